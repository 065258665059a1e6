"""Triton fast path for the product parity bottleneck's least squares and decode (parity.py): one program
per token builds its features' sign patterns from two small tables, solves in registers, and writes
neither the patterns nor the Gram matrix to memory.

Letters: N tokens, H grid rows, W grid columns (D = H * W), F features per token (at most 64), P row
patterns, U column patterns (2^col_bits).

Feature u = u1 + U * u2 of a token is phi_u[h, w] = sP[u2, h] sQ[u1, w] / sqrt(D) (parity.py). With s = 1/sqrt(D)
and S = (G + ridge I)^-1 on the token's support (the identity when `solve` is off), one launch computes

    b = s Phi^T x + v,   a = S b,   x_hat = s Phi a

and writes a (`write_a`) and x_hat (`decode`); x or v may be left out (empty), and then count as zero. The map is
linear in (x, v) and S is symmetric, so the backward is the same launch with x = dL/dx_hat and v = dL/da: it
writes dL/dv as its a and dL/dx as its x_hat.

How. The features come in blocks of 16 (the smallest tl.dot). Per block, the column patterns times the token's
grid (a [16, W] @ [W, H] product) give the inner products, and every block pair's Gram entries are
<sP_i, sP_j> <sQ_i, sQ_j> / D (two [16, H] @ [H, 16] products of +-1 entries: exact, the numbers of parity.py's
overlap table). The system, symmetric positive definite, is factored G = L D L^T block by block without
pivoting (as the layer's LU without pivoting), each 16 x 16 diagonal block inverted by Gauss-Jordan
elimination, and solved by block forward and back substitution; then one step of iterative refinement (solve
for b - G a with the same factors, G rebuilt from the patterns). The decode is one [H, 16] @ [16, W] product per
block.

Why blocks of 16, one refinement step, one warp per token up to 32 features (two for 64), and the backward
loading the forward's factors (`factor_tiles`: 1 KB a token at 16 features, 3 KB at 32, 10 KB at 64) instead of
factoring again: docs/decisions/parity-solver.md.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import next_power_of_2


REFINE_STEPS = 1  # steps of iterative refinement after the solve (see the module docstring)
BLOCK = 16  # features per block: the solve works on 16 x 16 blocks of the Gram matrix (the smallest tl.dot)
MAX_BLOCKS = 4  # blocks a token (at most 64 features: the pursuit's 2k at k = 32)


@triton.jit
def _block(idx_ptr, rows_ptr, cols_ptr, x_HxW, v_ptr, token, F, H, W, col_bits, scale,
           block: tl.constexpr, HAS_X: tl.constexpr, HAS_V: tl.constexpr, H_PAD: tl.constexpr, W_PAD: tl.constexpr):
    """Block `block` of a token's features: its row patterns [16, H], column patterns [16, W], which slots hold
    a feature, and its part of b = s Phi^T x + v."""
    f = block * 16 + tl.arange(0, 16)
    ok = f < F
    h = tl.arange(0, H_PAD)
    w = tl.arange(0, W_PAD)
    index = tl.load(idx_ptr + token * F + f, mask=ok, other=0).to(tl.int64)
    u1 = index & ((1 << col_bits) - 1)
    u2 = index >> col_bits
    # slots past F get zero patterns: zero inner products and zero Gram rows (their diagonal is set to 1)
    rows = tl.load(rows_ptr + u2[:, None] * H + h[None, :], mask=ok[:, None] & (h[None, :] < H), other=0.0)
    cols = tl.load(cols_ptr + u1[:, None] * W + w[None, :], mask=ok[:, None] & (w[None, :] < W), other=0.0)
    b = tl.zeros([16], dtype=tl.float32)
    if HAS_X:
        xq = tl.dot(cols, tl.trans(x_HxW), input_precision="ieee")  # [16, H]: x_grid sQ(u1) per feature
        b += tl.sum(rows * xq, axis=1) * scale
    if HAS_V:
        b += tl.load(v_ptr + token * F + f, mask=ok, other=0.0)
    return rows, cols, ok, b


@triton.jit
def _gram(rows_i, cols_i, rows_j, cols_j, scale):
    """<phi_i, phi_j> = <sP_i, sP_j> <sQ_i, sQ_j> / D for a block pair (+-1 products: exact)."""
    same_rows = tl.dot(rows_i, tl.trans(rows_j), input_precision="ieee")
    same_cols = tl.dot(cols_i, tl.trans(cols_j), input_precision="ieee")
    return same_rows * same_cols * (scale * scale)


@triton.jit
def _diagonal(rows, cols, ok, scale, ridge):
    """A diagonal block of G + ridge I, with 1 on the diagonal of empty slots (so it stays invertible)."""
    n = tl.arange(0, 16)
    diagonal = n[:, None] == n[None, :]
    extra = tl.where(diagonal, tl.where(ok[:, None], ridge, 1.0), 0.0)
    return _gram(rows, cols, rows, cols, scale) + extra


@triton.jit
def _inverse(A):
    """Inverse of a 16 x 16 symmetric positive definite block, by Gauss-Jordan elimination in place, no pivoting."""
    n = tl.arange(0, 16)
    for k in tl.static_range(16):
        row = tl.sum(tl.where(n[:, None] == k, A, 0.0), axis=0)
        col = tl.sum(tl.where(n[None, :] == k, A, 0.0), axis=1)
        pivot = tl.sum(tl.where(n == k, row, 0.0), axis=0)
        row = tl.where(n == k, 1.0, row) / pivot
        A = tl.where(n[:, None] == k, row[None, :], tl.where(n[None, :] == k, 0.0, A) - col[:, None] * row[None, :])
    return A


@triton.jit
def _times(A, x):
    """A x for a 16 x 16 block and a 16-vector."""
    return tl.sum(A * x[None, :], axis=1)


@triton.jit
def _times_t(A, x):
    """A^T x."""
    return tl.sum(A * x[:, None], axis=0)


@triton.jit
def _mm(A, B):
    return tl.dot(A, B, input_precision="ieee")


@triton.jit
def _mm_t(A, B):
    """A B^T."""
    return tl.dot(A, tl.trans(B), input_precision="ieee")


@triton.jit
def _store_block(a_ptr, token, F, block: tl.constexpr, a):
    f = block * 16 + tl.arange(0, 16)
    tl.store(a_ptr + token * F + f, a, mask=f < F)


@triton.jit
def _tile_offsets(token, tile: tl.constexpr, TILES: tl.constexpr):
    """Offsets of 16 x 16 tile `tile` of a token's TILES factor tiles (row-major, tokens one after another)."""
    n = tl.arange(0, 16)
    return (token * TILES + tile) * 256 + n[:, None] * 16 + n[None, :]


