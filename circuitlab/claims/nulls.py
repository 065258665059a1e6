"""The per-unit measurements seed 000's rows bootstrap (query circuits, source circuits, fact pairs), and the
null models they are read against: the dense gelu-stories model (its MLP activations as the code, the
circuit database's natural code for a dense FFN), a randomly initialised sgatlin model of the shipped design,
and shuffled labels.

semantic lift (seed 000, Fig. 5): for each query circuit with a category label, the share of its k nearest
circuits of another token that share its category, over the same share with the labels permuted (mean of the
shuffles); the lift is the ratio of the sums over queries, bootstrapped over the queries. A lift of 1 is what
label frequencies alone give.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from circuitlab.stats import N_RESAMPLES, Estimate, bootstrap_ratio


def semantic_per_query(db: Any, layer: int, n_queries: int, n_shuffles: int, k: int = 10,
                       seed: int = 0, shuffle_queries: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the share of other-token neighbours in its category, and the mean of that share under
    `n_shuffles` label permutations. `shuffle_queries` permutes the labels before scoring too (the
    shuffled-label null: its lift is 1 up to noise)."""
    categories = db.metadata["category"]
    labelled = np.flatnonzero(categories.notna().to_numpy())
    rng = np.random.default_rng(seed)
    queries = np.sort(rng.choice(labelled, min(n_queries, labelled.size), replace=False))
    neighbour_ids, _ = db.neighbours(layer, queries, k, within=labelled)
    _, values = np.unique(categories.to_numpy()[labelled].astype(str), return_inverse=True)
    label = np.full(len(db), -1, dtype=np.int64)
    label[labelled] = values
    if shuffle_queries:
        label[labelled] = rng.permutation(label[labelled])
    tokens = db.metadata["token_id"].to_numpy()
    valid = neighbour_ids >= 0
    safe = np.maximum(neighbour_ids, 0)
    other = valid & (tokens[safe] != tokens[queries][:, None])
    keep = other.any(1)

    def share(labels: np.ndarray) -> np.ndarray:
        same = (labels[safe] == labels[queries][:, None]) & other
        return same.sum(1)[keep] / other.sum(1)[keep]

    shuffled = []
    for _ in range(n_shuffles):
        permuted = label.copy()
        permuted[labelled] = rng.permutation(label[labelled])
        shuffled.append(share(permuted))
    return share(label), np.mean(shuffled, axis=0)


def semantic_lift(db: Any, layer: int, n_queries: int, n_shuffles: int, **options: Any) -> Estimate:
    score, baseline = semantic_per_query(db, layer, n_queries, n_shuffles, **options)
    return bootstrap_ratio(score, baseline)


def enrichment_per_source(db: Any, layer: int, source: str, target: str, n_points: int, k: int = 10,
                          shuffle: bool = False) -> tuple[np.ndarray, float]:
    """Per `source`-category circuit of a seeded sample: the share of its k nearest circuits (within the
    sample) in the `target` category; and the target's share of the sample (chance)."""
    labels = db.metadata["category"].fillna("(none)").to_numpy()
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(len(db), min(len(db), n_points), replace=False))
    if shuffle:
        labels = labels.copy()
        labels[sample] = rng.permutation(labels[sample])
    sources = sample[labels[sample] == source]
    chance = float(np.mean(labels[sample] == target))
    if sources.size == 0 or chance == 0:
        return np.array([]), chance
    neighbour_ids, _ = db.neighbours(layer, sources, k, within=sample)
    valid = neighbour_ids >= 0
    hit = (labels[np.maximum(neighbour_ids, 0)] == target) & valid
    return hit.sum(1) / np.maximum(valid.sum(1), 1), chance


def enrichment(db: Any, layers: list[int], source: str, target: str, n_points: int, shuffle: bool = False) -> Estimate:
    """Mean over `layers` of the per-source shares over chance, bootstrapped over the source circuits (the same
    resample in every layer)."""
    per_layer = [enrichment_per_source(db, layer, source, target, n_points, shuffle=shuffle) for layer in layers]
    per_layer = [(shares, chance) for shares, chance in per_layer if shares.size and chance > 0]
    if not per_layer:
        return Estimate(float("nan"))
    lifts = np.mean([shares / chance for shares, chance in per_layer], axis=0)
    return bootstrap_ratio(lifts, np.ones_like(lifts))


