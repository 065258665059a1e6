"""The compiled loops of `postings` (numba). Imported on first use: numba is an optional dependency.

Defined at module level so that numba's on-disk cache (cache=True) finds them again in the next process (a
kernel defined inside a function was compiled anew in every process: about 4 s before the first search).
"""

from __future__ import annotations

import numba
import numpy as np

ROUND_CUTOFF = 1e-9  # margin of the cutoff below the k-th best score: far above float64 rounding of a cosine


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
def accumulate_block(segments, unit_slot, n_blocks, block, rows, values, terms, weights, acc):
    """acc[local row] += weight * value over the block's segment of each term's list, in term order (a unit
    no stored row uses has no list and no slot)."""
    for term in range(terms.size):
        slot = unit_slot[terms[term]]
        if slot < 0:
            continue
        weight = weights[term]
        segment = slot * n_blocks + block
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


@numba.njit(cache=True)
def block_scratch(block_rows):
    """One thread's arrays for a block: accumulator, byte marks (and their 8-byte words), marked rows, their dots."""
    flags = np.zeros(block_rows, dtype=np.uint8)
    return np.zeros(block_rows), flags, flags.view(np.uint64), np.empty(block_rows, dtype=np.int64), np.empty(block_rows)


@numba.njit(parallel=True, cache=True)
def exact(segments, unit_slot, block_rows, rows, values, norms, norm_low, norm_high, q_indices, q_values, q_norms, exclude, k,
          n_chunks):
    n_queries = q_indices.shape[0]
    n_rows = norms.size
    n_blocks = (n_rows + block_rows - 1) // block_rows
    out_ids = np.full((n_queries, k), -1, dtype=np.int64)
    out_distances = np.full((n_queries, k), np.inf)
    found = np.zeros(n_queries, dtype=np.int64)
    for chunk in numba.prange(n_chunks):
        acc, flags, words, hits, dots = block_scratch(block_rows)
        for query in range(chunk * n_queries // n_chunks, (chunk + 1) * n_queries // n_chunks):
            terms, weights, q_norm = q_indices[query], q_values[query], q_norms[query]
            best_d, best_i = out_distances[query], out_ids[query]
            filled = 0
            for block in range(n_blocks):
                base = block * block_rows
                stop = min(block_rows, n_rows - base)
                accumulate_block(segments, unit_slot, n_blocks, block, rows, values, terms, weights, acc)
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
def pruned(segments, unit_slot, block_rows, rows, values, norms, norm_low, norm_high, code_indices, code_values, q_indices,
           q_values, q_norms, exclude, terms, n_candidates, k, size, n_chunks):
    n_queries = q_indices.shape[0]
    n_rows = norms.size
    n_blocks = (n_rows + block_rows - 1) // block_rows
    out_ids = np.full((n_queries, k), -1, dtype=np.int64)
    out_distances = np.full((n_queries, k), np.inf)
    for chunk in numba.prange(n_chunks):
        acc, flags, words, hits, dots = block_scratch(block_rows)
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
                accumulate_block(segments, unit_slot, n_blocks, block, rows, values, top_terms, top_weights, acc)
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
def segment_starts(indptr, rows, units, block_rows, n_blocks):
    """Where the list of each of `units` (those with a non-empty list, ascending) enters each row block:
    [units.size * n_blocks + 1]; the segment of units[s] in block b is [starts[s * n_blocks + b],
    starts[s * n_blocks + b + 1])."""
    starts = np.empty(units.size * n_blocks + 1, dtype=np.int64)
    for slot in range(units.size):
        entry, end = indptr[units[slot]], indptr[units[slot] + 1]
        for block in range(n_blocks):
            starts[slot * n_blocks + block] = entry
            limit = (block + 1) * block_rows
            while entry < end and rows[entry] < limit:
                entry += 1
    starts[units.size * n_blocks] = indptr[indptr.size - 1]
    return starts