@triton.jit
def _store_tile(factors_ptr, token, tile: tl.constexpr, TILES: tl.constexpr, A):
    tl.store(factors_ptr + _tile_offsets(token, tile, TILES), A)


@triton.jit
def _load_tile(factors_ptr, token, tile: tl.constexpr, TILES: tl.constexpr):
    return tl.load(factors_ptr + _tile_offsets(token, tile, TILES))


@triton.jit
def _decode_block(rows, cols, a):
    """sum over the block's features of a_f outer(sP_f, sQ_f): [H, W]."""
    return tl.dot(tl.trans(rows * a[:, None]), cols, input_precision="ieee")


@triton.jit
def _factor2(r0, c0, ok0, r1, c1, ok1, scale, ridge):
    """G = L D L^T for two blocks: (inverses of D's blocks, L's block below the diagonal)."""
    I0 = _inverse(_diagonal(r0, c0, ok0, scale, ridge))
    G10 = _gram(r1, c1, r0, c0, scale)
    L10 = _mm(G10, I0)
    I1 = _inverse(_diagonal(r1, c1, ok1, scale, ridge) - _mm_t(L10, G10))
    return I0, I1, L10


@triton.jit
def _solve2(I0, I1, L10, a0, a1):
    """(L D L^T)^-1 (a0, a1): forward, diagonal and back substitution."""
    a1 -= _times(L10, a0)
    a0 = _times(I0, a0)
    a1 = _times(I1, a1)
    a0 -= _times_t(L10, a1)
    return a0, a1


