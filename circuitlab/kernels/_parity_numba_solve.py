"""Least squares of the compiled parity encoder (`_parity_numba`): the Gram matrix of a support from the
mean-sign tables, Cholesky in float64, and the union's system built on the support's factor (a block update:
W = L_S^-1 G_SU and the Schur complement's factor); inner products, decoding and residuals of one token.

Letters: H grid rows, W grid columns, U column patterns, P row patterns, F features in a solve.
"""

from __future__ import annotations

import numba
import numpy as np

# reassociation and contraction allowed (vectorised sums); NaN and infinity keep their meaning
FAST = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(cache=True, inline="always")
def _gram(ids_A, ids_B, row_means, col_means, col_bits, out, lower):
    """out[i, j] = <phi_a_i, phi_b_j> = tP[u2 xor u2'] tQ[u1 xor u1'] (the xor-group identity: two lookups in
    tables of 2^r2 and 2^r1 entries), for j <= i only when `lower`."""
    mask = (1 << col_bits) - 1
    for i in range(ids_A.size):
        u1, u2 = ids_A[i] & mask, ids_A[i] >> col_bits
        for j in range(i + 1 if lower else ids_B.size):
            out[i, j] = row_means[u2 ^ (ids_B[j] >> col_bits)] * col_means[u1 ^ (ids_B[j] & mask)]


@numba.njit(cache=True, fastmath=FAST)
def _cholesky(L, F):
    """The lower Cholesky factor of L[:F, :F] (its lower triangle read), in place, a column at a time, four rows
    together: the column's entries below the diagonal are independent dot products, which the core overlaps,
    and four of them share each load of the column's row. At F = 32: 1.3 us, against 2.8 one row at a time and
    4.4 row by row (each entry waiting on the one before it)."""
    for j in range(F):
        total = L[j, j]
        for p in range(j):
            total -= L[j, p] * L[j, p]
        diagonal = np.sqrt(total)
        L[j, j] = diagonal
        inverse = 1.0 / diagonal
        i = j + 1
        while i + 4 <= F:
            t0, t1, t2, t3 = L[i, j], L[i + 1, j], L[i + 2, j], L[i + 3, j]
            for p in range(j):
                v = L[j, p]
                t0 -= L[i, p] * v
                t1 -= L[i + 1, p] * v
                t2 -= L[i + 2, p] * v
                t3 -= L[i + 3, p] * v
            L[i, j], L[i + 1, j], L[i + 2, j], L[i + 3, j] = t0 * inverse, t1 * inverse, t2 * inverse, t3 * inverse
            i += 4
        while i < F:
            total = L[i, j]
            for p in range(j):
                total -= L[i, p] * L[j, p]
            L[i, j] = total * inverse
            i += 1


@numba.njit(cache=True, fastmath=FAST)
def _forward(L, F, b, y):
    """y = L^-1 b (y may be b)."""
    for i in range(F):
        total = b[i]
        for p in range(i):
            total -= L[i, p] * y[p]
        y[i] = total / L[i, i]


@numba.njit(cache=True, fastmath=FAST)
def _backward(L, F, y, a):
    """a = L^-T y, by rows of L (a[i] is final once the rows below it are done)."""
    for i in range(F):
        a[i] = y[i]
    for i in range(F - 1, -1, -1):
        a[i] /= L[i, i]
        value = a[i]
        for p in range(i):
            a[p] -= value * L[i, p]


@numba.njit(cache=True, fastmath=FAST)
def _factor_solve(ids, b, row_means, col_means, ridge, col_bits, L, y, a):
    """Factor G + ridge I of the support into L, y = L^-1 b, a = L^-T y; returns a.b + ridge ||a||^2 (what the
    fit removes from ||x||^2)."""
    F = ids.size
    _gram(ids, ids, row_means, col_means, col_bits, L, True)
    for i in range(F):
        L[i, i] += ridge
    _cholesky(L, F)
    _forward(L, F, b, y)
    _backward(L, F, y, a)
    explained = 0.0
    for i in range(F):
        explained += a[i] * b[i] + ridge * a[i] * a[i]
    return explained


