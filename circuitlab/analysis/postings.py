"""Inverted lists of active units, searched by a compiled scatter-add: exact and pruned cosine search.

A stored code is active on a few units (64 of 8192 for sgatlin-stories). The posting list of unit j holds
the rows active on j with their values (the codes' CSC form). For a query, walking the posting lists of its
active units and adding value * query value into an accumulator gives the dot product of every row that
shares a unit with the query; every other row has cosine 0 exactly. That is the same product as the
blocked scipy.sparse path in `codeindex` (and equal to brute force), but done per query in one compiled
loop: no sparse result matrix is built, sorted or transposed.

Row blocks. The rows are cut into blocks of `block_rows` (32,768 by default: a float64 accumulator of 256 KB
stays in a core's L2 cache), and each unit's list into one segment per block (its rows ascend, so a segment
is a slice; `PostingLists.segments` holds where each starts, for the units some row uses: the table grows with
those units times the blocks, not with the code size). A query walks its lists block by block: the
segments of one block add into the block's accumulator, then one pass over the accumulator turns the dot
products into distances and clears it. That pass marks, without branches, the rows that can still enter
the k best (dot above the cutoff times the block's smallest norm; the cutoff is read from the k-th best
distance so far, less a margin of 1e-9 that rounding cannot cross), then skips the marks eight rows at a
time, so only the few marked rows are checked against their own norm and pay for a division and an
insertion. Each row's dot product adds up its units' contributions in the same order as a walk of whole
lists, so the distances are bit for bit those of the previous engine (one accumulator of all rows, a second
walk of the lists to score them). Entries are 6 bytes (a uint16 row offset within its block, a float32
value), since the walk streams them from memory (docs/decisions/search-postings.md has the measured queries/s).
The loops live in `_postings_numba` (module level, so numba's disk cache serves later processes).

Approximate search walks only the posting lists of the query's `terms` largest units (by |value|), keeps
the `candidates` rows of highest partial cosine, and re-ranks those exactly against their full stored
codes. Queries run in parallel over numba's threads (one accumulator per thread).

numba is imported on first use (it comes with the `search` extra, through umap-learn); without it
`available()` is False and callers take the scipy path.

Shape letters: R stored rows, Q queries, K non-zeros per code, k neighbours per query, M candidates, B rows
of a block.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxtyping import Float, Int

BLOCK_ROWS = 1 << 15  # rows per accumulator block (256 KB of float64)


@functools.cache
def available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _kernels():
    import circuitlab.analysis._postings_numba as compiled

    return compiled.exact, compiled.pruned, compiled.segment_starts


class PostingLists:
    """The CSC form of one layer's codes, cut into row blocks of `block_rows` rows (rounded up to a multiple of
    64, at most 2^16): per unit, the rows active on it and their values, and where each list enters each block.

    Rows are stored as offsets within their block (uint16) and values as float32 (code matrices hold float32
    or float16 values, repeated indices already summed; should a value not fit float32 exactly, float64 is kept):
    walking the lists streams these arrays from memory, and 6 bytes an entry instead of 12 made that walk faster
    (docs/decisions/search-postings.md). `unit_entries` gives a list with global row ids."""

    def __init__(self, codes, block_rows: int = BLOCK_ROWS) -> None:
        if block_rows < 1:
            raise ValueError(f"block_rows must be positive, got {block_rows}")
        self.n_rows = len(codes)
        self.size = codes.size
        columns = codes.to_csr(np.float64).tocsc()  # a counting sort: rows stay ascending within a unit
        self.indptr = columns.indptr.astype(np.int64)
        rows = columns.indices.astype(np.int32, copy=False)
        values32 = columns.data.astype(np.float32)
        self.values = values32 if np.array_equal(values32, columns.data) else columns.data
        self.norms = np.asarray(codes.norms, dtype=np.float64)
        self.code_indices = np.ascontiguousarray(codes.indices, dtype=np.int32)
        self.code_values = np.ascontiguousarray(codes.values, dtype=np.float32)
        # the mask of a block is read eight bytes at a time, so blocks hold a multiple of 64 rows
        self.block_rows = -(-min(block_rows, max(self.n_rows, 1), 1 << 16) // 64) * 64
        self.n_blocks = -(-self.n_rows // self.block_rows)
        used = np.flatnonzero(np.diff(self.indptr))
        self.unit_slot = np.full(self.size, -1, dtype=np.int32)  # row of each used unit in the segment table
        self.unit_slot[used] = np.arange(used.size, dtype=np.int32)
        self.segments = _kernels()[2](self.indptr, rows, used, self.block_rows, self.n_blocks)
        self.rows = (rows % self.block_rows).astype(np.uint16)
        padded = np.full(self.n_blocks * self.block_rows, np.nan)
        padded[: self.n_rows] = self.norms
        blocks = padded.reshape(self.n_blocks, self.block_rows)
        self.block_norm_low, self.block_norm_high = np.nanmin(blocks, axis=1), np.nanmax(blocks, axis=1)

    def unit_entries(self, unit: int) -> tuple[Int[np.ndarray, " n"], Float[np.ndarray, " n"]]:
        """The rows active on `unit` (global ids, ascending) and their values (float64)."""
        lo, hi = self.indptr[unit], self.indptr[unit + 1]
        if lo == hi:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        slot = self.unit_slot[unit]
        starts = self.segments[slot * self.n_blocks : (slot + 1) * self.n_blocks + 1]
        block_of_entry = np.repeat(np.arange(self.n_blocks, dtype=np.int64), np.diff(starts))
        return block_of_entry * self.block_rows + self.rows[lo:hi], self.values[lo:hi].astype(np.float64)

    @property
    def posting_lengths(self) -> Int[np.ndarray, " size"]:
        return np.diff(self.indptr)


def _threads() -> int:
    import numba

    return numba.get_num_threads()


def _query_arrays(queries, exclude, n_queries):
    exclude = np.full(n_queries, -1, dtype=np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
    return (
        np.ascontiguousarray(queries.indices, dtype=np.int64),
        np.ascontiguousarray(queries.values, dtype=np.float64),
        np.asarray(queries.norms, dtype=np.float64),
        exclude,
    )


def exact_top_k(
    postings: PostingLists, queries, k: int, exclude: Int[np.ndarray, " Q"] | None = None
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"], Int[np.ndarray, " Q"]]:
    """Per query the k rows of smallest cosine distance among those with cosine > 0, ordered by (distance,
    id), and how many were found, up to k (fewer than k: no more exist, and the caller fills up with rows at
    distance 1)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    exact = _kernels()[0]
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return exact(postings.segments, postings.unit_slot, postings.block_rows, postings.rows, postings.values, postings.norms,
                 postings.block_norm_low, postings.block_norm_high, q_indices, q_values, q_norms, exclude, int(k), n_chunks)


def pruned_top_k(
    postings: PostingLists, queries, k: int, terms: int, n_candidates: int, exclude: Int[np.ndarray, " Q"] | None = None
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Approximate: candidates from the posting lists of each query's `terms` largest units, re-ranked by
    exact cosine distance; -1 / inf where fewer than k candidates exist."""
    if k < 1 or terms < 1:
        raise ValueError(f"k and terms must be at least 1, got k={k}, terms={terms}")
    pruned = _kernels()[1]
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return pruned(postings.segments, postings.unit_slot, postings.block_rows, postings.rows, postings.values, postings.norms,
                  postings.block_norm_low, postings.block_norm_high, postings.code_indices,
                  postings.code_values, q_indices, q_values, q_norms, exclude, int(terms), int(max(n_candidates, k)),
                  int(k), int(postings.size), n_chunks)
