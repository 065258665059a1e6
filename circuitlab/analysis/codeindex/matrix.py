"""The sparse codes of one layer as a matrix of rows (one per circuit), in the canonical form both searches use.

torch is imported only where a SparseCode comes in or goes out: opening and searching a database on the CPU
loads no torch (its import alone holds about 200 MB).

Shape letters: R stored rows (circuits), K non-zeros per code.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Float, Int

if TYPE_CHECKING:
    from circuitlab.codes import SparseCode

_CHUNK_ROWS = 65536


def _as_numpy(array) -> np.ndarray:
    torch = sys.modules.get("torch")  # a tensor can only come from a process that imported torch
    if torch is not None and isinstance(array, torch.Tensor):
        return array.detach().to("cpu").numpy()
    return np.asarray(array)


class CodeMatrix:
    """The sparse codes of one layer, one row per circuit, in canonical form.

    Canonical form: int32 indices sorted ascending within each row; an index that occurs more than once in
    a row keeps its first slot with the summed value and its other slots carry value 0 (so the row still
    densifies to the same vector, as `SparseCode.to_dense` adds duplicates up). Values are float32 or float16.
    The arrays may be read-only memory maps of a saved database.
    """

    def __init__(
        self,
        indices: Int[np.ndarray, "R K"],
        values: Float[np.ndarray, "R K"],
        size: int,
        *,
        canonical: bool = False,
        value_dtype: str | np.dtype | None = None,
    ) -> None:
        indices = _as_numpy(indices)
        values = _as_numpy(values)
        if indices.ndim != 2 or indices.shape != values.shape:
            raise ValueError(
                f"codes need indices and values of one shape [rows, nnz]; got {indices.shape} and {values.shape}"
            )
        if size <= 0:
            raise ValueError(f"code size must be positive, got {size}")
        if value_dtype is not None:
            values = values.astype(np.dtype(value_dtype), copy=False)
        elif values.dtype not in (np.float16, np.float32):
            values = values.astype(np.float32)
        if not canonical:
            indices, values = _canonicalise(indices, values, size)
        self.indices = indices
        self.values = values
        self.size = int(size)
        self._norms: np.ndarray | None = None

    @classmethod
    def from_sparse_code(cls, code: SparseCode, value_dtype: str | np.dtype = np.float32) -> "CodeMatrix":
        """Flatten a `SparseCode` of any leading shape into rows."""
        flat = code.indices.reshape(-1, code.nnz), code.values.reshape(-1, code.nnz)
        values = _as_numpy(flat[1].float())
        return cls(_as_numpy(flat[0]), values, code.size, value_dtype=value_dtype)

    @classmethod
    def concatenate(cls, parts: list["CodeMatrix"]) -> "CodeMatrix":
        if not parts:
            raise ValueError("cannot concatenate an empty list of code matrices")
        sizes = {part.size for part in parts}
        if len(sizes) != 1:
            raise ValueError(f"code matrices of different sizes {sorted(sizes)} cannot be concatenated")
        return cls(
            np.concatenate([part.indices for part in parts]),
            np.concatenate([part.values for part in parts]),
            parts[0].size,
            canonical=True,
        )

    def __len__(self) -> int:
        return self.indices.shape[0]

    @property
    def nnz(self) -> int:
        return self.indices.shape[1]

    @property
    def norms(self) -> Float[np.ndarray, " R"]:
        """Euclidean norms in float64 (canonical rows have no repeated index, so this is the dense norm)."""
        if self._norms is None:
            norms = np.empty(len(self), dtype=np.float64)
            for start in range(0, len(self), _CHUNK_ROWS):
                block = self.values[start : start + _CHUNK_ROWS].astype(np.float64)
                norms[start : start + _CHUNK_ROWS] = np.sqrt(np.einsum("rk,rk->r", block, block))
            self._norms = norms
        return self._norms

    def rows(self, row_ids) -> "CodeMatrix":
        row_ids = np.asarray(row_ids, dtype=np.int64)
        return CodeMatrix(
            np.ascontiguousarray(self.indices[row_ids]),
            np.ascontiguousarray(self.values[row_ids]),
            self.size,
            canonical=True,
        )

    def to_sparse_code(self) -> SparseCode:
        import torch

        from circuitlab.codes import SparseCode

        return SparseCode(
            torch.from_numpy(self.indices.astype(np.int64)),
            torch.from_numpy(self.values.astype(np.float32)),
            self.size,
        )

    def to_dense(self) -> Float[np.ndarray, "R size"]:
        """Dense float32 rows. Memory R * size * 4 bytes: for tests and small subsets only."""
        dense = np.zeros((len(self), self.size), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), self.nnz)
        np.add.at(dense, (rows, self.indices.ravel()), self.values.astype(np.float32).ravel())
        return dense

    def to_csr(self, dtype=np.float32):
        """A scipy.sparse CSR matrix [R, size] (zero-valued slots dropped)."""
        from scipy import sparse

        values = self.values.astype(dtype).ravel()
        matrix = sparse.csr_matrix(
            (values, self.indices.ravel().astype(np.int64), np.arange(0, values.size + 1, self.nnz)),
            shape=(len(self), self.size),
        )
        matrix.eliminate_zeros()
        return matrix


def _canonicalise(
    indices: Int[np.ndarray, "R K"], values: Float[np.ndarray, "R K"], size: int
) -> tuple[Int[np.ndarray, "R K"], Float[np.ndarray, "R K"]]:
    if indices.size:
        lowest, highest = int(indices.min()), int(indices.max())
        if lowest < 0 or highest >= size:
            raise ValueError(f"code indices must lie in [0, {size}); found values in [{lowest}, {highest}]")
    order = np.argsort(indices, axis=1, kind="stable")
    indices = np.take_along_axis(indices, order, axis=1).astype(np.int32)
    values = np.take_along_axis(values, order, axis=1).copy()
    repeated = indices[:, 1:] == indices[:, :-1]
    for row in np.flatnonzero(repeated.any(axis=1)):
        first_slot = np.concatenate([[True], ~repeated[row]])
        group = np.cumsum(first_slot) - 1
        sums = np.bincount(group, weights=values[row].astype(np.float64))
        merged = np.zeros_like(values[row])
        merged[first_slot] = sums
        values[row] = merged
    return indices, values
