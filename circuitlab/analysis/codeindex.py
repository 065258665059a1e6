"""Sparse code storage and nearest-neighbour search by cosine distance.

A circuit is identified by its sparse code (seed 000, section 4: the gate vector of a token fixes the linear
circuit sgatlin applies to it), and two circuits are compared by the cosine distance of their codes
(DESIGN section 7). This module holds the codes of one layer and searches them two ways:

- exact: blocked sparse products (scipy.sparse): CSR row blocks of the codes times a CSR block of queries give
  the dot product of every row that shares a neuron with a query; every other row has cosine 0 exactly, so
  the k best per query (argpartition) are the brute-force result (ties broken by the smaller row id).
- approximate: every code is compressed to a dense sketch of `dim` floats (a sparse signed random
  projection, seeded, so it needs no stored matrix whatever the code size), the normalised sketches go
  into a FAISS inner-product index, FAISS proposes candidates and those are re-ranked with the exact
  sparse cosine distance. Densified sgatlin codes (8192 dims) would take 32 GB per million rows; sketches
  of 512 dims quantised to 8 bits take 0.5 GB.

Shape letters: R stored rows (circuits), Q queries, K non-zeros per code, D sketch dimensions, M candidates
per query.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Float, Int

from circuitlab.codes import SparseCode

_CHUNK_ROWS = 65536


def _as_numpy(array) -> np.ndarray:
    if isinstance(array, torch.Tensor):
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


# ----------------------------------------------------------------------------------------------- exact


class ExactIndex:
    """One layer's codes prepared for exact search, by one of two engines that give the same answer:

    - "postings" (when numba is installed): per unit, the rows active on it (`postings.PostingLists`); a
      compiled loop walks a query's lists into an accumulator, one query per thread at a time.
    - "scipy": row blocks of a scipy CSR matrix [R, size] in float64. A block of queries becomes a CSR
      matrix [Q, size]; `rows @ queries.T` [rows, Q] holds the dot product of every stored row with every
      query that shares a neuron with it, and every pair it leaves out has cosine 0 exactly. Row blocks
      bound the memory of one product.
    engine "auto" takes postings when numba imports, scipy otherwise.
    """

    def __init__(self, codes: CodeMatrix, block_rows: int = 1 << 18, engine: str = "auto") -> None:
        from circuitlab.analysis import postings

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
            self.postings = postings.PostingLists(codes)
            self.posting_lengths = self.postings.posting_lengths
            return
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
    k_out = min(k, n_rows - (0 if exclude is None else 1)) if n_rows else 0
    ids = np.full((n_queries, k), -1, dtype=np.int64)
    distances = np.full((n_queries, k), np.inf, dtype=np.float64)
    if n_rows == 0 or k_out <= 0 or n_queries == 0:
        return ids, distances
    if index.postings is not None:
        return _exact_search_postings(index, queries, k, k_out, exclude, ids, distances)
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
    return ids, distances


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
            lo, hi = lists.indptr[unit], lists.indptr[unit + 1]
            dots += np.bincount(lists.rows[lo:hi], weights=weight * lists.values[lo:hi], minlength=index.n_rows)
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


# ----------------------------------------------------------------------------------------- approximate


@dataclass(frozen=True)
class SketchSpec:
    """A sparse signed random projection: code index i adds +-value/sqrt(hashes) to `hashes` of `dim` buckets.

    Inner products of sketches estimate inner products of codes without bias (a count sketch with several
    hashes; standard deviation about |x||y|/sqrt(dim)); the buckets and signs come from a seeded integer
    hash of (seed, hash number, index), so no projection matrix is stored whatever the code size.
    """

    dim: int = 512
    hashes: int = 4
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(values: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: a bijective avalanche mix of 64-bit integers (wrapping arithmetic is intended).
    with np.errstate(over="ignore"):
        values = values ^ (values >> np.uint64(30))
        values = values * np.uint64(0xBF58476D1CE4E5B9)
        values = values ^ (values >> np.uint64(27))
        values = values * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


def projection(size: int, spec: SketchSpec):
    """The sketch as a sparse matrix [size, dim]: row i holds code index i's `hashes` signed entries."""
    from scipy import sparse

    indices = np.arange(size, dtype=np.uint64)
    buckets, signs = [], []
    for hash_number in range(spec.hashes):
        with np.errstate(over="ignore"):
            salt = np.uint64((spec.seed * 0x9E3779B1 + hash_number * 0x85EBCA77 + 1) & 0xFFFFFFFFFFFFFFFF)
            mixed = _mix64(indices * np.uint64(0x9E3779B97F4A7C15) + salt)
        buckets.append((mixed % np.uint64(spec.dim)).astype(np.int64))
        signs.append(np.where((mixed >> np.uint64(63)) == 1, -1.0, 1.0) / math.sqrt(spec.hashes))
    rows = np.tile(np.arange(size), spec.hashes)
    # duplicates (two hashes of one index in one bucket) are summed by the COO -> CSR conversion
    return sparse.coo_matrix((np.concatenate(signs), (rows, np.concatenate(buckets))), shape=(size, spec.dim)).tocsr()


