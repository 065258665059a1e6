"""Exact circuit search on an accelerator: the scan's contract, its plain-PyTorch reference and the key format.

The scan scores every stored code against a block of queries and keeps, per query, the `keep` best rows of
each row chunk, without writing the [queries, rows] score matrix anywhere. A score is the float32 dot product
of the query and the row, summed over the row's K entries in order, times the row's inverse norm: for one
query it orders rows as cosine similarity does. Score and row travel as one int64 key, so that "larger key"
means "larger score, then smaller row" and one top-k over keys is the ranking brute force gives (ties to the
smaller id):

    key = (ordered(score bits) << 32) | (2^32 - 1 - row)        ordered: float order as int32 order

The codes are laid out in tiles of B rows, transposed within a tile ([tiles, K, B]), so that the j-th entries
of B consecutive rows are B consecutive numbers (one coalesced load on a GPU). Padded rows (beyond n_rows)
and a query's excluded row get the smallest key, `MISSING`.

float32 is not exact: `search_triton` and this reference agree to float32 rounding (bit for bit where both
round each product and sum as this reference does), and callers certify the float64 answer from the kept
rows with `score_error_bound` (circuitlab/analysis/circuitdb/device.py).

Letters: N tiles, K entries per code, B rows per tile, S code size, Q queries, C row chunks, P kept per chunk.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

MISSING = -(2**63)  # the key of a padded or excluded row: below every real key
LOW_MASK = 0xFFFFFFFF


def tile_codes(
    indices_RxK: Int[Tensor, "rows k"], values_RxK: Float[Tensor, "rows k"], tile: int
) -> tuple[Int[Tensor, "tiles k tile"], Float[Tensor, "tiles k tile"]]:
    """Codes [R, K] as tiles [ceil(R / tile), K, tile] (rows past R padded with index 0, value 0)."""
    n_rows, nnz = indices_RxK.shape
    n_tiles = max(1, -(-n_rows // tile))
    padded = n_tiles * tile - n_rows
    indices = torch.nn.functional.pad(indices_RxK, (0, 0, 0, padded))
    values = torch.nn.functional.pad(values_RxK, (0, 0, 0, padded))
    return (indices.reshape(n_tiles, tile, nnz).transpose(1, 2).contiguous(),
            values.reshape(n_tiles, tile, nnz).transpose(1, 2).contiguous())


def pack_keys(scores: Float[Tensor, "..."], rows: Int[Tensor, "..."]) -> Int[Tensor, "..."]:
    """int64 keys ordered by (score, then smaller row); -0.0 counts as 0.0."""
    bits = (scores.float() + 0.0).view(torch.int32)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return (ordered.to(torch.int64) << 32) | (LOW_MASK - rows.to(torch.int64))


def unpack_keys(keys: Int[Tensor, "..."]) -> tuple[Float[Tensor, "..."], Int[Tensor, "..."]]:
    """(float32 scores, int64 rows) of packed keys; rows are -1 where the key is MISSING."""
    ordered = (keys >> 32).to(torch.int32)
    bits = torch.where(ordered < 0, ordered ^ 0x7FFFFFFF, ordered)
    rows = LOW_MASK - (keys & LOW_MASK)
    missing = keys == MISSING
    return bits.view(torch.float32), torch.where(missing, torch.full_like(rows, -1), rows)


def score_error_bound(nnz: int, query_norms: Float[Tensor, " Q"]) -> Float[Tensor, " Q"]:
    """How far a float32 scan score can lie from dot / |row| (float64 `query_norms`).

    The dot product of nnz float32 products summed in float32 is within gamma_(nnz+1) * sum |x_i y_i| <=
    gamma_(nnz+1) |q| |x| of the exact one, in any summation order and with or without fused multiply-adds
    (gamma_n = n u / (1 - n u), u = 2^-24); the inverse norm and the final product add 2u |q| more. Doubled,
    for margin.
    """
    unit = 2.0**-24
    gamma = (nnz + 1) * unit / (1 - (nnz + 1) * unit)
    return 2.0 * (gamma + 3 * unit) * query_norms


def chunk_bounds(n_tiles: int, n_chunks: int) -> list[tuple[int, int]]:
    """Tiles [start, stop) of each of n_chunks row chunks (as even as whole tiles allow)."""
    per_chunk = -(-n_tiles // max(1, n_chunks))
    return [(start, min(start + per_chunk, n_tiles)) for start in range(0, n_tiles, per_chunk)]


def scan_top_keys(
    indices_NxKxB: Int[Tensor, "tiles k tile"],
    values_NxKxB: Float[Tensor, "tiles k tile"],
    inverse_norms_R: Float[Tensor, " padded_rows"],
    dense_queries_SxQ: Float[Tensor, "size queries"],
    exclude_Q: Int[Tensor, " queries"],
    n_rows: int,
    keep: int,
    n_chunks: int,
) -> Int[Tensor, "chunks queries keep"]:
    """Per row chunk and query, the `keep` largest keys (descending; MISSING where a chunk has fewer rows).

    dense_queries_SxQ: the query block densified and transposed, float32. exclude_Q: a row left out of each
    query's answer (-1: none). inverse_norms_R: float32 1 / |row| (0 for an all-zero row), one per padded row.
    """
    n_tiles, nnz, tile = indices_NxKxB.shape
    n_queries = dense_queries_SxQ.shape[1]
    bounds = chunk_bounds(n_tiles, n_chunks)
    out = torch.full((len(bounds), n_queries, keep), MISSING, dtype=torch.int64, device=dense_queries_SxQ.device)
    for chunk, (start, stop) in enumerate(bounds):
        units = indices_NxKxB[start:stop].transpose(1, 2).reshape(-1, nnz).long()
        weights = values_NxKxB[start:stop].transpose(1, 2).reshape(-1, nnz).float()
        rows = torch.arange(start * tile, stop * tile, device=units.device)
        dots = torch.zeros(n_queries, rows.numel(), dtype=torch.float32, device=units.device)
        for j in range(nnz):  # the kernel's order: entry 0 first, each product rounded, then added
            dots += dense_queries_SxQ[units[:, j]].T * weights[:, j]
        keys = pack_keys(dots * inverse_norms_R[rows], rows.expand(n_queries, -1))
        valid = (rows < n_rows)[None, :] & (rows[None, :] != exclude_Q[:, None])
        keys = torch.where(valid, keys, MISSING)
        kept = min(keep, keys.shape[1])
        out[chunk, :, :kept] = torch.topk(keys, kept, dim=1).values
    return out


def merge_chunks(keys_CxQxP: Int[Tensor, "chunks queries keep"], keep: int) -> Int[Tensor, "queries keep"]:
    """The `keep` largest keys per query over all chunks (descending)."""
    n_chunks, n_queries, per_chunk = keys_CxQxP.shape
    flat = keys_CxQxP.permute(1, 0, 2).reshape(n_queries, n_chunks * per_chunk)
    kept = min(keep, flat.shape[1])
    return torch.topk(flat, kept, dim=1).values
