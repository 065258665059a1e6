"""Seed 002's SELECTIVE read against the pressure-free control (circuitlab.claims.selectivity, seed002_null):
the control measured on a tiny dense model against a hand computation, the null-relative counts on constructed
tables, and the sweep's sparse-detector row on a constructed histogram."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.claims import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, REPRODUCED, Context
from circuitlab.claims.selectivity import (
    control_values, crispness_cut, pressure_free_stats, selective_beyond, share, sparse_detectors,
)
from circuitlab.claims.context import UNCENTRED
from circuitlab.claims.seed002_null import paper_attention_beyond_null, paper_ffn_beyond_null, sweep_sparse_detectors


def test_control_values_by_hand():
    pre = torch.tensor([[0.0, 3.0], [2.0, 3.0]])  # unit 0: mean 1, std 1 -> z = -1, +1; unit 1 never varies -> z = 0
    values = control_values(pre)
    sig4 = 1 / (1 + math.exp(-4))
    assert values[:, 0].tolist() == pytest.approx([1 - sig4, sig4])
    assert values[:, 1].tolist() == pytest.approx([0.5, 0.5])


def test_pressure_free_stats_on_a_tiny_dense_model_by_hand():
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset("tiny-gelu")).eval()
    tokens = torch.randint(0, model.cfg.d_vocab, (3, 12))
    stats = pressure_free_stats(model, tokens, batch_size=2)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    for layer in range(model.cfg.n_layers):
        pre = cache[f"blocks.{layer}.mlp.hook_pre"].reshape(-1, cache[f"blocks.{layer}.mlp.hook_pre"].shape[-1])
        pre = pre.double().numpy()
        z = (pre - pre.mean(0)) / pre.std(0)  # numpy's std is the population one
        v = 1 / (1 + np.exp(-4 * z))
        rows = stats[stats["layer"] == layer].sort_values("channel")
        assert len(rows) == pre.shape[1]
        assert rows["crispness"].to_numpy() == pytest.approx((np.minimum(v, 1 - v) < 0.1).mean(0), abs=1e-12)
        assert rows["on_fraction"].to_numpy() == pytest.approx((v > 0.9).mean(0), abs=1e-12)
        assert rows["variance"].to_numpy() == pytest.approx(v.var(0), rel=1e-6, abs=1e-12)
        expected = np.where(v.var(0) < 0.003, "CONSTANT", np.where((np.minimum(v, 1 - v) < 0.1).mean(0) > 0.5,
                                                                    "SELECTIVE", "FUZZY"))
        assert rows["regime"].tolist() == expected.tolist()


def test_null_relative_counts_on_a_constructed_table():
    control = pd.DataFrame({"crispness": np.linspace(0, 1, 101), "variance": 0.1, "on_fraction": 0.3})
    cut = crispness_cut(control)
    assert cut == pytest.approx(0.95)
    stats = pd.DataFrame({"crispness": [0.99, 0.97, 0.9, 0.99], "variance": [0.1, 0.1, 0.1, 0.001],
                          "on_fraction": [0.01, 0.05, 0.2, 0.005]})
    # crisper than the cut and not CONSTANT: channels 0 and 1 (channel 3 is crisp but constant)
    assert selective_beyond(stats, cut).tolist() == [True, True, False, False]
    assert sparse_detectors(stats).tolist() == [True, True, False, False]
    found = share(selective_beyond(stats, cut))
    assert found.value == pytest.approx(50.0) and found.low < 50 < found.high
    # the control scores its own 5% by construction (values strictly above the 95% quantile)
    assert share(selective_beyond(control, cut)).value == pytest.approx(100 * 5 / 101)


def _model(name: str, regime: str, attention: list[int], ffn: list[int]) -> dict:
    return {"name": name, "regime": regime, "on_rate_histogram": {
        "edges": [0.0, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99, 1.0],
        "attention operator": attention, "ffn operator": ffn}}


def _context(tmp_path: Path, models: list[dict]) -> Context:
    path = tmp_path / "legibility_regimes.json"
    path.write_text(json.dumps({"version": 1, "models": models}))
    return Context(legible_sweep=path)


def test_sweep_sparse_detectors_read_the_histogram(tmp_path):
    plain = _model("legible-none", "none", [900, 100, 0, 0, 0, 0, 0, 0], [950, 50, 0, 0, 0, 0, 0, 0])
    crisp = _model("legible-crisp", "crispness alone", [500, 400, 100, 0, 0, 0, 0, 0], [600, 300, 100, 0, 0, 0, 0, 0])
    found = sweep_sparse_detectors(_context(tmp_path, [plain, crisp]), "attention")
    assert found.verdict == REPRODUCED and found.value == pytest.approx(40.0)  # 400 of 1000 against 10%
    assert found.nulls == {"no pressure": 10.0} and found.estimate.low < 40 < found.estimate.high
    assert sweep_sparse_detectors(_context(tmp_path, [plain, crisp]), "ffn").value == pytest.approx(30.0)
    fewer = _model("legible-crisp", "crispness alone", [990, 10, 0, 0, 0, 0, 0, 0], [990, 10, 0, 0, 0, 0, 0, 0])
    assert sweep_sparse_detectors(_context(tmp_path, [plain, fewer]), "ffn").verdict == CONTRADICTED
    assert sweep_sparse_detectors(Context(), "ffn").verdict == NOT_MEASURED
    assert paper_attention_beyond_null(_context(tmp_path, [plain, crisp])).verdict == NOT_MEASURED  # no weights


class _Tables(Context):
    """A claims context whose per-channel statistics are constructed tables, one per legible model name."""

    def __init__(self, tables: dict, **kwargs):
        super().__init__(**kwargs)
        self.tables = tables

    def legibility_stats_of(self, name):
        return self.tables[name]

    def random_legibility_stats_of(self, name):
        return self.tables["random " + name]

    @property
    def pressure_free_stats(self):
        return pd.DataFrame({"crispness": np.linspace(0, 1, 101), "variance": 0.1, "on_fraction": 0.3,
                             "regime": "FUZZY"})


def _channels(surface: str, crispness: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"surface": surface, "family": "operator", "operand": True, "combined": True,
                         "crispness": crispness, "variance": 0.1, "on_fraction": 0.3})


def test_paper_rows_read_the_uncentred_model(tmp_path):
    folder = tmp_path / UNCENTRED
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")  # only its presence is read here
    crisp, dull = [0.99] * 80 + [0.1] * 20, [0.1] * 100
    tables = {UNCENTRED: pd.concat([_channels("attention", crisp), _channels("ffn", dull)]),
              "legible-stories": pd.concat([_channels("attention", dull), _channels("ffn", crisp)])}
    tables.update({f"random {name}": pd.concat([_channels("attention", dull), _channels("ffn", dull)]) for name in
                   (UNCENTRED, "legible-stories")})
    context = _Tables(tables, uncentred_model=folder)
    attention, ffn = paper_attention_beyond_null(context), paper_ffn_beyond_null(context)
    # the uncentred model's tables, not the shipped one's: 80% of its attention channels, none of its FFN's
    assert attention.value == pytest.approx(80.0) and attention.verdict == REPRODUCED
    assert ffn.value == pytest.approx(0.0) and ffn.verdict == CONTRADICTED
    assert attention.ours.startswith(UNCENTRED) and attention.nulls[f"random-init {UNCENTRED}"] == pytest.approx(0.0)
    assert paper_ffn_beyond_null(_Tables(tables, uncentred_model=tmp_path / "absent")).verdict == NOT_MEASURED


class _Shares(Context):
    """A claims context whose per-window legible shares and one-prompt attribution are constructed."""

    def __init__(self, shares: dict, **kwargs):
        super().__init__(**kwargs)
        self.shares = shares

    def legible_shares_of(self, name, random_init=False):
        return self.shares[(name, random_init)]

    def dla_of(self, name):
        return pd.DataFrame({"level": "component", "kind": ["attn_head", "attn_head", "embedding"],
                             "operation": ["boolean", "standard", ""], "value": [3.0, -1.0, 0.0]})


def test_legible_share_is_a_mean_over_windows_with_its_interval():
    from circuitlab.claims.seed002 import legible_attribution

    windows = [0.70, 0.74, 0.76, 0.80] * 5
    context = _Shares({("legible-stories", False): windows, ("legible-stories", True): [0.4] * 20})
    found = legible_attribution(context)
    assert found.value == pytest.approx(75.0) and found.verdict == REPRODUCED  # the interval lies inside 60-90
    assert found.estimate.low < 75 < found.estimate.high and found.estimate.high - found.estimate.low < 5
    assert found.nulls == {"random-init legible-stories": pytest.approx(40.0), "gelu-stories": 0.0}
    assert "75.0%" in found.ours  # the one prompt: |3| of |3| + |-1|
    low = _Shares({("legible-stories", False): [0.2, 0.25] * 10, ("legible-stories", True): [0.4] * 20})
    assert legible_attribution(low).verdict == CONTRADICTED


class _Attributions(_Shares):
    """A claims context whose per-window attention-weaker shares are constructed."""

    def attributions_of(self, name, random_init=False):
        return [{"attention_weaker_mean": share} for share in self.shares[(name, random_init)]]


def test_attention_weak_is_a_share_of_predictions_with_its_interval_and_nulls():
    from circuitlab.claims.seed002 import attention_weak

    windows = [0.7, 0.8, 0.9, 1.0] * 5
    shares = {("legible-stories", False): windows, ("legible-stories", True): [0.3] * 20,
              ("gelu-stories", False): [0.2] * 20}
    found = attention_weak(_Attributions(shares))
    assert found.value == pytest.approx(85.0) and found.verdict == REPRODUCED  # the interval lies above 50%
    assert 50 < found.estimate.low < 85 < found.estimate.high
    assert found.nulls == {"random-init legible-stories": pytest.approx(30.0), "gelu-stories": pytest.approx(20.0)}
    assert "largest |head| 3.00" in found.ours  # the one prompt kept beside the mean
    # the dense model's attention is as weak: the metric cannot tell the designs apart
    ceiling = attention_weak(_Attributions({**shares, ("gelu-stories", False): [0.95] * 20}))
    assert ceiling.verdict == INCONCLUSIVE and "ceiling" in ceiling.reason
    strong = attention_weak(_Attributions({**shares, ("legible-stories", False): [0.1, 0.2] * 10}))
    assert strong.verdict == CONTRADICTED