@triton.jit
def _gram_times2(r0, c0, ok0, r1, c1, ok1, scale, ridge, a0, a1):
    """(G + ridge I) (a0, a1), G rebuilt from the patterns."""
    G10 = _gram(r1, c1, r0, c0, scale)
    y0 = _times(_diagonal(r0, c0, ok0, scale, ridge), a0) + _times_t(G10, a1)
    y1 = _times(G10, a0) + _times(_diagonal(r1, c1, ok1, scale, ridge), a1)
    return y0, y1


@triton.jit
def _factor4(r0, c0, ok0, r1, c1, ok1, r2, c2, ok2, r3, c3, ok3, scale, ridge):
    """G = L D L^T for four blocks (right-looking: each step updates the Schur complement below it)."""
    I0 = _inverse(_diagonal(r0, c0, ok0, scale, ridge))
    G10 = _gram(r1, c1, r0, c0, scale)
    G20 = _gram(r2, c2, r0, c0, scale)
    G30 = _gram(r3, c3, r0, c0, scale)
    L10 = _mm(G10, I0)
    L20 = _mm(G20, I0)
    L30 = _mm(G30, I0)
    G11 = _diagonal(r1, c1, ok1, scale, ridge) - _mm_t(L10, G10)
    G21 = _gram(r2, c2, r1, c1, scale) - _mm_t(L20, G10)
    G31 = _gram(r3, c3, r1, c1, scale) - _mm_t(L30, G10)
    G22 = _diagonal(r2, c2, ok2, scale, ridge) - _mm_t(L20, G20)
    G32 = _gram(r3, c3, r2, c2, scale) - _mm_t(L30, G20)
    G33 = _diagonal(r3, c3, ok3, scale, ridge) - _mm_t(L30, G30)
    I1 = _inverse(G11)
    L21 = _mm(G21, I1)
    L31 = _mm(G31, I1)
    G22 -= _mm_t(L21, G21)
    G32 -= _mm_t(L31, G21)
    G33 -= _mm_t(L31, G31)
    I2 = _inverse(G22)
    L32 = _mm(G32, I2)
    I3 = _inverse(G33 - _mm_t(L32, G32))
    return I0, I1, I2, I3, L10, L20, L30, L21, L31, L32


@triton.jit
def _solve4(I0, I1, I2, I3, L10, L20, L30, L21, L31, L32, a0, a1, a2, a3):
    a1 -= _times(L10, a0)
    a2 -= _times(L20, a0) + _times(L21, a1)
    a3 -= _times(L30, a0) + _times(L31, a1) + _times(L32, a2)
    a0 = _times(I0, a0)
    a1 = _times(I1, a1)
    a2 = _times(I2, a2)
    a3 = _times(I3, a3)
    a2 -= _times_t(L32, a3)
    a1 -= _times_t(L21, a2) + _times_t(L31, a3)
    a0 -= _times_t(L10, a1) + _times_t(L20, a2) + _times_t(L30, a3)
    return a0, a1, a2, a3


