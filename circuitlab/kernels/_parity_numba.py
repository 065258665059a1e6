"""The product parity layer's encoder on the CPU, compiled (numba): one token at a time, every step in cache.

The same search as `ParityBottleneck._pursue` (parity.py), written as loops over one token instead of batched
tensor operations. The PyTorch path writes every pass's 16,384 scores a token to memory and runs top-k, LU
solves and gathers over the whole batch; on 2 CPU cores that made parity-stories' forward pass 0.15x the GELU
model's. Here a token's column products Y (H x U), its scores and its systems stay in cache.

Per token and pursuit pass:
- Y = x_grid @ sQ^T (one small BLAS product) and the column bounds ||Y[:, u1]||_1;
- the columns are taken in decreasing bound (put in order 24 at a time by one pass of insertions; in the first
  batch only columns whose bound reaches an edge that at least 24 of them reach), scored eight at a time
  (Y[:, columns]^T @ sP^T, one BLAS product on the block's columns only), and a column's scores that beat the
  k-th best kept so far are inserted into the kept lists (a column none of whose scores can enter is passed
  over after one vectorised count; before the lists fill, a floor read off the first block's group maxima
  keeps most scores out: `_first_floor`). The visit
  stops once the k kept scores beat the next column's bound by BOUND_MARGIN (no later column can enter them)
  and never goes past `beam` columns: the result is the configured encoder's, without scoring the columns
  that cannot change it (on the shipped model's writes 8-24 of 64 columns on average in the first pass,
  24-30 in the second, by layer);
- the pursuit pass asks for the k best residual features outside the support, which is what parity.py keeps
  of its top 2k (its first k outside the support), so it stops on the k-th best instead of the 2k-th;
- least squares by Cholesky in float64. The union's system reuses the support's factor (a block update:
  W = L_S^-1 G_SU and the Schur complement's factor), and a support's residual norm comes from
  ||x||^2 - a.b - ridge ||a||^2 without decoding it; only the support the next pass scores is decoded, and the
  final support, whose decoded write sum_i a_i phi_i is returned with it (the layer's output where no hook
  changes the coefficients).

The edges and floors only keep columns and scores out that cannot change the result; the tests check them
against brute force, and a kept list left short (which a wrong floor would cause) leaves its token out rather
than reading past the lists: the caller then keeps the PyTorch encoder for the batch.

The least squares are in `_parity_numba_solve`.

Float32 scores, float64 solves: near-ties may be ordered differently from the PyTorch path (as between any two
float32 paths; tests/architectures/test_parity.py compares the supports and, where they differ, how well each
fits).

Letters: N tokens, H grid rows, W grid columns, U column patterns, P row patterns, F features in a solve,
B columns scored together.
"""

from __future__ import annotations

import numba
import numpy as np

from circuitlab.kernels._parity_numba_solve import FAST, _factor_solve, _union_solve, _inner_products, _decode, _residual

# the visit stops when `count` scores exceed the next bound by this relative margin: far above the float32
# rounding of a 16-term sum taken in another order (about 1e-6 relative)
BOUND_MARGIN = 1e-4
COLUMN_BLOCK = 8  # columns scored by one BLAS product
ORDER_BATCH = 24  # columns put in order by one pass over the bounds (most tokens stop within 24)
# the first floor (see _first_floor): groups of 8 scores, their maxima binned in 1/16 octaves over 8 octaves
FLOOR_GROUP = 8
FLOOR_SHIFT = 19
FLOOR_BINS = 128
# tokens with ||x||^2 at or above this (or not finite) are not encoded: below it |x_j| < 1e18, and no float32
# score (a sum of d terms of |x_j|) can overflow
WRITE_LIMIT = 1e36


# --- column products and the top features -------------------------------------------------------------------


@numba.njit(cache=True, fastmath=FAST)
def _column_products(x_HxW, colsT_WxU, Y_HxU, bounds_U):
    """Y = x_grid @ sQ^T and bounds[u] = sum_h |Y[h, u]|."""
    np.dot(x_HxW, colsT_WxU, Y_HxU)
    bounds_U[:] = 0.0
    for h in range(Y_HxU.shape[0]):
        for u in range(Y_HxU.shape[1]):
            bounds_U[u] += abs(Y_HxU[h, u])


