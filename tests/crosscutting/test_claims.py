"""analyses/claims.md: the registry, the verdict rules, the file's structure, and that its numbers are measured.

The fast run (what CI runs) is executed once as `scripts/claims.py --fast` on the shipped models; its rows are
checked against the registry, against a direct call of each row's measuring function, and against a results
JSON that fills a row the shipped models cannot measure. A copy of a model folder with changed weights or
metrics changes the row that reads it. The helpers (percentage rule, alive share, coherence, legible share,
the file parser) are checked on constructed inputs with known answers, and so are the rows that read the pressure
sweep's and the parity report's results: small constructed result files on each side of every row's rule.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from circuitlab import claims as claims_module
from circuitlab.claims import (
    CLAIMS, COLUMNS, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, REPRODUCED, VERDICT_RULES, VERDICTS, ClaimRow, Context,
    Sizes, claim_by_id, counts_text, legible_share, max_coherence, measure_claim, read_claims, render_claims,
    verdict_counts,
)
from circuitlab.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories")


def shipped_models_present() -> bool:
    from circuitlab.resources import models_root

    return all((models_root() / name / "model.safetensors").is_file() for name in SHIPPED)


needs_models = pytest.mark.skipif(not shipped_models_present(), reason="the shipped models are not installed")

FILLED = {"claims": {"s000-nonlinearity": {
    "ours": "ReLU 3.31 vs linear 3.20 nats/token (test entry)", "value": 3.31, "ci95": [3.2, 3.4],
    "verdict": "reproduced", "reason": "", "measured_by": "scripts/ablation.py"}}}


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory) -> tuple[Path, list[dict[str, str]]]:
    """scripts/claims.py --fast, with a results folder holding one entry."""
    folder = tmp_path_factory.mktemp("claims")
    results = folder / "results"
    results.mkdir()
    (results / "ablation.json").write_text(json.dumps(FILLED))
    out = folder / "claims.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "claims.py"), "--fast", "--quiet", "--out", str(out), "--results", str(results),
         "--ladder", str(folder / "no-ladder.json")],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return out, read_claims(out)


# --- the fast run ----------------------------------------------------------------------------------------


@needs_models
@pytest.mark.slow
def test_fast_run_has_one_row_per_claim_with_a_verdict_and_its_rule(fast_run):
    out, rows = fast_run
    text = out.read_text()
    assert [row["id"] for row in rows] == [claim.id for claim in CLAIMS]
    assert VERDICT_RULES in text and "fast mode" in text
    # no path of the machine that wrote it: not the repository's, the temporary folder's or the home folder's
    repository = str(Path(__file__).resolve().parents[2])
    assert all(place not in text for place in (repository, tempfile.gettempdir(), str(Path.home())))
    for row in rows:
        claim = claim_by_id(row["id"])
        assert row["verdict"] in VERDICTS
        assert (row["claim"], row["paper"], row["rule"]) == (claim.claim, claim.paper, claim.rule)
        if row["verdict"] == NOT_MEASURED:
            assert row["reason"] not in ("", "-"), f"{row['id']}: 'not measured' needs a reason"
        else:
            measured_by = row["measured by"].strip("`")
            if measured_by.endswith(".json)"):  # filled from a results file
                continue
            module, _, function = measured_by.rpartition(".")
            assert module == "circuitlab.claims" and callable(getattr(claims_module, function, None)), row
    assert f"Verdicts: {counts_text(verdict_counts(rows))}." in text


@needs_models
@pytest.mark.slow
def test_a_results_json_fills_a_row_the_models_cannot_measure(fast_run):
    _, rows = fast_run
    row = next(r for r in rows if r["id"] == "s000-nonlinearity")
    entry = FILLED["claims"]["s000-nonlinearity"]
    assert (row["ours"], row["verdict"]) == (entry["ours"], entry["verdict"])
    assert row["measured by"] == "`scripts/ablation.py (analyses/results/ablation.json)`"
    blocked = next(r for r in rows if r["id"] == "s003-steering")
    assert (blocked["ours"], blocked["verdict"]) == ("-", NOT_MEASURED)


@needs_models
@pytest.mark.slow
@pytest.mark.parametrize("claim_id", ["s000-nie-layer", "s000-max-names", "s002-attn-selective-centred",
                                      "s002-legible-share-centred", "s002-quality-centred", "s003-coherence"])
def test_rows_agree_with_a_direct_call_of_their_measuring_function(fast_run, claim_id):
    _, rows = fast_run
    row = next(r for r in rows if r["id"] == claim_id)
    claim = claim_by_id(claim_id)
    with torch.no_grad():
        outcome = claim.measure(Context(fast=True))
    assert (row["ours"], row["verdict"]) == (outcome.ours, outcome.verdict)


# --- a changed model changes its rows ------------------------------------------------------------------


def _copy_models(tmp_path: Path) -> Path:
    from circuitlab.resources import models_root

    root = tmp_path / "models"
    for name in SHIPPED:
        folder = root / name
        folder.mkdir(parents=True)
        for path in (models_root() / name).iterdir():
            if path.name in ("config.json", "metrics.json"):
                shutil.copy(path, folder / path.name)
            elif path.is_file():
                (folder / path.name).symlink_to(path)
    return root


@needs_models
def test_rows_follow_the_model_folder_they_read(tmp_path):
    from circuitlab import load_model

    changed = _copy_models(tmp_path)
    shipped = Context(fast=True)
    quality, share = claim_by_id("s002-quality-centred"), claim_by_id("s002-legible-share-centred")
    with torch.no_grad():
        before = measure_claim(quality, shipped, {}), measure_claim(share, shipped, {})
    legible = load_model("legible-stories")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in legible.named_parameters():
            if ".mlp." in name:  # other FFN weights: another attribution, and perplexity far from GELU's
                parameter.add_(0.5 * parameter.std() * torch.randn(parameter.shape, generator=generator))
    metrics_of_legible = (changed / "legible-stories" / "metrics.json").read_text()
    shutil.rmtree(changed / "legible-stories")
    legible.save(changed / "legible-stories")
    (changed / "legible-stories" / "metrics.json").write_text(metrics_of_legible)
    other = Context(fast=True, models_dir=changed)
    with torch.no_grad():
        after = measure_claim(quality, other, {}), measure_claim(share, other, {})
    assert after[0].verdict == CONTRADICTED  # whatever the shipped pair reads, the perturbed legible model fails
    assert after[0].value > before[0].value * 1.1  # the perplexity ratio is measured on the model that was read
    assert before[1].value != after[1].value and before[1].ours != after[1].ours


@needs_models
def test_quality_parity_compares_both_models_on_the_same_tokens(tmp_path):
    """With the GELU folder holding the legible model itself (its recorded losses changed), the perplexity ratio
    is exactly 1 on both sets: the row measures the two models on identical windows, not from their metrics."""
    root = _copy_models(tmp_path)
    shutil.rmtree(root / "gelu-stories")
    shutil.copytree(root / "legible-stories", root / "gelu-stories", symlinks=True)
    metrics_path = root / "gelu-stories" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    for name in ("natural", "generated"):  # a row that read the recorded losses would now see a gap
        metrics[f"{name}_held_out_loss"] += 1.0
    metrics_path.unlink()
    metrics_path.write_text(json.dumps(metrics))
    context = Context(fast=True, models_dir=root)
    with torch.no_grad():
        outcome = measure_claim(claim_by_id("s002-quality-centred"), context, {})
        legible, gelu = context.held_out_loss("legible-stories"), context.held_out_loss("gelu-stories")
    assert legible == gelu and set(legible) == {"natural", "generated"}
    assert outcome.value == 1.0 and outcome.verdict == REPRODUCED
    assert "(1.000x); generated" in outcome.ours and outcome.ours.count("(1.000x)") == 2


# --- rules and helpers on constructed inputs ------------------------------------------------------------


def test_max_coherence_of_known_vectors():
    assert max_coherence(torch.eye(4)) == 0.0
    vectors = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -3.0]])
    assert max_coherence(vectors) == pytest.approx(1 / math.sqrt(2))


def test_legible_share_of_a_constructed_attribution():
    table = pd.DataFrame([
        dict(level="component", kind="embedding", operation="", value=1.0),
        dict(level="component", kind="attn_head", operation="boolean", value=-2.0),
        dict(level="component", kind="attn_head", operation="standard", value=1.0),
        dict(level="component", kind="ffn", operation="ncffn", value=9.0),  # the units below carry it
        dict(level="unit", kind="ffn_unit", operation="and", value=3.0),
        dict(level="unit", kind="ffn_unit", operation="gelu", value=-3.0),
    ])
    share = legible_share(table)
    assert share["legible"] == pytest.approx((2 + 3) / (1 + 2 + 1 + 3 + 3))
    assert (share["max_head"], share["max_unit"]) == (2.0, 3.0)


def test_results_files_must_name_a_verdict(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"claims": {"s000-isoflop": {"ours": "x", "verdict": "maybe"}}}))
    with pytest.raises(UserError, match="verdict"):
        Context(results_dir=tmp_path).results()
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        Context(results_dir=tmp_path).results()


def test_render_and_read_round_trip_with_pipes_in_cells(tmp_path):
    rows = [ClaimRow(id=claim.id, seed=claim.seed, place=claim.place, claim=claim.claim, paper=claim.paper,
                     ours=f"|x| = {index}", verdict=VERDICTS[index % 3], reason="r" if index % 3 == 2 else "",
                     rule=claim.rule, measured_by=claim.measured_by)
            for index, claim in enumerate(CLAIMS)]
    path = tmp_path / "claims.md"
    path.write_text(render_claims(rows, True, Sizes.fast(), "python scripts/claims.py --fast"))
    back = read_claims(path)
    assert [r["id"] for r in back] == [c.id for c in CLAIMS] and set(back[0]) == set(COLUMNS)
    assert [r["ours"] for r in back] == [row.ours for row in rows]
    assert [r["verdict"] for r in back] == [row.verdict for row in rows]
    with pytest.raises(UserError, match="scripts/claims.py"):
        read_claims(tmp_path / "missing.md")


def test_every_measuring_function_is_exported_under_the_name_its_row_prints():
    # the functions live in circuitlab/claims/seed000.py etc.; a row names them by the package that exports them
    measured = [claim for claim in CLAIMS if claim.measure is not None]
    assert len(measured) >= 40
    for claim in measured:
        module, _, function = claim.measured_by.rpartition(".")
        assert module == "circuitlab.claims" and getattr(claims_module, function) is claim.measure, claim.id


def test_every_claim_can_be_measured_or_says_why_not():
    ids = [claim.id for claim in CLAIMS]
    assert len(ids) == len(set(ids))
    assert {claim.seed for claim in CLAIMS} == {"000", "002", "003"}
    for claim in CLAIMS:
        assert (claim.measure is not None) != bool(claim.blocked), claim.id


# --- rows read from the sweep's and the parity report's results (constructed files) ----------------------


def _summary(surface: str, on: float, crisp: float = 80.0, selective_operands: float = 50.0) -> dict:
    return dict(surface=surface, family="operator", on_percent=on, atom_crisp=crisp, selective_operands=selective_operands)


def _regime(regime: str, attn_on: float = 5.0, ffn_on: float = 2.0, ffn_crisp: float = 90.0, ffn_selective: float = 10.0,
            selective_by_layer: tuple = (0.2, 0.3, 0.8, 0.9), share: float = 0.2) -> dict:
    by_layer = [dict(surface="attention", family="operator", layer=layer, selective=value)
                for layer, value in reversed(list(enumerate(selective_by_layer)))]  # order must not matter
    by_layer.append(dict(surface="attention", family="quantifier", layer=0, selective=1.0))  # ignored
    return dict(name=f"legible-{regime.split()[0]}", regime=regime, by_layer=by_layer,
                summary=[_summary("attention", attn_on),
                         dict(surface="ffn", family="quantifier", on_percent=50.0, atom_crisp=0.0, selective_operands=0.0),
                         _summary("ffn", ffn_on, ffn_crisp, ffn_selective)],
                attribution=dict(share_mean=share, parts_mean=dict(bounded_heads=share, opaque_units=1 - share),
                                 n_positions=10))


def _paper_sweep(**changes: dict) -> list[dict]:
    """Four regimes at seed 002's numbers (Tables 1 and 5); `changes` maps a regime to the fields it changes."""
    base = {"none": dict(ffn_on=0.9, ffn_crisp=50.0, ffn_selective=0.0, attn_on=9.0),
            "sparsity alone": dict(attn_on=2.2, ffn_on=0.1, ffn_crisp=51.0),
            "crispness alone": dict(attn_on=12.1, ffn_on=32.7, share=0.75),
            "both pressures": dict(attn_on=0.9, ffn_on=3.5)}
    return [_regime(regime, **{**fields, **changes.get(regime, {})}) for regime, fields in base.items()]


