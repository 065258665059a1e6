"""Circuit search on synthetic codes: exact search equals brute force, approximate recall has a floor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from circuitlab.analysis import postings
from circuitlab.analysis.circuitdb import CircuitDB, CircuitDBError, format_hits, mark_token, neighbour_heatmap
from circuitlab.analysis.codeindex import (
    ApproximateIndex,
    CodeMatrix,
    ExactIndex,
    SketchSpec,
    brute_force_search,
    exact_search,
    recall_at_k,
    rerank,
    sketch,
    structured_synthetic_codes,
)
from circuitlab.codes import SparseCode


def awkward_codes(n_rows: int, size: int, nnz: int, seed: int) -> CodeMatrix:
    """Small-integer values (so float sums are exact and ties are real), negative values, repeated indices
    within a row, duplicated rows and an all-zero row: every case the search must get right."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, size, (n_rows, nnz))
    values = rng.choice(np.array([-2.0, -1.0, 1.0, 2.0, 3.0], dtype=np.float32), (n_rows, nnz))
    indices[1::7] = indices[0::7][: len(indices[1::7])]
    values[1::7] = values[0::7][: len(values[1::7])]
    indices[3, :2] = indices[3, 2]  # a repeated index: its values add up
    values[5] = 0.0
    return CodeMatrix(indices, values, size)


def test_canonical_rows_densify_like_sparse_code():
    indices = torch.tensor([[[4, 1, 4, 0]], [[2, 2, 2, 3]]])
    values = torch.tensor([[[1.0, 2.0, 3.0, -1.0]], [[0.5, 0.5, 1.0, 2.0]]])
    code = SparseCode(indices, values, size=6)
    matrix = CodeMatrix.from_sparse_code(code)
    np.testing.assert_array_equal(matrix.to_dense(), code.to_dense().reshape(2, 6).numpy())
    assert matrix.indices.tolist() == [[0, 1, 4, 4], [2, 2, 2, 3]]
    np.testing.assert_allclose(matrix.norms, np.linalg.norm(code.to_dense().reshape(2, 6).numpy(), axis=1))


def test_indices_out_of_range_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        CodeMatrix(np.array([[1, 8]]), np.ones((1, 2), np.float32), 8)


