"""The per-unit measurements behind seed 000's rows and their nulls, against hand computations on tiny inputs:
a stand-in database whose neighbours are fixed by hand, and a constructed patching table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from circuitlab.claims.nulls import bootstrap_pairs, enrichment_per_source, nie_cells, semantic_per_query


class TinyDB:
    """Six circuits; each one's neighbours listed by hand (the `within` restriction is honoured)."""

    def __init__(self, categories, tokens, neighbours):
        self.metadata = pd.DataFrame({"category": categories, "token_id": tokens})
        self._neighbours = neighbours

    def __len__(self) -> int:
        return len(self.metadata)

    def neighbours(self, layer, ids, k, within=None):
        allowed = set(np.asarray(within).tolist()) if within is not None else None
        rows = []
        for i in np.asarray(ids):
            found = [j for j in self._neighbours[int(i)] if allowed is None or j in allowed][:k]
            rows.append(found + [-1] * (k - len(found)))
        return np.array(rows), None


def _db() -> TinyDB:
    # circuits 0-2 are animals (tokens 10, 11, 12), 3-5 names (tokens 20, 21, 20)
    return TinyDB(["ANIMAL"] * 3 + ["NAME"] * 3, [10, 11, 12, 20, 21, 20],
                  {0: [1, 3], 1: [0, 2], 2: [1, 5], 3: [5, 4], 4: [3, 0], 5: [3, 1]})


def test_semantic_per_query_by_hand():
    score, baseline = semantic_per_query(_db(), 0, n_queries=6, n_shuffles=50, k=2)
    # other-token neighbours sharing the category: 0 -> {1 yes, 3 no}: 1/2; 1 -> {0, 2}: 1; 2 -> {1 yes, 5 no}: 1/2;
    # 3 -> {5 same token: left out, 4 yes}: 1; 4 -> {3 yes, 0 no}: 1/2; 5 -> {3 same token, 1 no}: 0
    assert score.tolist() == [0.5, 1.0, 0.5, 1.0, 0.5, 0.0]
    assert baseline.shape == (6,) and 0.2 < baseline.mean() < 0.6  # permuted labels: about chance
    shuffled, _ = semantic_per_query(_db(), 0, n_queries=6, n_shuffles=1, k=2, shuffle_queries=True)
    assert shuffled.shape == (6,)


def test_enrichment_per_source_by_hand():
    shares, chance = enrichment_per_source(_db(), 0, "NAME", "ANIMAL", n_points=6, k=2)
    # names 3, 4, 5: animals among {5, 4} 0, {3, 0} 1/2, {3, 1} 1/2; animals are half the sample
    assert shares.tolist() == [0.0, 0.5, 0.5] and chance == 0.5
    empty, _ = enrichment_per_source(_db(), 0, "PRONOUN", "ANIMAL", n_points=6)
    assert empty.size == 0


def test_pair_bootstrap_of_nie_cells_by_hand():
    rows = []
    for pair, (noun, final) in enumerate([(0.4, 0.1), (0.6, 0.3), (0.5, 0.2), (0.5, 0.2)]):
        rows += [dict(pair=pair, layer=0, position="noun", nie=noun, excluded=False),
                 dict(pair=pair, layer=0, position="final", nie=final, excluded=False)]
    rows.append(dict(pair=4, layer=0, position="noun", nie=9.0, excluded=True))  # excluded: left out
    rows.append(dict(pair=4, layer=0, position="final", nie=9.0, excluded=True))
    table = pd.DataFrame(rows)
    cells = nie_cells(table)
    assert cells[(0, "noun")] == pytest.approx(0.5) and cells[(0, "final")] == pytest.approx(0.2)
    estimate = bootstrap_pairs(table, lambda c: c[(0, "noun")] - c[(0, "final")], n_resamples=200)
    # every pair's difference is exactly 0.3, so every resample gives 0.3
    assert estimate.value == pytest.approx(0.3) and estimate.low == pytest.approx(0.3) and estimate.high == pytest.approx(0.3)


def test_embedding_neighbours_by_hand():
    from circuitlab.claims.nulls import EmbeddingNeighbours

    # tokens 0, 1, 2 with embeddings along x, near x, along y; circuits: tokens [0, 1, 2, 0]
    embedding = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    metadata = pd.DataFrame({"token_id": [0, 1, 2, 0], "category": ["A", "A", "B", "A"]})
    db = EmbeddingNeighbours(metadata, embedding, [0, 1])
    ids, distance = db.neighbours(1, [0, 2], k=3)
    # circuit 0 (token 0): other-token circuits 1 (cos 0.994) then 2 (cos 0); its copy (circuit 3) is left out
    assert ids[0].tolist() == [1, 2, -1]
    assert distance[0, 0] == pytest.approx(1 - 0.9 / np.hypot(0.9, 0.1), abs=1e-6)
    # circuit 2 (token 2): circuit 1 (cos 0.110) before circuits 0 and 3 (cos 0)
    assert ids[1].tolist() == [1, 0, 3]
    within, _ = db.neighbours(0, [0], k=2, within=[2, 3])
    assert within.tolist() == [[2, -1]]
    score, _ = semantic_per_query(db, 1, n_queries=4, n_shuffles=2, k=1)
    # nearest other-token circuit: 0 -> 1 (A, A), 1 -> 0 (A, A), 2 -> 1 (B, A), 3 -> 1 (A, A)
    assert sorted(score.tolist()) == [0.0, 1.0, 1.0, 1.0]
