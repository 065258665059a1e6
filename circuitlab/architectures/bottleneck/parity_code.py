"""The parity dictionary's codes: seeded F2 matrices, their +-1 sign tables and coherence, and the grid a
product-design bottleneck reads d_model as. No layer here; circuitlab.architectures.bottleneck.parity builds
the bottleneck on these, and analyses (coherence of a code) use them directly.

Letters: R index bits, G code length (grid rows or columns), D d_model.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

FACTOR_CODE_TRIES = 64  # seeded draws per factor code; the least coherent full-rank one is kept


def f2_rank(bits_DxR: Tensor) -> int:
    """Rank over GF(2) of a 0/1 matrix, by Gaussian elimination on its columns."""
    rows = [int("".join(str(int(b)) for b in column), 2) for column in bits_DxR.T.tolist()]
    rank = 0
    for bit in reversed(range(bits_DxR.shape[0])):
        pivot = next((i for i in range(rank, len(rows)) if rows[i] >> bit & 1), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for i in range(len(rows)):
            if i != rank and rows[i] >> bit & 1:
                rows[i] ^= rows[rank]
        rank += 1
    return rank


def make_code_matrix(d_model: int, n_bits: int, seed: int) -> Int[Tensor, "d_model n_bits"]:
    """A seeded random M in F2^(d x r) of full column rank (distinct features get distinct patterns)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(100):
        # on the CPU even under a meta default device (the CLI sizes models on meta before training them)
        code = torch.randint(0, 2, (d_model, n_bits), generator=generator, dtype=torch.int32, device="cpu")
        if f2_rank(code) == n_bits:
            return code
    raise RuntimeError(f"no full-rank {d_model}x{n_bits} F2 matrix found from seed {seed}")


def sign_table(code_GxR: Int[Tensor, "length n_bits"]) -> Float[Tensor, "patterns length"]:
    """R(code bits(u)) for every u in [0, 2^r): row u is the +-1 pattern of codeword code @ bits(u)."""
    length, n_bits = code_GxR.shape
    patterns = torch.arange(2**n_bits, device="cpu")
    bits = (patterns[:, None] >> torch.arange(n_bits, device="cpu")) & 1
    parity = (bits @ code_GxR.to(device="cpu", dtype=torch.int64).T) & 1
    return (1 - 2 * parity).to(torch.float32)


def code_coherence(code_GxR: Int[Tensor, "length n_bits"]) -> float:
    """max over non-zero u of |mean sign of codeword u| (1 when two features would coincide up to sign)."""
    return float(sign_table(code_GxR)[1:].mean(-1).abs().max()) if code_GxR.shape[1] else 0.0


@functools.lru_cache(maxsize=64)
def make_factor_code(length: int, n_bits: int, seed: int) -> Int[Tensor, "length n_bits"]:
    """The full-rank F2 matrix (length x n_bits) of lowest coherence among FACTOR_CODE_TRIES seeded draws
    (cached: every layer of a model draws the same one; treat the result as read-only)."""
    generator = torch.Generator().manual_seed(seed)
    best, best_coherence = None, 2.0
    for _ in range(FACTOR_CODE_TRIES):
        code = torch.randint(0, 2, (length, n_bits), generator=generator, dtype=torch.int32, device="cpu")
        if f2_rank(code) < n_bits:
            continue
        coherence = code_coherence(code)
        if coherence < best_coherence:
            best, best_coherence = code, coherence
    if best is None or best_coherence >= 1.0:
        raise ValueError(
            f"no {length} x {n_bits} F2 code from seed {seed} keeps distinct features apart (an all-ones codeword "
            f"is unavoidable when n_bits = length); use fewer index bits or a larger grid"
        )
    return best


def relative_error(x: Tensor, x_hat: Tensor, centred: bool = False) -> Tensor:
    """||x - x_hat||^2 / ||x||^2 summed over all tokens (float32 scalar; 0 for an all-zero x). `centred`:
    over ||x - mean(x)||^2 instead, the mean taken over all tokens: the share of the writes' variation that
    the reconstruction misses. A write that is nearly the same for every token scores well on the first (its
    constant part is easy to code) however badly its varying part is kept; the second sees only that part."""
    x, x_hat = x.float(), x_hat.float()
    if centred:
        reference = x - x.reshape(-1, x.shape[-1]).mean(0)
    else:
        reference = x
    return (x - x_hat).pow(2).sum() / reference.pow(2).sum().clamp_min(torch.finfo(torch.float32).tiny)


def product_layout(bottleneck: Any, d_model: int) -> tuple[int, int, int, int]:
    """(grid rows, grid cols, row bits, col bits) of a product-design bottleneck in d_model dimensions: the
    configured grid, else the most nearly square one; `col_bits` of the index bits (None: half, rounded up)
    pick a column pattern, the others a row pattern."""
    if bottleneck.grid is not None:
        rows, cols = bottleneck.grid
    else:
        rows = max(divisor for divisor in range(1, math.isqrt(d_model) + 1) if d_model % divisor == 0)
        cols = d_model // rows
    col_bits = bottleneck.col_bits if bottleneck.col_bits is not None else (bottleneck.n_bits + 1) // 2
    return rows, cols, bottleneck.n_bits - col_bits, col_bits
