"""Whether a sparse code uses its dictionary: the diagnostics of the parity issue, for a parity bottleneck or a
sparse autoencoder alike (anything with k feature ids per token out of m).

From the count c_u of tokens whose code holds feature u, over N tokens:
- effective features: exp of the entropy of p_u = c_u / sum c (m when every feature is used equally, 1 when
  one feature carries every use);
- top feature share: max_u c_u / N, the share of tokens that use the most used feature; `over_10_percent`:
  features used by more than 10% of tokens;
- dead share: the share of the m features no token uses;
- firing-frequency histogram: how many features fire on a share c_u / N of tokens in each decade (log scale),
  dead features counted apart.
From the writes x (the FFN writes a bottleneck codes): the participation ratio (sum lambda)^2 / sum lambda^2 of
their covariance's eigenvalues, the number of directions the writes effectively span.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

HISTOGRAM_DECADES = 7  # firing frequencies from 1e-7 to 1, one bin a decade


def usage_figures(counts: Tensor, n_tokens: int) -> dict:
    """The usage diagnostics of per-feature token counts (see the module docstring)."""
    counts = counts.double().cpu()
    m = counts.numel()
    p = counts / counts.sum().clamp_min(1.0)
    used = p > 0
    entropy = float(-(p[used] * p[used].log()).sum())
    frequency = counts / max(n_tokens, 1)
    edges = [10.0 ** (-HISTOGRAM_DECADES + i) for i in range(HISTOGRAM_DECADES + 1)]
    live = frequency[frequency > 0].numpy()
    histogram = np.histogram(np.clip(live, edges[0], edges[-1]), bins=edges)[0].tolist()
    return {
        "features": m,
        "distinct_features": int(used.sum()),
        "effective_features": math.exp(entropy),
        "top_feature_share": float(frequency.max()),
        "over_10_percent": int((frequency > 0.1).sum()),
        "dead_share": float((~used).double().mean()),
        "firing_histogram": {"edges": edges, "counts": histogram, "dead": int((~used).sum())},
    }


class WriteMoments:
    """Running sums of writes x (and x x^T) over tokens: their mean and their covariance's participation ratio."""

    def __init__(self, d: int):
        self.n = 0
        self.total = torch.zeros(d, dtype=torch.float64)
        self.outer = torch.zeros(d, d, dtype=torch.float64)

    def add(self, x_NxD: Tensor) -> None:
        x = x_NxD.reshape(-1, x_NxD.shape[-1]).double().cpu()
        self.n += x.shape[0]
        self.total += x.sum(0)
        self.outer += x.T @ x

    @property
    def mean(self) -> Tensor:
        return self.total / max(self.n, 1)

    def spread(self) -> float:
        """sum over tokens of ||x - mean||^2 (the writes' total variation around their mean)."""
        return float(self.outer.trace() - self.n * self.mean.pow(2).sum())

    def energy(self) -> float:
        """sum over tokens of ||x||^2."""
        return float(self.outer.trace())

    def participation_ratio(self) -> float:
        mean = self.mean
        covariance = self.outer / max(self.n, 1) - torch.outer(mean, mean)
        eigenvalues = torch.linalg.eigvalsh(covariance).clamp_min(0.0)
        return float(eigenvalues.sum() ** 2 / eigenvalues.pow(2).sum().clamp_min(1e-300))
