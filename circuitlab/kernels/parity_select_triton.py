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

The bisection starts from the smallest column maximum where the tile has at least `count` columns: each
column holds a score at or above it, so the invariant holds. On the writes of the shipped model (beam 16,
count 16; 2,048 held-out natural tokens; simulated once in PyTorch, not kept) that start needs 0.0-1.2
halvings on average per layer against 1.1-1.3 from zero.

`beam_select` runs the product encoder's whole beam search in one program per token, from the write itself:
Y = x_grid sQ^T for all U column patterns (a [H, W] @ [W, U] product), their bounds ||Y[:, u]||_1, the beam by
one sort of packed (bound, pattern) keys, the beam's columns of Y rebuilt from their sign patterns, `_select`,
and the top `count` of the filled slots by a second sort of packed (score, position) keys, written as feature
ids (both sorts now bitonic top-k's by default, and at beams up to 16 the slots replaced by the top by row
maxima: below). Y and the bounds stay on chip; the beam's column list and the candidate slots go to memory and
are read back by the same program. No torch top-k follows. The layer runs it up to beam 32
(kernels.FUSED_SELECT_MAX_BEAM): an earlier version without the final sort was slower than the composed path
at beam 64 (BENCHMARKS.md, "The parity bottleneck's settings"). Timed on one H200 (65,536 tokens, heavy-tailed
random writes; benchmarks/results/parity_select_2026-12-02_onekernel.txt, _options.txt): at beam 16 and k 16,
2.53 ms in 2 warps (1 warp 6.32, 4 warps 2.95, 8 warps 5.29) against 4.15 ms for the composed path, and 2.39 ms
with 32-bit sort keys. Those are not the default: two bounds within 2^-15 of each other at the beam's edge may
get equal keys, and the tie then goes to the smaller pattern whichever bound is larger, so the layer's supports
would differ from the reference's on such tokens (one of 18 in a test of the tiny model). Taking the beam's
columns from the sorted keys in registers instead of memory was not faster (2.57 ms) and was dropped.

Its options since (BEAM_OPTIONS; benchmarks/results/parity_select_2026-12-02_options_topk.txt, _options_more.txt,
one H200, the same workload): the beam and the final top `count` by Triton's bitonic top-k (`tl.topk`: the first
log2(k) merge stages, then halving) instead of full sorts, and one packed int64 key per candidate slot instead
of a value and a position (one store and one load a slot, the keys not rebuilt). Together, 64-bit keys, 2 warps:
2.35 ms against 2.55 with the sizes as runtime arguments, 2.24-2.26 ms against 2.53 with them compile-time
constants (as now); they are the default. Nsight Compute on one launch (ncu_2026-12-02_beam_select_details.csv,
32-bit keys, packed): 255 registers a thread, so 4 programs (8 warps) an SM, 12.5% occupancy; issue slots 34%
busy; L1 63% busy, DRAM 0.7%: a latency-bound kernel whose L1 traffic is shared memory (the products' operands,
the sorts) and spills. ptxas for sm_90 counts about 10,600 instructions a thread at 2 warps, the two products'
2,048 FMAs among them. Two variants that cut the registers were not faster, and were dropped: rescoring only
the rows that hold a candidate (a [64, 16] tile stored instead of [256, 16]; 2.25 ms, the same), and the rare
overflowing ties in a second launch, so that the first compiles without that code (204 registers, no spills;
2.39 ms at 2 warps, 2.26 at 4).

The top by row maxima (`row_max`, the default since 2026-12-02, up to beam ROW_MAX_BEAM): no bisection, slots
or scans. The `count` largest keys lie among the `count` rows of the [P, C] tile with the largest maxima: a key
with that many rows ranked above its own row has as many larger keys, their maxima. So the kernel takes each
row's maximum, the ROWS best rows (at least `count`, and 16 for tl.dot) by tl.topk, computes those rows' scores
again (the same products in the same order, so the same numbers) and takes the top `count` of their ROWS x C
keys (`_top_by_row_max`). With `transposed` the tile is [C, P], like the bounds' tile: each thread holds whole
columns of it, the maxima need no exchange between threads and the top-k over them runs on one copy of each
instead of four. ptxas for sm_90 (Triton 3.9, 2 warps) counts 5,192 instructions a thread, 255 registers and a
400-byte stack, against 10,584 with slots (6,248, 168 registers and no stack with the tile [P, C]). On one H200
(parity_select_2026-12-02_options_rowmax.txt, the same workload; the same features as the sorts on every token):
1.894 ms at beam 16, count 16, 2 warps, against 1.955 with the tile [P, C] and 2.243 with slots (top-k, packed
keys); 4 warps were slower (2.52-2.88). At beam 32 (4 warps) the slots stayed faster, 3.42 against 3.67-3.87 ms,
so wider beams keep them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import next_power_of_2

