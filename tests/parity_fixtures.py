"""Parity reports for the tests of the report's tables and of the dashboard's Parity page: the shipped one
(results/parity/parity_report.json) and a small constructed one whose verdicts are known in advance."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

SHIPPED_REPORT = Path(__file__).resolve().parents[1] / "results" / "parity" / "parity_report.json"

_PARITY_LOSS, _GELU_LOSS = 3.0, 3.0 - math.log(1.04)  # perplexity ratio exp(3.0 - gelu) = 1.04: met (<= 1.05)
_CONSTRUCTED = {
    "model": "models/made-up-parity",
    "design": {"design": "product", "n_bits": 10, "k": 8, "beam": 8},
    "tokens": 1000,
    "natural": "data/natural",
    "parity": {"loss": _PARITY_LOSS, "loss_writes_zeroed": _PARITY_LOSS + 0.8},
    "layers": [
        {"layer": 0, "write_over_residual": 0.4, "reconstruction": 0.12, "distinct_features": 512, "top100_share": 0.5,
         "sampled_tokens": 100, "agreement": 0.9, "certified": 0.75,
         "by_beam": {"4": {"agreement": 0.6, "certified": 0.25}, "8": {"agreement": 0.9, "certified": 0.75}},
         "coherence": 0.5},
        {"layer": 1, "write_over_residual": 0.3, "reconstruction": 0.3, "distinct_features": 256, "top100_share": 0.75,
         "sampled_tokens": 100, "agreement": 0.875, "certified": 0.5,
         "by_beam": {"4": {"agreement": 0.5, "certified": 0.125}, "8": {"agreement": 0.875, "certified": 0.5}},
         "coherence": 0.5},
    ],
    "gelu": {"model": "models/made-up-gelu", "loss": _GELU_LOSS, "loss_writes_zeroed": _GELU_LOSS + 2.0,
             "write_over_residual": [0.6, 0.7]},
    "ablation_share": 0.8 / 2.0,  # parity cost / GELU cost: missed (< 0.5)
    "perplexity_ratio": 1.04,
}
# layer 0: reconstruction 0.12 met, agreement exactly 0.9 met (>=); layer 1: reconstruction exactly 0.3 missed
# (strictly below 0.3 is the target), agreement 0.875 missed
CONSTRUCTED_VERDICTS = {"reconstruction": "missed", "agreement": "missed", "ablation_share": "missed",
                        "perplexity_ratio": "met"}
CONSTRUCTED_LAYER_VERDICTS = [("met", "met"), ("missed", "missed")]  # (reconstruction, agreement) per layer


def constructed_report() -> dict:
    return copy.deepcopy(_CONSTRUCTED)


def shipped_report() -> dict:
    return json.loads(SHIPPED_REPORT.read_text())