def _sweep_context(tmp_path: Path, models: list[dict]) -> Context:
    path = tmp_path / "legibility_regimes.json"
    path.write_text(json.dumps({"version": 1, "models": models}))
    return Context(legible_sweep=path)


MEETS, MISSES = "meets", "misses"  # rows with no interval say whether the point value meets the rule


def _meets(outcome) -> str:
    """REPRODUCED / CONTRADICTED for rows judged on an interval; "meets" / "misses" for rows with none."""
    if outcome.verdict == INCONCLUSIVE and "no 95% interval" in outcome.reason:
        return MEETS if "point value meets" in outcome.reason else MISSES
    return outcome.verdict


def _verdict(tmp_path: Path, function: str, models: list[dict]) -> str:
    return _meets(getattr(claims_module, function)(_sweep_context(tmp_path, models)))


@pytest.mark.parametrize("function, changes, expected", [
    ("sweep_both_collapse", {}, MEETS),
    ("sweep_both_collapse", {"both pressures": dict(attn_on=5.9, ffn_on=0.0)}, MEETS),  # 0.9 + 5
    ("sweep_both_collapse", {"both pressures": dict(attn_on=6.0)}, MISSES),
    ("sweep_both_collapse", {"both pressures": dict(ffn_on=8.6)}, MISSES),  # 3.5 + 5 = 8.5
    ("sweep_plain_illegible", {}, MEETS),
    ("sweep_plain_illegible", {"none": dict(ffn_crisp=55.0, ffn_selective=5.0)}, MEETS),
    ("sweep_plain_illegible", {"none": dict(ffn_crisp=55.1)}, MISSES),
    ("sweep_plain_illegible", {"none": dict(ffn_selective=5.1)}, MISSES),
    ("sweep_sparsity_inert", {"sparsity alone": dict(ffn_crisp=56.0)}, MEETS),
    ("sweep_sparsity_inert", {"sparsity alone": dict(ffn_crisp=56.1)}, MISSES),
    ("sweep_sparsity_inert", {"sparsity alone": dict(ffn_crisp=99.7)}, MISSES),
    ("sweep_attention_on", {}, MEETS),
    ("sweep_attention_on", {"crispness alone": dict(attn_on=17.2)}, MISSES),
    ("sweep_attention_on", {"none": dict(attn_on=90.0)}, MEETS),  # Table 1 has no unpressured row
    ("sweep_ffn_on", {}, MEETS),
    ("sweep_ffn_on", {"crispness alone": dict(ffn_on=27.6)}, MISSES),
    ("sweep_ffn_on", {"sparsity alone": dict(ffn_on=90.0)}, MEETS),  # Table 5 has no such row
    ("sweep_crispness_keeps_on", {}, MEETS),
    ("sweep_crispness_keeps_on", {"none": dict(attn_on=12.1)}, MISSES),  # a tie is not "more"
    ("sweep_crispness_keeps_on", {"both pressures": dict(ffn_on=40.0)}, MISSES),
    ("sweep_depth", {}, MEETS),
    ("sweep_depth", {"none": dict(selective_by_layer=(0.9, 0.9, 0.1, 0.1))}, MEETS),  # only pressured regimes
    ("sweep_depth", {"both pressures": dict(selective_by_layer=(0.9, 0.9, 0.1, 0.1))}, MISSES),
    ("sweep_depth", {"sparsity alone": dict(selective_by_layer=(0.5, 0.5, 0.5, 0.5))}, MISSES),
    ("sweep_legible_share", {}, MEETS),
    ("sweep_legible_share", {"crispness alone": dict(share=0.60)}, MEETS),
    ("sweep_legible_share", {"crispness alone": dict(share=0.599)}, MISSES),
    ("sweep_legible_share", {"crispness alone": dict(share=0.216)}, MISSES),
])
def test_sweep_rows_follow_their_rules(tmp_path, function, changes, expected):
    assert _verdict(tmp_path, function, _paper_sweep(**changes)) == expected


