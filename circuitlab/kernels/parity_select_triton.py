"""Triton fast path for the product parity encoder's scoring and selection (bottleneck/parity.py, `top_scores`).

Letters: N tokens, H grid rows, W grid columns, U column patterns, P row patterns (2^r2), C kept column
patterns (the beam), F features asked for (`count`), CAP candidate slots per token.

`beam_candidates` (behind `kernels.parity_beam_top`): per token, the scores S[p, c] = |<sP(p), Y[:, c]>| of every
row pattern p and kept column c, in registers (one [P, H] @ [H, C] product, float32 FMA, so exact to float32
rounding), and a superset of their `count` largest in CAP slots. A bisection on the scores' range finds a
threshold `lo` that at least `count` and at most CAP scores reach (it starts from the smallest column maximum,
which at least `count` scores reach when there are `count` columns); the scores at or above it are written to
the slots, numbered by position per row. Every one of the `count` largest is among them. When more than CAP
scores tie at the threshold (a degenerate write) the scores above the upper end `hi` go first and the tied ones
fill the remaining slots, so the result is still a valid top-`count` (ties broken by position). A top-k over
the slots finishes the selection.

`beam_select` (behind `kernels.parity_beam_select`, beams up to 32): the whole beam search in one program per
token, from the write itself. Y = x_grid sQ^T for all U column patterns, their bounds ||Y[:, u]||_1, the beam as
the top C of (bound, pattern) keys, the beam's columns of Y rebuilt from their sign patterns, then the top
`count` of the [P, C] score tile by row maxima (`_top_by_row_max`): the `count` largest keys lie among the
`count` rows with the largest maxima (a key with that many rows ranked above its own has as many larger keys,
their maxima), so the kernel takes each row's maximum, the best rows by tl.topk, computes those rows' scores
again (the same products in the same order, so the same numbers) and takes the top `count` of their keys. The
tile is held transposed, [C, P], so each thread holds whole columns and the maxima need no exchange between
threads. Nothing but the beam's column list goes to memory. Keys are 64-bit, so the beam is exactly the columns
of largest bound (ties to the smaller pattern) and scores tie to the smaller position p * C + c. The variants
measured and dropped are in docs/decisions/parity-beam-select.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import next_power_of_2

# `beam_select` needs Triton's bitonic top-k; without it the encoder takes the composed path (kernels/__init__.py)
HAS_TOPK = hasattr(tl, "topk")
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
    x_ptr, row_signs_ptr, col_signs_ptr, column_ptr, next_bound_ptr, out_value_ptr, out_id_ptr,
    H: tl.constexpr, W: tl.constexpr, U: tl.constexpr, P: tl.constexpr, C: tl.constexpr, count: tl.constexpr,
    H_PAD: tl.constexpr, W_PAD: tl.constexpr, U_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr,
    K_PAD: tl.constexpr, ROWS: tl.constexpr,
):
    """One token from its write: the bounds of all U column patterns, the beam of the C largest (64-bit keys:
    the bound's bits above, the smaller pattern first among equal bounds), its columns of Y rebuilt, and the top
    `count` of their scores by `_top_by_row_max` over the ROWS best rows."""
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
    # the bound's bits above (order-preserving for bounds >= 0), then the smaller pattern first
    keys = (bounds.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (U_PAD - 1 - u).to(tl.int64)
    ranked = tl.topk(keys, C_PAD)  # the C_PAD largest keys, descending
    pattern = (U_PAD - 1 - (ranked & 0xFFFFFFFF)).to(tl.int32)
    last_kept = tl.sum(tl.where(c == C - 1, ranked, 0), axis=0)
    next_bound = tl.max(tl.where(keys < last_kept, bounds, -1.0), axis=0)  # exact: the keys are distinct
    tl.store(column_ptr + token * C + c, pattern, mask=c < C)
    tl.store(next_bound_ptr + token, tl.where(C < U, next_bound, -1.0))
    tl.debug_barrier()  # the beam's columns, written above by every thread of the program, read back
    columns = tl.load(column_ptr + token * C + c, mask=c < C, other=0)
    signs_CxW = tl.load(col_signs_ptr + columns[:, None] * W + w[None, :],
                        mask=(c[:, None] < C) & (w[None, :] < W), other=0.0)
    y_HxC = tl.dot(x_HxW, tl.trans(signs_CxW), input_precision="ieee")
    ranked = _top_by_row_max(y_HxC, row_signs_ptr, H, P, C, H_PAD, P_PAD, C_PAD, ROWS, K_PAD)
    place = tl.arange(0, K_PAD)
    best = (ranked >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    flat = 0x7FFFFFFF - (ranked & 0xFFFFFFFF)
    column = tl.load(column_ptr + token * C + flat % C, mask=place < count, other=0)
    feature = (flat // C) * U + column  # row pattern u2 above the column pattern's log2(U) bits
    tl.store(out_value_ptr + token * count + place, best, mask=place < count)
    tl.store(out_id_ptr + token * count + place, feature, mask=place < count)


@triton.jit
def _top_by_row_max(y_HxC, signs_ptr, H, P, C, H_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr,
                    ROWS: tl.constexpr, K_PAD: tl.constexpr):
    """The K_PAD largest (score, position) keys (`_slot_keys`) of |signs @ y| ([P, C]), descending, found among
    the ROWS rows (>= K_PAD) of largest maximum: each row's maximum is one distinct key, so a key with ROWS
    rows ranked above its own has ROWS larger keys and is not in the top K_PAD. Rows rank by (maximum, lower
    row first), which orders their maxima as the keys do. The chosen rows' scores are computed again (a
    [ROWS, H] @ [H, C] product with the same inner order, so the same numbers) instead of gathered from the tile."""
    h = tl.arange(0, H_PAD)
    c = tl.arange(0, C_PAD)
    if ROWS < P_PAD:
        # the scores transposed, [C, P] like the bounds' tile: each thread then holds whole columns of it, so
        # the maxima need no exchange between threads and the top-k below runs on one copy of each
        p = tl.arange(0, P_PAD)
        signs_HxP = tl.load(signs_ptr + p[None, :] * H + h[:, None], mask=(p[None, :] < P) & (h[:, None] < H),
                            other=0.0)
        scores = tl.abs(tl.dot(tl.trans(y_HxC), signs_HxP, input_precision="ieee"))
        row_max = tl.max(tl.where((c[:, None] < C) & (p[None, :] < P), scores, -1.0), axis=0)
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
):
    """One token's scores |signs @ y| ([P, C], in registers) and the candidates of its top `count` in its
    first CAP slots (values at value_ptr, flat positions p * C + c at position_ptr); returns how many slots it
    filled (the others are left as they were)."""
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
        _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP)
    else:  # the common case: every score at or above `lo` fits, slots numbered by position in one scan
        kept = (scores >= lo).to(tl.int32)
        _store_slots(scores, p[:, None] * C + c[None, :], _slots(kept), kept > 0, value_ptr, position_ptr, token, CAP)
    return n_used


@triton.jit
def _store_slots(scores, flat, slot, keep, value_ptr, position_ptr, token, CAP: tl.constexpr):
    tl.store(value_ptr + token * CAP + slot, scores, mask=keep)
    tl.store(position_ptr + token * CAP + slot, flat, mask=keep)


@triton.jit
def _store_by_tiers(scores, lo, hi, p, c, C, value_ptr, position_ptr, token, CAP: tl.constexpr):
    """The scores above `hi` first, then those tied in [lo, hi) by position, as many as the CAP slots hold."""
    above = (scores >= hi).to(tl.int32)
    tied = ((scores >= lo) & (scores < hi)).to(tl.int32)
    n_above = tl.sum(tl.sum(above, axis=1), axis=0)
    slot = tl.where(above > 0, _slots(above), n_above + _slots(tied))
    keep = ((above + tied) > 0) & (slot < CAP)
    _store_slots(scores, p[:, None] * C + c[None, :], slot, keep, value_ptr, position_ptr, token, CAP)


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
    if not HAS_TOPK:
        raise RuntimeError("beam_select needs triton.language.topk (Triton 3.2 or later)")
    if row_signs_PxH.shape[1] != n_rows or col_signs_UxW.shape[1] != n_cols:
        raise ValueError(f"x is [N, {n_rows}, {n_cols}] but the sign tables are {tuple(row_signs_PxH.shape)} and "
                         f"{tuple(col_signs_UxW.shape)}")
    if not 0 < beam <= n_col_patterns:
        raise ValueError(f"beam must lie in [1, {n_col_patterns}], got {beam}")
    if not 0 < count <= n_patterns * beam:
        raise ValueError(f"count must lie in [1, {n_patterns * beam}], got {count}")
    x = x_NxHxW.contiguous().float()
    device = x.device
    p_pad, k_pad = next_power_of_2(max(n_patterns, 16)), next_power_of_2(count)
    columns = torch.empty((n_tokens, beam), dtype=torch.int32, device=device)
    next_bound = torch.empty((n_tokens,), dtype=torch.float32, device=device)
    values = torch.empty((n_tokens, count), dtype=torch.float32, device=device)
    ids = torch.empty((n_tokens, count), dtype=torch.int64, device=device)
    if n_tokens:
        _beam_select_kernel[(n_tokens,)](
            x, row_signs_PxH.contiguous().float(), col_signs_UxW.contiguous().float(), columns, next_bound, values,
            ids, n_rows, n_cols, n_col_patterns, n_patterns, beam, count,
            H_PAD=next_power_of_2(max(n_rows, 16)), W_PAD=next_power_of_2(max(n_cols, 16)),
            U_PAD=next_power_of_2(max(n_col_patterns, 16)), P_PAD=p_pad, C_PAD=next_power_of_2(max(beam, 16)),
            K_PAD=k_pad, ROWS=min(max(16, k_pad), p_pad), num_warps=num_warps or select_warps(n_patterns, beam),
        )
    return ids, values, next_bound