ENGINES = ["scipy", pytest.param("postings", marks=pytest.mark.skipif(not postings.available(), reason="needs numba"))]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("k", [1, 10, 40])
def test_exact_search_equals_dense_brute_force(k, engine):
    stored = awkward_codes(600, size=50, nnz=6, seed=0)
    queries = CodeMatrix.concatenate([awkward_codes(40, size=50, nnz=6, seed=1), stored.rows([0, 1, 5, 3])])
    index = ExactIndex(stored, engine=engine)
    assert index.engine == engine
    ids, distances = exact_search(stored, index, queries, k)
    reference_ids, reference_distances = brute_force_search(stored, queries, k)
    np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)
    # Integer values make every distance exact, so ties are true ties and both break them by the smaller id.
    np.testing.assert_array_equal(ids, reference_ids)
    assert np.all(np.diff(distances, axis=1) >= 0)
    # A stored row finds itself (or an identical copy) at distance 0; the zero row is at distance 1 from all.
    assert distances[40, 0] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(distances[42], 1.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_exact_search_excludes_the_query_row_and_handles_small_stores(engine):
    stored = awkward_codes(30, size=20, nnz=4, seed=2)
    query_ids = np.array([0, 4, 9])
    index = ExactIndex(stored, engine=engine)
    ids, distances = exact_search(stored, index, stored.rows(query_ids), k=50, exclude=query_ids)
    assert ids.shape == (3, 50)
    assert (ids[:, :29] >= 0).all() and (ids[:, 29:] == -1).all() and np.isinf(distances[:, 29:]).all()
    for row, query in enumerate(query_ids):
        assert query not in ids[row]
        reference_ids, reference_distances = brute_force_search(stored, stored.rows([query]), 30)
        keep = reference_ids[0] != query
        np.testing.assert_array_equal(ids[row, :29], reference_ids[0][keep])
        np.testing.assert_allclose(distances[row, :29], reference_distances[0][keep], atol=1e-12)


def test_sketch_inner_products_track_cosine():
    codes = structured_synthetic_codes(400, seed=3)
    sketches = sketch(codes, SketchSpec(dim=256))
    dense = codes.to_dense().astype(np.float64)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    true_cosine = (dense[:200] @ dense[200:].T).ravel()
    sketch_cosine = (sketches[:200] @ sketches[200:].T).ravel()
    np.testing.assert_allclose(np.linalg.norm(sketches, axis=1), 1.0, rtol=1e-5)
    # A count sketch of 256 buckets estimates a cosine with standard deviation about 1/sqrt(256) = 0.06.
    assert np.std(sketch_cosine - true_cosine) < 0.09
    assert abs(np.mean(sketch_cosine - true_cosine)) < 0.01
    assert np.corrcoef(true_cosine, sketch_cosine)[0, 1] > 0.9
    # Deterministic: the same seed gives the same sketch, another seed another one.
    np.testing.assert_array_equal(sketches, sketch(codes, SketchSpec(dim=256)))
    assert not np.allclose(sketches, sketch(codes, SketchSpec(dim=256, seed=1)))


# Measured when written (seeded, so reproducible): flat 1.000 / 1.000, ivf 1.000 / 1.000, hnsw (5k rows)
# about 0.99 on stored and fresh queries; with 16 candidates instead of 257 recall falls well below.
@pytest.mark.parametrize("kind, n_rows, floor", [("flat", 20000, 0.99), ("ivf", 20000, 0.99), ("hnsw", 5000, 0.95)])
def test_approximate_recall_on_structured_codes(kind, n_rows, floor):
    stored = structured_synthetic_codes(n_rows, seed=0)
    stored_queries = np.random.default_rng(1).choice(len(stored), 150, replace=False)
    fresh = structured_synthetic_codes(150, seed=2, prototypes_seed=0)
    exact_index = ExactIndex(stored)
    index = ApproximateIndex.build(stored, SketchSpec(), kind, nlist=64, nprobe=16)
    for queries, exclude in ((stored.rows(stored_queries), stored_queries), (fresh, None)):
        exact_ids, exact_distances = exact_search(stored, exact_index, queries, 10, exclude)
        approx_ids, approx_distances = rerank(stored, queries, index.candidates(queries, 257), 10, exclude)
        recall = recall_at_k(exact_distances, approx_distances)
        assert recall >= floor, f"{kind} recall@10 {recall:.3f} below {floor}"
        few = rerank(stored, queries, index.candidates(queries, 16), 10, exclude)[1]
        assert recall_at_k(exact_distances, few) < recall
        # Re-ranking is exact: whatever approximate search returns carries its true distance.
        dense_distance = brute_force_search(stored.rows(approx_ids[0]), queries.rows([0]), 10)[1]
        np.testing.assert_allclose(np.sort(dense_distance[0]), approx_distances[0], atol=1e-9)


@pytest.mark.skipif(not postings.available(), reason="needs numba")
def test_posting_segments_cut_each_list_at_the_row_blocks():
    stored = awkward_codes(517, size=301, nnz=5, seed=5)
    lists = postings.PostingLists(stored, block_rows=100)  # rounded up to 128 rows: blocks 0-3, the last partial
    assert (lists.block_rows, lists.n_blocks) == (128, 5)
    used = np.flatnonzero(np.bincount(stored.indices.ravel(), minlength=301))
    assert used.size < 301  # some units are used by no row: they take no place in the segment table
    assert lists.segments.shape == (used.size * 5 + 1,) and lists.segments[-1] == lists.indptr[-1]
    assert (lists.unit_slot[used] == np.arange(used.size)).all() and (np.delete(lists.unit_slot, used) == -1).all()
    # code values are float32 (a repeated index is summed when the code matrix is built), kept exactly
    assert lists.rows.dtype == np.uint16 and lists.values.dtype == np.float32
    columns = stored.to_csr(np.float64).tocsc()
    for unit in range(301):
        rows = columns.indices[columns.indptr[unit] : columns.indptr[unit + 1]]
        global_rows, values = lists.unit_entries(unit)
        np.testing.assert_array_equal(global_rows, rows)
        np.testing.assert_array_equal(values, columns.data[columns.indptr[unit] : columns.indptr[unit + 1]])
        if lists.unit_slot[unit] < 0:
            assert rows.size == 0 and global_rows.size == 0
            continue
        slot = lists.unit_slot[unit]
        for block in range(5):
            segment = lists.rows[lists.segments[slot * 5 + block] : lists.segments[slot * 5 + block + 1]]
            np.testing.assert_array_equal(128 * block + segment.astype(np.int64),
                                          rows[(rows >= 128 * block) & (rows < 128 * (block + 1))])


@pytest.mark.skipif(not postings.available(), reason="needs numba")
def test_posting_lists_of_a_large_code_space_keep_segments_for_used_units_only():
    """Codes of size 2^16 that use 40 units: the segment table has 40 rows, not 65,536, and exact search over
    several blocks (queries touching unused units too) still equals brute force."""
    rng = np.random.default_rng(12)
    units = rng.choice(2**16, 40, replace=False)
    stored = CodeMatrix(units[rng.integers(0, 40, (300, 6))], rng.integers(1, 4, (300, 6)).astype(np.float32), 2**16)
    queries = CodeMatrix(np.concatenate([units[rng.integers(0, 40, (12, 4))], rng.integers(0, 2**16, (12, 2))], 1),
                         rng.integers(1, 4, (12, 6)).astype(np.float32), 2**16)
    index = ExactIndex(stored, block_rows=64, engine="postings")
    lists = index.postings
    assert lists.n_blocks == 5 and lists.segments.shape == (40 * 5 + 1,)
    ids, distances = exact_search(stored, index, queries, 7)
    reference_ids, reference_distances = brute_force_search(stored, queries, 7)
    np.testing.assert_array_equal(ids, reference_ids)
    np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)


