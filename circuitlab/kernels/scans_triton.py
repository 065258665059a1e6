"""Triton fast paths for the NC-FFN sequence quantifiers (docs/designs/legible.md) as parallel scans.

Letters: S sequences (all leading dims flattened), T position, U unit.

Both recurrences are scans over (value a, decay g) pairs. One program owns one sequence and a block of
units and walks the positions in chunks: inside a chunk `tl.associative_scan` combines the pairs in
parallel, and the state at the chunk's end carries into the next chunk, so each input is read once and
each output written once.

  existential  E_t = max(M_t, g E_(t-1)):            (a1, g1) then (a2, g2) -> (max(a2, g2 a1), g1 g2)
  proportion   P_t = (1 - g) M_t + g P_(t-1):        (a1, g1) then (a2, g2) -> (a2 + g2 a1,      g1 g2)

Backward, with G_t the whole gradient reaching state X_t and F_t the part of the gradient of X_(t+1) that
flows into its carried term (so dL/dX_t = dX_t + g F_t):
  existential  c_t = 1 where the carried g E_(t-1) beat M_t (saved by the forward as int8),
               F_t = c_(t+1) (dE_(t+1) + g F_(t+1)),  G_t = dE_t + g F_t,  dM_t = (1 - c_t) G_t,
               dg = sum_t F_t E_t   (the argmax path: a gradient follows whichever side won the max)
  proportion   F_t = dP_(t+1) + g F_(t+1),  G_t = dP_t + g F_t,  dM_t = (1 - g) G_t,
               dg = sum_t (F_t P_t - G_t M_t)
F is itself a linear recurrence, run as the same chunked scan over reversed positions.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import circuitlab.kernels.ops as ops
from circuitlab.kernels._triton_common import next_power_of_2, tuning_configs

_SCAN_CONFIGS = [
    triton.Config({"BLOCK_T": 32, "BLOCK_U": 64}, num_warps=4),
    triton.Config({"BLOCK_T": 64, "BLOCK_U": 32}, num_warps=4),
    triton.Config({"BLOCK_T": 64, "BLOCK_U": 64}, num_warps=8),
]
_INTERPRETER_CONFIG = triton.Config({"BLOCK_T": 16, "BLOCK_U": 16}, num_warps=4)
# The tuning is keyed on T rounded up to a power of two (T_BUCKET, read by nothing else): keyed on T itself, a
# pass over documents of every length from 2 to n_ctx re-timed the configs at each new length, minutes of
# tuning inside one held-out evaluation.


@triton.jit
def _max_combine(a1, g1, a2, g2):
    return tl.maximum(a2, g2 * a1), g1 * g2


@triton.jit
def _linear_combine(a1, g1, a2, g2):
    return a2 + g2 * a1, g1 * g2


@triton.autotune(configs=tuning_configs(_SCAN_CONFIGS, _INTERPRETER_CONFIG), key=["T_BUCKET", "U", "IS_MAX"])
@triton.jit
def _scan_fwd_kernel(
    m_ptr, decay_ptr, out_ptr, won_ptr,
    T, U, T_BUCKET,
    IS_MAX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_U: tl.constexpr,
):
    sequence = tl.program_id(0).to(tl.int64)
    u = tl.program_id(1) * BLOCK_U + tl.arange(0, BLOCK_U)
    u_ok = u < U
    decay = tl.load(decay_ptr + u, mask=u_ok, other=0.0).to(tl.float32)
    gain = tl.zeros([BLOCK_T, BLOCK_U], dtype=tl.float32) + decay[None, :]
    rows = tl.arange(0, BLOCK_T)
    base = sequence * T * U
    carry = tl.zeros([BLOCK_U], dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        t = t0 + rows
        tile_ok = (t < T)[:, None] & u_ok[None, :]
        offsets = base + t.to(tl.int64)[:, None] * U + u[None, :]
        member = tl.load(m_ptr + offsets, mask=tile_ok, other=0.0).to(tl.float32)
        if IS_MAX:
            scanned, gain_prefix = tl.associative_scan((member, gain), 0, _max_combine)
            state = tl.maximum(scanned, gain_prefix * carry[None, :])
            tl.store(won_ptr + offsets, (state > member).to(tl.int8), mask=tile_ok)
        else:
            scanned, gain_prefix = tl.associative_scan(((1.0 - decay)[None, :] * member, gain), 0, _linear_combine)
            state = scanned + gain_prefix * carry[None, :]
        tl.store(out_ptr + offsets, state.to(out_ptr.dtype.element_ty), mask=tile_ok)
        # rows past T only occur in the last chunk, whose carry is never used
        carry = tl.sum(tl.where(rows[:, None] == BLOCK_T - 1, state, 0.0), axis=0)


@triton.autotune(configs=tuning_configs(_SCAN_CONFIGS, _INTERPRETER_CONFIG), key=["T_BUCKET", "U", "IS_MAX"])
@triton.jit
def _scan_bwd_kernel(
    m_ptr, decay_ptr, out_ptr, won_ptr, dout_ptr, dm_ptr, ddecay_ptr,
    T, U, T_BUCKET,
    IS_MAX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_U: tl.constexpr,
):
    sequence = tl.program_id(0).to(tl.int64)
    u = tl.program_id(1) * BLOCK_U + tl.arange(0, BLOCK_U)
    u_ok = u < U
    decay = tl.load(decay_ptr + u, mask=u_ok, other=0.0).to(tl.float32)
    rows = tl.arange(0, BLOCK_T)
    base = sequence * T * U
    carry = tl.zeros([BLOCK_U], dtype=tl.float32)  # F at the first position of the chunk after this one
    ddecay = tl.zeros([BLOCK_U], dtype=tl.float32)
    n_chunks = tl.cdiv(T, BLOCK_T)
    for chunk in range(0, n_chunks):
        # row r holds position t = chunk end - r, so a forward scan over rows runs backwards in time
        t = (n_chunks - 1 - chunk) * BLOCK_T + (BLOCK_T - 1) - rows
        here_ok = (t < T)[:, None] & u_ok[None, :]
        next_ok = (t + 1 < T)[:, None] & u_ok[None, :]
        offsets = base + t.to(tl.int64)[:, None] * U + u[None, :]
        grad_here = tl.load(dout_ptr + offsets, mask=here_ok, other=0.0).to(tl.float32)
        grad_next = tl.load(dout_ptr + offsets + U, mask=next_ok, other=0.0).to(tl.float32)
        state = tl.load(out_ptr + offsets, mask=here_ok, other=0.0).to(tl.float32)
        if IS_MAX:
            won_here = tl.load(won_ptr + offsets, mask=here_ok, other=0).to(tl.float32)
            won_next = tl.load(won_ptr + offsets + U, mask=next_ok, other=0).to(tl.float32)
            f_scanned, f_gain = tl.associative_scan(
                (won_next * grad_next, won_next * decay[None, :]), 0, _linear_combine
            )
        else:
            member = tl.load(m_ptr + offsets, mask=here_ok, other=0.0).to(tl.float32)
            gain = tl.zeros([BLOCK_T, BLOCK_U], dtype=tl.float32) + decay[None, :]
            f_scanned, f_gain = tl.associative_scan((grad_next, gain), 0, _linear_combine)
        future = f_scanned + f_gain * carry[None, :]
        total = grad_here + decay[None, :] * future
        if IS_MAX:
            dm = (1.0 - won_here) * total
            ddecay += tl.sum(future * state, axis=0)
        else:
            dm = (1.0 - decay[None, :]) * total
            ddecay += tl.sum(future * state - total * member, axis=0)
        tl.store(dm_ptr + offsets, dm.to(dm_ptr.dtype.element_ty), mask=here_ok)
        carry = tl.sum(tl.where(rows[:, None] == BLOCK_T - 1, future, 0.0), axis=0)
    tl.store(ddecay_ptr + sequence * U + u, ddecay, mask=u_ok)


def scan_forward(member_SxTxU, decay_U, is_max):
    """circuitlab::quantifier_scan_fwd (see ops.py): the states, and which side won each max (int8; the
    proportion scan never reads it: one placeholder element)."""
    n_seq, n_pos, n_units = member_SxTxU.shape
    member_SxTxU, decay_U = member_SxTxU.contiguous(), decay_U.contiguous()
    out_dtype = torch.promote_types(member_SxTxU.dtype, decay_U.dtype)
    out_SxTxU = torch.empty(member_SxTxU.shape, dtype=out_dtype, device=member_SxTxU.device)
    if is_max:
        won_SxTxU = torch.empty(member_SxTxU.shape, dtype=torch.int8, device=member_SxTxU.device)
    else:
        won_SxTxU = torch.zeros((1,), dtype=torch.int8, device=member_SxTxU.device)
    if out_SxTxU.numel() > 0:
        grid = lambda meta: (n_seq, triton.cdiv(n_units, meta["BLOCK_U"]))  # noqa: E731
        _scan_fwd_kernel[grid](member_SxTxU, decay_U, out_SxTxU, won_SxTxU, n_pos, n_units, next_power_of_2(n_pos),
                               IS_MAX=is_max)
    return out_SxTxU, won_SxTxU


def scan_backward(dout_SxTxU, member_SxTxU, decay_U, out_SxTxU, won_SxTxU, is_max):
    """circuitlab::quantifier_scan_bwd (see ops.py): d membership and d decay (float32, summed over sequences)."""
    n_seq, n_pos, n_units = member_SxTxU.shape
    dout_SxTxU = dout_SxTxU.contiguous()
    dmember_SxTxU = torch.empty(member_SxTxU.shape, dtype=member_SxTxU.dtype, device=dout_SxTxU.device)
    ddecay_SxU = torch.zeros((n_seq, n_units), dtype=torch.float32, device=dout_SxTxU.device)
    if dmember_SxTxU.numel() > 0:
        grid = lambda meta: (n_seq, triton.cdiv(n_units, meta["BLOCK_U"]))  # noqa: E731
        _scan_bwd_kernel[grid](
            member_SxTxU.contiguous(), decay_U.contiguous(), out_SxTxU.contiguous(), won_SxTxU.contiguous(),
            dout_SxTxU, dmember_SxTxU, ddecay_SxU, n_pos, n_units, next_power_of_2(n_pos), IS_MAX=is_max,
        )
    return dmember_SxTxU, ddecay_SxU.sum(0)


# the public entry points (custom operators; see ops.py)
existential_scan = ops.existential_scan
proportion_scan = ops.proportion_scan
