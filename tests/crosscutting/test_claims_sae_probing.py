"""Seed 003's probing row (circuitlab.claims.seed003.parity_probing) on comparison files written here."""

from __future__ import annotations

import json
import math

import pytest

from circuitlab.claims.context import Context
from circuitlab.claims.rows import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, REPRODUCED
from circuitlab.claims.seed003 import parity_probing
from circuitlab.errors import UserError


def comparison(tmp_path, parity, sae, raw_parity, raw_sae, test_tokens=1000):
    layers = [{"layer": i, "parity": {"probe": p, "raw_probe": rp}, "sae": {"probe": s, "raw_probe": rs}}
              for i, (p, s, rp, rs) in enumerate(zip(parity, sae, raw_parity, raw_sae))]
    path = tmp_path / "sae_comparison.json"
    path.write_text(json.dumps({"kind": "sae_comparison", "probe": {"test_tokens": test_tokens, "majority": 0.2},
                                "layers": layers}))
    return Context(sae_comparison=path)


def test_the_interval_is_the_normal_one_of_the_mean_difference(tmp_path):
    parity, sae = [0.90, 0.80], [0.85, 0.70]
    outcome = parity_probing(comparison(tmp_path, parity, sae, [0.5, 0.5], [0.9, 0.9], test_tokens=400))
    mean = ((0.90 - 0.85) + (0.80 - 0.70)) / 2
    variance = sum(p * (1 - p) / 400 + s * (1 - s) / 400 for p, s in zip(parity, sae))
    half = 1.96 * math.sqrt(variance) / 2
    assert outcome.estimate.value == pytest.approx(mean)
    assert [outcome.estimate.low, outcome.estimate.high] == pytest.approx([mean - half, mean + half])
    # the raw writes' difference (-0.4) misses the rule, so the null does not hold the verdict back
    assert outcome.verdict == REPRODUCED
    assert outcome.nulls["raw writes (no code)"] == pytest.approx(-0.4)


def test_a_null_that_passes_too_makes_it_inconclusive_and_a_clear_loss_contradicts(tmp_path):
    at_ceiling = parity_probing(comparison(tmp_path, [0.99, 0.99], [0.98, 0.98], [0.99, 0.99], [0.99, 0.99]))
    assert at_ceiling.verdict == INCONCLUSIVE and "metric at ceiling" in at_ceiling.reason
    worse = parity_probing(comparison(tmp_path, [0.70, 0.70], [0.90, 0.90], [0.9, 0.9], [0.9, 0.9]))
    assert worse.verdict == CONTRADICTED and worse.estimate.high < -0.01


def test_missing_or_damaged_comparison(tmp_path):
    assert parity_probing(Context(sae_comparison=tmp_path / "absent.json")).verdict == NOT_MEASURED
    (tmp_path / "bad.json").write_text(json.dumps({"probe": {}, "layers": []}))
    with pytest.raises(UserError, match="test_tokens"):
        parity_probing(Context(sae_comparison=tmp_path / "bad.json"))


def test_the_tax_row_gives_its_ratio_beside_both_scales(tmp_path):
    from circuitlab.claims.rows import NOT_AT_SCALE
    from circuitlab.claims.seed003 import parity_training_cost

    for name, seconds, parameters in (("parity-stories", 30.0, 5_000_000), ("gelu-stories", 20.0, 4_000_000)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(
            {"train_seconds": seconds, "tokens_seen": 2_000_000, "parameters": parameters}))
    outcome = parity_training_cost(Context(models_dir=tmp_path))
    assert outcome.value == 1.5 and "parity 15.0 us" in outcome.ours and "GELU 10.0 us" in outcome.ours
    assert outcome.verdict == NOT_AT_SCALE and "ours 5e+06 parameters, the paper's 1.3e+09 parameters" in outcome.reason
    assert "not the paper's compute to matched capability" in outcome.reason
    # a model at the paper's scale still gets no verdict: the ratio is not the paper's quantity
    (tmp_path / "parity-stories" / "metrics.json").write_text(json.dumps(
        {"train_seconds": 30.0, "tokens_seen": 2_000_000, "parameters": 1_300_000_000}))
    assert parity_training_cost(Context(models_dir=tmp_path)).verdict == NOT_MEASURED