def pruned_reference(stored: CodeMatrix, queries: CodeMatrix, k: int, terms: int, n_candidates: int, exclude=None):
    """The pruned search by dense arithmetic: partial dot products over each query's `terms` largest units,
    the `n_candidates` rows of largest partial dot / |x| (rows with a zero partial dot are not proposed; ties
    by smaller id), re-ranked by the exact cosine distance."""
    dense_rows = stored.to_dense().astype(np.float64)
    norms = np.linalg.norm(dense_rows, axis=1)
    ids = np.full((len(queries), k), -1)
    distances = np.full((len(queries), k), np.inf)
    for query in range(len(queries)):
        q_idx, q_val = queries.indices[query], queries.values[query].astype(np.float64)
        order = np.argsort(-np.abs(q_val), kind="stable")[:terms]
        partial = np.zeros(stored.size)
        np.add.at(partial, q_idx[order], q_val[order])
        dots = dense_rows @ partial
        eligible = (dots != 0) & (norms > 0)
        if exclude is not None:
            eligible[exclude[query]] = False
        rows = np.flatnonzero(eligible)
        rows = rows[np.lexsort((rows, -dots[rows] / norms[rows]))][:n_candidates]
        full = np.zeros(stored.size)
        np.add.at(full, q_idx, q_val)
        cosine = dense_rows[rows] @ full / (np.linalg.norm(full) * norms[rows])
        row_distances = np.clip(1.0 - cosine, 0.0, 2.0)
        best = np.lexsort((rows, row_distances))[:k]
        ids[query, : best.size] = rows[best]
        distances[query, : best.size] = row_distances[best]
    return ids, distances


@pytest.mark.skipif(not postings.available(), reason="needs numba")
@pytest.mark.parametrize("block_rows", [64, 192, 100_000])
def test_pruned_postings_search_equals_its_dense_reference(block_rows):
    """The blocked walk (several blocks, one, a partial last one) proposes exactly the candidates that dense
    arithmetic does, and re-ranks them to the same answer. Values are distinct floats, so no ties."""
    rng = np.random.default_rng(7)
    stored = structured_synthetic_codes(700, channels=4, k=4, neurons=64, seed=3)
    stored = CodeMatrix(stored.indices, (stored.values * rng.uniform(0.5, 1.5, stored.values.shape)).astype(np.float32),
                        stored.size)
    queries = structured_synthetic_codes(40, channels=4, k=4, neurons=64, seed=4, prototypes_seed=3)
    lists = postings.PostingLists(stored, block_rows=block_rows)
    exclude = rng.integers(0, len(stored), len(queries))
    for terms, n_candidates, k in ((6, 12, 5), (16, 40, 10), (3, 8, 8)):
        for skip in (None, exclude):
            ids, distances = postings.pruned_top_k(lists, queries, k, terms, n_candidates, skip)
            reference_ids, reference_distances = pruned_reference(stored, queries, k, terms, n_candidates, skip)
            np.testing.assert_array_equal(ids, reference_ids)
            np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)
    # the compiled loops index the k-th best: k = 0 is refused before they run
    with pytest.raises(ValueError, match="k must be at least 1"):
        postings.exact_top_k(lists, queries, 0)
    with pytest.raises(ValueError, match="at least 1"):
        postings.pruned_top_k(lists, queries, 10, 0, 16)


