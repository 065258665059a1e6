"""Triton fast paths for the sgatlin layer (seed 000): the fused combine and the product top-k router.

Letters: M tokens (batch * pos flattened), D d_model, C channels, K gates per channel, N neurons per
channel, n subkeys per half, A = M * C * K gate assignments.

Combine, forward: one program per token walks its C * K assignments in tiles of rows, gathers the chosen
w_in and w_out rows straight from the experts tensor, and keeps sum_ck g (w_in . z) w_out in registers, so
the [M, C, K, D] gathered tensors never exist. It also writes neuron_pre = w_in . z [M, C*K] (fp32) for the
backward.
Combine, backward: (1) one program per token gathers the rows again: back = w_out . dy, the gate gradient
neuron_pre * back, dz = sum g * back * w_in, and keeps g * back per assignment; (2) the assignments are
sorted by expert row (c, i) and one program per expert row sums its own assignments' contributions,
dw_in = sum g * back * z and dw_out = sum g * neuron_pre * dy: every expert-gradient row is written exactly
once, so duplicate indices need no atomics and the result does not depend on scheduling.
Router: each thread holds one (token, channel) row. It walks the row's n subkey scores of each half,
inserting each into a descending list of K registers (one comparison per slot with the new score; a slot
takes the new score or the one above it, so the K slots update independently), then inserts only the pair
sums that can reach the top K: pair (a, b) of the two ranked lists is beaten by every (a', b') with
a' <= a and b' <= b, so only (a + 1)(b + 1) <= K can (20 of 64 pairs for K = 8). Ties go to the lower
subkey, then to the lower neuron i1 * n + i2; -0.0 equals 0.0; with NaN scores the choice is unspecified
(indices stay in range). For K > ROW_ROUTER_MAX_K a tiled design takes over (docs/decisions/sgatlin-router.md):
one warp per tile of rows, each selection step an int64 max reduction over keys that pack
the score's bits above who holds it.
Backward: the gate gradients scattered onto the two subkeys of each gate.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import circuitlab.kernels.ops as ops
from circuitlab.kernels._triton_common import next_power_of_2, tuning_configs

MAX_D_MODEL = ops.MAX_D_MODEL
# the one-row-per-thread router unrolls about K^2 log K comparisons and holds three K-lists (values and ids)
# per thread; beyond this K the tiled router takes over
ROW_ROUTER_MAX_K = 16


def row_tile_candidates(name: str) -> list[triton.Config]:
    """Tiles of `name` rows x BLOCK_D columns in 2, 4 or 8 warps; the first (4 rows, 4 warps) fits any d_model
    and is the one used without tuning. Pruned per call to tiles of 2K-8K elements, 8 warps only above 4K
    (docs/decisions/sgatlin-combine-tiles.md)."""
    first = triton.Config({name: 4}, num_warps=4)
    others = [
        triton.Config({name: rows}, num_warps=warps)
        for rows in (1, 2, 4, 8, 16, 32)
        for warps in (2, 4, 8)
        if (rows, warps) != (4, 4)
    ]
    return [first, *others]


def _row_tile_configs(name: str) -> list[triton.Config]:
    candidates = row_tile_candidates(name)
    return tuning_configs(candidates, candidates[0])


def _pruner(name: str):
    def prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
        block_d = kwargs.get("BLOCK_D", named_args.get("BLOCK_D"))
        kept = []
        for config in configs:
            elements = config.kwargs[name] * block_d
            if 2048 <= elements <= 8192 and (config.num_warps < 8 or elements > 4096):
                kept.append(config)
        return kept or [min(configs, key=lambda config: abs(config.kwargs[name] * block_d - 4096))]

    return prune


_ROW_TILE_CONFIGS = _row_tile_configs("BLOCK_R")
_ROW_TILE_CONFIGS_S = _row_tile_configs("BLOCK_S")
prune_row_tiles = _pruner("BLOCK_R")
prune_row_tiles_s = _pruner("BLOCK_S")


# --- combine, forward -----------------------------------------------------------------------------------


@triton.autotune(configs=_ROW_TILE_CONFIGS, key=["D", "CK"], prune_configs_by={"early_config_prune": prune_row_tiles})
@triton.jit
def _combine_fwd_kernel(
    z_ptr, idx_ptr, gate_ptr, experts_ptr, out_ptr, pre_ptr,
    D, N, CK, K, OUT_OFFSET,
    BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    z = tl.load(z_ptr + token * D + d, mask=d_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    for r0 in range(0, CK, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        r_ok = r < CK
        neuron = tl.load(idx_ptr + token * CK + r, mask=r_ok, other=0).to(tl.int64)
        gate = tl.load(gate_ptr + token * CK + r, mask=r_ok, other=0.0).to(tl.float32)
        row = ((r // K).to(tl.int64) * N + neuron) * D
        tile_ok = r_ok[:, None] & d_ok[None, :]
        w_in = tl.load(experts_ptr + row[:, None] + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        w_out = tl.load(experts_ptr + OUT_OFFSET + row[:, None] + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        neuron_pre = tl.sum(w_in * z[None, :], axis=1)
        tl.store(pre_ptr + token * CK + r, neuron_pre, mask=r_ok)
        acc += (neuron_pre * gate)[:, None] * w_out
    out = tl.sum(acc, axis=0)
    tl.store(out_ptr + token * D + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


# --- combine, backward per token --------------------------------------------------------------------------


@triton.autotune(configs=_ROW_TILE_CONFIGS, key=["D", "CK"], prune_configs_by={"early_config_prune": prune_row_tiles})
@triton.jit
def _combine_bwd_token_kernel(
    dy_ptr, idx_ptr, gate_ptr, pre_ptr, experts_ptr, dz_ptr, dgate_ptr, gback_ptr,
    D, N, CK, K, OUT_OFFSET,
    BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    dy = tl.load(dy_ptr + token * D + d, mask=d_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    for r0 in range(0, CK, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        r_ok = r < CK
        neuron = tl.load(idx_ptr + token * CK + r, mask=r_ok, other=0).to(tl.int64)
        gate = tl.load(gate_ptr + token * CK + r, mask=r_ok, other=0.0).to(tl.float32)
        neuron_pre = tl.load(pre_ptr + token * CK + r, mask=r_ok, other=0.0)
        row = ((r // K).to(tl.int64) * N + neuron) * D
        tile_ok = r_ok[:, None] & d_ok[None, :]
        w_in = tl.load(experts_ptr + row[:, None] + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        w_out = tl.load(experts_ptr + OUT_OFFSET + row[:, None] + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        back = tl.sum(w_out * dy[None, :], axis=1)
        tl.store(dgate_ptr + token * CK + r, (neuron_pre * back).to(dgate_ptr.dtype.element_ty), mask=r_ok)
        gate_back = gate * back
        tl.store(gback_ptr + token * CK + r, gate_back, mask=r_ok)
        acc += gate_back[:, None] * w_in
    dz = tl.sum(acc, axis=0)
    tl.store(dz_ptr + token * D + d, dz.to(dz_ptr.dtype.element_ty), mask=d_ok)


# --- combine, backward per expert row ---------------------------------------------------------------------


@triton.autotune(configs=_ROW_TILE_CONFIGS_S, key=["D", "CK"], prune_configs_by={"early_config_prune": prune_row_tiles_s})
@triton.jit
def _combine_bwd_expert_kernel(
    z_ptr, dy_ptr, order_ptr, offsets_ptr, gback_ptr, gate_ptr, pre_ptr, dexperts_ptr,
    D, CK, OUT_OFFSET,
    BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    expert_row = tl.program_id(0).to(tl.int64)  # c * N + i
    start = tl.load(offsets_ptr + expert_row)
    end = tl.load(offsets_ptr + expert_row + 1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    acc_in = tl.zeros([BLOCK_S, BLOCK_D], dtype=tl.float32)
    acc_out = tl.zeros([BLOCK_S, BLOCK_D], dtype=tl.float32)
    for s0 in range(start, end, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        s_ok = s < end
        assignment = tl.load(order_ptr + s, mask=s_ok, other=0).to(tl.int64)
        token = assignment // CK
        coef_in = tl.load(gback_ptr + assignment, mask=s_ok, other=0.0)
        coef_out = tl.load(gate_ptr + assignment, mask=s_ok, other=0.0).to(tl.float32) * tl.load(
            pre_ptr + assignment, mask=s_ok, other=0.0
        )
        tile_ok = s_ok[:, None] & d_ok[None, :]
        z = tl.load(z_ptr + token[:, None] * D + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + token[:, None] * D + d[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        acc_in += coef_in[:, None] * z
        acc_out += coef_out[:, None] * dy
    out_ty = dexperts_ptr.dtype.element_ty
    tl.store(dexperts_ptr + expert_row * D + d, tl.sum(acc_in, axis=0).to(out_ty), mask=d_ok)
    tl.store(dexperts_ptr + OUT_OFFSET + expert_row * D + d, tl.sum(acc_out, axis=0).to(out_ty), mask=d_ok)


def combine_forward(z_MxD, indices_MxCK, gates_MxCK, experts, k):
    """circuitlab::sgatlin_combine_fwd (see ops.py): out [M, D] and neuron_pre [M, C*K] float32."""
    _, n_channels, n_neurons, d_model = experts.shape
    n_tokens = z_MxD.shape[0]
    z_MxD, indices_MxCK, gates_MxCK = z_MxD.contiguous(), indices_MxCK.contiguous(), gates_MxCK.contiguous()
    experts = experts.contiguous()
    out_dtype = torch.promote_types(z_MxD.dtype, experts.dtype)
    out_MxD = torch.empty((n_tokens, d_model), dtype=out_dtype, device=z_MxD.device)
    neuron_pre_MxCK = torch.empty((n_tokens, n_channels * k), dtype=torch.float32, device=z_MxD.device)
    if n_tokens > 0:
        _combine_fwd_kernel[(n_tokens,)](
            z_MxD, indices_MxCK, gates_MxCK, experts, out_MxD, neuron_pre_MxCK,
            d_model, n_neurons, n_channels * k, k, n_channels * n_neurons * d_model,
            BLOCK_D=next_power_of_2(d_model),
        )
    return out_MxD, neuron_pre_MxCK


def expert_row_segments(indices_MxCK: torch.Tensor, n_channels: int, n_neurons: int, k: int,
                        key_dtype: torch.dtype | None = None):
    """The assignments sorted by expert row c * N + i (stable): (order [A], offsets [C*N + 1]), so that row r's
    assignments are order[offsets[r]:offsets[r + 1]]. The sort keys are the narrowest integers that hold
    C * N (the radix sort makes one pass a byte), unless `key_dtype` says otherwise."""
    device = indices_MxCK.device
    channel_offset_CK = torch.arange(n_channels, device=device, dtype=torch.int64).repeat_interleave(k)
    key_dtype = key_dtype or next(dtype for dtype in (torch.int16, torch.int32, torch.int64)
                                  if n_channels * n_neurons < torch.iinfo(dtype).max)
    keys_A = (indices_MxCK.to(torch.int64) + channel_offset_CK * n_neurons).to(key_dtype).reshape(-1)
    sorted_keys_A, order_A = torch.sort(keys_A, stable=True)
    row_ids = torch.arange(n_channels * n_neurons + 1, device=device, dtype=key_dtype)
    return order_A, torch.searchsorted(sorted_keys_A, row_ids)


def combine_backward(dy_MxD, z_MxD, indices_MxCK, gates_MxCK, experts, neuron_pre_MxCK, k, need_dexperts):
    """circuitlab::sgatlin_combine_bwd (see ops.py): dz, dgates, dexperts (empty [0] unless need_dexperts)."""
    n_tokens, d_model = z_MxD.shape
    _, n_channels, n_neurons, _ = experts.shape
    ck = indices_MxCK.shape[1]
    out_offset = n_channels * n_neurons * d_model
    block_d = next_power_of_2(d_model)
    z_MxD, indices_MxCK, gates_MxCK = z_MxD.contiguous(), indices_MxCK.contiguous(), gates_MxCK.contiguous()
    experts, neuron_pre_MxCK = experts.contiguous(), neuron_pre_MxCK.contiguous()
    dy_MxD = dy_MxD.contiguous()
    dz_MxD = torch.empty_like(z_MxD)
    dgates_MxCK = torch.empty_like(gates_MxCK)
    gate_back_MxCK = torch.empty((n_tokens, ck), dtype=torch.float32, device=z_MxD.device)
    if n_tokens > 0:
        _combine_bwd_token_kernel[(n_tokens,)](
            dy_MxD, indices_MxCK, gates_MxCK, neuron_pre_MxCK, experts, dz_MxD, dgates_MxCK, gate_back_MxCK,
            d_model, n_neurons, ck, k, out_offset,
            BLOCK_D=block_d,
        )
    if not need_dexperts:
        return dz_MxD, dgates_MxCK, experts.new_empty((0,))
    # sort the assignments by expert row: a segmented reduction, exact under duplicate indices
    order_A, offsets = expert_row_segments(indices_MxCK, n_channels, n_neurons, k)
    dexperts = torch.empty_like(experts)
    _combine_bwd_expert_kernel[(n_channels * n_neurons,)](
        z_MxD, dy_MxD, order_A, offsets, gate_back_MxCK, gates_MxCK, neuron_pre_MxCK, dexperts,
        d_model, ck, out_offset,
        BLOCK_D=block_d,
    )
    return dz_MxD, dgates_MxCK, dexperts


@triton.jit
def _packed_key(value, tie_break):
    """int64 key ordered like the float `value`, ties going to the larger `tie_break` (0 <= tie_break < 2**31).
    One integer max then yields the best value and who holds it in a single reduction."""
    bits = value.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: flip the magnitude bits
    return (ordered.to(tl.int64) << 32) | tie_break.to(tl.int64)


@triton.jit
def _unpack_key(key):
    ordered = (key >> 32).to(tl.int32)
    value = (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)
    tie_break = (key & 0xFFFFFFFF).to(tl.int32)
    return value, tie_break


@triton.jit
def _top_k_keys(keys, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """Per row: the K largest keys, unpacked, in descending order."""
    slot = tl.arange(0, BLOCK_K)
    top = tl.full([keys.shape[0], BLOCK_K], float("-inf"), tl.float32)
    top_tie = tl.zeros([keys.shape[0], BLOCK_K], dtype=tl.int32)
    for j in tl.static_range(K):
        best = tl.max(keys, axis=1)
        value, tie_break = _unpack_key(best)
        top = tl.where(slot[None, :] == j, value[:, None], top)
        top_tie = tl.where(slot[None, :] == j, tie_break[:, None], top_tie)
        keys = tl.where(keys == best[:, None], -9223372036854775807 - 1, keys)
    return top, top_tie


@triton.jit
def _route_tile_fwd_kernel(
    scores_ptr, idx_ptr, gate_ptr,
    M, C, n,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    channel = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    first_ptrs = scores_ptr + rows.to(tl.int64)[:, None] * (2 * C * n) + channel * n + cols[None, :]
    tile_ok = row_ok[:, None] & (cols[None, :] < n)
    first = tl.load(first_ptrs, mask=tile_ok, other=float("-inf")).to(tl.float32)
    second = tl.load(first_ptrs + C * n, mask=tile_ok, other=float("-inf")).to(tl.float32)
    # ties between equal subkey scores go to the lower subkey
    tie_by_col = (BLOCK_N - 1 - cols)[None, :] + tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    first_top, first_tie = _top_k_keys(_packed_key(first, tie_by_col), K, BLOCK_K)
    second_top, second_tie = _top_k_keys(_packed_key(second, tie_by_col), K, BLOCK_K)
    first_id = BLOCK_N - 1 - first_tie
    second_id = BLOCK_N - 1 - second_tie
    # the k * k pair sums, each keyed by its neuron i1 * n + i2 (ties go to the lower neuron)
    pair_sum = tl.reshape(first_top[:, :, None] + second_top[:, None, :], [BLOCK_M, BLOCK_K * BLOCK_K])
    pair_neuron = tl.reshape(first_id[:, :, None] * n + second_id[:, None, :], [BLOCK_M, BLOCK_K * BLOCK_K])
    gate, neuron_tie = _top_k_keys(_packed_key(pair_sum, 2147483647 - pair_neuron), K, BLOCK_K)
    neuron = (2147483647 - neuron_tie).to(tl.int64)
    slot = tl.arange(0, BLOCK_K)
    out_offsets = rows.to(tl.int64)[:, None] * (C * K) + channel * K + slot[None, :]
    out_ok = row_ok[:, None] & (slot[None, :] < K)
    tl.store(idx_ptr + out_offsets, neuron, mask=out_ok)
    tl.store(gate_ptr + out_offsets, gate.to(gate_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def _route_bwd_kernel(
    dgate_ptr, idx_ptr, dscores_ptr,
    M, C,
    N_SUB: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    channel = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    dfirst = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    dsecond = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    gate_row = rows.to(tl.int64) * (C * K) + channel * K
    for j in tl.static_range(K):
        dgate = tl.load(dgate_ptr + gate_row + j, mask=row_ok, other=0.0).to(tl.float32)
        neuron = tl.load(idx_ptr + gate_row + j, mask=row_ok, other=0).to(tl.int32)
        first = neuron // N_SUB  # a constant divisor: no integer division at run time
        # gate = first_score[i1] + second_score[i2]: its gradient lands on both subkeys
        dfirst += tl.where(cols[None, :] == first[:, None], dgate[:, None], 0.0)
        dsecond += tl.where(cols[None, :] == (neuron - first * N_SUB)[:, None], dgate[:, None], 0.0)
    out_ptrs = dscores_ptr + rows.to(tl.int64)[:, None] * (2 * C * N_SUB) + channel * N_SUB + cols[None, :]
    tile_ok = row_ok[:, None] & (cols[None, :] < N_SUB)
    out_ty = dscores_ptr.dtype.element_ty
    tl.store(out_ptrs, dfirst.to(out_ty), mask=tile_ok)
    tl.store(out_ptrs + C * N_SUB, dsecond.to(out_ty), mask=tile_ok)


@triton.jit
def _insert(top, top_id, value, ident, LOWER_ID_FIRST: tl.constexpr):
    """(value, ident) into one row's descending list (top, top_id) of K registers. Ties: with LOWER_ID_FIRST
    the lower ident goes first whatever the order of insertion (empty slots hold -inf and the largest ident);
    without, an equal value already listed stays ahead (callers insert in increasing ident) and an empty slot
    (ident -1) takes anything."""
    new_top = ()
    new_id = ()
    carry = value
    carry_id = ident
    for j in tl.static_range(len(top)):
        if LOWER_ID_FIRST:
            take = (value > top[j]) | ((value == top[j]) & (ident < top_id[j]))
        else:
            take = (value > top[j]) | (top_id[j] < 0)
        new_top = new_top + (tl.where(take, carry, top[j]),)
        new_id = new_id + (tl.where(take, carry_id, top_id[j]),)
        # slot j + 1 takes what slot j held, or the new value if it has not been placed yet
        carry = tl.where(take, top[j], value)
        carry_id = tl.where(take, top_id[j], ident)
    return new_top, new_id


@triton.jit
def _empty_list(fill_id, K: tl.constexpr, BLOCK_R: tl.constexpr):
    top = ()
    top_id = ()
    for _ in tl.static_range(K):
        top = top + (tl.full([BLOCK_R], float("-inf"), tl.float32),)
        top_id = top_id + (tl.full([BLOCK_R], fill_id, tl.int32),)
    return top, top_id


@triton.jit
def _route_rows_fwd_kernel(
    scores_ptr, idx_ptr, gate_ptr,
    R, C,
    N_SUB: tl.constexpr, K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # row = token * C + channel
    row_ok = rows < R
    token = rows // C
    first_base = token.to(tl.int64) * (2 * C * N_SUB) + (rows - token * C) * N_SUB
    first_top, first_id = _empty_list(-1, K, BLOCK_R)
    second_top, second_id = _empty_list(-1, K, BLOCK_R)
    for col in range(N_SUB):
        subkey = tl.full([BLOCK_R], col, tl.int32)
        first = tl.load(scores_ptr + first_base + col, mask=row_ok, other=0.0).to(tl.float32)
        second = tl.load(scores_ptr + first_base + C * N_SUB + col, mask=row_ok, other=0.0).to(tl.float32)
        first_top, first_id = _insert(first_top, first_id, first, subkey, False)
        second_top, second_id = _insert(second_top, second_id, second, subkey, False)
    gate, neuron = _empty_list(2147483647, K, BLOCK_R)
    for a in tl.static_range(K):
        for b in tl.static_range(K):
            if (a + 1) * (b + 1) <= K:  # the pairs that can reach the top K (module docstring)
                gate, neuron = _insert(
                    gate, neuron, first_top[a] + second_top[b], first_id[a] * N_SUB + second_id[b], True
                )
    out = rows.to(tl.int64) * K
    for j in tl.static_range(K):
        tl.store(idx_ptr + out + j, neuron[j].to(tl.int64), mask=row_ok)
        tl.store(gate_ptr + out + j, gate[j].to(gate_ptr.dtype.element_ty), mask=row_ok)


def _route_blocks(n_subkeys: int, k: int) -> tuple[int, int, int]:
    block_n = max(16, next_power_of_2(n_subkeys))
    block_k = max(2, next_power_of_2(k))
    # one warp per program keeps every top-k reduction inside a warp; its widest int64 tile is
    # [BLOCK_M, max(BLOCK_N, BLOCK_K ** 2)], kept near 32 keys per thread
    block_m = max(1, min(32, 1024 // max(block_k * block_k, block_n)))
    return block_m, block_n, block_k


ROUTER_DESIGNS = ("rows", "tiled")


def route_forward(scores_M, n_channels, k, design: str | None = None):
    """circuitlab::sgatlin_route_fwd (see ops.py): scores [M, 2*C*n] -> gates [M, C, K], indices [M, C, K] int64.
    `design`: "rows" (one (token, channel) row per thread; the default up to K = ROW_ROUTER_MAX_K) or "tiled";
    both give the same gates and indices (the benchmark times them side by side), except where -0.0 and 0.0
    tie: the tiled design's keys order -0.0 below 0.0."""
    design = design or ("rows" if k <= ROW_ROUTER_MAX_K else "tiled")
    if design not in ROUTER_DESIGNS:
        raise ValueError(f"router design {design!r}; expected one of {', '.join(ROUTER_DESIGNS)}")
    if design == "rows" and k > ROW_ROUTER_MAX_K:
        raise ValueError(f"the rows router holds K <= {ROW_ROUTER_MAX_K} per thread, got K = {k}; use design='tiled'")
    n_tokens = scores_M.shape[0]
    n_subkeys = scores_M.shape[1] // (2 * n_channels)
    scores_M = scores_M.contiguous()
    indices = torch.empty((n_tokens, n_channels, k), dtype=torch.int64, device=scores_M.device)
    gates = torch.empty((n_tokens, n_channels, k), dtype=scores_M.dtype, device=scores_M.device)
    if n_tokens > 0 and design == "rows":
        rows, block_r = n_tokens * n_channels, 128
        _route_rows_fwd_kernel[(triton.cdiv(rows, block_r),)](
            scores_M, indices, gates, rows, n_channels, N_SUB=n_subkeys, K=k, BLOCK_R=block_r, num_warps=4,
        )
    elif n_tokens > 0:
        block_m, block_n, block_k = _route_blocks(n_subkeys, k)
        grid = (triton.cdiv(n_tokens, block_m), n_channels)
        _route_tile_fwd_kernel[grid](
            scores_M, indices, gates, n_tokens, n_channels, n_subkeys,
            K=k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=1,
        )
    return gates, indices


def route_backward(dgates, indices, n_subkeys):
    """circuitlab::sgatlin_route_bwd (see ops.py): the gate gradients onto both subkeys of each gate."""
    n_tokens, n_channels, k = indices.shape
    dscores = torch.empty((n_tokens, 2 * n_channels * n_subkeys), dtype=dgates.dtype, device=indices.device)
    if n_tokens > 0:
        block_n = max(16, next_power_of_2(n_subkeys))
        block_m = max(1, min(64, 4096 // block_n))
        grid = (triton.cdiv(n_tokens, block_m), n_channels)
        _route_bwd_kernel[grid](
            dgates.contiguous(), indices.contiguous(), dscores, n_tokens, n_channels,
            N_SUB=n_subkeys, K=k, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4,
        )
    return dscores


# the public entry points (custom operators; see ops.py)
sgatlin_combine = ops.sgatlin_combine
sgatlin_route = ops.sgatlin_route
