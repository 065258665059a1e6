"""The semantic score: do neighbouring circuits share a meaning? (beyond seed 000, which says they do)

An analysis over a circuit database, beside neuron usage and the UMAP embedding:

    semantic_score(db, layer=2, k=10)     # one layer: score, shuffled-label baseline, other-token score
    semantic_scores(db)                   # every layer, as a DataFrame
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from circuitlab.analysis.circuitdb.errors import CircuitDBError

CircuitDB = Any  # circuitlab.analysis.circuitdb.CircuitDB (which imports this module)


def semantic_score(
    db: CircuitDB,
    layer: int,
    k: int = 10,
    *,
    n_queries: int = 2000,
    n_shuffles: int = 20,
    exact: bool = True,
    seed: int = 0,
) -> dict:
    """How much do circuits cluster by meaning? A number for seed 000's "semantically related" claim.

    Among circuits whose token has a category label, draw up to `n_queries` (seeded) and find each one's
    k nearest other labelled circuits. `score` is the mean fraction of neighbours whose label equals the
    query's; `baseline` is the same with the labels randomly permuted over the labelled circuits (mean of
    `n_shuffles` permutations, `baseline_std` their spread), which is what label frequencies alone give.
    Identical tokens share a label trivially, so `score_other_tokens` repeats the score over neighbours
    with a different token id only (queries with none are skipped), and `same_token_fraction` says how
    many neighbours are the same token.
    """
    for option, value in (("k", k), ("n_queries", n_queries), ("n_shuffles", n_shuffles)):
        if value < 1:
            raise ValueError(f"semantic score: {option} must be at least 1, got {value}")
    layer = db.require_layer(layer)
    categories = db.metadata["category"]
    labelled = np.flatnonzero(categories.notna().to_numpy())
    if labelled.size < k + 1:
        raise CircuitDBError(
            f"semantic score needs category labels: only {labelled.size} circuits of layer {layer} have one "
            "(build the database from labelled stories, e.g. circuitlab.data's generated corpus)"
        )
    rng = np.random.default_rng(seed)
    queries = np.sort(rng.choice(labelled, min(n_queries, labelled.size), replace=False))
    neighbour_ids, _ = db.neighbours(layer, queries, k, within=labelled, exact=exact)
    codes_of, label_values = np.unique(categories.to_numpy()[labelled].astype(str), return_inverse=True)
    label = np.full(len(db), -1, dtype=np.int64)
    label[labelled] = label_values
    token_ids = db.metadata["token_id"].to_numpy()
    valid = neighbour_ids >= 0
    safe = np.maximum(neighbour_ids, 0)
    other_token = valid & (token_ids[safe] != token_ids[queries][:, None])

    def scores(labels: np.ndarray) -> tuple[float, float]:
        same = (labels[safe] == labels[queries][:, None]) & valid
        overall = np.mean(same.sum(1) / np.maximum(valid.sum(1), 1))
        has_other = other_token.any(1)
        other = (same & other_token).sum(1)[has_other] / other_token.sum(1)[has_other]
        return float(overall), float(other.mean()) if other.size else float("nan")

    score, score_other = scores(label)
    shuffled = []
    for _ in range(n_shuffles):
        permuted = label.copy()
        permuted[labelled] = rng.permutation(label[labelled])
        shuffled.append(scores(permuted))
    shuffled = np.array(shuffled)
    return {
        "layer": layer,
        "k": k,
        "n_queries": int(queries.size),
        "n_labels": int(codes_of.size),
        "score": score,
        "baseline": float(shuffled[:, 0].mean()),
        "baseline_std": float(shuffled[:, 0].std()),
        "score_other_tokens": score_other,
        "baseline_other_tokens": float(np.nanmean(shuffled[:, 1])),
        "same_token_fraction": float(np.mean((~other_token & valid).sum(1) / np.maximum(valid.sum(1), 1))),
    }

def semantic_scores(db: CircuitDB, layers: Sequence[int] | None = None, **options: Any):
    """`semantic_score` of several layers as a DataFrame (one row per layer)."""
    import pandas as pd

    return pd.DataFrame([semantic_score(db, layer, **options) for layer in (layers or db.layers)])