def pair_matrix(table: Any) -> tuple[np.ndarray, list[tuple[Any, str]]]:
    """nie_grid's rows as a [pairs, cells] array of NIE (NaN where excluded or undefined) and the cells' keys."""
    if "excluded" in table.columns:
        table = table.assign(nie=table["nie"].where(~table["excluded"].astype(bool)))
    wide = table.pivot_table(index="pair", columns=["layer", "position"], values="nie", aggfunc="mean", dropna=False)
    return wide.to_numpy(dtype=float), list(wide.columns)


def bootstrap_pairs(table: Any, statistic: Callable[[dict[tuple[Any, str], float]], float],
                    n_resamples: int = N_RESAMPLES, seed: int = 0) -> Estimate:
    """`statistic` of the mean NIE per (layer, position) cell, with the percentile interval of resampling the
    fact pairs."""
    values, cells = pair_matrix(table)

    def cell_means(rows: np.ndarray) -> dict[tuple[Any, str], float]:
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                means = np.nanmean(values[rows], axis=0)
        return {cell: float(mean) for cell, mean in zip(cells, means)}

    value = statistic(cell_means(np.arange(values.shape[0])))
    if values.shape[0] < 2:
        return Estimate(value)
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(cell_means(rng.integers(0, values.shape[0], values.shape[0])))
                      for _ in range(n_resamples)], dtype=float)
    draws = draws[np.isfinite(draws)]
    if draws.size < n_resamples // 2:
        return Estimate(value)
    low, high = np.percentile(draws, [2.5, 97.5])
    return Estimate(value, float(low), float(high))


def nie_cells(table: Any) -> dict[tuple[Any, str], float]:
    """Mean NIE over pairs per (layer, position) cell, leaving out excluded pairs and NaN."""
    if "excluded" in table.columns:
        table = table[~table["excluded"].astype(bool)]
    table = table.dropna(subset=["nie"])
    return {(layer, position): float(v) for (layer, position), v in table.groupby(["layer", "position"])["nie"].mean().items()}


class EmbeddingNeighbours:
    """A stand-in circuit database for the raw-token-embedding null: every circuit is its token's row of the
    embedding matrix, neighbours by cosine similarity among the circuits of other tokens (a token's embedding is
    the same at every position, so its own copies would fill every neighbour list). It answers what
    `semantic_per_query` and `enrichment_per_source` ask of a CircuitDB: `metadata`, `len`, `layers` (those of the
    database it mirrors; the embedding is the same in each) and `neighbours`."""

    def __init__(self, metadata: Any, embedding: np.ndarray, layers: list[int]):
        self.metadata = metadata
        self.layers = list(layers)
        tokens = metadata["token_id"].to_numpy()
        vectors = np.asarray(embedding, dtype=np.float32)[tokens]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self._unit = vectors / np.where(norms > 0, norms, 1.0)
        self._tokens = tokens

    def __len__(self) -> int:
        return len(self.metadata)

    def neighbours(self, layer: int, circuit_ids: Any, k: int = 10, *, within: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids [Q, k] padded with -1, cosine distances [Q, k]) of the k nearest circuits of other tokens."""
        ids = np.asarray(circuit_ids, dtype=np.int64)
        pool = np.arange(len(self)) if within is None else np.asarray(within, dtype=np.int64)
        found = np.full((ids.size, k), -1, dtype=np.int64)
        distance = np.full((ids.size, k), np.inf, dtype=np.float32)
        for start in range(0, ids.size, 256):
            chunk = ids[start:start + 256]
            similarity = self._unit[chunk] @ self._unit[pool].T
            similarity[self._tokens[chunk][:, None] == self._tokens[pool][None, :]] = -np.inf
            take = min(k, pool.size)
            order = np.argsort(-similarity, axis=1, kind="stable")[:, :take]
            best = np.take_along_axis(similarity, order, axis=1)
            valid = np.isfinite(best)
            found[start:start + chunk.size, :take] = np.where(valid, pool[order], -1)
            distance[start:start + chunk.size, :take] = np.where(valid, 1 - best, np.inf)
        return found, distance