@numba.njit(cache=True, inline="always")
def _insert(keys, filled, capacity, key):
    """Insert `key` into keys[:filled], kept in decreasing order, at most `capacity` long; the caller has checked
    that it beats the last key when the list is full. One int64 array: a score and who holds it move together."""
    position = filled if filled < capacity else capacity - 1
    while position > 0 and keys[position - 1] < key:
        keys[position] = keys[position - 1]
        position -= 1
    keys[position] = key
    return filled + 1 if filled < capacity else filled


@numba.njit(cache=True, inline="always")
def _key(magnitude_bits, payload):
    """An int64 ordered like the non-negative float32 whose bits are given, then by the payload (< 2^32)."""
    return (np.int64(magnitude_bits) << 32) | np.int64(payload)


@numba.njit(cache=True, inline="always")
def _key_magnitude(key, bits_1, float_1):
    """The float32 magnitude of a key (bits_1: a one-element int32 scratch array, float_1 its float32 view, made
    once: a view made per call costs a reference count and its release each time)."""
    bits_1[0] = np.int32(key >> 32)
    return float_1[0]


@numba.njit(cache=True, inline="always")
def _keep(S_bits, c, p, u1, col_bits, excluded, kept, filled, count):
    """Insert score (c, p) into the kept lists unless its feature is excluded; returns how many are kept."""
    feature = u1 | (p << col_bits)
    if excluded[feature]:
        return filled
    negative = np.int64(S_bits[c, p] < 0) << 31
    return _insert(kept, filled, count, _key(S_bits[c, p] & 0x7FFFFFFF, negative | feature))


@numba.njit(cache=True, inline="always", fastmath=FAST)
def _count_above(scores_BxP, c, limit, strict):
    """How many |scores[c]| exceed `limit` (reach it when not `strict`): an integer sum of compares, which
    compiles to vector code where a running maximum does not (15 against 120 ns for 256 scores)."""
    above = 0
    if strict:
        for p in range(scores_BxP.shape[1]):
            above += abs(scores_BxP[c, p]) > limit
    else:
        for p in range(scores_BxP.shape[1]):
            above += abs(scores_BxP[c, p]) >= limit
    return above


@numba.njit(cache=True)
def _edge(bits, reach, histogram):
    """The largest value (in bins of 2^FLOOR_SHIFT, FLOOR_BINS of them below the largest of `bits`) that at
    least `reach` of the non-negative int32 `bits` attain; 0 where the count reaches `reach` only below the
    bins."""
    top = np.int32(0)
    for i in range(bits.size):
        top = bits[i] if bits[i] > top else top
    histogram[:] = 0
    for i in range(bits.size):
        below = (top - bits[i]) >> FLOOR_SHIFT
        histogram[below if below < FLOOR_BINS else FLOOR_BINS] += 1
    reached = 0
    for b in range(FLOOR_BINS):
        reached += histogram[b]
        if reached >= reach:
            edge = top - (((b + 1) << FLOOR_SHIFT) - 1)  # the smallest value of bin b
            return edge if edge > 0 else np.int32(0)
    return np.int32(0)


@numba.njit(cache=True)
def _order(bound_bits, edge, taken, wanted, order):
    """One pass of insertions: order[:wanted] = the largest column keys below `taken` among the columns whose
    bound reaches `edge`, in decreasing order; returns how many were found (at most `wanted`)."""
    U = bound_bits.size
    found = 0
    for u in range(U):
        if bound_bits[u] < edge:
            continue
        key = _key(bound_bits[u], U - 1 - u)
        if key < taken and (found < wanted or key > order[wanted - 1]):
            found = _insert(order, found, wanted, key)
    return found


