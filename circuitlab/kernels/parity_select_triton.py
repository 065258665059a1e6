"""Triton fast path for the product parity encoder's scoring and selection (parity.py, `top_scores`).

Letters: N tokens, H grid rows, P row patterns (2^r2), C kept column patterns (the beam), F features asked
for (`count`), CAP candidate slots per token.

Per token the encoder scores S[p, c] = |<sP(p), Y[:, c]>| for every row pattern p and kept column c, and
needs the `count` largest. Done in PyTorch that writes N x P x C scores to memory (4.3 GB at 65,536 tokens,
P 256, C 64) and reads them back in a multi-pass radix top-k. Here one program takes one token: it computes
its P x C scores in registers (one [P, H] @ [H, C] product, float32 FMA, so the scores are exact to float32
rounding), finds a threshold by bisection on the scores' range such that at least `count` and at most CAP
scores reach it, and writes those (score, flat position p * C + c) to CAP slots, numbered by position; the
unused slots keep the value -1 written before the launch. A top-`count` over the CAP slots then finishes the
selection.

Why it is exact: the threshold `lo` always has at least `count` scores at or above it, so every one of the
`count` largest is among them. When more than CAP scores tie at the threshold (a degenerate write, e.g. a
column whose P scores are all equal) the bisection cannot separate them; then the scores strictly above the
upper end `hi` (fewer than `count`) are written first and the tied ones fill the remaining slots, so the
result is still a valid top-`count` (ties broken by position).

Choosing the design on one H200 (2026-12-01, 65,536 tokens, P 256, C 64, heavy-tailed random writes; a sweep
run once, not kept as a script): the kernel and the top-k over its slots took 7.4 ms against 16.4 ms for the
PyTorch product, abs and top-k, for both k = 32 and the pursuit's 2k = 64; 16 warps gave the same, 4 warps
spilled (26 ms), and 64, 128 or 256 slots differed by under 5%. benchmarks/bench_parity.py times the result
inside the layer. A first version that flattened the score tile to number the slots took 15.6 ms: the reshape of a
[P, C] tile costs a round trip through shared memory, so slots are now numbered per row (`_slots`).
Numbering them is a scan of the whole tile, and the first version ran two in every program (the scores above
`hi`, then the tied ones); now the common case (everything at or above `lo` fits in the slots) runs one, and
the two-tier numbering runs only when ties overflow the slots. Timed once on an H200 (2026-12-01, 14:25 UTC, the
same shape, one-off script): 7.07 -> 5.29 ms a launch for k = 32 and 7.02 -> 5.25 ms for 64, with the same
top-k; of the 5.3 ms, loading and scoring alone took 1.10 ms and the bisection 2.0 ms more.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import next_power_of_2

MAX_BISECTIONS = 40  # float32 has 24 mantissa bits: after 40 halvings of [0, max] only exact ties are left


@triton.jit
def _candidates_kernel(
    y_ptr, signs_ptr, value_ptr, position_ptr,
    H, P, C, count,
    H_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr, CAP: tl.constexpr,
    MAX_ITERS: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, H_PAD)
    c = tl.arange(0, C_PAD)
    y_HxC = tl.load(y_ptr + token * H * C + h[:, None] * C + c[None, :], mask=(h[:, None] < H) & (c[None, :] < C), other=0.0)
    _select(y_HxC, signs_ptr, value_ptr, position_ptr, token, H, P, C, count, H_PAD, P_PAD, C_PAD, CAP, MAX_ITERS)


@triton.jit
def _select(
    y_HxC, signs_ptr, value_ptr, position_ptr, token, H, P, C, count,
    H_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr, CAP: tl.constexpr, MAX_ITERS: tl.constexpr,
):
    """One token's scores |signs @ y| ([P, C], in registers) and the candidates of its top `count` in CAP slots
    (benchmarks/explore_parity_select.py builds other kernels around it)."""
    h = tl.arange(0, H_PAD)
    p = tl.arange(0, P_PAD)
    c = tl.arange(0, C_PAD)
    signs_PxH = tl.load(signs_ptr + p[:, None] * H + h[None, :], mask=(p[:, None] < P) & (h[None, :] < H), other=0.0)
    scores = tl.abs(tl.dot(signs_PxH, y_HxC, input_precision="ieee"))
    valid = (p[:, None] < P) & (c[None, :] < C)
    scores = tl.where(valid, scores, -1.0)

    # bisection invariant: count(scores >= lo) >= count > count(scores >= hi)
    top = tl.max(tl.max(scores, axis=1), axis=0)
    lo = top * 0.0
    hi = top * 1.0001 + 1e-30
    n_lo = tl.sum(tl.sum((scores >= lo).to(tl.int32), axis=1), axis=0)
    iteration = 0
    while (n_lo > CAP) & (iteration < MAX_ITERS):
        mid = 0.5 * (lo + hi)
        n_mid = tl.sum(tl.sum((scores >= mid).to(tl.int32), axis=1), axis=0)
        lo = tl.where(n_mid >= count, mid, lo)
        n_lo = tl.where(n_mid >= count, n_mid, n_lo)
        hi = tl.where(n_mid >= count, hi, mid)
        iteration += 1

    if n_lo > CAP:  # more scores tie at the threshold than there are slots (bisection could not split them)
        _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP)
    else:  # the common case: every score at or above `lo` fits, slots numbered by position in one scan
        kept = (scores >= lo).to(tl.int32)
        slot = _slots(kept)
        flat = p[:, None] * C + c[None, :]
        tl.store(value_ptr + token * CAP + slot, scores, mask=kept > 0)
        tl.store(position_ptr + token * CAP + slot, flat, mask=kept > 0)


@triton.jit
def _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP: tl.constexpr):
    """The scores above `hi` first, then those tied in [lo, hi) by position, as many as the CAP slots hold."""
    above = (scores >= hi).to(tl.int32)
    tied = ((scores >= lo) & (scores < hi)).to(tl.int32)
    n_above = tl.sum(tl.sum(above, axis=1), axis=0)
    slot = tl.where(above > 0, _slots(above), n_above + _slots(tied))
    keep = ((above + tied) > 0) & (slot < CAP)
    flat = p[:, None] * C + c[None, :]
    tl.store(value_ptr + token * CAP + slot, scores, mask=keep)
    tl.store(position_ptr + token * CAP + slot, flat, mask=keep)


@triton.jit
def _slots(mask_PxC):
    """Row-major rank of each set entry of a 0/1 tile among the set entries (0-based; meaningless elsewhere)."""
    per_row = tl.sum(mask_PxC, axis=1)
    before_row = tl.cumsum(per_row, axis=0) - per_row
    return before_row[:, None] + tl.cumsum(mask_PxC, axis=1) - 1


def candidate_slots(count: int) -> int:
    """CAP for a top-`count`: a power of two, at least twice `count` (and 64)."""
    return next_power_of_2(max(2 * count, 64))


def beam_candidates(y_NxHxC: torch.Tensor, signs_PxH: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [N, CAP] float32, flat positions p * C + c [N, CAP] int32): a superset of the `count` largest
    |(signs @ y)[n]| of each token, unused slots valued -1 (see the module docstring)."""
    n_tokens, n_rows, n_cols = y_NxHxC.shape
    n_patterns = signs_PxH.shape[0]
    if signs_PxH.shape[1] != n_rows:
        raise ValueError(f"signs are [P, {signs_PxH.shape[1]}] but y has {n_rows} rows")
    if not 0 < count <= n_patterns * n_cols:
        raise ValueError(f"count must lie in [1, {n_patterns * n_cols}], got {count}")
    cap = candidate_slots(count)
    y = y_NxHxC.contiguous().float()
    signs = signs_PxH.contiguous().float()
    values = torch.full((n_tokens, cap), -1.0, dtype=torch.float32, device=y.device)
    positions = torch.zeros((n_tokens, cap), dtype=torch.int32, device=y.device)
    if n_tokens:
        p_pad, c_pad = next_power_of_2(max(n_patterns, 16)), next_power_of_2(max(n_cols, 16))
        _candidates_kernel[(n_tokens,)](
            y, signs, values, positions, n_rows, n_patterns, n_cols, count,
            H_PAD=next_power_of_2(max(n_rows, 16)), P_PAD=p_pad, C_PAD=c_pad, CAP=cap, MAX_ITERS=MAX_BISECTIONS,
            num_warps=8 if p_pad * c_pad >= 8192 else 4,
        )
    return values, positions