def sketch(codes: CodeMatrix, spec: SketchSpec, matrix=None) -> Float[np.ndarray, "R D"]:
    """L2-normalised float32 sketches of every row (a zero row gets a zero sketch): codes @ projection.

    matrix: `projection(codes.size, spec)`, when the caller keeps it between calls."""
    matrix = projection(codes.size, spec) if matrix is None else matrix
    out = np.zeros((len(codes), spec.dim), dtype=np.float32)
    for start in range(0, len(codes), _CHUNK_ROWS):
        block = (codes.rows(np.arange(start, min(start + _CHUNK_ROWS, len(codes)))).to_csr(np.float64) @ matrix).toarray()
        lengths = np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = np.where(lengths > 0, block / np.where(lengths > 0, lengths, 1.0), 0.0)
    return out


def _faiss_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is None


class ApproximateIndex:
    """Sketches of one layer's codes in a FAISS inner-product index, proposing candidates for exact re-ranking.

    kind "flat" scans every sketch (small stores); "ivf" scans the `nprobe` nearest of `nlist` k-means cells
    (default sqrt(rows) cells, 32 probed, float32 sketches: on CPU FAISS scans float32 lists faster than
    8-bit ones, and a million 512-float sketches take 2 GB); "hnsw" walks a graph. "auto" picks flat below
    20k rows, ivf above. k-means trains on 40 sketches per cell (FAISS's own lower bound for a stable
    clustering). Measured on 10^6 structured sgatlin-shape codes: benchmarks/bench_circuitdb.py.
    """

    def __init__(self, faiss_index, spec: SketchSpec, kind: str, params: dict, postings=None) -> None:
        self.faiss_index = faiss_index
        self.spec = spec
        self.kind = kind
        self.params = dict(params)
        self.postings = postings  # kind "postings": the layer's posting lists (no FAISS index)
        self._projection = None
        self._apply_search_params()

    @classmethod
    def build(
        cls,
        codes: CodeMatrix,
        spec: SketchSpec | None = None,
        kind: str = "auto",
        *,
        nlist: int | None = None,
        nprobe: int | None = None,
        training_per_cell: int = 40,
        hnsw_m: int = 32,
        ef_search: int = 256,
        seed: int = 0,
        terms: int = 24,
        candidates: int = 256,
        posting_lists=None,
        progress: bool = False,
    ) -> "ApproximateIndex":
        from tqdm.auto import tqdm

        from circuitlab.analysis import postings

        spec = spec or SketchSpec()
        n_rows = len(codes)
        if kind == "auto":
            kind = "postings" if _faiss_missing() and postings.available() else "flat" if n_rows < 20_000 else "ivf"
        if kind == "postings":
            if not postings.available():
                raise ImportError("the 'postings' index needs numba: pip install 'circuitlab[search]'")
            params = {"terms": int(terms), "candidates": int(candidates)}
            lists = posting_lists if posting_lists is not None else postings.PostingLists(codes)
            return cls(None, spec, kind, params, postings=lists)
        import faiss

        matrix = projection(codes.size, spec)
        if kind == "flat":
            index = faiss.IndexFlatIP(spec.dim)
            params: dict = {}
        elif kind == "ivf":
            nlist = nlist or max(1, min(int(math.sqrt(n_rows)), n_rows // training_per_cell))
            nprobe = min(nlist, nprobe or 32)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(spec.dim), spec.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            sample_size = min(n_rows, training_per_cell * nlist)
            sample = np.sort(np.random.default_rng(seed).choice(n_rows, sample_size, replace=False))
            index.train(sketch(codes.rows(sample), spec, matrix))
            params = {"nlist": nlist, "nprobe": nprobe, "training_sample": int(sample_size)}
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(spec.dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            params = {"hnsw_m": hnsw_m, "ef_search": ef_search}
        else:
            raise ValueError(f"unknown approximate index kind {kind!r}; expected 'auto', 'flat', 'ivf' or 'hnsw'")
        chunk = 2 * _CHUNK_ROWS
        for start in tqdm(range(0, n_rows, chunk), desc=f"sketch index ({kind})", disable=not progress):
            index.add(sketch(codes.rows(np.arange(start, min(start + chunk, n_rows))), spec, matrix))
        built = cls(index, spec, kind, params)
        built._projection = matrix
        return built

    def search(
        self,
        codes: CodeMatrix,
        queries: CodeMatrix,
        k: int,
        exclude: Int[np.ndarray, " Q"] | None = None,
        n_candidates: int | None = None,
    ) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
        """The k nearest stored rows of each query among `n_candidates` proposed ones, re-ranked by exact
        cosine distance: (ids [Q, k], distances [Q, k]), -1 / inf where fewer were proposed.

        postings: candidates by partial cosine over each query's `terms` largest units (default
        `params["candidates"]` of them); FAISS kinds: by sketch inner product (default max(512, 50 k))."""
        if self.kind == "postings":
            from circuitlab.analysis.postings import pruned_top_k

            wanted = n_candidates or self.params["candidates"]
            return pruned_top_k(self.postings, queries, k, self.params["terms"], wanted, exclude)
        wanted = n_candidates or max(512, 50 * k)
        return rerank(codes, queries, self.candidates(queries, wanted + (0 if exclude is None else 1)), k, exclude)

    @property
    def has_file(self) -> bool:
        """False for "postings", which is rebuilt from the codes on load (nothing to save)."""
        return self.kind != "postings"

    def _apply_search_params(self) -> None:
        if self.kind == "ivf":
            self.faiss_index.nprobe = int(self.params["nprobe"])
        elif self.kind == "hnsw":
            self.faiss_index.hnsw.efSearch = int(self.params["ef_search"])

    def __len__(self) -> int:
        return self.postings.n_rows if self.kind == "postings" else int(self.faiss_index.ntotal)

    def candidates(self, queries: CodeMatrix, n_candidates: int) -> Int[np.ndarray, "Q M"]:
        """Row ids whose sketches have the largest inner product with each query's sketch (-1 = none)."""
        if self.kind == "hnsw":
            self.faiss_index.hnsw.efSearch = max(int(self.params["ef_search"]), n_candidates)
        if self._projection is None:
            self._projection = projection(queries.size, self.spec)
        query_sketches = sketch(queries, self.spec, self._projection)
        _, ids = self.faiss_index.search(query_sketches, min(n_candidates, max(1, len(self))))
        return ids.astype(np.int64)

    def save(self, path: str | Path) -> None:
        import faiss

        faiss.write_index(self.faiss_index, str(path))

    @classmethod
    def load(cls, path: str | Path, spec: SketchSpec, kind: str, params: dict, codes: CodeMatrix | None = None) -> "ApproximateIndex":
        """A saved FAISS index; for kind "postings", the posting lists rebuilt from `codes`."""
        if kind == "postings":
            return cls.build(codes, spec, kind, **params)
        import faiss

        return cls(faiss.read_index(str(path)), spec, kind, params)


def rerank(
    codes: CodeMatrix,
    queries: CodeMatrix,
    candidates: Int[np.ndarray, "Q M"],
    k: int,
    exclude: Int[np.ndarray, " Q"] | None = None,
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Exact cosine distances of each query to its candidate rows; the k best by (distance, id)."""
    n_queries, n_candidates = candidates.shape
    ids = np.full((n_queries, k), -1, dtype=np.int64)
    distances = np.full((n_queries, k), np.inf, dtype=np.float64)
    if n_queries == 0 or n_candidates == 0:
        return ids, distances
    # A block of queries is densified (block * size floats) so each candidate's dot product is a gather.
    chunk = max(1, min((1 << 22) // codes.size, (1 << 20) // (n_candidates * codes.nnz)))
    for start in range(0, n_queries, chunk):
        stop = min(start + chunk, n_queries)
        block_queries = queries.rows(np.arange(start, stop))
        block_candidates = candidates[start:stop]
        valid = block_candidates >= 0
        safe = np.where(valid, block_candidates, 0)
        offsets = np.arange(stop - start, dtype=np.int64) * codes.size
        dense_queries = np.bincount(
            (block_queries.indices + offsets[:, None]).ravel(),
            weights=block_queries.values.astype(np.float64).ravel(),
            minlength=(stop - start) * codes.size,
        )
        gathered = dense_queries[codes.indices[safe] + offsets[:, None, None]]
        dots = np.einsum("qmk,qmk->qm", gathered, codes.values[safe].astype(np.float64))
        denominator = block_queries.norms[:, None] * codes.norms[safe]
        with np.errstate(divide="ignore", invalid="ignore"):
            cosine = np.where(denominator > 0, dots / np.where(denominator > 0, denominator, 1.0), 0.0)
        block_distances = np.where(valid, np.clip(1.0 - cosine, 0.0, 2.0), np.inf)
        if exclude is not None:
            block_distances[block_candidates == exclude[start:stop, None]] = np.inf
        order = np.lexsort((block_candidates, block_distances), axis=-1)[:, :k]
        best_ids = np.take_along_axis(block_candidates, order, axis=1)
        best_distances = np.take_along_axis(block_distances, order, axis=1)
        found = np.isfinite(best_distances)
        ids[start:stop, : order.shape[1]] = np.where(found, best_ids, -1)
        distances[start:stop, : order.shape[1]] = best_distances
    return ids, distances


def recall_at_k(
    exact_distances: Float[np.ndarray, "Q k"], approximate_distances: Float[np.ndarray, "Q k"], tolerance: float = 1e-9
) -> float:
    """Mean fraction of the k true neighbours recovered, counting ties fairly.

    A returned row counts as a true neighbour when its exact distance is at most the k-th exact distance (+
    tolerance): with duplicate codes several rows are equally correct answers. Both arrays hold exact
    cosine distances (approximate search re-ranks exactly), sorted ascending, inf for missing entries.
    """
    kth = exact_distances[:, -1:]
    found = (approximate_distances <= kth + tolerance) & np.isfinite(approximate_distances)
    wanted = np.isfinite(exact_distances).sum(axis=1)
    return float(np.mean(np.minimum(found.sum(axis=1), wanted) / np.maximum(wanted, 1)))


# ------------------------------------------------------------------------------------- synthetic codes


def structured_synthetic_codes(
    n_rows: int,
    *,
    channels: int = 8,
    k: int = 8,
    neurons: int = 1024,
    n_prototypes: int | None = None,
    replace_probability: float = 0.3,
    duplicate_fraction: float = 0.1,
    seed: int = 0,
    prototypes_seed: int | None = None,
) -> CodeMatrix:
    """Codes of the sgatlin shape with the structure of real ones, for tests and benchmarks.

    Each code picks one of `n_prototypes` prototype circuits (Zipf-distributed, as token frequencies are),
    keeps each of its `channels * k` neurons with probability 1 - `replace_probability` (a replaced slot
    takes a random neuron of its channel), and scales the values by log-normal noise;
    `duplicate_fraction` of the rows then copy an earlier row exactly (real databases hold many identical
    circuits). Neuron ids carry the channel offset c * neurons + i. Pass the same `prototypes_seed` to draw
    queries from the prototypes of a stored set.
    """
    rng = np.random.default_rng(seed)
    prototype_rng = np.random.default_rng(seed if prototypes_seed is None else prototypes_seed)
    n_prototypes = n_prototypes or max(16, n_rows // 500)
    prototype_indices = np.argsort(prototype_rng.random((n_prototypes, channels, neurons)), axis=2)[:, :, :k]
    prototype_values = prototype_rng.gamma(2.0, 1.0, size=(n_prototypes, channels, k))
    weights = 1.0 / np.arange(1, n_prototypes + 1) ** 0.8
    chosen = rng.choice(n_prototypes, n_rows, p=weights / weights.sum())
    indices = prototype_indices[chosen].copy()
    values = prototype_values[chosen] * rng.lognormal(0.0, 0.3, size=(n_rows, channels, k))
    replaced = rng.random((n_rows, channels, k)) < replace_probability
    indices[replaced] = rng.integers(0, neurons, int(replaced.sum()))
    values[replaced] = rng.gamma(2.0, 0.5, int(replaced.sum()))
    indices = indices + (np.arange(channels) * neurons)[None, :, None]
    indices = indices.reshape(n_rows, channels * k)
    values = values.reshape(n_rows, channels * k).astype(np.float32)
    copies = np.flatnonzero(rng.random(n_rows) < duplicate_fraction)
    copies = copies[copies > 0]
    sources = (rng.random(copies.size) * copies).astype(np.int64)
    indices[copies] = indices[sources]
    values[copies] = values[sources]
    return CodeMatrix(indices, values, channels * neurons)