@triton.jit
def _gram_times4(r0, c0, ok0, r1, c1, ok1, r2, c2, ok2, r3, c3, ok3, scale, ridge, a0, a1, a2, a3):
    G10 = _gram(r1, c1, r0, c0, scale)
    G20 = _gram(r2, c2, r0, c0, scale)
    G30 = _gram(r3, c3, r0, c0, scale)
    G21 = _gram(r2, c2, r1, c1, scale)
    G31 = _gram(r3, c3, r1, c1, scale)
    G32 = _gram(r3, c3, r2, c2, scale)
    y0 = _times(_diagonal(r0, c0, ok0, scale, ridge), a0) + _times_t(G10, a1) + _times_t(G20, a2) + _times_t(G30, a3)
    y1 = _times(G10, a0) + _times(_diagonal(r1, c1, ok1, scale, ridge), a1) + _times_t(G21, a2) + _times_t(G31, a3)
    y2 = _times(G20, a0) + _times(G21, a1) + _times(_diagonal(r2, c2, ok2, scale, ridge), a2) + _times_t(G32, a3)
    y3 = _times(G30, a0) + _times(G31, a1) + _times(G32, a2) + _times(_diagonal(r3, c3, ok3, scale, ridge), a3)
    return y0, y1, y2, y3


@triton.jit
def _features_kernel(
    x_ptr, v_ptr, idx_ptr, rows_ptr, cols_ptr, factors_ptr, a_ptr, xhat_ptr,
    F, H, W, col_bits, scale, ridge,
    HAS_X: tl.constexpr, HAS_V: tl.constexpr, SOLVE: tl.constexpr, WRITE_A: tl.constexpr, DECODE: tl.constexpr,
    BLOCKS: tl.constexpr, REFINE: tl.constexpr, H_PAD: tl.constexpr, W_PAD: tl.constexpr, FACTORS: tl.constexpr,
):
    """One token: b, then a = S b by block LDL^T without pivoting (BLOCKS = 1, 2 or 4 blocks of 16; REFINE steps
    of iterative refinement, each solving for b - G a with the same factors), then x_hat. FACTORS: 0 factor the
    system, 1 factor it and store the factors' tiles at factors_ptr (`factor_tiles` of them: I0; I0, I1, L10;
    or I0-I3, L10, L20, L30, L21, L31, L32), 2 load them from there instead of factoring."""
    token = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, H_PAD)
    w = tl.arange(0, W_PAD)
    grid_ok = (h[:, None] < H) & (w[None, :] < W)
    x_HxW = tl.zeros([H_PAD, W_PAD], dtype=tl.float32)
    if HAS_X:
        x_HxW = tl.load(x_ptr + token * H * W + h[:, None] * W + w[None, :], mask=grid_ok, other=0.0)
    args = (idx_ptr, rows_ptr, cols_ptr, x_HxW, v_ptr, token, F, H, W, col_bits, scale)
    r0, c0, ok0, a0 = _block(*args, 0, HAS_X, HAS_V, H_PAD, W_PAD)
    if BLOCKS >= 2:
        r1, c1, ok1, a1 = _block(*args, 1, HAS_X, HAS_V, H_PAD, W_PAD)
    if BLOCKS >= 4:
        r2, c2, ok2, a2 = _block(*args, 2, HAS_X, HAS_V, H_PAD, W_PAD)
        r3, c3, ok3, a3 = _block(*args, 3, HAS_X, HAS_V, H_PAD, W_PAD)

    if SOLVE:  # the vectors a_k hold b on entry and a = (G + ridge I)^-1 b on exit
        if BLOCKS == 1:
            if FACTORS == 2:
                I0 = _load_tile(factors_ptr, token, 0, 1)
            else:
                I0 = _inverse(_diagonal(r0, c0, ok0, scale, ridge))
                if FACTORS == 1:
                    _store_tile(factors_ptr, token, 0, 1, I0)
            b0 = a0
            a0 = _times(I0, b0)
            for _ in tl.static_range(REFINE):
                a0 += _times(I0, b0 - _times(_diagonal(r0, c0, ok0, scale, ridge), a0))
        if BLOCKS == 2:
            if FACTORS == 2:
                I0 = _load_tile(factors_ptr, token, 0, 3)
                I1 = _load_tile(factors_ptr, token, 1, 3)
                L10 = _load_tile(factors_ptr, token, 2, 3)
            else:
                I0, I1, L10 = _factor2(r0, c0, ok0, r1, c1, ok1, scale, ridge)
                if FACTORS == 1:
                    _store_tile(factors_ptr, token, 0, 3, I0)
                    _store_tile(factors_ptr, token, 1, 3, I1)
                    _store_tile(factors_ptr, token, 2, 3, L10)
            b0, b1 = a0, a1
            a0, a1 = _solve2(I0, I1, L10, b0, b1)
            for _ in tl.static_range(REFINE):
                y0, y1 = _gram_times2(r0, c0, ok0, r1, c1, ok1, scale, ridge, a0, a1)
                d0, d1 = _solve2(I0, I1, L10, b0 - y0, b1 - y1)
                a0, a1 = a0 + d0, a1 + d1
        if BLOCKS == 4:
            if FACTORS == 2:
                I0 = _load_tile(factors_ptr, token, 0, 10)
                I1 = _load_tile(factors_ptr, token, 1, 10)
                I2 = _load_tile(factors_ptr, token, 2, 10)
                I3 = _load_tile(factors_ptr, token, 3, 10)
                L10 = _load_tile(factors_ptr, token, 4, 10)
                L20 = _load_tile(factors_ptr, token, 5, 10)
                L30 = _load_tile(factors_ptr, token, 6, 10)
                L21 = _load_tile(factors_ptr, token, 7, 10)
                L31 = _load_tile(factors_ptr, token, 8, 10)
                L32 = _load_tile(factors_ptr, token, 9, 10)
            else:
                I0, I1, I2, I3, L10, L20, L30, L21, L31, L32 = _factor4(
                    r0, c0, ok0, r1, c1, ok1, r2, c2, ok2, r3, c3, ok3, scale, ridge)
                if FACTORS == 1:
                    _store_tile(factors_ptr, token, 0, 10, I0)
                    _store_tile(factors_ptr, token, 1, 10, I1)
                    _store_tile(factors_ptr, token, 2, 10, I2)
                    _store_tile(factors_ptr, token, 3, 10, I3)
                    _store_tile(factors_ptr, token, 4, 10, L10)
                    _store_tile(factors_ptr, token, 5, 10, L20)
                    _store_tile(factors_ptr, token, 6, 10, L30)
                    _store_tile(factors_ptr, token, 7, 10, L21)
                    _store_tile(factors_ptr, token, 8, 10, L31)
                    _store_tile(factors_ptr, token, 9, 10, L32)
            b0, b1, b2, b3 = a0, a1, a2, a3
            a0, a1, a2, a3 = _solve4(I0, I1, I2, I3, L10, L20, L30, L21, L31, L32, b0, b1, b2, b3)
            for _ in tl.static_range(REFINE):
                y0, y1, y2, y3 = _gram_times4(r0, c0, ok0, r1, c1, ok1, r2, c2, ok2, r3, c3, ok3, scale, ridge,
                                              a0, a1, a2, a3)
                d0, d1, d2, d3 = _solve4(I0, I1, I2, I3, L10, L20, L30, L21, L31, L32, b0 - y0, b1 - y1, b2 - y2,
                                         b3 - y3)
                a0, a1, a2, a3 = a0 + d0, a1 + d1, a2 + d2, a3 + d3

    if WRITE_A:
        _store_block(a_ptr, token, F, 0, a0)
        if BLOCKS >= 2:
            _store_block(a_ptr, token, F, 1, a1)
        if BLOCKS >= 4:
            _store_block(a_ptr, token, F, 2, a2)
            _store_block(a_ptr, token, F, 3, a3)
    if DECODE:
        xhat = _decode_block(r0, c0, a0)
        if BLOCKS >= 2:
            xhat += _decode_block(r1, c1, a1)
        if BLOCKS >= 4:
            xhat += _decode_block(r2, c2, a2) + _decode_block(r3, c3, a3)
        tl.store(xhat_ptr + token * H * W + h[:, None] * W + w[None, :], xhat * scale, mask=grid_ok)