@pytest.mark.skipif(not postings.available(), reason="needs numba")
def test_postings_recall_on_structured_codes():
    """Candidates from each query's 24 largest units, 256 re-ranked: recall@10 measured against exact search
    on seeded codes (1.000 on stored and fresh queries when written); 2 units and 10 candidates fall below."""
    stored = structured_synthetic_codes(20000, seed=0)
    stored_queries = np.random.default_rng(1).choice(len(stored), 150, replace=False)
    fresh = structured_synthetic_codes(150, seed=2, prototypes_seed=0)
    exact_index = ExactIndex(stored, engine="postings")
    index = ApproximateIndex.build(stored, kind="postings")
    assert index.kind == "postings" and index.params == {"terms": 24, "candidates": 256} and len(index) == len(stored)
    coarse = ApproximateIndex.build(stored, kind="postings", terms=2, candidates=10)
    for queries, exclude in ((stored.rows(stored_queries), stored_queries), (fresh, None)):
        _, exact_distances = exact_search(stored, exact_index, queries, 10, exclude)
        approx_ids, approx_distances = index.search(stored, queries, 10, exclude)
        recall = recall_at_k(exact_distances, approx_distances)
        assert recall >= 0.99, f"postings recall@10 {recall:.3f} below 0.99"
        assert recall_at_k(exact_distances, coarse.search(stored, queries, 10, exclude)[1]) < 0.9
        if exclude is not None:
            assert not (approx_ids == exclude[:, None]).any()
        # Re-ranking is exact: whatever approximate search returns carries its true distance, in order.
        dense_distance = brute_force_search(stored.rows(approx_ids[0]), queries.rows([0]), 10)[1]
        np.testing.assert_allclose(np.sort(dense_distance[0]), approx_distances[0], atol=1e-9)


def test_recall_counts_ties_fairly():
    exact = np.array([[0.0, 0.0, 0.5]])
    assert recall_at_k(exact, np.array([[0.0, 0.0, 0.5]])) == 1.0
    assert recall_at_k(exact, np.array([[0.0, 0.5, 0.6]])) == pytest.approx(2 / 3)
    assert recall_at_k(exact, np.array([[0.0, np.inf, np.inf]])) == pytest.approx(1 / 3)


def test_database_search_table():
    codes = structured_synthetic_codes(3000, seed=4)
    metadata = _synthetic_metadata(len(codes))
    db = CircuitDB.from_codes({2: codes}, metadata)
    queries = codes.rows([10, 20]).to_sparse_code()
    hits = db.search(queries, layer=2, k=5)
    assert list(hits.columns[:8]) == [
        "query_position", "query_token", "rank", "distance", "circuit_id", "token", "context", "top_predictions"
    ]
    assert len(hits) == 10 and hits["rank"].tolist() == [1, 2, 3, 4, 5] * 2
    ids, distances = exact_search(codes, ExactIndex(codes), codes.rows([10, 20]), 5)
    np.testing.assert_array_equal(hits["circuit_id"].to_numpy().reshape(2, 5), ids)
    np.testing.assert_allclose(hits["distance"].to_numpy().reshape(2, 5), distances)
    first = hits.iloc[0]
    assert first["token"] == metadata["token"][first["circuit_id"]]
    assert first["context"] == mark_token(*metadata.loc[first["circuit_id"], ["context", "token_start", "token_end"]])
    assert first["top_predictions"] == " | ".join(metadata["top_predictions"][first["circuit_id"]])
    with pytest.warns(UserWarning, match="no approximate index yet"):  # built on demand
        approximate = db.search(queries, layer=2, k=5, exact=False)
    assert approximate["distance"].iloc[0] == pytest.approx(0.0, abs=1e-9)
    text = format_hits(hits)
    assert text.count("\n") == 10 and "«" in text
    figure = neighbour_heatmap(hits)
    assert np.array(figure.data[0].z).shape == (5, 2)
    with pytest.raises(CircuitDBError, match="layer 0 is not in this database"):
        db.search(queries, layer=0)
    with pytest.raises(CircuitDBError, match="size"):
        db.search(SparseCode(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), 99), layer=2)
    with pytest.raises(CircuitDBError, match="text queries"):
        db.search("hello", layer=2)