def test_sweep_rows_report_the_numbers_they_judge(tmp_path):
    context = _sweep_context(tmp_path, _paper_sweep(**{"both pressures": dict(attn_on=4.56, ffn_on=0.02)}))
    outcome = claims_module.sweep_both_collapse(context)
    assert outcome.ours == "operands ON: attention legible-both: 4.6% ON; ffn legible-both: 0.02% ON"
    depth = claims_module.sweep_depth(context)
    assert "sparsity alone 20/30/80/90% (deep minus shallow 60.0)" in depth.ours


def test_sweep_rows_say_not_measured_without_the_sweep_or_its_regime(tmp_path):
    missing = Context(legible_sweep=tmp_path / "absent.json")
    for function in ("sweep_both_collapse", "sweep_plain_illegible", "sweep_sparsity_inert", "sweep_attention_on",
                     "sweep_ffn_on", "sweep_crispness_keeps_on", "sweep_depth", "sweep_legible_share"):
        outcome = getattr(claims_module, function)(missing)
        assert outcome.verdict == NOT_MEASURED and "legibility_regimes.json" in outcome.reason
    without_both = [model for model in _paper_sweep() if model["regime"] != "both pressures"]
    outcome = claims_module.sweep_both_collapse(_sweep_context(tmp_path, without_both))
    assert outcome.verdict == NOT_MEASURED and "both pressures" in outcome.reason
    (tmp_path / "bad.json").write_text(json.dumps({"models": {"none": {}}}))
    with pytest.raises(UserError, match="'models' must be a list"):
        claims_module.sweep_depth(Context(legible_sweep=tmp_path / "bad.json"))