@numba.njit(cache=True, fastmath=FAST)
def _union_solve(support, fresh, b_S, b_U, L_S, y_S, row_means, col_means, ridge, col_bits, W, WtW, Z, y_U, a):
    """Least squares on support + fresh from the support's factor L_S and y_S = L_S^-1 b_S: W = L_S^-1 G_SU,
    the Schur complement G_UU + ridge I - W^T W factored as Z, then both halves of the block solve. The
    coefficients go to a (support's first)."""
    K, J = support.size, fresh.size
    _gram(support, fresh, row_means, col_means, col_bits, W, False)
    for p in range(K):  # W = L_S^-1 G_SU, a row of W final at a time, then taken off the rows below it
        inverse = 1.0 / L_S[p, p]
        for j in range(J):
            W[p, j] *= inverse
        for i in range(p + 1, K):
            factor = L_S[i, p]
            for j in range(J):
                W[i, j] -= factor * W[p, j]
    _gram(fresh, fresh, row_means, col_means, col_bits, Z, True)
    np.dot(W.T, W, WtW)  # W is K x J (both k)
    for i in range(J):
        for j in range(i + 1):
            Z[i, j] -= WtW[i, j]
        Z[i, i] += ridge
    _cholesky(Z, J)
    for j in range(J):  # y_U = Z^-1 (b_U - W^T y_S)
        y_U[j] = b_U[j]
    for i in range(K):
        value = y_S[i]
        for j in range(J):
            y_U[j] -= W[i, j] * value
    _forward(Z, J, y_U, y_U)
    _backward(Z, J, y_U, a[K:])
    for i in range(K):  # a_S = L_S^-T (y_S - W a_U)
        total = y_S[i]
        for j in range(J):
            total -= W[i, j] * a[K + j]
        a[i] = total
    _backward(L_S, K, a[:K], a[:K])


@numba.njit(cache=True, fastmath=FAST)
def _inner_products(ids, Y_HxU, rows_PxH, col_bits, scale, b):
    """b_i = <x, phi_i> = sum_h sP(u2_i)[h] Y[h, u1_i] / sqrt(d), from the token's own Y."""
    mask = (1 << col_bits) - 1
    for i in range(ids.size):
        u1, u2 = ids[i] & mask, ids[i] >> col_bits
        total = 0.0
        for h in range(Y_HxU.shape[0]):
            total += rows_PxH[u2, h] * Y_HxU[h, u1]
        b[i] = total * scale


@numba.njit(cache=True, fastmath=FAST)
def _decode(ids, a, rows_PxH, cols_UxW, col_bits, scale, A_HxF, C_FxW, x_hat):
    """x_hat = sum_i a_i phi_i (float64), as (a-weighted row patterns) @ (column patterns)."""
    mask = (1 << col_bits) - 1
    for i in range(ids.size):
        u1, u2 = ids[i] & mask, ids[i] >> col_bits
        weight = a[i] * scale
        for h in range(A_HxF.shape[0]):
            A_HxF[h, i] = weight * rows_PxH[u2, h]
        for w in range(C_FxW.shape[1]):
            C_FxW[i, w] = cols_UxW[u1, w]
    np.dot(A_HxF, C_FxW, x_hat)  # F = k: the whole arrays


@numba.njit(cache=True, fastmath=FAST)
def _residual(x_HxW, ids, a, rows_PxH, cols_UxW, col_bits, scale, A_HxF, C_FxW, x_hat, residual_HxW):
    """residual = x - sum_i a_i phi_i (float32); x_hat keeps the decoded write (float64)."""
    _decode(ids, a, rows_PxH, cols_UxW, col_bits, scale, A_HxF, C_FxW, x_hat)
    for h in range(x_HxW.shape[0]):
        for w in range(x_HxW.shape[1]):
            residual_HxW[h, w] = x_HxW[h, w] - x_hat[h, w]
