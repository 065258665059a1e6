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


def skewed_code_chunks(
    n_rows: int,
    *,
    popularity_spread: float,
    log_mean: float,
    log_std: float,
    negative: float,
    channels: int = 8,
    k: int = 8,
    neurons: int = 1024,
    seed: int = 0,
    chunk_rows: int = 1 << 16,
    first_chunk: int = 0,
    device="cpu",
    layout_seed: int | None = None,
):
    """Random codes of the sgatlin shape with skewed unit frequencies, as (indices int32, values float32) torch
    chunks of `chunk_rows` rows on `device`.

    Every code holds `k` distinct neurons in each of `channels` channels of `neurons`. A neuron's popularity is
    log-normal: the neuron of rank r (ranks shuffled over each channel's neurons, seeded) is drawn with
    probability proportional to exp(popularity_spread * z_r), z_r the standard normal quantile at
    1 - (r - 1/2) / neurons; the ranks are shuffled by `layout_seed` (default `seed`): draw queries with the
    stored set's layout_seed and another seed, and they favour the same neurons as the stored codes, as a real
    model's queries do. Values have a log-normal(log_mean, log_std) magnitude and are negative with
    probability `negative`. A duplicate within a channel is drawn again until the k differ. Chunk c comes from
    its own seed, so rows [c * chunk_rows, ...) are the same whichever process draws them (`first_chunk`
    starts there): the ranks of a distributed benchmark draw disjoint parts of one set.
    """
    import torch

    device = torch.device(device)
    layout = torch.Generator(device="cpu").manual_seed(seed if layout_seed is None else layout_seed)
    neuron_of_rank = torch.stack([torch.randperm(neurons, generator=layout) for _ in range(channels)]).to(device)
    quantiles = torch.special.ndtri(1 - (torch.arange(1, neurons + 1, dtype=torch.float64) - 0.5) / neurons)
    weights = torch.exp(popularity_spread * quantiles)
    cumulative = (weights.cumsum(0) / weights.sum()).to(device)
    offsets = (torch.arange(channels, device=device) * neurons)[None, :, None]
    n_chunks = -(-n_rows // chunk_rows)
    for chunk in range(first_chunk, n_chunks):
        rows = min(chunk_rows, n_rows - chunk * chunk_rows)
        draw = torch.Generator(device=device).manual_seed(seed * 1_000_003 + chunk + 1)
        rank = torch.searchsorted(cumulative, torch.rand((rows, channels, k), generator=draw, device=device,
                                                         dtype=torch.float64)).clamp_max(neurons - 1)
        while True:
            ordered, order = rank.sort(dim=2)
            repeated = torch.zeros_like(rank, dtype=torch.bool)
            repeated.scatter_(2, order[:, :, 1:], ordered[:, :, 1:] == ordered[:, :, :-1])
            count = int(repeated.sum())
            if count == 0:
                break
            redraw = torch.rand(count, generator=draw, device=device, dtype=torch.float64)
            rank[repeated] = torch.searchsorted(cumulative, redraw).clamp_max(neurons - 1)
        channel = torch.arange(channels, device=device)[None, :, None].expand_as(rank)
        indices = (neuron_of_rank[channel, rank] + offsets).reshape(rows, channels * k)
        magnitude = torch.exp(log_mean + log_std * torch.randn((rows, channels * k), generator=draw, device=device))
        sign = torch.where(torch.rand((rows, channels * k), generator=draw, device=device) < negative, -1.0, 1.0)
        indices, order = indices.sort(dim=1)
        yield indices.to(torch.int32), (magnitude * sign).gather(1, order).float()
