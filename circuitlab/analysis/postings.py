"""Inverted lists of active units, searched by a compiled scatter-add: exact and pruned cosine search.

A stored code is active on a few units (64 of 8192 for sgatlin-stories). The posting list of unit j holds
the rows active on j with their values (the codes' CSC form). For a query, walking the posting lists of its
active units and adding value * query value into an accumulator gives the dot product of every row that
shares a unit with the query; every other row has cosine 0 exactly. That is the same product as the
blocked scipy.sparse path in `codeindex` (and equal to brute force), but done per query in one compiled
loop: no sparse result matrix is built, sorted or transposed.

Row blocks. The rows are cut into blocks of `block_rows` (32,768 by default: a float64 accumulator of 256 KB
stays in a core's L2 cache), and each unit's list into one segment per block (its rows ascend, so a segment
is a slice; `PostingLists.segments` holds where each starts). A query walks its lists block by block: the
segments of one block add into the block's accumulator, then one pass over the accumulator turns the dot
products into distances and the accumulator is cleared. That pass first marks the rows that can still
enter the k best (dot > cutoff * |x|, with the cutoff read from the k-th best distance so far, less a margin
of 1e-9 that rounding cannot cross) in a byte mask without branches, then skips the mask eight rows at a
time, so only the few marked rows pay for a division and an insertion. Each row's dot product adds up its
units' contributions in the same order as a whole-list walk, so the distances are bit for bit those of
the previous engine. At 10^6 structured codes on 2 cores (benchmarks/bench_cpu.py; first timed in a
one-off script, 2026-12-01): exact search went from 66-89 to 616-644 queries/s, the pruned search (24
units, 256 candidates) from 143-173 to 902-1,049, with the same answers; the blocks alone, with a second
walk of the lists to score rows, gave 147-190 (the accumulator of a whole million rows, 8 MB a thread, had
left every update to L3).

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
ROUND_CUTOFF = 1e-9  # margin of the cutoff below the k-th best score: far above float64 rounding of a cosine


@functools.cache
def available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _kernels():
    import numba

    @numba.njit(cache=True, inline="always")
    def insert(best_d, best_i, filled, capacity, distance, row):
        """Insert (distance, row) into the ascending lists best_d/best_i of `filled` <= capacity entries."""
        if filled == capacity and (distance > best_d[capacity - 1] or (distance == best_d[capacity - 1] and row > best_i[capacity - 1])):
            return filled
        position = filled if filled < capacity else capacity - 1
        while position > 0 and (best_d[position - 1] > distance or (best_d[position - 1] == distance and best_i[position - 1] > row)):
            best_d[position] = best_d[position - 1]
            best_i[position] = best_i[position - 1]
            position -= 1
        best_d[position] = distance
        best_i[position] = row
        return filled + 1 if filled < capacity else filled

    @numba.njit(cache=True, inline="always")
    def worse(d1, i1, d2, i2):
        return d1 > d2 or (d1 == d2 and i1 > i2)

    @numba.njit(cache=True, inline="always")
    def push(heap_d, heap_i, filled, capacity, distance, row):
        """Keep the `capacity` smallest (distance, row) in a max-heap (the worst kept at the root); the kept set
        is the one `insert` keeps, without its order: O(log capacity) a row instead of O(capacity)."""
        if filled == capacity:
            if not worse(heap_d[0], heap_i[0], distance, row):
                return filled
            position = 0  # replace the root and sift down
            while True:
                child = 2 * position + 1
                if child >= capacity:
                    break
                if child + 1 < capacity and worse(heap_d[child + 1], heap_i[child + 1], heap_d[child], heap_i[child]):
                    child += 1
                if not worse(heap_d[child], heap_i[child], distance, row):
                    break
                heap_d[position], heap_i[position] = heap_d[child], heap_i[child]
                position = child
            heap_d[position], heap_i[position] = distance, row
            return filled
        position = filled  # append and sift up
        while position > 0:
            parent = (position - 1) // 2
            if not worse(distance, row, heap_d[parent], heap_i[parent]):
                break
            heap_d[position], heap_i[position] = heap_d[parent], heap_i[parent]
            position = parent
        heap_d[position], heap_i[position] = distance, row
        return filled + 1

    @numba.njit(cache=True, inline="always")
    def accumulate_block(segments, n_blocks, block, rows, values, terms, weights, acc):
        """acc[local row] += weight * value over the block's segment of each term's list, in term order."""
        for term in range(terms.size):
            weight = weights[term]
            segment = terms[term] * n_blocks + block
            for entry in range(segments[segment], segments[segment + 1]):
                acc[rows[entry]] += weight * values[entry]

    @numba.njit(cache=True, inline="always")
    def marked_rows(acc, norms, base, stop, cutoff, any_nonzero, norm_low, norm_high, flags, words, hits, dots):
        """Collect the block's rows that pass (acc > cutoff * norm, or acc != 0 with `any_nonzero`): local ids in
        hits[:count], ascending, and their dot products in dots[:count]; leave the accumulator all zeros.

        A branch-free first pass reads only the accumulator: it marks the rows above the cutoff times the
        block's smallest norm (largest for a negative cutoff), which every passing row is, and clears the
        rest. Words of eight rows with a mark are then checked against each row's own norm and cleared."""
        if any_nonzero:
            for local in range(stop):
                flags[local] = acc[local] != 0.0
        else:
            bound = cutoff * (norm_low if cutoff >= 0.0 else norm_high)
            for local in range(stop):
                dot = acc[local]
                marked = dot > bound
                flags[local] = marked
                acc[local] = dot if marked else 0.0
        for local in range(stop, flags.size):
            flags[local] = 0
        count = 0
        for word in range(words.size):
            if words[word] != 0:
                for local in range(8 * word, 8 * word + 8):
                    if flags[local]:
                        dot = acc[local]
                        acc[local] = 0.0
                        if any_nonzero or dot > cutoff * norms[base + local]:
                            hits[count] = local
                            dots[count] = dot
                            count += 1
        return count

    @numba.njit(parallel=True, cache=True)
    def exact(segments, block_rows, rows, values, norms, norm_low, norm_high, q_indices, q_values, q_norms, exclude, k,
              n_chunks):
        n_queries = q_indices.shape[0]
        n_rows = norms.size
        n_blocks = (n_rows + block_rows - 1) // block_rows
        out_ids = np.full((n_queries, k), -1, dtype=np.int64)
        out_distances = np.full((n_queries, k), np.inf)
        found = np.zeros(n_queries, dtype=np.int64)
        for chunk in numba.prange(n_chunks):
            acc = np.zeros(block_rows)
            flags = np.zeros(block_rows, dtype=np.uint8)
            words = flags.view(np.uint64)
            hits = np.empty(block_rows, dtype=np.int64)
            dots = np.empty(block_rows)
            for query in range(chunk * n_queries // n_chunks, (chunk + 1) * n_queries // n_chunks):
                terms, weights, q_norm = q_indices[query], q_values[query], q_norms[query]
                best_d, best_i = out_distances[query], out_ids[query]
                filled = 0
                for block in range(n_blocks):
                    base = block * block_rows
                    stop = min(block_rows, n_rows - base)
                    accumulate_block(segments, n_blocks, block, rows, values, terms, weights, acc)
                    # a row enters the k best only if 1 - dot / (|q| |x|) <= the k-th distance so far; before k are
                    # found, any row with cosine > 0 (a row at cosine <= 0 is at distance >= 1 and never kept)
                    cutoff = (1.0 - best_d[k - 1] - ROUND_CUTOFF) * q_norm if filled == k else 0.0
                    marked = marked_rows(acc, norms, base, stop, cutoff, False, norm_low[block], norm_high[block], flags,
                                         words, hits, dots)
                    for hit in range(marked):
                        row = base + hits[hit]
                        # the dense reference's arithmetic (dot / (|q| |x|)), so ties stay ties
                        denominator = q_norm * norms[row]
                        cosine = dots[hit] / denominator if denominator > 0 else 0.0
                        distance = min(max(1.0 - cosine, 0.0), 2.0)
                        if distance < 1.0 and row != exclude[query]:
                            filled = insert(best_d, best_i, filled, k, distance, row)
                found[query] = filled
        return out_ids, out_distances, found

    @numba.njit(parallel=True, cache=True)
    def pruned(segments, block_rows, rows, values, norms, norm_low, norm_high, code_indices, code_values, q_indices,
               q_values, q_norms, exclude, terms, n_candidates, k, size, n_chunks):
        n_queries = q_indices.shape[0]
        n_rows = norms.size
        n_blocks = (n_rows + block_rows - 1) // block_rows
        out_ids = np.full((n_queries, k), -1, dtype=np.int64)
        out_distances = np.full((n_queries, k), np.inf)
        for chunk in numba.prange(n_chunks):
            acc = np.zeros(block_rows)
            flags = np.zeros(block_rows, dtype=np.uint8)
            words = flags.view(np.uint64)
            hits = np.empty(block_rows, dtype=np.int64)
            dots = np.empty(block_rows)
            dense_query = np.zeros(size)
            cand_d = np.empty(n_candidates)
            cand_i = np.empty(n_candidates, dtype=np.int64)
            for query in range(chunk * n_queries // n_chunks, (chunk + 1) * n_queries // n_chunks):
                q_idx, q_val = q_indices[query], q_values[query]
                order = np.argsort(-np.abs(q_val))[:terms]
                top_terms, top_weights = q_idx[order], q_val[order]
                filled = 0
                for block in range(n_blocks):
                    base = block * block_rows
                    stop = min(block_rows, n_rows - base)
                    accumulate_block(segments, n_blocks, block, rows, values, top_terms, top_weights, acc)
                    # candidates are ranked by -dot / |x|; once M are kept, a row must beat the M-th (the heap's root)
                    full = filled == n_candidates
                    best = -cand_d[0] if full else 0.0
                    cutoff = best - ROUND_CUTOFF * (1.0 + abs(best))
                    marked = marked_rows(acc, norms, base, stop, cutoff, not full, norm_low[block], norm_high[block], flags,
                                         words, hits, dots)
                    for hit in range(marked):
                        row = base + hits[hit]
                        if row != exclude[query] and norms[row] > 0:
                            filled = push(cand_d, cand_i, filled, n_candidates, -dots[hit] / norms[row], row)
                # exact re-ranking of the candidates against their full codes
                for term in range(q_idx.size):
                    dense_query[q_idx[term]] += q_val[term]
                best_d, best_i = out_distances[query], out_ids[query]
                kept = 0
                for slot in range(filled):
                    row = cand_i[slot]
                    dot = 0.0
                    for entry in range(code_indices.shape[1]):
                        dot += dense_query[code_indices[row, entry]] * code_values[row, entry]
                    denominator = q_norms[query] * norms[row]
                    cosine = dot / denominator if denominator > 0 else 0.0
                    distance = min(max(1.0 - cosine, 0.0), 2.0)
                    kept = insert(best_d, best_i, kept, k, distance, row)
                for term in range(q_idx.size):
                    dense_query[q_idx[term]] = 0.0
        return out_ids, out_distances

    @numba.njit(cache=True)
    def segment_starts(indptr, rows, block_rows, n_blocks):
        """Where each unit's list enters each row block: [size * n_blocks + 1], segment (j, b) is
        [starts[j * n_blocks + b], starts[j * n_blocks + b + 1])."""
        size = indptr.size - 1
        starts = np.empty(size * n_blocks + 1, dtype=np.int64)
        for unit in range(size):
            entry, end = indptr[unit], indptr[unit + 1]
            for block in range(n_blocks):
                starts[unit * n_blocks + block] = entry
                limit = (block + 1) * block_rows
                while entry < end and rows[entry] < limit:
                    entry += 1
        starts[size * n_blocks] = indptr[size]
        return starts

    return exact, pruned, segment_starts


class PostingLists:
    """The CSC form of one layer's codes, cut into row blocks of `block_rows` rows (rounded up to a multiple of
    64, at most 2^16): per unit, the rows active on it and their values, and where each list enters each block.

    Rows are stored as offsets within their block (uint16) and values as float32 (code matrices hold float32
    or float16 values, repeated indices already summed; should a value not fit float32 exactly, float64 is kept):
    walking the lists streams these arrays from memory, and 6 bytes an entry instead of 12 made that walk
    1.6x faster (one thread, 10^6 codes, one-off timing, 2026-12-01). `unit_entries` gives a list with global
    row ids."""

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
        self.segments = _kernels()[2](self.indptr, rows, self.block_rows, self.n_blocks)
        self.rows = (rows % self.block_rows).astype(np.uint16)
        padded = np.full(self.n_blocks * self.block_rows, np.nan)
        padded[: self.n_rows] = self.norms
        blocks = padded.reshape(self.n_blocks, self.block_rows)
        self.block_norm_low, self.block_norm_high = np.nanmin(blocks, axis=1), np.nanmax(blocks, axis=1)

    def unit_entries(self, unit: int) -> tuple[Int[np.ndarray, " n"], Float[np.ndarray, " n"]]:
        """The rows active on `unit` (global ids, ascending) and their values (float64)."""
        starts = self.segments[unit * self.n_blocks : (unit + 1) * self.n_blocks + 1]
        block_of_entry = np.repeat(np.arange(self.n_blocks, dtype=np.int64), np.diff(starts))
        lo, hi = self.indptr[unit], self.indptr[unit + 1]
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
    exact = _kernels()[0]
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return exact(postings.segments, postings.block_rows, postings.rows, postings.values, postings.norms,
                 postings.block_norm_low, postings.block_norm_high, q_indices, q_values, q_norms, exclude, int(k), n_chunks)


def pruned_top_k(
    postings: PostingLists, queries, k: int, terms: int, n_candidates: int, exclude: Int[np.ndarray, " Q"] | None = None
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Approximate: candidates from the posting lists of each query's `terms` largest units, re-ranked by
    exact cosine distance; -1 / inf where fewer than k candidates exist."""
    pruned = _kernels()[1]
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return pruned(postings.segments, postings.block_rows, postings.rows, postings.values, postings.norms,
                  postings.block_norm_low, postings.block_norm_high, postings.code_indices,
                  postings.code_values, q_indices, q_values, q_norms, exclude, int(terms), int(max(n_candidates, k)),
                  int(k), int(postings.size), n_chunks)
