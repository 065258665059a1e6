"""Sparse per-token codes: the object every circuit analysis indexes.

A model's `sparse_codes(cache)` returns `{layer: SparseCode}`. For sgatlin the code of a token is its gate
vector (seed 000, eq. 1) with channel-offset neuron ids `c * N + i`; for the parity bottleneck it is the k
active dictionary features; for NC-FFN the most active operator outputs; for dense FFNs the largest hidden
activations (a baseline, not a circuit). Letters: B batch, T position, K non-zeros per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor


@dataclass
class SparseCode:
    """K (index, value) pairs per token of a vector space of dimension `size`."""

    indices: Int[Tensor, "batch pos nnz"]
    values: Float[Tensor, "batch pos nnz"]
    size: int

    def __post_init__(self) -> None:
        if self.indices.shape != self.values.shape:
            raise ValueError(
                f"SparseCode indices {tuple(self.indices.shape)} and values {tuple(self.values.shape)} "
                "must have the same shape"
            )

    @property
    def nnz(self) -> int:
        return self.indices.shape[-1]

    def to_dense(self) -> Float[Tensor, "batch pos size"]:
        """Densify (duplicate indices add up). Only for small sizes: tests and plots."""
        dense = torch.zeros(*self.indices.shape[:-1], self.size, dtype=self.values.dtype, device=self.values.device)
        return dense.scatter_add_(-1, self.indices.long(), self.values)

    def flatten(self) -> "SparseCode":
        """Merge the leading (batch, pos) axes into one row axis: [rows, nnz]."""
        return SparseCode(self.indices.reshape(-1, self.nnz), self.values.reshape(-1, self.nnz), self.size)
