"""Exact search on an accelerator: codes resident on the device, scanned by `kernels.code_scan_top_keys`, the
answer certified in float64.

The scan ranks rows by float32 scores and keeps the `keep` best per query; float32 can misorder rows whose
cosines differ by less than its rounding, so the answer is made exact afterwards:

1. the kept rows' cosine distances are computed again in float64 (each product exact, so the sum is within
   float64 rounding of the true dot product, as brute force's is) and ranked by (distance, row);
2. every row the scan did not keep scored at most s_keep (the keep-th float32 score) and so has cosine at
   most (s_keep + e) / |q| (`score_error_bound`: e covers float32 rounding in any order); when the k-th
   float64 distance is smaller than 1 minus that, no row left out can enter or tie the top k, and the
   answer is brute force's;
3. the queries where it is not (many exact ties, or fewer than k rows sharing a unit with the query) run
   again keeping more rows, and the rest are scored against every row in float64.

Shape letters: R rows, K non-zeros per code, N tiles, B rows per tile, S code size, Q queries, P kept rows.
"""

from __future__ import annotations

import numpy as np
import torch

import circuitlab.kernels as kernels
from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.kernels.search_reference import merge_chunks, score_error_bound, tile_codes, unpack_keys

TILE = 128  # rows per tile of the device layout: the most rows the scan keeps per query
QUERY_BLOCK = 1024  # queries per scan: the dense block is code size x 1,024 x 4 bytes (32 MiB at 8,192 units)
UPLOAD_ROWS = 1 << 18  # rows tiled and copied to the device at a time


def _index_dtype(size: int) -> torch.dtype:
    return torch.int16 if size <= 2**15 else torch.int32