def factor_tiles(n_features: int) -> int:
    """16 x 16 tiles of a token's factors (`_features_kernel`'s FACTORS): the inverses of D's diagonal blocks
    and L's blocks below the diagonal, for 1, 2 or 4 blocks of features."""
    return {1: 1, 2: 3, 4: 10}[next_power_of_2(-(-n_features // BLOCK))]


def feature_solve(
    x_NxD: torch.Tensor, v_NxF: torch.Tensor, indices_NxF: torch.Tensor, row_signs_PxH: torch.Tensor,
    col_signs_UxW: torch.Tensor, factors: torch.Tensor, ridge: float, solve: bool, write_a: bool, decode: bool,
    keep_factors: bool, num_warps: int | None = None, refine: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a [N, F] or [0], x_hat [N, D] or [0], factors [N, tiles, 16, 16] or [0]) as the module docstring says;
    x or v empty ([0]) means zero. `factors` given (not [0]): the system's factors as an earlier launch on the
    same support kept them, loaded instead of computed (the backward's solve); `keep_factors`: write them out.
    `num_warps` and `refine` (refinement steps) override the defaults, for tuning."""
    n_tokens, n_features = indices_NxF.shape
    n_rows, n_cols = row_signs_PxH.shape[1], col_signs_UxW.shape[1]
    d_model = n_rows * n_cols
    device = indices_NxF.device
    has_x, has_v, has_factors = x_NxD.numel() > 0, v_NxF.numel() > 0, factors.numel() > 0
    if has_x and tuple(x_NxD.shape) != (n_tokens, d_model):
        raise ValueError(f"x must be [{n_tokens}, {d_model}], got {tuple(x_NxD.shape)}")
    if has_v and tuple(v_NxF.shape) != (n_tokens, n_features):
        raise ValueError(f"v must be [{n_tokens}, {n_features}], got {tuple(v_NxF.shape)}")
    blocks = next_power_of_2(-(-n_features // BLOCK))
    if blocks > MAX_BLOCKS:
        raise ValueError(f"the fused solve takes at most {MAX_BLOCKS * BLOCK} features per token, got {n_features}")
    tiles = factor_tiles(n_features)
    if has_factors and tuple(factors.shape) != (n_tokens, tiles, BLOCK, BLOCK):
        raise ValueError(f"factors must be [{n_tokens}, {tiles}, {BLOCK}, {BLOCK}], got {tuple(factors.shape)}")
    keep_factors = keep_factors and solve and not has_factors and (write_a or decode)
    a = torch.empty((n_tokens, n_features) if write_a else (0,), dtype=torch.float32, device=device)
    x_hat = torch.empty((n_tokens, d_model) if decode else (0,), dtype=torch.float32, device=device)
    kept = torch.empty((n_tokens, tiles, BLOCK, BLOCK) if keep_factors else (0,), dtype=torch.float32, device=device)
    if n_tokens == 0 or not (write_a or decode):
        return a, x_hat, kept
    absent = torch.zeros(1, dtype=torch.float32, device=device)  # never read (its stage is compiled out)
    x = x_NxD.contiguous().float() if has_x else absent
    v = v_NxF.contiguous().float() if has_v else absent
    _features_kernel[(n_tokens,)](
        x, v, indices_NxF.contiguous(), row_signs_PxH.contiguous().float(), col_signs_UxW.contiguous().float(),
        factors.contiguous().float() if has_factors and solve else kept if keep_factors else absent,
        a, x_hat, n_features, n_rows, n_cols, int(math.log2(col_signs_UxW.shape[0])), 1.0 / math.sqrt(d_model),
        float(ridge), HAS_X=has_x, HAS_V=has_v, SOLVE=solve, WRITE_A=write_a, DECODE=decode,
        BLOCKS=blocks, REFINE=REFINE_STEPS if refine is None else refine,
        H_PAD=next_power_of_2(max(n_rows, 16)), W_PAD=next_power_of_2(max(n_cols, 16)),
        FACTORS=2 if has_factors and solve else 1 if keep_factors else 0,
        num_warps=num_warps or (2 if blocks >= 4 else 1),
    )
    return a, x_hat, kept
