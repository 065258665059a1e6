"""Exact nearest-neighbour search of sparse codes by cosine distance, equal to brute force over dense vectors.

Blocked sparse products (scipy.sparse), or posting lists when numba is installed: CSR row blocks of the codes
times a CSR block of queries give the dot product of every row that shares a neuron with a query; every other
row has cosine 0 exactly, so the k best per query (argpartition) are the brute-force result (ties broken by the
smaller row id). `brute_force_search` is the dense reference the tests hold it to.

Shape letters: R stored rows (circuits), Q queries, B rows of one block, k neighbours per query.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int

from circuitlab.analysis.codeindex.matrix import CodeMatrix


class ExactIndex:
    """One layer's codes prepared for exact search, by one of two engines that give the same answer:

    - "postings" (when numba is installed): per unit, the rows active on it (`postings.PostingLists`); a
      compiled loop walks a query's lists into an accumulator, one query per thread at a time, one block of
      `block_rows` rows (default `postings.BLOCK_ROWS`) after another.
    - "scipy": row blocks of a scipy CSR matrix [R, size] in float64. A block of queries becomes a CSR
      matrix [Q, size]; `rows @ queries.T` [rows, Q] holds the dot product of every stored row with every
      query that shares a neuron with it, and every pair it leaves out has cosine 0 exactly. Row blocks of
      `block_rows` rows (default 2^18) bound the memory of one product.
    engine "auto" takes postings when numba imports, scipy otherwise.
    """

    def __init__(self, codes: CodeMatrix, block_rows: int | None = None, engine: str = "auto") -> None:
        import circuitlab.analysis.postings as postings

        if engine not in ("auto", "postings", "scipy"):
            raise ValueError(f"unknown exact search engine {engine!r}; expected 'auto', 'postings' or 'scipy'")
        if engine == "auto":
            engine = "postings" if postings.available() else "scipy"
        self.engine = engine
        self.n_rows = len(codes)
        self.size = codes.size
        self.norms = codes.norms
        self.blocks = []
        self.postings = None
        if engine == "postings":
            self.postings = postings.PostingLists(codes, block_rows or postings.BLOCK_ROWS)
            self.posting_lengths = self.postings.posting_lengths
            return
        block_rows = block_rows or 1 << 18
        for start in range(0, max(len(codes), 1), block_rows):
            part = codes.rows(np.arange(start, min(start + block_rows, len(codes))))
            self.blocks.append((start, part.to_csr(np.float64)))
        self.posting_lengths = np.bincount(codes.indices.ravel(), minlength=codes.size)


def _block_top_k(
    block_start: int,
    block_rows,
    block_norms: Float[np.ndarray, " B"],
    query_matrix,
    query_norms: Float[np.ndarray, " Q"],
    k: int,
    exclude: Int[np.ndarray, " Q"] | None,
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Per query, the k best rows of one row block among those with cosine > 0: (ids, distances, counts)."""
    products = (block_rows @ query_matrix.T).T.tocsr()  # [Q, B]; csr->csc conversion sorts row ids
    ids, distances = [], []
    counts = np.zeros(len(query_norms), dtype=np.int64)
    for query in range(len(query_norms)):
        lo, hi = products.indptr[query], products.indptr[query + 1]
        local = products.indices[lo:hi]
        dots = products.data[lo:hi]
        # The same arithmetic as the dense reference (dot / (|q| |x|)), so ties stay ties.
        denominator = query_norms[query] * block_norms[local]
        cosine = np.divide(dots, denominator, out=np.zeros_like(dots), where=denominator > 0)
        distance = np.clip(1.0 - cosine, 0.0, 2.0)
        row_ids = local.astype(np.int64) + block_start
        keep = distance < 1.0
        if exclude is not None and exclude[query] >= 0:
            keep &= row_ids != exclude[query]
        row_ids, distance = row_ids[keep], distance[keep]
        counts[query] = row_ids.size
        chosen = smallest_k(distance, k)
        ids.append(row_ids[chosen])
        distances.append(distance[chosen])
    return ids, distances, counts


