"""Approximate nearest-neighbour search of sparse codes: candidates proposed cheaply, re-ranked by exact cosine.

Two kinds of proposer. Where numba is installed the default ("auto") is the postings index: the posting
lists of each query's largest units propose candidates (circuitlab/analysis/postings.py); it shares the exact
index's lists, so it costs nothing to build (docs/decisions/search-postings.md compares the two). The FAISS
kinds remain: every code is compressed to
a dense sketch of `dim` floats (a sparse signed random projection, seeded, so it needs no stored matrix
whatever the code size), the normalised sketches go into a FAISS inner-product index, FAISS proposes
candidates and those are re-ranked with the exact sparse cosine distance. Densified sgatlin codes (8192
dims) would take 32 GB per million rows; sketches of 512 dims quantised to 8 bits take 0.5 GB.
`recall_at_k` scores an approximate answer against the exact one.

Shape letters: R stored rows (circuits), Q queries, K non-zeros per code, D sketch dimensions, M candidates
per query, k neighbours per query.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from jaxtyping import Float, Int

from circuitlab.analysis.codeindex.matrix import _CHUNK_ROWS, CodeMatrix


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


class ApproximateIndex:
    """One layer's candidate proposer for exact re-ranking: posting lists, or sketches in a FAISS index.

    kind "postings" walks the posting lists of each query's `terms` largest units and keeps `candidates` rows
    (needs numba; the default of "auto" where numba is installed). kind "flat" scans every sketch (small
    stores); "ivf" scans the `nprobe` nearest of `nlist` k-means cells (default sqrt(rows) cells, 32 probed,
    float32 sketches: on CPU FAISS scans float32 lists faster than 8-bit ones, and a million 512-float
    sketches take 2 GB); "hnsw" walks a graph. Without numba, "auto" picks flat below 20k rows, ivf above.
    k-means trains on 40 sketches per cell (FAISS's own lower bound for a stable clustering). Measured on
    10^6 structured sgatlin-shape codes: benchmarks/bench_cpu.py and benchmarks/bench_circuitdb.py.
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

        import circuitlab.analysis.postings as postings

        spec = spec or SketchSpec()
        n_rows = len(codes)
        if kind == "auto":  # the postings index where numba is (faster to build and to query at 10^6 codes)
            kind = "postings" if postings.available() else "flat" if n_rows < 20_000 else "ivf"
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

    def to_gpu(self, device_index: int = 0) -> "ApproximateIndex":
        """A copy of this FAISS index on a GPU (needs faiss-gpu: `faiss_gpu_available()`); flat and IVF kinds."""
        import faiss

        resources = faiss.StandardGpuResources()
        copy = ApproximateIndex(faiss.index_cpu_to_gpu(resources, device_index, self.faiss_index), self.spec,
                                self.kind, self.params)
        copy._resources = resources  # the GPU memory and streams the copy runs on live as long as it does
        copy._projection = self._projection
        return copy

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


def faiss_gpu_available() -> bool:
    """Whether faiss is installed with GPU support (faiss-gpu) and sees a GPU; faiss is imported only here."""
    try:
        import faiss
    except ImportError:
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def rerank(
    codes,
    queries: CodeMatrix,
    candidates: Int[np.ndarray, "Q M"],
    k: int,
    exclude: Int[np.ndarray, " Q"] | None = None,
) -> tuple[Int[np.ndarray, "Q k"], Float[np.ndarray, "Q k"]]:
    """Exact cosine distances of each query to its candidate rows; the k best by (distance, id).

    codes: a CodeMatrix, or anything with `size`, `nnz` and `rows(ids)` (one layer of a sharded database)."""
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
        # each distinct candidate row is read once (from memory maps, or the shards of a database)
        unique, slot = np.unique(np.where(valid, block_candidates, 0), return_inverse=True)
        slot = slot.reshape(block_candidates.shape)
        rows = codes.rows(unique)
        offsets = np.arange(stop - start, dtype=np.int64) * codes.size
        dense_queries = np.bincount(
            (block_queries.indices + offsets[:, None]).ravel(),
            weights=block_queries.values.astype(np.float64).ravel(),
            minlength=(stop - start) * codes.size,
        )
        gathered = dense_queries[rows.indices[slot] + offsets[:, None, None]]
        dots = np.einsum("qmk,qmk->qm", gathered, rows.values[slot].astype(np.float64))
        denominator = block_queries.norms[:, None] * rows.norms[slot]
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