def _parity_context(tmp_path: Path, reconstruction=(0.01, 0.02), agreement=(1.0, 1.0),
                    parity=(3.0, 5.0), gelu=(3.0, 7.0)) -> Context:
    layers = [dict(layer=i, reconstruction=r, agreement=a, certified=a) for i, (r, a) in enumerate(zip(reconstruction, agreement))]
    record = dict(tokens=100, design=dict(beam=64), layers=layers,
                  parity=dict(loss=parity[0], loss_writes_zeroed=parity[1]),
                  gelu=dict(loss=gelu[0], loss_writes_zeroed=gelu[1]),
                  ablation_share=0.99)  # not read: the row computes its share from the losses
    path = tmp_path / "parity_report.json"
    path.write_text(json.dumps(record))
    return Context(parity_report=path)


@pytest.mark.parametrize("function, fields, expected", [
    ("parity_reconstruction", dict(reconstruction=(0.01, 0.299)), MEETS),
    ("parity_reconstruction", dict(reconstruction=(0.01, 0.3)), MISSES),  # the worst layer decides
    ("parity_ablation", dict(parity=(3.0, 5.0), gelu=(3.0, 7.0)), MEETS),  # 2 / 4 = 0.5
    ("parity_ablation", dict(parity=(3.0, 4.99), gelu=(3.0, 7.0)), MISSES),
    ("parity_ablation", dict(parity=(3.07, 5.79), gelu=(3.11, 8.37)), MEETS),  # 2.72 / 5.26
    ("parity_encoder_exact", dict(agreement=(1.0, 0.99)), MEETS),
    ("parity_encoder_exact", dict(agreement=(1.0, 0.989)), MISSES),
])
def test_parity_rows_follow_their_rules(tmp_path, function, fields, expected):
    assert _meets(getattr(claims_module, function)(_parity_context(tmp_path, **fields))) == expected


