"""Triton fast path of the exact circuit search scan (contract, key format and reference: search_reference.py).

One program takes a tile of BLOCK_Q queries and one chunk of rows. For each tile of B rows it reads the
rows' K (unit, value) pairs (the tile layout makes each of the K reads B consecutive numbers), gathers the
queries' values at those units from the dense, transposed query block ([S, Q]: BLOCK_Q consecutive floats per
unit) and accumulates the B x BLOCK_Q dot products in registers in float32, entry by entry. Scores become
packed (score, row) keys, and the program's running top `keep` per query absorbs the tile with two bitonic
top-k's (the tile's best `keep`, then the best of those and the running ones), skipped when no key of the tile
beats any query's current `keep`-th. Only the [chunks, Q, keep] keys are written; the score matrix never is.

Bytes: the codes are read once per query block (K * (index + value bytes) per row), the query block is
gathered from cache (S * Q * 4 bytes, 32 MiB for 8,192 units and 1,024 queries: within an H200's 50 MB L2).
Work: R * K * Q multiply-adds per block, each with a 4-byte gather.

Letters: N tiles, K entries per code, B rows per tile, S code size, Q queries, P kept per query and chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import tuning_configs
from circuitlab.kernels.search_reference import MISSING as MISSING_KEY
from circuitlab.kernels.search_reference import chunk_bounds

# compiled kernels read only constexpr globals (the interpreter reads any)
MISSING = tl.constexpr(MISSING_KEY)

_CONFIGS = [
    triton.Config({"BLOCK_Q": 32}, num_warps=4),
    triton.Config({"BLOCK_Q": 64}, num_warps=8),
    triton.Config({"BLOCK_Q": 16}, num_warps=4),
    triton.Config({"BLOCK_Q": 32}, num_warps=8),
]


@triton.autotune(configs=tuning_configs(_CONFIGS, triton.Config({"BLOCK_Q": 8}, num_warps=1)),
                 key=["NNZ", "TILE", "KEEP"])
@triton.jit
def _scan_kernel(
    indices_ptr, values_ptr, inverse_norms_ptr, queries_ptr, exclude_ptr, out_ptr,
    n_rows, Q, tiles_per_chunk, n_tiles,
    NNZ: tl.constexpr, TILE: tl.constexpr, KEEP: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    query_tile = tl.program_id(0)
    chunk = tl.program_id(1)
    q = query_tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q_ok = q < Q
    excluded = tl.load(exclude_ptr + q, mask=q_ok, other=-1)
    best = tl.full([BLOCK_Q, KEEP], MISSING, tl.int64)
    floor = tl.full([BLOCK_Q], MISSING, tl.int64)  # each query's KEEP-th best key so far
    first_tile = chunk.to(tl.int64) * tiles_per_chunk  # int64: rows * NNZ passes 2^31 at 10^8 codes
    last_tile = tl.minimum(first_tile + tiles_per_chunk, n_tiles)
    local = tl.arange(0, TILE)
    for tile in range(first_tile, last_tile):
        rows = tile * TILE + local
        base = tile * NNZ * TILE
        dots = tl.zeros([BLOCK_Q, TILE], tl.float32)
        for entry in range(NNZ):
            units = tl.load(indices_ptr + base + entry * TILE + local).to(tl.int64)
            weights = tl.load(values_ptr + base + entry * TILE + local).to(tl.float32)
            gathered = tl.load(queries_ptr + units[None, :] * Q + q[:, None], mask=q_ok[:, None], other=0.0)
            dots += gathered * weights[None, :]
        scores = dots * tl.load(inverse_norms_ptr + rows)[None, :] + 0.0
        bits = scores.to(tl.int32, bitcast=True)
        ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        keys = (ordered.to(tl.int64) << 32) | (0xFFFFFFFF - rows.to(tl.int64))[None, :]
        valid = q_ok[:, None] & (rows < n_rows)[None, :] & (rows[None, :] != excluded[:, None])
        keys = tl.where(valid, keys, MISSING)
        if tl.max((tl.max(keys, axis=1) > floor).to(tl.int32), axis=0) > 0:
            if TILE > KEEP:
                tile_best = tl.topk(keys, KEEP)
            else:
                tile_best = keys
            best = tl.topk(tl.reshape(tl.join(best, tile_best), [BLOCK_Q, 2 * KEEP]), KEEP)
            floor = tl.min(best, axis=1)
    slot = tl.arange(0, KEEP)
    out = out_ptr + (chunk.to(tl.int64) * Q + q[:, None]) * KEEP + slot[None, :]
    tl.store(out, best, mask=q_ok[:, None])


# The autotuner times every candidate config several times on the launch that first meets its key (NNZ, TILE,
# KEEP, dtypes), whatever the number of rows. On 10^8 codes one launch takes seconds, so tuning on the whole
# table would cost minutes; the first launch for a key on more than TUNE_TILES tiles is preceded by one on its
# first TUNE_TILES tiles (2^20 rows at B = 128), which picks the config the full launch then reuses.
TUNE_TILES = 8192
_tuned: set[tuple] = set()


def _tune_on_a_prefix(indices, values, inverse_norms, dense_queries, exclude, n_rows, keep, n_chunks) -> None:
    n_tiles, nnz, tile = indices.shape
    key = (nnz, tile, keep, indices.dtype, values.dtype, dense_queries.device)
    if key in _tuned:
        return
    _tuned.add(key)
    if n_tiles <= TUNE_TILES:
        return
    rows = TUNE_TILES * tile
    scan_top_keys(indices[:TUNE_TILES], values[:TUNE_TILES], inverse_norms[:rows], dense_queries, exclude,
                  min(n_rows, rows), keep, min(n_chunks, TUNE_TILES))


def scan_top_keys(indices_NxKxB, values_NxKxB, inverse_norms_R, dense_queries_SxQ, exclude_Q, n_rows: int,
                  keep: int, n_chunks: int) -> torch.Tensor:
    """The contract of `search_reference.scan_top_keys`, in one launch."""
    n_tiles, nnz, tile = indices_NxKxB.shape
    n_queries = dense_queries_SxQ.shape[1]
    if keep & (keep - 1) or tile & (tile - 1) or keep > tile:
        raise ValueError(f"keep ({keep}) and the tile ({tile} rows) must be powers of two with keep <= tile")
    bounds = chunk_bounds(n_tiles, n_chunks)
    tiles_per_chunk = bounds[0][1] - bounds[0][0]
    out = torch.empty((len(bounds), n_queries, keep), dtype=torch.int64, device=dense_queries_SxQ.device)
    if n_queries == 0:
        return out

    _tune_on_a_prefix(indices_NxKxB, values_NxKxB, inverse_norms_R, dense_queries_SxQ, exclude_Q, n_rows, keep,
                      n_chunks)

    def grid(meta):
        return (triton.cdiv(n_queries, meta["BLOCK_Q"]), len(bounds))

    _scan_kernel[grid](
        indices_NxKxB, values_NxKxB, inverse_norms_R, dense_queries_SxQ.contiguous(), exclude_Q.contiguous(), out,
        n_rows, n_queries, tiles_per_chunk, n_tiles, NNZ=nnz, TILE=tile, KEEP=keep,
    )
    return out
