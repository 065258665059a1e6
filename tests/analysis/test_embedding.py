"""UMAP maps of circuits: point selection, the database kNN graph, labels, caching; one slow real-UMAP test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from circuitlab.analysis.circuitdb import CircuitDB
from circuitlab.analysis.codeindex import CodeMatrix, brute_force_search, structured_synthetic_codes
from circuitlab.analysis.embedding import (
    database_knn,
    embed,
    embed_layer,
    embedding_figure,
    frequent_token_circuits,
    knn_speedup,
)


def clustered_db(n_per_token: int = 60, seed: int = 0) -> CircuitDB:
    """Five tokens, each with codes from its own two prototypes; token "rare" occurs twice."""
    parts, tokens = [], []
    for token_id in range(5):
        parts.append(
            structured_synthetic_codes(
                n_per_token, channels=2, k=4, neurons=64, n_prototypes=2, seed=seed + token_id,
                replace_probability=0.15, duplicate_fraction=0.0,
            )
        )
        tokens += [token_id] * n_per_token
    parts.append(structured_synthetic_codes(2, channels=2, k=4, neurons=64, seed=50))
    tokens += [5, 5]
    codes = CodeMatrix.concatenate(parts)
    names = np.array(["dog", "cat", "Max", "Lily", ".", "rare"])
    categories = np.array(["ANIMAL", "ANIMAL", "NAME", "NAME", "PUNCT", "OTHER"])
    token_ids = np.array(tokens)
    metadata = pd.DataFrame(
        {
            "token_id": token_ids,
            "token": names[token_ids],
            "category": categories[token_ids],
            "context": [f"the {names[t]} ran" for t in token_ids],
            "token_start": 4,
            "token_end": [4 + len(names[t]) for t in token_ids],
        }
    )
    return CircuitDB.from_codes({1: codes}, metadata)


def test_frequent_token_circuits_takes_every_occurrence_of_the_top_tokens():
    db = clustered_db()
    chosen = frequent_token_circuits(db, n_tokens=5)
    assert chosen.size == 300 and not np.isin(chosen, [300, 301]).any()
    assert frequent_token_circuits(db, n_tokens=6).size == 302
    subsample = frequent_token_circuits(db, n_tokens=5, max_points=100, seed=1)
    assert subsample.size == 100 and np.isin(subsample, chosen).all() and (np.diff(subsample) > 0).all()


def test_database_knn_is_the_exact_graph_in_umap_layout():
    db = clustered_db()
    circuit_ids = frequent_token_circuits(db, n_tokens=5)
    indices, distances = database_knn(db, 1, circuit_ids, n_neighbors=8)
    assert indices.shape == distances.shape == (300, 8)
    assert (indices[:, 0] == np.arange(300)).all() and (distances[:, 0] == 0).all()
    subset = db.codes[1].rows(circuit_ids)
    reference_ids, reference_distances = brute_force_search(subset, subset, 9)
    for point in (0, 123, 299):
        others = reference_ids[point] != point
        np.testing.assert_allclose(distances[point, 1:], reference_distances[point][others][:7], atol=1e-6)
    approximate, approximate_distances = database_knn(db, 1, circuit_ids, n_neighbors=8, exact=False)
    np.testing.assert_allclose(approximate_distances, distances, atol=1e-6)


def fake_reducer(codes_csr, knn=None):
    """A deterministic stand-in for UMAP (the first two dense coordinates' sums) that checks its inputs."""
    assert knn is not None and knn[0].shape[0] == codes_csr.shape[0]
    dense = codes_csr.toarray()
    return np.stack([dense[:, :64].sum(1), dense[:, 64:].sum(1)], axis=1)


def test_embed_layer_rows_carry_their_labels(tmp_path):
    db = clustered_db()
    coordinates = embed_layer(db, 1, n_tokens=5, reducer=fake_reducer, cache_dir=tmp_path)
    assert coordinates.shape[0] == 300
    assert {"circuit_id", "layer", "x", "y", "token", "category", "context"} <= set(coordinates.columns)
    expected = fake_reducer(db.codes[1].rows(coordinates["circuit_id"]).to_csr(), knn=(np.zeros((300, 1)), None))
    np.testing.assert_allclose(coordinates[["x", "y"]].to_numpy(), expected, rtol=1e-6)
    for row in coordinates.sample(20, random_state=0).itertuples():
        assert row.token == db.metadata["token"][row.circuit_id]
        assert row.category == db.metadata["category"][row.circuit_id]
        assert row.context == f"the «{row.token}» ran"
    figure = embedding_figure(coordinates, color="category")
    assert sorted(trace.name for trace in figure.data) == ["ANIMAL", "NAME", "PUNCT"]


def test_embeddings_are_cached_on_disk(tmp_path, monkeypatch):
    db = clustered_db()
    calls = []

    def counting_reducer(codes_csr, knn=None):
        calls.append(1)
        return np.zeros((codes_csr.shape[0], 2), np.float32) + len(calls)

    # A custom reducer is never cached (its identity cannot be hashed reliably); the UMAP path is, keyed
    # by content: the cache key changes with the layer's parameters and the database's codes.
    embed_layer(db, 1, n_tokens=5, reducer=counting_reducer, cache_dir=tmp_path)
    embed_layer(db, 1, n_tokens=5, reducer=counting_reducer, cache_dir=tmp_path)
    assert len(calls) == 2 and not list(tmp_path.iterdir())
    from circuitlab.analysis import embedding as embedding_module

    monkeypatch.setattr(embedding_module, "umap_reducer", lambda *args, **kwargs: counting_reducer)
    first = embed_layer(db, 1, n_tokens=5, cache_dir=tmp_path)
    second = embed_layer(db, 1, n_tokens=5, cache_dir=tmp_path)
    other_parameters = embed_layer(db, 1, n_tokens=5, n_neighbors=10, cache_dir=tmp_path)
    assert len(calls) == 4  # the second call came from the cache
    pd.testing.assert_frame_equal(first, second)
    assert (other_parameters["x"] == 4).all()
    assert len(list(tmp_path.glob("*.parquet"))) == 2


@pytest.mark.slow
def test_real_umap_separates_clusters_and_reports_speedup(tmp_path):
    db = clustered_db(n_per_token=80)
    coordinates = embed(db, [1], n_tokens=5, n_neighbors=10, cache_dir=tmp_path)
    assert coordinates.shape[0] == 400 and np.isfinite(coordinates[["x", "y"]].to_numpy()).all()
    # A point's nearest neighbours on the map are its own token's points (a token is a pair of prototypes, so
    # its points may sit in two groups: neighbourhoods, not mean distances, are what the map keeps)
    points = coordinates[["x", "y"]].to_numpy()
    tokens = coordinates["token"].to_numpy()
    gaps = np.linalg.norm(points[:, None] - points[None, :], axis=-1)
    np.fill_diagonal(gaps, np.inf)
    nearest = np.argsort(gaps, axis=1)[:, :5]
    assert (tokens[nearest] == tokens[:, None]).mean() >= 0.95
    timing = knn_speedup(db, 1, n_tokens=5, n_neighbors=10, warm_up=True)
    assert timing["points"] == 400
    # the speed-up is the ratio of the two timings it reports (a timing is shown by the benchmark, not tested)
    total = timing["database_knn_seconds"] + timing["umap_with_database_knn_seconds"]
    assert timing["speedup"] == pytest.approx(timing["umap_own_knn_seconds"] / total, rel=1e-9)


def test_umap_layout_is_repeatable_and_quiet_on_a_graph_in_pieces(tmp_path):
    import warnings

    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    db = clustered_db(n_per_token=40)
    ids = frequent_token_circuits(db, 5)
    neighbours, _ = database_knn(db, 1, ids, 10)
    rows = np.repeat(np.arange(ids.size), neighbours.shape[1])
    graph = csr_matrix((np.ones(rows.size), (rows, neighbours.ravel())), shape=(ids.size, ids.size))
    assert connected_components(graph, directed=False)[0] > 1  # the case where UMAP's spectral start fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = embed(db, [1], n_tokens=5, n_neighbors=10, use_cache=False)
    assert not [w for w in caught if "Spectral initialisation failed" in str(w.message)]
    second = embed(db, [1], n_tokens=5, n_neighbors=10, use_cache=False)
    assert np.array_equal(first[["x", "y"]].to_numpy(), second[["x", "y"]].to_numpy())  # seeded, repeatable
