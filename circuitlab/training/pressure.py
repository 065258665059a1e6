"""Calibrated selectivity pressures: how strong the pressures of seed 002 (section 3.6) are, in the units of
the loss, and the rule that sets them.

Why a rule: in seed 002's form (lambda * sum over channels, summed over layers) a pressure grows with the
model's width and depth. The 4-layer legible-stories model trained that way paid 1.41 nats/token of
crispness at step 1, more than its final LM loss (1.07), and 97-100% of its NC-FFN operands ended on (or
off) for more than 99% of tokens: the pressure, not the task, decided the operands.

The rule (SelectivityConfig normalization "mean", the *-stories legible presets):
1. Normalise each term to a mean over tokens, operand channels and layers, so a term lies in [0, lambda]
   (sparsity) or [0, lambda / 4] (crispness) nats/token whatever the width and depth.
2. lambda_c = presets.CALIBRATED_CRISPNESS on each surface, so that crispness costs at most lambda_c / 4 = 0.05
   nats/token per surface (0.1 for both, its value at initialisation, where operands sit near 1/2): about
   a tenth of the final LM loss of these models (~1.1 nats/token) and 1% of the loss at initialisation.
   lambda_s = lambda_c / 3, seed 002's ratio (1e-3 : 3e-3).
3. Ramp the pressures in linearly over the first presets.CALIBRATED_RAMP_STEPS steps, so the operands first learn what to
   detect from the task, then are pushed to the rails.
4. Cap the pressure added to the loss at presets.CALIBRATED_CAP x the batch's LM loss (a guard for larger lambdas: with the
   defaults it never binds after step 1).
The trainer logs every term in nats/token beside the LM loss (train_log.jsonl: pressure_<surface>_<kind>),
and metrics.json and the card report them at the first and the last steps (pressure_summary).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from circuitlab.config import SelectivityConfig

# the calibrated lambdas, ramp and cap of each regime: circuitlab.presets.calibrated_selectivity
TERMS = ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness")
LOG_PREFIX = "pressure_"


def pressure_scale(step: int, lm_loss: Tensor, pressure: Tensor, selectivity: SelectivityConfig) -> Tensor:
    """The factor the trainer multiplies the summed pressure by at optimizer step `step` (0-based): the ramp
    min(1, (step + 1) / ramp_steps), then, with a cap, at most cap x lm_loss / pressure. Both inputs are
    detached scalars; the result is a detached scalar tensor (1 when neither ramp nor cap is set)."""
    ramp = 1.0 if selectivity.ramp_steps == 0 else min(1.0, (step + 1) / selectivity.ramp_steps)
    scale = torch.full_like(pressure, ramp)
    if selectivity.cap > 0:
        allowed = selectivity.cap * lm_loss / (ramp * pressure).clamp_min(1e-12)
        scale = scale * allowed.clamp(max=1.0)
    return scale.detach()


def pressure_summary(history: Sequence[dict[str, Any]], last_fraction: float = 0.1) -> dict[str, Any]:
    """Pressures beside the LM loss (nats/token) at step 1 and over the last `last_fraction` of the logged
    steps: {"first": {"step", "lm_loss", "<term>": ..., "total"}, "final": {...}, "first_unscaled": step 1
    without the ramp and cap}; {} without pressure terms."""
    def is_term(key: str) -> bool:
        return key.startswith(LOG_PREFIX) and key[len(LOG_PREFIX):] in TERMS

    records = [r for r in history if "loss" in r and any(is_term(k) for k in r)]
    if not records:
        return {}
    terms = [k for k in records[0] if is_term(k)]

    def mean(rows: Sequence[dict[str, Any]], key: str) -> float:
        return float(sum(r[key] for r in rows) / len(rows))

    tail = records[-max(1, math.ceil(last_fraction * len(records))):]
    first = records[0]
    summary = {
        "first": {"step": first["step"], "lm_loss": first["loss"], **{k[len(LOG_PREFIX):]: first[k] for k in terms}},
        "final": {"steps": [tail[0]["step"], tail[-1]["step"]], "lm_loss": mean(tail, "loss"),
                  **{k[len(LOG_PREFIX):]: mean(tail, k) for k in terms}},
    }
    scale = first.get("pressure_scale")
    if scale:  # step 1 at full strength (before the ramp and the cap): the size the rule bounds
        summary["first_unscaled"] = {"step": first["step"], "lm_loss": first["loss"],
                                     **{k[len(LOG_PREFIX):]: first[k] / scale for k in terms}}
    for part in summary.values():
        part["total"] = sum(part[k[len(LOG_PREFIX):]] for k in terms)
    return summary
