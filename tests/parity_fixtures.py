"""Parity reports for the tests of the report's tables and of the dashboard's Parity page: the shipped one
(results/parity/parity_report.json, the linear design's), the first model's (results/parity/product/, the
product design's, written before the usage diagnostics), a small constructed one with every
field of the current report whose verdicts are known in advance (layer 0 meets every per-layer target, most on
the threshold itself; layer 1 misses each, some on the threshold), and the constructed one as an older report
without the diagnostics would have it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

SHIPPED_REPORT = Path(__file__).resolve().parents[1] / "results" / "parity" / "parity_report.json"
PRODUCT_REPORT = SHIPPED_REPORT.parent / "product" / "parity_report.json"

_M = 2**12
_PARITY_LOSS, _GELU_LOSS = 3.0, 3.0 - math.log(1.04)  # perplexity ratio exp(3.0 - gelu) = 1.04: met (<= 1.05)
_EDGES = [10.0 ** (-7 + i) for i in range(8)]
_CONSTRUCTED = {
    "model": "models/made-up-parity",
    "design": {"design": "product", "n_bits": 12, "k": 8, "beam": 8},
    "tokens": 1000,
    "natural": "data/natural",
    "parity": {"loss": _PARITY_LOSS, "loss_writes_zeroed": _PARITY_LOSS + 0.8,
               "loss_writes_mean_ablated": _PARITY_LOSS + 0.625, "zeroed_by_layer": [0.5, 0.25],
               "mean_ablated_by_layer": [0.375, 0.125]},
    "layers": [
        # every target met: reconstruction 0.04 < 0.05, agreement exactly 0.99, 2500 effective features, the top
        # feature on exactly 10% of tokens, 410 of 4096 features dead (0.100)
        {"layer": 0, "write_over_residual": 0.4, "reconstruction": 0.04, "distinct_features": _M - 410,
         "top100_share": 0.5, "sampled_tokens": 100, "agreement": 0.99, "certified": 0.75,
         "by_beam": {"4": {"agreement": 0.6, "certified": 0.25}, "8": {"agreement": 0.99, "certified": 0.75}},
         "coherence": 0.5, "features": _M, "effective_features": 2500.0, "top_feature_share": 0.1,
         "over_10_percent": 0, "dead_share": 410 / _M,
         "firing_histogram": {"edges": _EDGES, "counts": [0, 5, 80, 600, 2000, 1000, 1], "dead": 410},
         "participation_ratio": 12.5},
        # every target missed: reconstruction exactly 0.05 (the target is strictly below), agreement 0.875,
        # 1999.5 effective features, the top feature on 25% of tokens, 1024 of 4096 features dead (0.25)
        {"layer": 1, "write_over_residual": 0.3, "reconstruction": 0.05, "distinct_features": _M - 1024,
         "top100_share": 0.75, "sampled_tokens": 100, "agreement": 0.875, "certified": 0.5,
         "by_beam": {"4": {"agreement": 0.5, "certified": 0.125}, "8": {"agreement": 0.875, "certified": 0.5}},
         "coherence": 0.5, "features": _M, "effective_features": 1999.5, "top_feature_share": 0.25,
         "over_10_percent": 3, "dead_share": 0.25,
         "firing_histogram": {"edges": _EDGES, "counts": [0, 0, 69, 1000, 1500, 500, 3], "dead": 1024},
         "participation_ratio": 8.0},
    ],
    "gelu": {"model": "models/made-up-gelu", "loss": _GELU_LOSS, "loss_writes_zeroed": _GELU_LOSS + 2.0,
             "loss_writes_mean_ablated": _GELU_LOSS + 1.0, "zeroed_by_layer": [1.5, 0.75],
             "mean_ablated_by_layer": [0.75, 0.5], "write_over_residual": [0.6, 0.7], "participation_ratio": [20.0, 16.0]},
    "ablation_share": 0.8 / 2.0,  # parity zeroing cost / GELU's: missed (< 0.5)
    "mean_ablation_share": 0.625 / 1.0,  # met (>= 0.5)
    "loss_ratio": _PARITY_LOSS / _GELU_LOSS,  # 1.013: met (<= 1.05)
    "perplexity_ratio": 1.04,
}
CONSTRUCTED_VERDICTS = {"reconstruction": "missed", "agreement": "missed", "effective_features": "missed",
                        "top_feature_share": "missed", "dead_share": "missed", "mean_ablation_share": "met",
                        "ablation_share": "missed", "loss_ratio": "met", "perplexity_ratio": "met"}
CONSTRUCTED_MEASURED = {"reconstruction": 0.05, "agreement": 0.875, "effective_features": 1999.5,
                        "top_feature_share": 0.25, "dead_share": 0.25, "mean_ablation_share": 0.625,
                        "ablation_share": 0.4, "loss_ratio": _PARITY_LOSS / _GELU_LOSS, "perplexity_ratio": 1.04}
# per layer: (reconstruction, agreement) of the layer table; (effective features, top feature share, dead share)
# of the usage table
CONSTRUCTED_LAYER_VERDICTS = [("met", "met"), ("missed", "missed")]
CONSTRUCTED_USAGE_VERDICTS = [("met", "met", "met"), ("missed", "missed", "missed")]
# what a report of `circuitlab report parity` before the usage diagnostics lacks
NEW_LAYER_FIELDS = ("features", "effective_features", "top_feature_share", "over_10_percent", "dead_share",
                    "firing_histogram", "participation_ratio")
NEW_LOSS_FIELDS = ("loss_writes_mean_ablated", "zeroed_by_layer", "mean_ablated_by_layer")
NEW_REPORT_FIELDS = ("mean_ablation_share", "loss_ratio")
NEW_TARGETS = ("effective_features", "top_feature_share", "dead_share", "mean_ablation_share", "loss_ratio")


def constructed_report() -> dict:
    return copy.deepcopy(_CONSTRUCTED)


def older_constructed_report() -> dict:
    """The constructed report without the fields the usage diagnostics added (as an older report has it)."""
    report = constructed_report()
    for layer in report["layers"]:
        for field in NEW_LAYER_FIELDS:
            del layer[field]
    for losses in (report["parity"], report["gelu"]):
        for field in NEW_LOSS_FIELDS:
            del losses[field]
    del report["gelu"]["participation_ratio"]
    for field in NEW_REPORT_FIELDS:
        del report[field]
    return report


def shipped_report() -> dict:
    return json.loads(SHIPPED_REPORT.read_text())


def product_report() -> dict:
    return json.loads(PRODUCT_REPORT.read_text())


# --- the sparse autoencoder comparison (`circuitlab report sae`) -------------------------------------------------

SAE_COMPARISON_FILE = SHIPPED_REPORT.parent / "sae_comparison.json"


def _code_figures(reconstruction, loss_added, effective, top, over, dead, counts, probe, raw_probe) -> dict:
    return {"reconstruction": reconstruction, "loss_added": loss_added, "features": _M, "distinct_features": _M - dead,
            "effective_features": effective, "top_feature_share": top, "over_10_percent": over,
            "dead_share": dead / _M, "firing_histogram": {"edges": _EDGES, "counts": counts, "dead": dead},
            "probe": probe, "raw_probe": raw_probe}


_SAE_COMPARISON = {
    "kind": "sae_comparison",
    "tokens": 1000,
    "seq_len": 100,
    "natural": "data/natural",
    "parity": {"model": "models/made-up-parity", "design": {"design": "product", "n_bits": 12, "k": 8},
               "loss": 3.0, "loss_uncoded": 2.875, "loss_added": 0.125},
    "gelu": {"model": "models/made-up-gelu", "loss": 2.9, "loss_spliced": 3.15, "loss_added": 0.25},
    "sae": {"folder": "runs/sae", "config": {"d_model": 64, "n_latents": _M, "k": 8, "k_aux": 32},
            "training": [{"steps": 20}, {"steps": 20}]},
    "probe": {"stories": 12, "seed": 0, "test_share": 0.2, "max_iter": 1000, "train_tokens": 800, "test_tokens": 200,
              "classes": ["NAME", "PUNCT", "VERB"], "majority": 0.375},
    "layers": [
        {"layer": 0,
         "sae": _code_figures(0.125, 0.0625, 1500.0, 0.5, 2, 1024, [0, 1, 10, 100, 1000, 1900, 61], 0.75, 0.875),
         "parity": _code_figures(0.25, 0.03125, 2500.0, 0.125, 1, 410, [0, 5, 80, 600, 2000, 1000, 1], 0.625, 0.8125)},
        {"layer": 1,
         "sae": _code_figures(0.0625, 0.125, 1800.5, 0.25, 0, 2048, [0, 0, 48, 1000, 1000, 0, 0], 0.5, 0.9375),
         "parity": _code_figures(0.5, 0.09375, 999.5, 0.0625, 0, 8, [0, 0, 0, 88, 2000, 2000, 0], 0.6875, 0.75)},
    ],
}


def constructed_sae_comparison() -> dict:
    """A small comparison with every field `circuitlab report sae` writes, in numbers exact in binary."""
    return copy.deepcopy(_SAE_COMPARISON)