def test_mark_token_keeps_leading_space_outside():
    assert mark_token("there was a big farm", 11, 15) == "there was a «big» farm"


def test_semantic_score_separates_clustered_labels_from_shuffled():
    # Two prototype families with their own labels: neighbours share labels far above the shuffled rate.
    first = structured_synthetic_codes(800, n_prototypes=4, seed=5, replace_probability=0.2)
    second = structured_synthetic_codes(800, n_prototypes=4, seed=6, replace_probability=0.2)
    codes = CodeMatrix.concatenate([first, second])
    metadata = _synthetic_metadata(len(codes))
    metadata["category"] = ["A"] * 800 + ["B"] * 800
    db = CircuitDB.from_codes({0: codes}, metadata)
    score = db.semantic_score(0, k=10, n_queries=300, n_shuffles=5)
    assert score["score"] > 0.95
    assert 0.4 < score["baseline"] < 0.6
    # A labelling unrelated to the codes scores like the shuffled baseline.
    metadata["category"] = np.where(np.random.default_rng(0).random(len(codes)) < 0.5, "A", "B")
    unrelated = CircuitDB.from_codes({0: codes}, metadata).semantic_score(0, k=10, n_queries=300, n_shuffles=5)
    assert abs(unrelated["score"] - unrelated["baseline"]) < 0.05


def _synthetic_metadata(n_rows: int):
    import pandas as pd

    rng = np.random.default_rng(0)
    words = np.array(["dog", " cat", " Max", " he", "."])
    token_ids = rng.integers(0, len(words), n_rows)
    return pd.DataFrame(
        {
            "sequence_id": np.arange(n_rows) // 50,
            "position": np.arange(n_rows) % 50,
            "token_id": token_ids,
            "token": words[token_ids],
            "category": None,
            "context": [f"a story about{words[t]} today" for t in token_ids],
            "token_start": np.full(n_rows, 13),
            "token_end": [13 + len(words[t]) for t in token_ids],
            "top_predictions": [["x", "y", "z", "w", "v"]] * n_rows,
        }
    )


@pytest.mark.parametrize(
    "block_rows, threads, engine",
    [(37, 1, "scipy"), (64, 3, "scipy"), (1000, 2, "scipy"),
     pytest.param(1, 1, "postings", marks=pytest.mark.skipif(not postings.available(), reason="needs numba"))],
)
def test_exact_search_at_awkward_sizes_equals_brute_force(block_rows, threads, engine):
    """Row blocks that do not divide the store, a query block that does not divide the queries, queries that
    share a neuron with fewer than k rows (rows at cosine 0 fill in, smallest id first), and exclusions."""
    stored = awkward_codes(517, size=301, nnz=5, seed=5)
    uses = np.bincount(stored.indices[stored.values != 0], minlength=301)
    rare = int(np.argmin(np.where(uses > 0, uses, 10**9)))  # a neuron that few stored rows use
    assert uses[rare] < 7
    lonely = CodeMatrix(np.full((1, 5), rare), np.ones((1, 5), np.float32), 301)
    queries = CodeMatrix.concatenate([awkward_codes(23, size=301, nnz=5, seed=6), lonely, stored.rows([8, 9])])
    index = ExactIndex(stored, block_rows=block_rows, engine=engine)
    assert len(index.blocks) == (-(-517 // block_rows) if engine == "scipy" else 0)
    if engine == "postings":  # blocks of 64 rows (rounded up from 1): nine, the last one partial
        assert (index.postings.block_rows, index.postings.n_blocks) == (64, 9)
    for k in (1, 7, 33):
        ids, distances = exact_search(stored, index, queries, k, threads=threads)
        reference_ids, reference_distances = brute_force_search(stored, queries, k)
        np.testing.assert_array_equal(ids, reference_ids)
        np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)
    exclude = np.full(len(queries), -1)
    exclude[-2:] = [8, 9]
    ids, distances = exact_search(stored, index, queries, 7, exclude, threads=threads)
    for row in (len(queries) - 2, len(queries) - 1):
        reference_ids = brute_force_search(stored, queries.rows([row]), 8)[0][0]
        np.testing.assert_array_equal(ids[row], reference_ids[reference_ids != exclude[row]][:7])