# `_beam_select_kernel`'s options. keys32: 64-bit sort keys by default, so the beam is exactly the columns of
# largest bound; 32-bit keys (where the column patterns fit in 8 bits) were 6% faster but choose the beam only to
# 2^-15 relative. topk: the beam and the final top `count` by Triton's bitonic top-k (`tl.topk`, where this Triton
# has it) instead of full sorts; the same keys, so the same result. packed: the candidate slots hold one int64
# (score, position) key each instead of a value and a position. Both on by default: together 11% faster at the
# shipped settings. row_max (needs tl.topk; on by default up to beam ROW_MAX_BEAM): no slots, the top `count`
# among the rows of largest maximum, 16% faster again; transposed: its score tile as [C, P] (3% faster). warps:
# the kernel's warps (0: `select_warps`). The module docstring has the measurements.
BEAM_OPTIONS = {"keys32": False, "topk": True, "packed": True, "row_max": True, "transposed": True, "warps": 0}
HAS_TOPK = hasattr(tl, "topk")
# row_max serves beams up to this: at beam 32 (4 warps) the slots were faster (3.42 against 3.67-3.87 ms)
ROW_MAX_BEAM = 16
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
def _beam_select_kernel(
    x_ptr, row_signs_ptr, col_signs_ptr, column_ptr, next_bound_ptr, value_ptr, position_ptr, out_value_ptr,
    out_id_ptr, H: tl.constexpr, W: tl.constexpr, U: tl.constexpr, P: tl.constexpr, C: tl.constexpr,
    count: tl.constexpr, H_PAD: tl.constexpr, W_PAD: tl.constexpr, U_PAD: tl.constexpr, P_PAD: tl.constexpr,
    C_PAD: tl.constexpr, CAP: tl.constexpr, MAX_ITERS: tl.constexpr, KEYS32: tl.constexpr, TOPK: tl.constexpr,
    PACKED: tl.constexpr, K_PAD: tl.constexpr, ROW_MAX: tl.constexpr, ROWS: tl.constexpr, TRANSPOSED: tl.constexpr,
):
    """One token from its write: the bounds of all U column patterns, the beam of the C largest, its columns
    of Y rebuilt, `_select` on them (into this token's CAP scratch slots), and the top `count` of the slots.
    KEYS32 (U_PAD <= 256): 32-bit sort keys, the bound's low 8 bits replaced by the pattern, so the beam is
    the top C by bound to 2^-15 relative; the bound left out is still exact, and with it the certificate. Off:
    64-bit keys, the beam by exact bound (ties to the smaller pattern). TOPK: the beam (C_PAD keys) and the final
    K_PAD keys by tl.topk, not full sorts. PACKED: value_ptr is this token's int64 slot keys (position_ptr
    unused). ROW_MAX: the top `count` by `_top_by_row_max` over the ROWS best rows (TRANSPOSED: its tile as
    [C, P]) instead of `_select` and the slots, which are then not used."""
    token = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, H_PAD)
    w = tl.arange(0, W_PAD)
    u = tl.arange(0, U_PAD)
    c = tl.arange(0, C_PAD)
    x_HxW = tl.load(x_ptr + token * H * W + h[:, None] * W + w[None, :],
                    mask=(h[:, None] < H) & (w[None, :] < W), other=0.0)
    signs_UxW = tl.load(col_signs_ptr + u[:, None] * W + w[None, :],
                        mask=(u[:, None] < U) & (w[None, :] < W), other=0.0)
    bounds = tl.sum(tl.abs(tl.dot(x_HxW, tl.trans(signs_UxW), input_precision="ieee")), axis=0)
    bounds = tl.where(u < U, bounds, -1.0)
    if KEYS32:
        keys = (bounds.to(tl.int32, bitcast=True) & ~0xFF) | (U_PAD - 1 - u)
    else:  # the bound's bits above (order-preserving for bounds >= 0), then the smaller pattern first
        keys = (bounds.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (U_PAD - 1 - u).to(tl.int64)
    if TOPK:
        ranked = tl.topk(keys, C_PAD)  # the C_PAD largest keys, descending
        rank = c
    else:
        ranked = tl.sort(keys, descending=True)  # position u of `ranked` holds the (u+1)-th largest bound
        rank = u
    pattern = (U_PAD - 1 - (ranked & (0xFF if KEYS32 else 0xFFFFFFFF))).to(tl.int32)
    last_kept = tl.sum(tl.where(rank == C - 1, ranked, 0), axis=0)
    next_bound = tl.max(tl.where(keys < last_kept, bounds, -1.0), axis=0)  # exact: the keys are distinct
    tl.store(column_ptr + token * C + rank, pattern, mask=rank < C)
    tl.store(next_bound_ptr + token, tl.where(C < U, next_bound, -1.0))
    tl.debug_barrier()  # the beam's columns, written above by every thread of the program, read back
    columns = tl.load(column_ptr + token * C + c, mask=c < C, other=0)
    signs_CxW = tl.load(col_signs_ptr + columns[:, None] * W + w[None, :],
                        mask=(c[:, None] < C) & (w[None, :] < W), other=0.0)
    y_HxC = tl.dot(x_HxW, tl.trans(signs_CxW), input_precision="ieee")
    if ROW_MAX:  # the top `count` among the ROWS rows of largest maximum (`_top_by_row_max`); no slots
        ranked = _top_by_row_max(y_HxC, row_signs_ptr, H, P, C, H_PAD, P_PAD, C_PAD, ROWS, K_PAD, TRANSPOSED)
        place = tl.arange(0, K_PAD)
    else:
        n_used = _select(y_HxC, row_signs_ptr, value_ptr, position_ptr, token, H, P, C, count, H_PAD, P_PAD, C_PAD,
                         CAP, MAX_ITERS, PACKED)
        # the top `count` of the used slots, by packed (score, position) keys: descending scores, the lower
        # position first among equal ones
        tl.debug_barrier()
        slot = tl.arange(0, CAP)
        used = slot < n_used
        if PACKED:
            keys = tl.load(value_ptr + token * CAP + slot, mask=used, other=-1)
        else:
            value = tl.load(value_ptr + token * CAP + slot, mask=used, other=-1.0)
            position = tl.load(position_ptr + token * CAP + slot, mask=used, other=0)
            keys = _slot_keys(value, position)
        if TOPK:
            ranked = tl.topk(keys, K_PAD)
            place = tl.arange(0, K_PAD)
        else:
            ranked = tl.sort(keys, descending=True)
            place = slot
    best = (ranked >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    flat = 0x7FFFFFFF - (ranked & 0xFFFFFFFF)
    column = tl.load(column_ptr + token * C + flat % C, mask=place < count, other=0)
    feature = (flat // C) * U + column  # row pattern u2 above the column pattern's log2(U) bits
    tl.store(out_value_ptr + token * count + place, best, mask=place < count)
    tl.store(out_id_ptr + token * count + place, feature, mask=place < count)


@triton.jit
def _top_by_row_max(y_HxC, signs_ptr, H, P, C, H_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr,
                    ROWS: tl.constexpr, K_PAD: tl.constexpr, TRANSPOSED: tl.constexpr):
    """The K_PAD largest (score, position) keys (`_slot_keys`) of |signs @ y| ([P, C]), descending, found among
    the ROWS rows (>= K_PAD) of largest maximum: each row's maximum is one distinct key, so a key with ROWS
    rows ranked above its own has ROWS larger keys and is not in the top K_PAD. Rows rank by (maximum, lower
    row first), which orders their maxima as the keys do. The chosen rows' scores are computed again (a
    [ROWS, H] @ [H, C] product with the same inner order, so the same numbers) instead of gathered from the tile."""
    h = tl.arange(0, H_PAD)
    c = tl.arange(0, C_PAD)
    if (ROWS < P_PAD) & TRANSPOSED:
        # the scores transposed, [C, P] like the bounds' tile: each thread then holds whole columns of it, so
        # the maxima need no exchange between threads and the top-k below runs on one copy of each
        p = tl.arange(0, P_PAD)
        signs_HxP = tl.load(signs_ptr + p[None, :] * H + h[:, None], mask=(p[None, :] < P) & (h[:, None] < H),
                            other=0.0)
        scores = tl.abs(tl.dot(tl.trans(y_HxC), signs_HxP, input_precision="ieee"))
        row_max = tl.max(tl.where((c[:, None] < C) & (p[None, :] < P), scores, -1.0), axis=0)
    elif ROWS < P_PAD:
        p = tl.arange(0, P_PAD)
        signs_PxH = tl.load(signs_ptr + p[:, None] * H + h[None, :], mask=(p[:, None] < P) & (h[None, :] < H),
                            other=0.0)
        scores = tl.abs(tl.dot(signs_PxH, y_HxC, input_precision="ieee"))
        row_max = tl.max(tl.where((p[:, None] < P) & (c[None, :] < C), scores, -1.0), axis=1)
    if ROWS < P_PAD:
        row_keys = (row_max.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (P_PAD - 1 - p).to(tl.int64)
        rows = (P_PAD - 1 - (tl.topk(row_keys, ROWS) & 0xFFFFFFFF)).to(tl.int32)  # padded rows rank last
    else:
        rows = tl.arange(0, ROWS)
    signs_RxH = tl.load(signs_ptr + rows[:, None] * H + h[None, :], mask=(rows[:, None] < P) & (h[None, :] < H),
                        other=0.0)
    scores = tl.abs(tl.dot(signs_RxH, y_HxC, input_precision="ieee"))
    keys = tl.where((rows[:, None] < P) & (c[None, :] < C), _slot_keys(scores, rows[:, None] * C + c[None, :]), -1)
    return tl.topk(tl.reshape(keys, [ROWS * C_PAD], can_reorder=True), K_PAD)


@triton.jit
def _slot_keys(value, position):
    """int64 keys ordering (score, flat position) as the selection wants them: larger scores first, the lower
    position first among equal scores (scores >= 0, positions < 2^31 - 1)."""
    return (value.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (0x7FFFFFFF - position).to(tl.int64)


@triton.jit
def _select(
    y_HxC, signs_ptr, value_ptr, position_ptr, token, H, P, C, count,
    H_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr, CAP: tl.constexpr, MAX_ITERS: tl.constexpr,
    PACKED: tl.constexpr = False,
):
    """One token's scores |signs @ y| ([P, C], in registers) and the candidates of its top `count` in its
    first CAP slots; returns how many slots it filled (the others are left as they were). PACKED: one int64
    key per slot (`_slot_keys`) at value_ptr instead of the value there and the position at position_ptr."""
    h = tl.arange(0, H_PAD)
    p = tl.arange(0, P_PAD)
    c = tl.arange(0, C_PAD)
    signs_PxH = tl.load(signs_ptr + p[:, None] * H + h[None, :], mask=(p[:, None] < P) & (h[None, :] < H), other=0.0)
    scores = tl.abs(tl.dot(signs_PxH, y_HxC, input_precision="ieee"))
    valid = (p[:, None] < P) & (c[None, :] < C)
    scores = tl.where(valid, scores, -1.0)

    # bisection invariant: count(scores >= lo) >= count > count(scores >= hi). It starts from the smallest
    # column maximum where there are at least `count` columns (each column has a score at or above it)
    column_max = tl.max(scores, axis=0)
    top = tl.max(column_max, axis=0)
    lo = tl.where(C >= count, tl.min(tl.where(c < C, column_max, top), axis=0), top * 0.0)
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

    n_used = tl.minimum(n_lo, CAP)
    if n_lo > CAP:  # more scores tie at the threshold than there are slots (bisection could not split them)
        _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP, PACKED)
    else:  # the common case: every score at or above `lo` fits, slots numbered by position in one scan
        kept = (scores >= lo).to(tl.int32)
        _store_slots(scores, p[:, None] * C + c[None, :], _slots(kept), kept > 0, value_ptr, position_ptr, token,
                     CAP, PACKED)
    return n_used


@triton.jit
def _store_slots(scores, flat, slot, keep, value_ptr, position_ptr, token, CAP: tl.constexpr, PACKED: tl.constexpr):
    if PACKED:
        tl.store(value_ptr + token * CAP + slot, _slot_keys(scores, flat), mask=keep)
    else:
        tl.store(value_ptr + token * CAP + slot, scores, mask=keep)
        tl.store(position_ptr + token * CAP + slot, flat, mask=keep)


@triton.jit
def _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP: tl.constexpr,
                    PACKED: tl.constexpr):
    """The scores above `hi` first, then those tied in [lo, hi) by position, as many as the CAP slots hold."""
    above = (scores >= hi).to(tl.int32)
    tied = ((scores >= lo) & (scores < hi)).to(tl.int32)
    n_above = tl.sum(tl.sum(above, axis=1), axis=0)
    slot = tl.where(above > 0, _slots(above), n_above + _slots(tied))
    keep = ((above + tied) > 0) & (slot < CAP)
    _store_slots(scores, p[:, None] * C + c[None, :], slot, keep, value_ptr, position_ptr, token, CAP, PACKED)


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


def select_warps(n_patterns: int, n_cols: int) -> int:
    """Warps per token program: 2 for up to 4096 scores after padding, more for larger tiles (8 at 256 x 64)."""
    scores = next_power_of_2(max(n_patterns, 16)) * next_power_of_2(max(n_cols, 16))
    return max(2, min(8, scores // 2048))


def beam_select(
    x_NxHxW: torch.Tensor, row_signs_PxH: torch.Tensor, col_signs_UxW: torch.Tensor, beam: int, count: int,
    num_warps: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The product encoder's whole beam search, one program per token. Returns (feature ids u2 * U + u1
    [N, count] int64 and their scores [N, count] float32, descending, as `reference.parity_beam_select` gives
    them; the largest bound left out of the beam [N] float32, -1 where none is). Bounds are ||Y[:, u]||_1 with
    Y = x_grid @ col_signs^T, unscaled like the scores; ties between bounds keep the smaller pattern, ties
    between scores the smaller position p * beam + c. num_warps 0: `select_warps`."""
    n_tokens, n_rows, n_cols = x_NxHxW.shape
    n_patterns, n_col_patterns = row_signs_PxH.shape[0], col_signs_UxW.shape[0]
    if row_signs_PxH.shape[1] != n_rows or col_signs_UxW.shape[1] != n_cols:
        raise ValueError(f"x is [N, {n_rows}, {n_cols}] but the sign tables are {tuple(row_signs_PxH.shape)} and "
                         f"{tuple(col_signs_UxW.shape)}")
    if not 0 < beam <= n_col_patterns:
        raise ValueError(f"beam must lie in [1, {n_col_patterns}], got {beam}")
    if not 0 < count <= n_patterns * beam:
        raise ValueError(f"count must lie in [1, {n_patterns * beam}], got {count}")
    cap = candidate_slots(count)
    x = x_NxHxW.contiguous().float()
    device = x.device
    topk, packed = BEAM_OPTIONS["topk"] and HAS_TOPK, BEAM_OPTIONS["packed"]
    row_max = BEAM_OPTIONS.get("row_max", False) and HAS_TOPK and beam <= ROW_MAX_BEAM
    p_pad, k_pad = next_power_of_2(max(n_patterns, 16)), next_power_of_2(count)
    # scratch for the slots, read back on chip (none with row_max): packed, the int64 keys in slot_values
    slots = 1 if row_max else cap
    slot_values = torch.empty((n_tokens, slots), dtype=torch.int64 if packed else torch.float32, device=device)
    slot_positions = torch.empty((n_tokens, 1 if packed else slots), dtype=torch.int32, device=device)
    columns = torch.empty((n_tokens, beam), dtype=torch.int32, device=device)
    next_bound = torch.empty((n_tokens,), dtype=torch.float32, device=device)
    values = torch.empty((n_tokens, count), dtype=torch.float32, device=device)
    ids = torch.empty((n_tokens, count), dtype=torch.int64, device=device)
    if n_tokens:
        _beam_select_kernel[(n_tokens,)](
            x, row_signs_PxH.contiguous().float(), col_signs_UxW.contiguous().float(), columns, next_bound,
            slot_values, slot_positions, values, ids, n_rows, n_cols, n_col_patterns, n_patterns, beam, count,
            H_PAD=next_power_of_2(max(n_rows, 16)), W_PAD=next_power_of_2(max(n_cols, 16)),
            U_PAD=next_power_of_2(max(n_col_patterns, 16)), P_PAD=p_pad,
            C_PAD=next_power_of_2(max(beam, 16)), CAP=cap, MAX_ITERS=MAX_BISECTIONS,
            KEYS32=BEAM_OPTIONS["keys32"] and next_power_of_2(max(n_col_patterns, 16)) <= 256, TOPK=topk,
            PACKED=packed, K_PAD=k_pad, ROW_MAX=row_max, ROWS=min(max(16, k_pad), p_pad),
            TRANSPOSED=BEAM_OPTIONS.get("transposed", False),
            num_warps=num_warps or BEAM_OPTIONS.get("warps", 0) or select_warps(n_patterns, beam),
        )
    return ids, values, next_bound