class DeviceCodes:
    """Rows of one layer on a device in the scan's tiled layout, with float64 norms for the float64 answer.

    Rows are appended in chunks (`append`); `segments` maps device rows to circuit ids: device rows
    [local, local + n) are circuits [first, first + n)."""

    def __init__(self, n_rows: int, nnz: int, size: int, value_dtype: torch.dtype, device: torch.device,
                 tile: int = TILE) -> None:
        self.n_rows, self.nnz, self.size, self.tile, self.device = n_rows, nnz, size, tile, torch.device(device)
        n_tiles = max(1, -(-n_rows // tile))
        self.indices = torch.zeros((n_tiles, nnz, tile), dtype=_index_dtype(size), device=self.device)
        self.values = torch.zeros((n_tiles, nnz, tile), dtype=value_dtype, device=self.device)
        self.norms = torch.zeros(n_tiles * tile, dtype=torch.float64, device=self.device)
        self.inverse_norms = torch.zeros(n_tiles * tile, dtype=torch.float32, device=self.device)
        self.filled = 0
        self.segments: list[tuple[int, int, int]] = []  # (device row, circuit id, rows)

    @classmethod
    def from_matrices(cls, parts: list[tuple[int, CodeMatrix]], device, tile: int = TILE) -> "DeviceCodes":
        """Codes of several shards ((first circuit id, CodeMatrix) each, in order) copied to `device`."""
        first = parts[0][1]
        value_dtype = torch.float16 if first.values.dtype == np.float16 else torch.float32
        codes = cls(sum(len(matrix) for _, matrix in parts), first.nnz, first.size, value_dtype, device, tile)
        from tqdm.auto import tqdm

        bar = tqdm(total=codes.n_rows, desc=f"codes to {codes.device}", unit="row", disable=codes.n_rows < UPLOAD_ROWS * 4)
        carry: list[np.ndarray] | None = None  # rows short of a whole tile, prepended to the next block
        for circuit, matrix in parts:
            codes.segments.append((codes.filled + (0 if carry is None else len(carry[0])), circuit, len(matrix)))
            for start in range(0, len(matrix), UPLOAD_ROWS):
                stop = min(start + UPLOAD_ROWS, len(matrix))
                block = [matrix.indices[start:stop], matrix.values[start:stop], matrix.norms[start:stop]]
                if carry is not None:
                    block = [np.concatenate([old, new]) for old, new in zip(carry, block)]
                whole = len(block[0]) // tile * tile
                if whole:
                    codes.append(*(torch.from_numpy(np.array(part[:whole])) for part in block))
                carry = [part[whole:] for part in block] if whole < len(block[0]) else None
                bar.update(stop - start)
        if carry is not None:
            codes.append(*(torch.from_numpy(np.array(part)) for part in carry))
        bar.close()
        return codes

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.indices, self.values, self.norms, self.inverse_norms))

    def append(self, indices_RxK: torch.Tensor, values_RxK: torch.Tensor, norms_R: torch.Tensor | None = None) -> None:
        """Copy rows in (a chunk starting on a tile boundary unless it is the last); norms default to float64
        norms computed on the device."""
        n_new = indices_RxK.shape[0]
        if self.filled % self.tile or self.filled + n_new > self.n_rows:
            raise ValueError(f"rows must be appended in whole tiles of {self.tile} and total {self.n_rows}")
        indices = indices_RxK.to(self.device, non_blocking=True).to(self.indices.dtype)
        values = values_RxK.to(self.device, non_blocking=True).to(self.values.dtype)
        if norms_R is None:
            wide = values.double()
            norms_R = (wide * wide).sum(dim=1).sqrt()
        tiled_indices, tiled_values = tile_codes(indices, values, self.tile)
        first = self.filled // self.tile
        self.indices[first : first + tiled_indices.shape[0]] = tiled_indices
        self.values[first : first + tiled_values.shape[0]] = tiled_values
        norms = norms_R.to(self.device, dtype=torch.float64)
        self.norms[self.filled : self.filled + n_new] = norms
        self.inverse_norms[self.filled : self.filled + n_new] = torch.where(norms > 0, 1.0 / norms, 0.0).float()
        self.filled += n_new

    def circuit_ids(self, rows: torch.Tensor) -> torch.Tensor:
        """Circuit ids of device rows (-1 stays -1)."""
        out = rows.clone()
        for local, circuit, count in self.segments:
            inside = (rows >= local) & (rows < local + count)
            out = torch.where(inside, rows - local + circuit, out)
        return out

    def device_rows(self, circuits: torch.Tensor) -> torch.Tensor:
        """Device rows of circuit ids (-1 where a circuit is not held here)."""
        out = torch.full_like(circuits, -1)
        for local, circuit, count in self.segments:
            inside = (circuits >= circuit) & (circuits < circuit + count)
            out = torch.where(inside, circuits - circuit + local, out)
        return out

    def gather(self, rows_QxP: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Units (int64) and values (float64) of device rows: [Q, P, K] each."""
        safe = rows_QxP.clamp_min(0)
        tile, offset = safe // self.tile, safe % self.tile
        units = self.indices[tile, :, offset].long()  # advanced indices around a slice: [Q, P, K]
        values = self.values[tile, :, offset].double()
        return units, values


def dense_block(queries: CodeMatrix, size: int, device: torch.device) -> torch.Tensor:
    """Queries densified and transposed, float32 [S, Q] (canonical rows: no unit repeats with a value)."""
    indices = torch.from_numpy(np.ascontiguousarray(queries.indices)).to(device).long()
    values = torch.from_numpy(np.ascontiguousarray(queries.values)).to(device).float()
    n_queries = indices.shape[0]
    dense = torch.zeros((size, n_queries), dtype=torch.float32, device=device)
    columns = torch.arange(n_queries, device=device)[:, None].expand_as(indices)
    dense.index_put_((indices.reshape(-1), columns.reshape(-1)), values.reshape(-1), accumulate=True)
    return dense


def _float64_distances(codes: DeviceCodes, dense_SxQ: torch.Tensor, query_norms: torch.Tensor,
                       rows_QxP: torch.Tensor) -> torch.Tensor:
    """Cosine distances of each query to its rows in float64 (inf where the row is -1)."""
    units, values = codes.gather(rows_QxP)
    columns = torch.arange(rows_QxP.shape[0], device=rows_QxP.device)[:, None, None]
    dots = (dense_SxQ[units, columns].double() * values).sum(dim=2)  # products exact in float64
    denominator = query_norms[:, None] * codes.norms[rows_QxP.clamp_min(0)]
    cosine = torch.where(denominator > 0, dots / torch.where(denominator > 0, denominator, 1.0), 0.0)
    distances = (1.0 - cosine).clamp(0.0, 2.0)
    return torch.where(rows_QxP >= 0, distances, torch.inf)


def _rank(rows_QxP: torch.Tensor, distances_QxP: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and distances ordered by (distance, row)."""
    by_row = torch.argsort(torch.where(rows_QxP >= 0, rows_QxP, torch.iinfo(torch.int64).max), dim=1, stable=True)
    rows, distances = rows_QxP.gather(1, by_row), distances_QxP.gather(1, by_row)
    by_distance = torch.argsort(distances, dim=1, stable=True)
    return rows.gather(1, by_distance), distances.gather(1, by_distance)


def _scan(codes, dense_SxQ, exclude_Q, keep, n_chunks):
    keys = kernels.code_scan_top_keys(codes.indices, codes.values, codes.inverse_norms, dense_SxQ, exclude_Q,
                                      codes.n_rows, keep, n_chunks)
    return unpack_keys(merge_chunks(keys, keep))


def _default_chunks(codes: DeviceCodes, n_queries: int) -> int:
    n_tiles = codes.indices.shape[0]
    if codes.device.type != "cuda":
        return min(n_tiles, 2)
    programs = 8 * torch.cuda.get_device_properties(codes.device).multi_processor_count
    return max(1, min(n_tiles, -(-programs // max(1, -(-n_queries // 32)))))


def exact_top_k(codes: DeviceCodes, queries: CodeMatrix, k: int, exclude: np.ndarray | None = None,
                query_block: int = QUERY_BLOCK, n_chunks: int | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The k nearest rows of each query by cosine distance, exactly brute force's answer in float64 (ties to
    the smaller circuit id): (circuit ids [Q, k], distances [Q, k], counters), -1 / inf where fewer exist.

    exclude: a circuit id left out of each query's answer (-1: none). Counters: how many queries were
    certified by the first scan, by the wider one, and scored against every row."""
    n_queries = len(queries)
    ids = np.full((n_queries, k), -1, dtype=np.int64)
    distances = np.full((n_queries, k), np.inf)
    counters = {"certified_first": 0, "certified_wider": 0, "float64_every_row": 0}
    if n_queries == 0 or codes.n_rows == 0:
        return ids, distances, counters
    excluded_all = np.full(n_queries, -1, dtype=np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
    for start in range(0, n_queries, query_block):
        stop = min(start + query_block, n_queries)
        block = queries.rows(np.arange(start, stop))
        excluded = codes.device_rows(torch.from_numpy(excluded_all[start:stop]).to(codes.device))
        found_ids, found_distances = _block_top_k(codes, block, k, excluded, n_chunks, counters)
        width = found_ids.shape[1]
        ids[start:stop, :width] = codes.circuit_ids(found_ids).cpu().numpy()
        distances[start:stop, :width] = found_distances.cpu().numpy()
    return ids, distances, counters


def _block_top_k(codes, block, k, excluded, n_chunks, counters):
    device = codes.device
    n_queries = len(block)
    dense = dense_block(block, codes.size, device)
    query_norms = torch.from_numpy(block.norms).to(device)
    available = codes.n_rows - (excluded >= 0).long()
    k_out = min(k, codes.n_rows)
    chunks = n_chunks or _default_chunks(codes, n_queries)
    out_rows = torch.full((n_queries, k_out), -1, dtype=torch.int64, device=device)
    out_distances = torch.full((n_queries, k_out), torch.inf, dtype=torch.float64, device=device)
    pending = torch.arange(n_queries, device=device)
    zero = query_norms == 0  # every row is at distance 1: the smallest ids, as brute force breaks ties
    for query in torch.nonzero(zero).flatten().tolist():
        rows = torch.arange(min(k_out + 1, codes.n_rows), device=device)
        rows = rows[rows != excluded[query]][:k_out]
        out_rows[query, : rows.numel()] = rows
        out_distances[query, : rows.numel()] = 1.0
    pending = pending[~zero]
    first_keep = min(codes.tile, max(16, 1 << (k_out + 5).bit_length()))
    keeps = [first_keep] + ([codes.tile] if codes.tile > first_keep else [])
    for keep, counter in zip(keeps, ("certified_first", "certified_wider")):
        if pending.numel() == 0:
            break
        sub = pending
        scores, rows = _scan(codes, dense[:, sub].contiguous(), excluded[sub], keep, chunks)
        rows = rows.to(device)
        distances = _float64_distances(codes, dense[:, sub], query_norms[sub], rows)
        ranked_rows, ranked = _rank(rows, distances)
        bound = score_error_bound(codes.nnz, query_norms[sub])
        outside_cosine = (scores[:, -1].double() + bound) / query_norms[sub]
        lowest_outside = (1.0 - outside_cosine).clamp(0.0, 2.0)
        saw_every_row = (rows >= 0).sum(dim=1) >= available[sub]
        kth = ranked[:, k_out - 1] if ranked.shape[1] >= k_out else torch.full_like(lowest_outside, torch.inf)
        certified = saw_every_row | (kth < lowest_outside)
        width = min(k_out, ranked.shape[1])
        out_rows[sub[certified], :width] = ranked_rows[certified, :width]
        out_distances[sub[certified], :width] = ranked[certified, :width]
        counters[counter] += int(certified.sum())
        pending = sub[~certified]
    for query in pending.tolist():
        rows, values = _every_row(codes, dense[:, query], query_norms[query], excluded[query], k_out)
        out_rows[query, : rows.numel()] = rows
        out_distances[query, : rows.numel()] = values
        counters["float64_every_row"] += 1
    out_rows = torch.where(torch.isfinite(out_distances), out_rows, -1)
    return out_rows, out_distances


def _every_row(codes: DeviceCodes, dense_S: torch.Tensor, query_norm: torch.Tensor, excluded: torch.Tensor,
               k: int, rows_per_pass: int = 1 << 18) -> tuple[torch.Tensor, torch.Tensor]:
    """One query against every row in float64: the k best (row, distance) by (distance, row)."""
    best_rows = torch.zeros(0, dtype=torch.int64, device=codes.device)
    best = torch.zeros(0, dtype=torch.float64, device=codes.device)
    for start in range(0, codes.n_rows, rows_per_pass):
        rows = torch.arange(start, min(start + rows_per_pass, codes.n_rows), device=codes.device)[None, :]
        distances = _float64_distances(codes, dense_S[:, None], query_norm.reshape(1), rows)
        distances = torch.where(rows == excluded, torch.inf, distances)
        candidates = torch.cat([best_rows[None, :], rows], dim=1)
        ranked_rows, ranked = _rank(candidates, torch.cat([best[None, :], distances], dim=1))
        best_rows, best = ranked_rows[0, :k], ranked[0, :k]
    return best_rows, best
