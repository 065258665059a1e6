"""Intervals for the numbers verdicts rest on: percentile bootstrap over the units a measurement is made of
(stories, pairs, tokens), and the spread over training seeds.

A loss in nats/token is a ratio of sums (the negative log-likelihood of all tokens over their count), so it
is resampled by units and recomputed as a ratio, never averaged per unit: a long story weighs as many tokens
as it has. Every interval is the 2.5th and 97.5th percentile of `n_resamples` resamples drawn with a fixed
seed, so the same data give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 2000


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval (None when it has none: a single unit, or nothing resampled)."""

    value: float
    low: float | None = None
    high: float | None = None

    @property
    def ci95(self) -> list[float] | None:
        return None if self.low is None else [self.low, self.high]

    def excludes(self, threshold: float) -> bool:
        """Whether the whole interval lies on one side of `threshold`."""
        return self.low is not None and (self.low > threshold or self.high < threshold)

    def text(self, digits: int = 3) -> str:
        if self.low is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _indices(n_units: int, n_resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_units, size=(n_resamples, n_units))


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], n_resamples: int = N_RESAMPLES,
                    seed: int = 0) -> Estimate:
    """sum(numerators) / sum(denominators) with the percentile interval of resampling the units."""
    top, bottom = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if top.shape != bottom.shape or top.ndim != 1 or top.size == 0:
        raise ValueError(f"need two equal non-empty 1-d arrays, got shapes {top.shape} and {bottom.shape}")
    value = float(top.sum() / bottom.sum())
    if top.size < 2:
        return Estimate(value)
    picked = _indices(top.size, n_resamples, seed)
    ratios = top[picked].sum(axis=1) / bottom[picked].sum(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return Estimate(value, float(low), float(high))


def bootstrap_mean(values: Sequence[float], n_resamples: int = N_RESAMPLES, seed: int = 0) -> Estimate:
    """The mean of per-unit values with the percentile interval of resampling the units."""
    values = np.asarray(values, dtype=np.float64)
    return bootstrap_ratio(values, np.ones_like(values), n_resamples, seed)


def bootstrap_difference(a_top: Sequence[float], a_bottom: Sequence[float], b_top: Sequence[float],
                         b_bottom: Sequence[float], n_resamples: int = N_RESAMPLES, seed: int = 0) -> Estimate:
    """ratio(a) - ratio(b) measured on the same units (paired: one resample of the units serves both)."""
    arrays = [np.asarray(x, dtype=np.float64) for x in (a_top, a_bottom, b_top, b_bottom)]
    if len({x.shape for x in arrays}) != 1 or arrays[0].ndim != 1 or arrays[0].size == 0:
        raise ValueError("a paired difference needs four equal non-empty 1-d arrays (the same units)")
    at, ab, bt, bb = arrays
    value = float(at.sum() / ab.sum() - bt.sum() / bb.sum())
    if at.size < 2:
        return Estimate(value)
    picked = _indices(at.size, n_resamples, seed)
    diffs = at[picked].sum(1) / ab[picked].sum(1) - bt[picked].sum(1) / bb[picked].sum(1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return Estimate(value, float(low), float(high))


def seed_spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation, min, max and count of one number over training seeds."""
    values = np.asarray(values, dtype=np.float64)
    return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
            "min": float(values.min()), "max": float(values.max()), "n": int(values.size)}


def binomial_interval(successes: int, trials: int) -> Estimate:
    """successes / trials with the exact (Clopper-Pearson) 95% interval of a binomial proportion."""
    from scipy.stats import beta

    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes} of {trials}")
    low = 0.0 if successes == 0 else float(beta.ppf(0.025, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(0.975, successes + 1, trials - successes))
    return Estimate(successes / trials, low, high)


def bootstrap_pairs_over_seeds(groups: Sequence[Sequence[float]], n_resamples: int = N_RESAMPLES,
                               seed: int = 0) -> Estimate:
    """The mean of per-unit values pooled over training seeds (one list per seed), resampling the seeds and,
    within each drawn seed, its units: the interval covers both the data and the seed-to-seed spread."""
    arrays = [np.asarray(group, dtype=np.float64) for group in groups if len(group)]
    if not arrays:
        raise ValueError("need at least one non-empty group")
    value = float(np.mean([a.mean() for a in arrays]))
    if len(arrays) == 1 and arrays[0].size < 2:
        return Estimate(value)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for index in range(n_resamples):
        picked = rng.integers(0, len(arrays), size=len(arrays))
        means[index] = np.mean([arrays[i][rng.integers(0, arrays[i].size, arrays[i].size)].mean() for i in picked])
    low, high = np.percentile(means, [2.5, 97.5])
    return Estimate(value, float(low), float(high))
