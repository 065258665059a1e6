"""Structured synthetic codes of the sgatlin shape, for the search tests and benchmarks."""

from __future__ import annotations

import numpy as np

from circuitlab.analysis.codeindex.matrix import CodeMatrix


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
