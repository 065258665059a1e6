"""Calibrated selectivity pressures: the normalisation, the schedule, and their report beside the LM loss."""

import json

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.config import SelectivityConfig
from circuitlab.training.pressure import pressure_scale, pressure_summary
from circuitlab.training.settings import TrainConfig
from circuitlab.training.trainer import Trainer

BASE = dict(d_vocab=97, d_model=48, n_layers=3, n_heads=2, d_head=16, n_ctx=64,
            attention=dict(value_mode="boolean", n_special=2),
            feedforward=dict(type="ncffn", d_ffw=64, rho=0.5, n_quantifiers=8))


def build(**selectivity):
    torch.manual_seed(0)
    return CircuitTransformer(ModelConfig.from_dict(dict(BASE, selectivity=selectivity)))


def operands(cache, n_layers=3):
    for layer in range(n_layers):
        yield "attn", [cache[f"blocks.{layer}.attn.hook_operand_a"], cache[f"blocks.{layer}.attn.hook_operand_b"]]
        yield "ffn", [cache[f"blocks.{layer}.mlp.hook_operand_a"], cache[f"blocks.{layer}.mlp.hook_operand_b"]]


@pytest.mark.parametrize("normalization", ["sum", "mean"])
def test_pressure_terms_match_their_definition(normalization):
    lambdas = dict(attn_sparsity=0.3, attn_crispness=0.7, ffn_sparsity=0.11, ffn_crispness=0.5)
    model = build(**lambdas, normalization=normalization)
    tokens = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    _, aux = model(tokens, return_aux=True)
    _, cache = model.run_with_cache(tokens)
    expected = {name: 0.0 for name in lambdas}
    for surface, values in operands(cache):
        v = torch.cat([x.reshape(2, 9, -1) for x in values], dim=-1).double()
        # sum: over channels, mean over tokens, summed over layers; mean: mean over tokens, channels and layers
        reduce = (lambda t: t.sum() / 18) if normalization == "sum" else (lambda t: t.mean() / 3)
        expected[f"{surface}_sparsity"] += lambdas[f"{surface}_sparsity"] * float(reduce(v))
        expected[f"{surface}_crispness"] += lambdas[f"{surface}_crispness"] * float(reduce(v * (1 - v)))
    terms = aux["selectivity_terms"]
    assert sorted(terms) == sorted(lambdas)
    for name, value in expected.items():
        assert terms[name].item() == pytest.approx(value, rel=1e-5), name
    assert aux["selectivity"].item() == pytest.approx(sum(expected.values()), rel=1e-5)


def test_mean_normalised_pressure_does_not_grow_with_depth_or_width_and_is_bounded():
    """The point of the rule: at a fixed lambda the mean form stays in [0, lambda/4] (crispness) whatever the
    model's size, where the summed form grows with channels x layers."""
    tokens = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    values = {}
    for normalization in ("sum", "mean"):
        for n_layers, d_ffw in ((1, 32), (4, 128)):
            torch.manual_seed(0)
            config = dict(BASE, n_layers=n_layers, feedforward=dict(type="ncffn", d_ffw=d_ffw, rho=0.5, n_quantifiers=8),
                          selectivity=dict(ffn_crispness=1.0, normalization=normalization))
            _, aux = CircuitTransformer(ModelConfig.from_dict(config))(tokens, return_aux=True)
            values[normalization, n_layers] = aux["selectivity"].item()
    assert values["sum", 4] > 10 * values["sum", 1]
    assert 0 < values["mean", 4] <= 0.25 and 0 < values["mean", 1] <= 0.25
    assert values["mean", 4] == pytest.approx(values["mean", 1], rel=0.2)  # operands near 1/2 at init either way


def test_ramp_and_cap():
    selectivity = SelectivityConfig(ffn_crispness=1.0, normalization="mean", ramp_steps=4, cap=0.1)
    lm, small, large = torch.tensor(2.0), torch.tensor(0.05), torch.tensor(1.0)
    # ramp: (step + 1) / 4, until the cap binds (cap x LM loss = 0.2 nats/token)
    assert [pressure_scale(s, lm, small, selectivity).item() for s in range(6)] == pytest.approx([0.25, 0.5, 0.75, 1, 1, 1])
    assert (pressure_scale(3, lm, large, selectivity) * large).item() == pytest.approx(0.2)
    assert (pressure_scale(0, lm, large, selectivity) * large).item() == pytest.approx(0.2)  # 0.25 ramped, then capped
    assert pressure_scale(0, lm, large, SelectivityConfig(ffn_crispness=1.0)).item() == 1.0  # seed 002's form: as is


def test_old_configs_keep_their_hash_and_describe_their_form():
    old = ModelConfig.preset("legible-stories-v1")
    data = old.to_dict()
    data["selectivity"] = {k: data["selectivity"][k] for k in ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness")}
    assert ModelConfig.from_dict(data).hash() == old.hash()
    assert ModelConfig.preset("legible-stories").hash() != old.replace(n_layers=6).hash()  # the rule is part of the model
    assert "seed 002's form" in old.selectivity.describe() and "crispness alone" in old.selectivity.describe()
    assert "calibrated" in ModelConfig.preset("legible-stories").selectivity.describe()
    assert ModelConfig.preset("legible-stories-none").selectivity.describe() == "none"
    regimes = {name: ModelConfig.preset(name).selectivity.regime for name in
               ("legible-stories-none", "legible-stories-sparse", "legible-stories", "legible-stories-both")}
    assert regimes == {"legible-stories-none": "none", "legible-stories-sparse": "sparsity alone",
                       "legible-stories": "crispness alone", "legible-stories-both": "both pressures"}


def test_trainer_logs_each_pressure_beside_the_lm_loss(tmp_path):
    config = dict(BASE, selectivity=dict(attn_crispness=0.4, ffn_sparsity=0.2, normalization="mean", ramp_steps=3, cap=0.5))
    model = CircuitTransformer(ModelConfig.from_dict(config))
    model.reset_parameters(seed=0)
    windows = torch.randint(0, 97, (24, 17), generator=torch.Generator().manual_seed(0))
    trainer = Trainer(model, TrainConfig(steps=5, batch_size=4, seq_len=16, warmup=1, eval_every=0, ckpt_every=0),
                      windows[:20], windows[20:], tmp_path, progress=False)
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    first = records[0]
    assert set(k for k in first if k.startswith("pressure_")) == {"pressure_attn_crispness", "pressure_ffn_sparsity", "pressure_scale"}
    assert first["pressure_scale"] == pytest.approx(1 / 3)  # ramp 1/3 at step 1; the cap does not bind
    assert first["selectivity"] == pytest.approx(first["pressure_attn_crispness"] + first["pressure_ffn_sparsity"])
    assert 0 < first["pressure_attn_crispness"] <= 0.4 / 4 / 3 + 1e-6  # lambda/4 at most, ramped by 1/3
    assert all(r["pressure_scale"] == pytest.approx(1.0) for r in records[2:5])
    summary = pressure_summary(records)
    assert summary["first"]["lm_loss"] == first["loss"] and summary["first"]["step"] == 1
    assert summary["first"]["total"] == pytest.approx(first["selectivity"])
    assert summary["final"]["steps"] == [5, 5] and summary["final"]["lm_loss"] == records[-1]["loss"]
    assert summary["first_unscaled"]["total"] == pytest.approx(3 * first["selectivity"])
    assert pressure_summary([{"step": 1, "loss": 3.0}]) == {}