def test_parity_rows_say_not_measured_without_the_report_and_name_their_function(tmp_path):
    missing = Context(parity_report=tmp_path / "absent.json")
    for function in ("parity_reconstruction", "parity_ablation", "parity_encoder_exact"):
        outcome = getattr(claims_module, function)(missing)
        assert outcome.verdict == NOT_MEASURED and "parity_report.json" in outcome.reason
    context = _parity_context(tmp_path, gelu=(3.0, 3.0))
    assert claims_module.parity_ablation(context).verdict == NOT_MEASURED
    row = measure_claim(claim_by_id("s003-ablation"), _parity_context(tmp_path), results={})
    assert (_meets(row), row.value, row.measured_by) == (MEETS, 0.5, "circuitlab.claims.parity_ablation")


def test_parity_rows_draw_intervals_over_the_reports_windows(tmp_path):
    """With per-window figures, reconstruction and ablation get a bootstrap interval over windows: brute force
    on the same resamples (the worst layer of each resample; the paired ratio of the two models' costs)."""
    import numpy as np

    from circuitlab.stats import N_RESAMPLES, _indices

    rng = np.random.default_rng(3)
    error = rng.uniform(0.5, 1.5, size=(2, 40)) * np.array([[0.02], [0.2]])
    norm = rng.uniform(0.8, 1.2, size=(2, 40))
    layers = [dict(layer=i, reconstruction=float(error[i].sum() / norm[i].sum()), agreement=1.0, certified=None,
                   window_error=error[i].tolist(), window_norm=norm[i].tolist()) for i in range(2)]
    plain = rng.uniform(250, 350, size=(2, 40))
    cost = rng.uniform(0.5, 1.5, size=(2, 40)) * np.array([[150], [300]])  # parity costs about half of gelu's
    record = dict(tokens=4000, design={}, layers=layers,
                  parity=dict(loss=plain[0].sum() / 4000, loss_writes_zeroed=(plain[0] + cost[0]).sum() / 4000,
                              window_losses=dict(loss=plain[0].tolist(), loss_writes_zeroed=(plain[0] + cost[0]).tolist())),
                  gelu=dict(loss=plain[1].sum() / 4000, loss_writes_zeroed=(plain[1] + cost[1]).sum() / 4000,
                            window_losses=dict(loss=plain[1].tolist(), loss_writes_zeroed=(plain[1] + cost[1]).tolist())))
    path = tmp_path / "parity_report.json"
    path.write_text(json.dumps(record))
    context = Context(parity_report=path)
    picked = _indices(40, N_RESAMPLES, 0)
    worst = np.max([error[i][picked].sum(1) / norm[i][picked].sum(1) for i in range(2)], axis=0)
    found = claims_module.parity_reconstruction(context)
    assert (found.estimate.low, found.estimate.high) == pytest.approx(tuple(np.percentile(worst, [2.5, 97.5])))
    assert found.value == pytest.approx(float(error[1].sum() / norm[1].sum()))
    assert found.verdict == REPRODUCED and "40 held-out windows" in found.reason  # the worst layer's ~0.2 < 0.3
    share = cost[0][picked].sum(1) / cost[1][picked].sum(1)
    ablation = claims_module.parity_ablation(context)
    assert (ablation.estimate.low, ablation.estimate.high) == pytest.approx(tuple(np.percentile(share, [2.5, 97.5])))
    assert ablation.estimate.low < ablation.value < ablation.estimate.high and ablation.verdict != REPRODUCED


