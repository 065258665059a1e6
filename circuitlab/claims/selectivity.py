"""Seed 002's regimes read against a pressure-free control, so that SELECTIVE discriminates.

Under seed 002's thresholds (circuitlab.analysis.legibility: SELECTIVE = variance >= 0.003 and crispness > 0.5)
almost any sigmoid channel of a trained model is SELECTIVE. The pressure-free control shows it: the MLP
pre-activations of the dense gelu-stories model, standardised per unit over the held-out tokens (z) and passed
through sigmoid(4 z), are bounded channels that no pressure ever shaped, and a standard-normal z already sits
within 0.1 of a rail on 58% of tokens (|4 z| > ln 9). The control is measured by the same per-channel code
(`channel_statistics`) as the legible model's channels.

The discriminating reading: a channel is SELECTIVE beyond the null when it is not CONSTANT (variance >= 0.003)
and its crispness exceeds the 95th percentile of the control's crispness, so the control itself scores about 5%
by construction. Sparse detectors (operand channels ON for 1-5% of tokens: decisive, and rare enough to name)
are counted apart, against the control's share. Shares are over channels, with their exact binomial interval.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from circuitlab.stats import Estimate, binomial_interval

CONTROL_GAIN = 4.0  # sigmoid(4 z): the pressure-free control's squashing
NULL_QUANTILE = 0.95
SPARSE_ON = (0.01, 0.05)  # ON-fraction of a sparse detector (bounds included; the sweep's histogram bin)
CONTROL = "pressure-free control (gelu-stories MLP pre-activations, sigmoid(4z))"


def control_values(pre_NxF: torch.Tensor, gain: float = CONTROL_GAIN) -> torch.Tensor:
    """sigmoid(gain * z) of [tokens, units] pre-activations, z standardised per unit over the tokens (population
    standard deviation; a unit that never varies gets z = 0)."""
    pre = pre_NxF.to(torch.float64)
    std = pre.std(0, unbiased=False)
    z = (pre - pre.mean(0)) / torch.where(std > 0, std, torch.ones_like(std))
    return torch.sigmoid(gain * z)


def pressure_free_stats(model: Any, tokens: torch.Tensor, batch_size: int = 8) -> Any:
    """Per MLP unit of every layer of a dense model: the legibility statistics (mean, variance, crispness,
    on_fraction, alive, regime, as `channel_statistics`) of its pre-activation through `control_values`, over
    the [sequences, pos] `tokens`; a `layer` column says where each unit sits."""
    import pandas as pd

    from circuitlab.analysis.legibility import channel_statistics

    hooks = [name for name in model.hook_dict if name.endswith("mlp.hook_pre")]
    if not hooks:
        raise ValueError("the pressure-free control needs MLP pre-activations (blocks.<l>.mlp.hook_pre)")
    collected: dict[str, list[torch.Tensor]] = {name: [] for name in hooks}
    with torch.no_grad():
        for batch in tokens.split(batch_size):
            _, cache = model.run_with_cache(batch.to(model.W_E.device), names_filter=lambda name: name in collected)
            for name in hooks:
                collected[name].append(cache[name].reshape(-1, cache[name].shape[-1]).float().cpu())
    tables = []
    for name in hooks:
        table = channel_statistics(control_values(torch.cat(collected[name])))
        tables.append(table.assign(layer=int(name.split(".")[1])))
    return pd.concat(tables, ignore_index=True)


def crispness_cut(control: Any, quantile: float = NULL_QUANTILE) -> float:
    """The control's `quantile` of per-channel crispness: the crispness a channel must exceed to count as
    SELECTIVE beyond the null."""
    return float(np.quantile(control["crispness"].to_numpy(dtype=float), quantile))


def selective_beyond(stats: Any, cut: float) -> np.ndarray:
    """Per channel: not CONSTANT (variance >= the regime's threshold) and crispness above `cut`."""
    from circuitlab.analysis.legibility import CONSTANT_VARIANCE

    return (stats["variance"].to_numpy(dtype=float) >= CONSTANT_VARIANCE) & (stats["crispness"].to_numpy(dtype=float) > cut)


def sparse_detectors(stats: Any) -> np.ndarray:
    """Per channel: ON for SPARSE_ON of the tokens (a decisive, rarely firing detector)."""
    on = stats["on_fraction"].to_numpy(dtype=float)
    return (on >= SPARSE_ON[0]) & (on <= SPARSE_ON[1])


def share(mask: np.ndarray) -> Estimate:
    """Percentage of True in `mask` with its exact binomial interval (NaN when the mask is empty)."""
    if mask.size == 0:
        return Estimate(float("nan"))
    found = binomial_interval(int(mask.sum()), int(mask.size))
    return Estimate(100 * found.value, 100 * found.low, 100 * found.high)


def channels(stats: Any, surface: str, operand: bool) -> Any:
    """The operator family's operand channels (operand=True) or combined channels of one surface."""
    family = stats["family"] == "operator" if "family" in stats.columns else True
    return stats[(stats["surface"] == surface) & family & stats["operand" if operand else "combined"].astype(bool)]


def control_selective(context: Any) -> float:
    """The pressure-free control's SELECTIVE share (percent) under seed 002's own thresholds (its ceiling), from
    a claims Context's `pressure_free_stats`."""
    return round(100 * float((context.pressure_free_stats["regime"] == "SELECTIVE").mean()), 1)
