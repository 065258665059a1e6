"""Inverted lists of active units, searched by a compiled scatter-add: exact and pruned cosine search.

A stored code is active on a few units (64 of 8192 for sgatlin-stories). The posting list of unit j holds
the rows active on j with their values (the codes' CSC form). For a query, walking the posting lists of its
active units and adding value * query value into an accumulator gives the dot product of every row that
shares a unit with the query; every other row has cosine 0 exactly. That is the same product as the
blocked scipy.sparse path in `codeindex` (and equal to brute force), but done per query in one compiled
loop: no sparse result matrix is built, sorted or transposed, each touched row is visited once more to
turn its dot product into a distance, and the k best are kept by insertion (k is small).

Approximate search walks only the posting lists of the query's `terms` largest units (by |value|), keeps
the `candidates` rows of highest partial cosine, and re-ranks those exactly against their full stored
codes. Queries run in parallel over numba's threads (one accumulator per thread).

numba is imported on first use (it comes with the `search` extra, through umap-learn); without it
`available()` is False and callers take the scipy path.

Shape letters: R stored rows, Q queries, K non-zeros per code, k neighbours per query, M candidates.
"""

from __future__ import annotations

import functools

import numpy as np
from jaxtyping import Float, Int


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
    def accumulate(indptr, rows, values, terms, weights, acc):
        for term in range(terms.size):
            weight = weights[term]
            unit = terms[term]
            for entry in range(indptr[unit], indptr[unit + 1]):
                acc[rows[entry]] += weight * values[entry]

    @numba.njit(parallel=True, cache=True)
    def exact(indptr, rows, values, norms, q_indices, q_values, q_norms, exclude, k, n_chunks):
        n_queries = q_indices.shape[0]
        out_ids = np.full((n_queries, k), -1, dtype=np.int64)
        out_distances = np.full((n_queries, k), np.inf)
        counts = np.zeros(n_queries, dtype=np.int64)
        for chunk in numba.prange(n_chunks):
            acc = np.zeros(norms.size)
            for query in range(chunk * n_queries // n_chunks, (chunk + 1) * n_queries // n_chunks):
                terms, weights = q_indices[query], q_values[query]
                accumulate(indptr, rows, values, terms, weights, acc)
                # Second walk over the same lists: each row with a non-zero dot product is scored once (its
                # accumulator is cleared); a zero dot product is cosine 0, distance 1, never among the kept.
                best_d, best_i = out_distances[query], out_ids[query]
                filled, count = 0, 0
                for term in range(terms.size):
                    unit = terms[term]
                    for entry in range(indptr[unit], indptr[unit + 1]):
                        row = rows[entry]
                        dot = acc[row]
                        if dot == 0.0:
                            continue
                        acc[row] = 0.0
                        # the dense reference's arithmetic (dot / (|q| |x|)), so ties stay ties
                        denominator = q_norms[query] * norms[row]
                        cosine = dot / denominator if denominator > 0 else 0.0
                        distance = min(max(1.0 - cosine, 0.0), 2.0)
                        if distance >= 1.0 or row == exclude[query]:
                            continue
                        count += 1
                        filled = insert(best_d, best_i, filled, k, distance, row)
                counts[query] = count
        return out_ids, out_distances, counts

    @numba.njit(parallel=True, cache=True)
    def pruned(indptr, rows, values, norms, code_indices, code_values, q_indices, q_values, q_norms, exclude, terms,
               n_candidates, k, size, n_chunks):
        n_queries = q_indices.shape[0]
        out_ids = np.full((n_queries, k), -1, dtype=np.int64)
        out_distances = np.full((n_queries, k), np.inf)
        for chunk in numba.prange(n_chunks):
            acc = np.zeros(norms.size)
            dense_query = np.zeros(size)
            cand_d = np.empty(n_candidates)
            cand_i = np.empty(n_candidates, dtype=np.int64)
            for query in range(chunk * n_queries // n_chunks, (chunk + 1) * n_queries // n_chunks):
                q_idx, q_val = q_indices[query], q_values[query]
                order = np.argsort(-np.abs(q_val))[:terms]
                top_terms, top_weights = q_idx[order], q_val[order]
                accumulate(indptr, rows, values, top_terms, top_weights, acc)
                filled = 0
                for term in range(top_terms.size):
                    unit = top_terms[term]
                    for entry in range(indptr[unit], indptr[unit + 1]):
                        row = rows[entry]
                        dot = acc[row]
                        if dot == 0.0:
                            continue
                        acc[row] = 0.0
                        if row != exclude[query] and norms[row] > 0:
                            filled = insert(cand_d, cand_i, filled, n_candidates, -dot / norms[row], row)
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

    return exact, pruned


class PostingLists:
    """The CSC form of one layer's codes: per unit, the rows active on it (int32) and their values (float64)."""

    def __init__(self, codes) -> None:
        self.n_rows = len(codes)
        self.size = codes.size
        columns = codes.to_csr(np.float64).tocsc()  # a counting sort: rows stay ascending within a unit
        self.indptr = columns.indptr.astype(np.int64)
        self.rows = columns.indices.astype(np.int32, copy=False)
        self.values = columns.data
        self.norms = np.asarray(codes.norms, dtype=np.float64)
        self.code_indices = np.ascontiguousarray(codes.indices, dtype=np.int32)
        self.code_values = np.ascontiguousarray(codes.values, dtype=np.float32)

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
    id), and how many such rows exist (fewer than k: the caller fills up with rows at distance 1)."""
    exact, _ = _kernels()
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return exact(postings.indptr, postings.rows, postings.values, postings.norms, q_indices, q_values, q_norms,
                 exclude, int(k), n_chunks)


def pruned_top_k(
    postings: PostingLists, queries, k: int, terms: int, n_candidates: int, exclude: Int[np.ndarray, " Q"] | None = None
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Approximate: candidates from the posting lists of each query's `terms` largest units, re-ranked by
    exact cosine distance; -1 / inf where fewer than k candidates exist."""
    _, pruned = _kernels()
    q_indices, q_values, q_norms, exclude = _query_arrays(queries, exclude, len(queries))
    n_chunks = max(1, min(len(queries), 4 * _threads()))
    return pruned(postings.indptr, postings.rows, postings.values, postings.norms, postings.code_indices,
                  postings.code_values, q_indices, q_values, q_norms, exclude, int(terms), int(max(n_candidates, k)),
                  int(k), int(postings.size), n_chunks)