def test_parity_reconstruction_is_judged_on_the_writes_variation_where_the_report_has_it(tmp_path):
    """A nearly constant write: tiny error of the write, half its variation lost. The row judges the error of
    the variation (bootstrap over windows against brute force) and sets the mean write's score beside the first."""
    import numpy as np

    from circuitlab.stats import N_RESAMPLES, _indices

    rng = np.random.default_rng(5)
    norm = rng.uniform(0.8, 1.2, size=(2, 30)) * 100.0
    spread = norm * np.array([[0.9], [0.005]])  # layer 1 writes almost the same vector at every token
    error = spread * np.array([[0.05], [0.5]]) * rng.uniform(0.8, 1.2, size=(2, 30))
    layers = [dict(layer=i, reconstruction=float(error[i].sum() / norm[i].sum()),
                   centred_reconstruction=float(error[i].sum() / spread[i].sum()),
                   variance_share=float(spread[i].sum() / norm[i].sum()), agreement=1.0, certified=None,
                   window_error=error[i].tolist(), window_norm=norm[i].tolist(), window_spread=spread[i].tolist())
              for i in range(2)]
    path = tmp_path / "parity_report.json"
    path.write_text(json.dumps(dict(tokens=3000, design={}, layers=layers, parity=dict(loss=3.0, loss_writes_zeroed=4.0))))
    found = claims_module.parity_reconstruction(Context(parity_report=path))
    picked = _indices(30, N_RESAMPLES, 0)
    worst = np.max([error[i][picked].sum(1) / spread[i][picked].sum(1) for i in range(2)], axis=0)
    assert (found.estimate.low, found.estimate.high) == pytest.approx(tuple(np.percentile(worst, [2.5, 97.5])))
    assert found.value == pytest.approx(float(error[1].sum() / spread[1].sum()))
    assert max(layer["reconstruction"] for layer in layers) < 0.1  # the plain error alone would pass the rule
    assert found.verdict == CONTRADICTED and "predates" not in found.reason
    assert found.nulls == {f"layer 1's mean write in place of its code, error of the write (the code's "
                           f"{layers[1]['reconstruction']:.3f})": pytest.approx(layers[1]["variance_share"])}
    assert "of the write's variation around its mean 0.0" in found.ours