@numba.njit(cache=True)
def _first_floor(flat_bits, n_scores, groups, maxima, histogram, bits_1, float_1):
    """A floor under the `groups`-th largest of the first block's scores: cut them into groups of FLOOR_GROUP,
    each group's largest a distinct feature, and find a value that at least `groups` of these maxima reach
    (`_edge`). With groups = count + excluded features, at least `count` features outside the excluded score
    at least the floor, so no feature of the top `count` is below it (first-pass list insertions a token on the
    shipped model: about 145 without a floor, 66-83 with the smallest of `groups` slice maxima, 45-54 with this
    one). Runs on the scores' bits (|s| as int32 orders like |s|). Where the count is reached only below
    the bins, the floor is the smallest of `groups` maxima of equal slices (valid too, but lower)."""
    n_groups = n_scores // FLOOR_GROUP
    if n_groups < groups:
        return np.float32(0.0)
    for g in range(n_groups):
        largest = np.int32(0)
        for j in range(g * FLOOR_GROUP, (g + 1) * FLOOR_GROUP):
            magnitude_bits = flat_bits[j] & np.int32(0x7FFFFFFF)
            largest = magnitude_bits if magnitude_bits > largest else largest  # (the builtin max is a call)
        maxima[g] = largest
    edge = _edge(maxima[:n_groups], groups, histogram)
    if edge == 0:
        size = n_groups // groups  # slices of whole groups
        edge = np.int32(0x7F800000)
        for slice_ in range(groups):
            largest = np.int32(0)
            for g in range(slice_ * size, (slice_ + 1) * size):
                largest = maxima[g] if maxima[g] > largest else largest
            edge = largest if largest < edge else edge
    bits_1[0] = edge
    return float_1[0]


@numba.njit(cache=True, fastmath=FAST)
def _top_features(Y_HxU, bounds_U, rowsT_HxP, count, beam, col_bits, excluded, n_excluded, work, out_i, out_v):
    """The `count` features of largest |<x, phi_u>| among the `beam` columns of largest bound, leaving out the
    `n_excluded` features marked in `excluded` (one flag per feature), in decreasing |score|: ids into out_i,
    signed sqrt(d) <x, phi_u> into out_v. Returns the columns scored, or -1 if fewer than `count` were kept.

    Kept features are int64 keys, |score|'s bits above the sign (bit 31) and the id: equal scores tie-break by
    sign, then id. Columns are keys too, bound's bits above U - 1 - u (of equal bounds, the lower column first)."""
    order, Y_BxH, S_BxP, kept, bits_1, maxima, histogram = work
    H, U = Y_HxU.shape
    P = rowsT_HxP.shape[1]
    B = Y_BxH.shape[0]
    batch = order.size
    last = min(beam, U)
    # views made once per call (one made per score or key would cost a reference count and its release)
    bound_bits = bounds_U.view(np.int32)
    S_bits = S_BxP.view(np.int32)
    flat_bits = S_bits.reshape(B * P)
    float_1 = bits_1.view(np.float32)
    filled = 0  # features kept so far, keys[:filled] decreasing
    kth = np.float32(0.0)  # the last kept score once `count` are kept
    scored = 0
    ordered = 0  # columns put in order so far; order[scored - start ...] holds the batch being scored
    start = 0
    taken = np.int64(0x7FFFFFFFFFFFFFFF)  # the key of the last column put in order
    floor = np.float32(0.0)  # while fewer than `count` are kept, scores from the floor up enter
    while scored < last:
        if scored == ordered:
            # the next batch of columns: the largest keys below the last taken, one pass of insertions
            wanted = min(batch, last - ordered)
            # first batch: only bounds from an edge that at least `wanted` of them reach are candidates (the
            # insertions fell from 83-109 to 26-55 a token in the first pass on the shipped model); a later
            # batch takes every key below the last taken
            edge = _edge(bound_bits, wanted, histogram) if ordered == 0 else np.int32(0)
            if _order(bound_bits, edge, taken, wanted, order) < wanted:
                _order(bound_bits, np.int32(0), taken, wanted, order)  # (only if the edge were wrong: a guard)
            taken = order[wanted - 1]
            start = ordered
            ordered += wanted
        block = min(B, ordered - scored)
        for c in range(block):
            u1 = U - 1 - np.int64(order[scored - start + c] & 0xFFFFFFFF)
            for h in range(H):
                Y_BxH[c, h] = Y_HxU[h, u1]
        np.dot(Y_BxH[:block], rowsT_HxP, S_BxP[:block])  # the rows past `block` are left as they were
        if filled == 0:
            floor = _first_floor(flat_bits, block * P, count + n_excluded, maxima, histogram, bits_1, float_1)
        for c in range(block):
            u1 = U - 1 - np.int64(order[scored - start] & 0xFFFFFFFF)
            scored += 1
            # kept lists full: a score must beat the last kept; not yet: reach the floor
            full = filled == count
            if _count_above(S_BxP, c, kth if full else floor, full) > 0:
                # (counted again per chunk of 16 or 64 scores, this took as long or longer)
                for p in range(P):
                    score = abs(S_BxP[c, p])
                    if (score > kth) if filled == count else (score >= floor):
                        filled = _keep(S_bits, c, p, u1, col_bits, excluded, kept, filled, count)
                        if filled == count:
                            kth = _key_magnitude(kept[count - 1], bits_1, float_1)
            if filled == count and scored < last:
                # stop once the `count` kept scores beat every bound left: the next column's
                if scored < ordered:
                    bound = _key_magnitude(order[scored - start], bits_1, float_1)
                else:
                    bound = np.float32(0.0)
                    for u in range(U):
                        if _key(bound_bits[u], U - 1 - u) < taken:
                            if bounds_U[u] > bound:
                                bound = bounds_U[u]
                if kth > bound * (1.0 + BOUND_MARGIN):
                    last = scored  # ends the visit
                    break
    for j in range(filled):
        key = kept[j]
        out_i[j] = key & 0x7FFFFFFF
        magnitude = _key_magnitude(key, bits_1, float_1)
        out_v[j] = -magnitude if (key >> 31) & 1 else magnitude
    return scored if filled == count else -1  # (never short where the floor is valid; a guard, not a path)