def cosine_distance_from_dots(
    dots: Float[np.ndarray, "Q R"], query_norms: Float[np.ndarray, " Q"], row_norms: Float[np.ndarray, " R"]
) -> Float[np.ndarray, "Q R"]:
    """1 - cos, where a zero vector has cosine 0 with everything (distance 1); clipped to [0, 2]."""
    denominator = query_norms[:, None] * row_norms[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = np.where(denominator > 0, dots / np.where(denominator > 0, denominator, 1.0), 0.0)
    return np.clip(1.0 - cosine, 0.0, 2.0)


def smallest_k(distances: Float[np.ndarray, " R"], k: int, ids: Int[np.ndarray, " R"] | None = None) -> Int[np.ndarray, " k"]:
    """Ids of the k smallest distances, ordered by (distance, id): the deterministic brute-force answer.

    ids: the (ascending) row ids of `distances` when it holds a subset of the rows; default 0..R-1.
    """
    k = min(k, distances.size)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(distances, k - 1)[k - 1]
    below = np.flatnonzero(distances < kth)
    tied = np.flatnonzero(distances == kth)[: k - below.size]
    chosen = np.concatenate([below, tied])
    chosen = chosen[np.lexsort((chosen, distances[chosen]))]
    return chosen if ids is None else ids[chosen]


def _query_block_size(index: ExactIndex, queries: CodeMatrix, budget: int = 1 << 25) -> int:
    """Queries per block so that one row block's product stays within `budget` entries (~400 MB)."""
    rows_per_block = max(index.blocks[0][1].shape[0], 1)
    touched = np.minimum(index.posting_lengths[queries.indices].sum(axis=1), index.n_rows)
    per_query = max(float(touched.mean()) * rows_per_block / max(index.n_rows, 1), 1.0) if len(queries) else 1.0
    return int(np.clip(budget // per_query, 1, 512))


def exact_search(
    codes: CodeMatrix,
    index: ExactIndex,
    queries: CodeMatrix,
    k: int,
    exclude: Int[np.ndarray, " Q"] | None = None,
    threads: int = 1,
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """The k rows nearest each query by cosine distance, exactly as brute force over dense vectors gives them.

    `exclude[q]` (a row id, or -1) is left out of query q's answer (a row searching for its own neighbours).
    Returns ids (int64, -1 where fewer than k rows exist) and distances (float64, inf there).
    threads: row blocks searched by a pool of threads (default 1: on 2 shared cores we measured no gain, as
    scipy's sparse product did not overlap across threads there).
    """
    from concurrent.futures import ThreadPoolExecutor

    if queries.size != codes.size:
        raise ValueError(f"query codes have size {queries.size} but the stored codes have size {codes.size}")
    n_rows, n_queries = len(codes), len(queries)
    k_out = min(k, n_rows)  # a query's excluded row, where it has one, is dropped below (distance inf)
    ids = np.full((n_queries, k), -1, dtype=np.int64)
    distances = np.full((n_queries, k), np.inf, dtype=np.float64)
    if n_rows == 0 or k_out <= 0 or n_queries == 0:
        return ids, distances
    if index.postings is not None:
        ids, distances = _exact_search_postings(index, queries, k, k_out, exclude, ids, distances)
        return np.where(np.isfinite(distances), ids, -1), distances
    step = _query_block_size(index, queries)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(index.blocks)))) as pool:
        for start in range(0, n_queries, step):
            stop = min(start + step, n_queries)
            block = queries.rows(np.arange(start, stop))
            matrix = block.to_csr(np.float64)
            block_exclude = None if exclude is None else exclude[start:stop]
            parts = list(pool.map(
                lambda part: _block_top_k(
                    part[0], part[1], index.norms[part[0] : part[0] + part[1].shape[0]], matrix, block.norms,
                    k_out, block_exclude,
                ),
                index.blocks,
            ))
            for slot in range(stop - start):
                query = start + slot
                found = sum(int(part[2][slot]) for part in parts)
                if found >= k_out:
                    # Row blocks come in ascending order, so the concatenated ids ascend and ties keep the smaller id.
                    row_ids = np.concatenate([part[0][slot] for part in parts])
                    row_distances = np.concatenate([part[1][slot] for part in parts])
                    order = np.lexsort((row_ids, row_distances))[:k_out]
                    nearest, nearest_distances = row_ids[order], row_distances[order]
                else:
                    # Fewer than k rows share a neuron with this query: rows at cosine 0 (distance 1) fill the
                    # rest, so rank every row by its full distance vector.
                    row_distances = _all_distances(index, block, slot)
                    if exclude is not None and exclude[query] >= 0:
                        row_distances[exclude[query]] = np.inf
                    nearest = smallest_k(row_distances, k_out)
                    nearest_distances = row_distances[nearest]
                ids[query, : nearest.size] = nearest
                distances[query, : nearest.size] = nearest_distances
    return np.where(np.isfinite(distances), ids, -1), distances


def _exact_search_postings(index, queries, k, k_out, exclude, ids, distances):
    from circuitlab.analysis.postings import exact_top_k

    found_ids, found_distances, counts = exact_top_k(index.postings, queries, k_out, exclude)
    ids[:, :k_out] = found_ids
    distances[:, :k_out] = found_distances
    for query in np.flatnonzero(counts < k_out):
        # Fewer than k rows share a neuron with this query at cosine > 0: rows at distance 1 fill the rest.
        row_distances = _all_distances(index, queries, query)
        if exclude is not None and exclude[query] >= 0:
            row_distances[exclude[query]] = np.inf
        nearest = smallest_k(row_distances, k_out)
        ids[query, : nearest.size] = nearest
        distances[query, : nearest.size] = row_distances[nearest]
    return ids, distances


def _all_distances(index: ExactIndex, queries: CodeMatrix, slot: int) -> Float[np.ndarray, " R"]:
    """Cosine distances of one query to every stored row (1 where they share no neuron)."""
    row_distances = np.ones(index.n_rows, dtype=np.float64)
    query_norm = queries.norms[slot]
    if query_norm == 0:
        return row_distances
    if index.postings is not None:
        lists = index.postings
        dots = np.zeros(index.n_rows, dtype=np.float64)
        for unit, weight in zip(queries.indices[slot].tolist(), queries.values[slot].astype(np.float64).tolist()):
            rows, values = lists.unit_entries(unit)
            dots += np.bincount(rows, weights=weight * values, minlength=index.n_rows)
        denominator = query_norm * index.norms
        cosine = np.divide(dots, denominator, out=np.zeros_like(dots), where=denominator > 0)
        return np.clip(1.0 - cosine, 0.0, 2.0)
    query = queries.rows([slot]).to_csr(np.float64)
    for start, rows in index.blocks:
        dots = np.asarray((rows @ query.T).todense()).ravel()
        stop = start + rows.shape[0]
        denominator = query_norm * index.norms[start:stop]
        cosine = np.divide(dots, denominator, out=np.zeros_like(dots), where=denominator > 0)
        row_distances[start:stop] = np.clip(1.0 - cosine, 0.0, 2.0)
    return row_distances


def brute_force_search(
    codes: CodeMatrix, queries: CodeMatrix, k: int
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Dense reference: densify everything, compute every cosine distance. For tests on small sizes only."""
    dense_rows = codes.to_dense().astype(np.float64)
    dense_queries = queries.to_dense().astype(np.float64)
    distances = cosine_distance_from_dots(
        dense_queries @ dense_rows.T, np.linalg.norm(dense_queries, axis=1), np.linalg.norm(dense_rows, axis=1)
    )
    ids = np.stack([smallest_k(row, k) for row in distances])
    return ids, np.take_along_axis(distances, ids, axis=1)