# --- analyses/claims.json: the schema, and that it carries the same rows as claims.md ---------------------


def check_claims_json(rows: list[dict]) -> None:
    """The schema of analyses/claims.json (issue 37): every field, intervals around their estimates, nulls by
    name, a config, a known verdict, and a measured row's interval or the reason it has none."""
    from circuitlab.claims import JSON_FIELDS

    assert rows and len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert set(JSON_FIELDS) <= set(row), row["id"]
        assert row["verdict"] in VERDICTS and isinstance(row["config"], str) and row["config"], row["id"]
        assert all(isinstance(row[name], str) for name in ("id", "claim", "paper", "reason", "rule", "measured_by"))
        estimate, ci95, null = row["estimate"], row["ci95"], row["null"]
        assert estimate is None or isinstance(estimate, (int, float))
        if ci95 is not None:
            assert len(ci95) == 2 and all(isinstance(x, (int, float)) for x in ci95) and ci95[0] <= ci95[1], row["id"]
            assert estimate is None or ci95[0] - 1e-6 <= estimate <= ci95[1] + 1e-6, row["id"]
        assert null is None or (isinstance(null, dict) and all(
            isinstance(name, str) and (value is None or isinstance(value, (int, float))) for name, value in null.items()))
        if row["verdict"] in (REPRODUCED, CONTRADICTED):
            assert ci95 is not None, f"{row['id']}: {row['verdict']!r} needs a 95% interval"
        elif row["verdict"] != NOT_MEASURED and ci95 is None:
            assert row["reason"], f"{row['id']}: a measured row without an interval must say why"
        else:
            assert row["verdict"] != NOT_MEASURED or row["reason"], f"{row['id']}: 'not measured' needs a reason"