# --- the encoder --------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _leave_out(support, values, decoded, n):
    """What a token that is not encoded keeps: zeros (its `encoded` flag stays False)."""
    support[n] = 0
    values[n] = 0.0
    decoded[n] = 0.0


@numba.njit(cache=True, parallel=True, fastmath=FAST)
def encode(X_NxHxW, row_signs_PxH, col_signs_UxW, row_means, col_means, k, beam, rounds, ridge, scale, col_bits,
           n_chunks):
    """(supports [N, k] int64 in the order parity.py gives them, their least-squares coefficients [N, k]
    float32, the decoded writes sum_i a_i phi_i [N, H, W] float32, columns scored [N, rounds], whether each
    token was encoded [N]). A token whose ||x||^2 is not below WRITE_LIMIT (not finite, or so large that float32
    scores could overflow) is left out: zero support ids and values, not encoded; the caller keeps the PyTorch
    encoder for such a batch."""
    N, H, W = X_NxHxW.shape
    U, P = col_signs_UxW.shape[0], row_signs_PxH.shape[0]
    support = np.empty((N, k), dtype=np.int64)
    values = np.empty((N, k), dtype=np.float32)
    scored = np.zeros((N, rounds), dtype=np.int32)
    decoded = np.empty((N, H, W), dtype=np.float32)
    encoded = np.zeros(N, dtype=np.bool_)
    colsT32 = np.ascontiguousarray(col_signs_UxW.T)
    rowsT32 = np.ascontiguousarray(row_signs_PxH.T)
    rows64 = row_signs_PxH.astype(np.float64)
    cols64 = col_signs_UxW.astype(np.float64)
    row_means64, col_means64 = row_means.astype(np.float64), col_means.astype(np.float64)
    for chunk in numba.prange(n_chunks):
        work = (
            np.empty(ORDER_BATCH, dtype=np.int64),
            np.empty((COLUMN_BLOCK, H), dtype=np.float32), np.empty((COLUMN_BLOCK, P), dtype=np.float32),
            np.empty(k, dtype=np.int64), np.empty(1, dtype=np.int32),
            np.empty(COLUMN_BLOCK * P // FLOOR_GROUP, dtype=np.int32), np.empty(FLOOR_BINS + 1, dtype=np.int64),
        )
        Y_x = np.empty((H, U), dtype=np.float32)
        Y_r = np.empty((H, U), dtype=np.float32)
        bounds = np.empty(U, dtype=np.float32)
        top_i = np.empty(k, dtype=np.int64)
        top_v = np.empty(k, dtype=np.float32)
        current = np.empty(k, dtype=np.int64)
        candidate = np.empty(k, dtype=np.int64)
        union = np.empty(2 * k, dtype=np.int64)
        b = np.empty(2 * k, dtype=np.float64)
        b_kept = np.empty(k, dtype=np.float64)
        a = np.empty(2 * k, dtype=np.float64)
        a_current = np.empty(k, dtype=np.float64)
        a_candidate = np.empty(k, dtype=np.float64)
        L = np.empty((k, k), dtype=np.float64)
        L_candidate = np.empty((k, k), dtype=np.float64)
        y = np.empty(k, dtype=np.float64)
        y_candidate = np.empty(k, dtype=np.float64)
        W_block = np.empty((k, k), dtype=np.float64)
        kept_a = np.empty(k, dtype=np.float64)
        kept_at = np.empty(k, dtype=np.int64)
        WtW = np.empty((k, k), dtype=np.float64)
        Z = np.empty((k, k), dtype=np.float64)
        y_fresh = np.empty(k, dtype=np.float64)
        A_HxF = np.empty((H, k), dtype=np.float64)
        C_FxW = np.empty((k, W), dtype=np.float64)
        x_hat = np.empty((H, W), dtype=np.float64)
        residual = np.empty((H, W), dtype=np.float32)
        excluded = np.zeros(U * P, dtype=np.bool_)
        for n in range(chunk * N // n_chunks, (chunk + 1) * N // n_chunks):
            x = X_NxHxW[n]
            norm = 0.0
            for h in range(H):
                for w in range(W):
                    norm += np.float64(x[h, w]) * x[h, w]
            if not norm < WRITE_LIMIT:  # NaN compares false too
                _leave_out(support, values, decoded, n)
                continue
            _column_products(x, colsT32, Y_x, bounds)
            scored[n, 0] = _top_features(Y_x, bounds, rowsT32, k, beam, col_bits, excluded, 0, work, top_i, top_v)
            if scored[n, 0] < 0:
                _leave_out(support, values, decoded, n)
                continue
            current[:] = top_i
            _inner_products(current, Y_x, rows64, col_bits, scale, b[:k])
            error = norm - _factor_solve(current, b[:k], row_means64, col_means64, ridge, col_bits, L, y, a_current)
            fresh_decode = False  # whether x_hat holds the current support's decoded write
            short = False
            for pass_ in range(1, rounds):
                _residual(x, current, a_current, rows64, cols64, col_bits, scale, A_HxF, C_FxW, x_hat, residual)
                fresh_decode = True
                _column_products(residual, colsT32, Y_r, bounds)
                # the k best residual features outside the support: parity.py's first k outside of its top 2k
                for i in range(k):
                    excluded[current[i]] = True
                scored[n, pass_] = _top_features(Y_r, bounds, rowsT32, k, beam, col_bits, excluded, k, work, top_i,
                                                 top_v)
                for i in range(k):
                    excluded[current[i]] = False
                if scored[n, pass_] < 0:
                    short = True
                    break
                union[:k] = current
                union[k:] = top_i
                _inner_products(top_i, Y_x, rows64, col_bits, scale, b[k:])
                _union_solve(current, top_i, b[:k], b[k:], L, y, row_means64, col_means64, ridge, col_bits,
                             W_block, WtW, Z, y_fresh, a)
                # the k largest |a| of the union, in decreasing |a| (of equal ones, the first in the union)
                filled = 0
                for i in range(2 * k):
                    magnitude = abs(a[i])
                    if filled < k or magnitude > kept_a[k - 1]:
                        position = filled if filled < k else k - 1
                        while position > 0 and kept_a[position - 1] < magnitude:
                            kept_a[position], kept_at[position] = kept_a[position - 1], kept_at[position - 1]
                            position -= 1
                        kept_a[position], kept_at[position] = magnitude, i
                        if filled < k:
                            filled += 1
                for i in range(k):
                    candidate[i] = union[kept_at[i]]
                    b_kept[i] = b[kept_at[i]]
                trial_error = norm - _factor_solve(candidate, b_kept, row_means64, col_means64, ridge, col_bits,
                                                   L_candidate, y_candidate, a_candidate)
                if trial_error < error:
                    error = trial_error
                    current[:] = candidate
                    a_current[:] = a_candidate
                    b[:k] = b_kept
                    L[:, :] = L_candidate
                    y[:] = y_candidate
                    fresh_decode = False
            if short:  # a short kept list (guarded, never seen): the token is left out
                _leave_out(support, values, decoded, n)
                continue
            if not fresh_decode:
                _decode(current, a_current, rows64, cols64, col_bits, scale, A_HxF, C_FxW, x_hat)
            support[n] = current
            for i in range(k):
                values[n, i] = a_current[i]
            for h in range(H):
                for w in range(W):
                    decoded[n, h, w] = x_hat[h, w]
            encoded[n] = True
    return support, values, decoded, scored, encoded