def test_claims_json_of_constructed_rows_round_trips(tmp_path):
    from circuitlab.claims import claims_json, read_claims_json

    rows = [ClaimRow(id="s000-a", seed="000", place="p", claim="c", paper="q", ours="2.0 [1.8, 2.2]", verdict=REPRODUCED,
                     reason="r", rule="> 1.5", measured_by="m", value=2.0, ci95=[1.8, 2.2], null={"gelu-stories": 1.1}),
            ClaimRow(id="s002-b", seed="002", place="p", claim="c", paper="q", ours="-", verdict=NOT_MEASURED,
                     reason="no sweep", rule="r", measured_by="", config="centred operands")]
    path = tmp_path / "claims.json"
    path.write_text(claims_json(rows))
    back = read_claims_json(path)
    check_claims_json(back)
    assert back[0]["estimate"] == 2.0 and back[0]["ci95"] == [1.8, 2.2] and back[0]["null"] == {"gelu-stories": 1.1}
    assert back[1]["config"] == "centred operands" and back[1]["ci95"] is None
    path.write_text(json.dumps([{"id": "x", "verdict": "maybe"}]))
    with pytest.raises(UserError, match="lacks"):
        read_claims_json(path)


def test_the_committed_claims_json_follows_the_schema_and_matches_claims_md():
    from circuitlab.claims import read_claims_json

    rows = read_claims_json(ROOT / "analyses" / "claims.json")
    check_claims_json(rows)
    markdown = read_claims(ROOT / "analyses" / "claims.md")
    assert [(r["id"], r["verdict"], r["ours"]) for r in rows] == [(r["id"], r["verdict"], r["ours"]) for r in markdown]


@needs_models
@pytest.mark.slow
def test_fast_run_writes_claims_json_beside_claims_md(fast_run):
    from circuitlab.claims import read_claims_json

    out, markdown = fast_run
    rows = read_claims_json(out.with_suffix(".json"))
    check_claims_json(rows)
    assert [(r["id"], r["verdict"], r["ours"], r["config"]) for r in rows] == \
        [(r["id"], r["verdict"], r["ours"], r["config"]) for r in markdown]


def _with_heads(model: dict, on: list[float]) -> dict:
    return {**model, "by_head": [dict(layer=i // 2, head=i % 2, n_operands=64, on_fraction=v, selective=0.5)
                                 for i, v in enumerate(on)]}


def test_sweep_rows_bootstrap_over_heads_and_read_the_no_pressure_null(tmp_path):
    """A rate with per-head values gets an interval over the heads; the no-pressure model is its null."""
    crisp_heads = [0.11, 0.12, 0.13, 0.12, 0.115, 0.125, 0.12, 0.12]
    for none_on, expected in ((0.5, REPRODUCED), (0.10, INCONCLUSIVE)):
        models = [_with_heads(m, crisp_heads) if m["regime"] == "crispness alone" else
                  _with_heads(m, [none_on] * 8) if m["regime"] == "none" else m for m in _paper_sweep()]
        outcome = claims_module.paper_attention_on(_sweep_context(tmp_path, models))
        assert outcome.verdict == expected and outcome.estimate.low is not None
        assert outcome.estimate.low <= 12.0 <= outcome.estimate.high and outcome.nulls == {"no pressure": 100 * none_on}
        if expected == INCONCLUSIVE:
            assert "metric at ceiling" in outcome.reason
    far = [_with_heads(m, [0.5] * 8) if m["regime"] == "crispness alone" else m for m in _paper_sweep()]
    assert claims_module.paper_attention_on(_sweep_context(tmp_path, far)).verdict == CONTRADICTED


def test_seed_002_judges_the_paper_configuration_and_names_each_deviation():
    from circuitlab.claims import PAPER

    ids = {claim.id: claim for claim in CLAIMS if claim.seed == "002"}
    for claim_id, claim in ids.items():
        if claim.config != PAPER:
            assert claim_id.endswith("-centred") and "centred" in claim.config
            assert claim_id.removesuffix("-centred") in ids and ids[claim_id.removesuffix("-centred")].config == PAPER
