"""circuitlab.analysis.parity_report: the verdicts against the parity issue's targets, the tables and figures the
dashboard's Parity page shows (numbers equal to the report's), and clear errors for files of another shape."""

from __future__ import annotations

import json
import math

import pytest

from circuitlab.analysis.parity_report import (
    TARGETS,
    ablation_figure,
    ablation_table,
    beam_figure,
    beam_table,
    check_parity_report,
    layer_figure,
    layer_table,
    load_parity_report,
    target_table,
    targets,
)
from circuitlab.errors import UserError
from parity_fixtures import (
    CONSTRUCTED_LAYER_VERDICTS,
    CONSTRUCTED_VERDICTS,
    SHIPPED_REPORT,
    constructed_report,
    shipped_report,
)


def test_the_targets_are_the_issues():
    assert {key: target.text for key, target in TARGETS.items()} == {
        "reconstruction": "< 0.3", "agreement": ">= 0.9", "ablation_share": ">= 0.5", "perplexity_ratio": "<= 1.05"}


def test_the_verdicts_recomputed_equal_those_the_script_wrote_into_the_shipped_report():
    report = load_parity_report(SHIPPED_REPORT)
    assert targets(report) == report["targets"]


@pytest.mark.parametrize("which", ["shipped", "constructed"])
def test_the_layer_table_shows_the_reports_numbers(which):
    report = shipped_report() if which == "shipped" else constructed_report()
    rows = layer_table(check_parity_report(report))
    m = 2 ** report["design"]["n_bits"]
    assert [row["layer"] for row in rows] == list(range(len(report["layers"])))
    for row, layer, gelu_ratio in zip(rows, report["layers"], report["gelu"]["write_over_residual"], strict=True):
        assert row["reconstruction"] == layer["reconstruction"]
        assert row["agreement"] == layer["agreement"]
        assert row["certified"] == layer["certified"]
        assert row["write / residual"] == layer["write_over_residual"]
        assert row["GELU write / residual"] == gelu_ratio
        assert row["features used"] == layer["distinct_features"]
        assert row["share of dictionary"] == layer["distinct_features"] / m
        assert row["top-100 share"] == layer["top100_share"]
        assert row["coherence"] == layer["coherence"]
        assert (row["reconstruction target"], row["agreement target"]) == ("< 0.3", ">= 0.9")


def test_the_shipped_report_meets_every_target_in_every_layer():
    report = load_parity_report(SHIPPED_REPORT)
    assert {row["verdict"] for row in target_table(report)} == {"met"}
    assert {(row["reconstruction verdict"], row["agreement verdict"]) for row in layer_table(report)} == {("met", "met")}
    measured = {row["target"]: row["measured"] for row in target_table(report)}
    assert measured == {key: value["measured"] for key, value in report["targets"].items()}


def test_the_constructed_report_meets_and_misses_what_it_was_built_to():
    report = check_parity_report(constructed_report())
    table = target_table(report)
    assert {row["target"]: row["verdict"] for row in table} == CONSTRUCTED_VERDICTS
    assert {row["target"]: row["measured"] for row in table} == {
        "reconstruction": 0.3, "agreement": 0.875, "ablation_share": 0.4, "perplexity_ratio": 1.04}
    assert [(row["reconstruction verdict"], row["agreement verdict"]) for row in layer_table(report)] == CONSTRUCTED_LAYER_VERDICTS


def test_a_report_without_a_gelu_model_says_not_measured():
    report = constructed_report()
    for key in ("gelu", "ablation_share", "perplexity_ratio"):
        del report[key]
    report = check_parity_report(report)
    verdicts = {row["target"]: (row["measured"], row["verdict"]) for row in target_table(report)}
    assert verdicts["ablation_share"] == verdicts["perplexity_ratio"] == (None, "not measured")
    assert verdicts["reconstruction"] == (0.3, "missed")
    assert [row["model"] for row in ablation_table(report)] == ["parity"]
    assert all(row["GELU write / residual"] is None for row in layer_table(report))
    assert [trace.name for trace in layer_figure(report).data if "GELU" in trace.name] == []


@pytest.mark.parametrize("which", ["shipped", "constructed"])
def test_the_beam_and_ablation_tables_show_the_reports_numbers(which):
    report = shipped_report() if which == "shipped" else constructed_report()
    beams = beam_table(check_parity_report(report))
    expected = [(layer["layer"], int(beam), figures["agreement"], figures["certified"])
                for layer in report["layers"] for beam, figures in layer["by_beam"].items()]
    assert sorted((row["layer"], row["beam"], row["agreement"], row["certified"]) for row in beams) == sorted(expected)
    assert {row["beam"] for row in beams if row["configured"]} == {report["design"]["beam"]}
    configured = {row["layer"]: row["agreement"] for row in beams if row["configured"]}
    assert configured == {layer["layer"]: layer["agreement"] for layer in report["layers"]}  # the headline beam

    parity, gelu = ablation_table(report)
    assert (parity["loss"], parity["loss zeroed"]) == (report["parity"]["loss"], report["parity"]["loss_writes_zeroed"])
    assert (gelu["loss"], gelu["loss zeroed"]) == (report["gelu"]["loss"], report["gelu"]["loss_writes_zeroed"])
    assert parity["cost"] / gelu["cost"] == pytest.approx(report["ablation_share"], rel=1e-12)
    assert parity["perplexity"] / gelu["perplexity"] == pytest.approx(report["perplexity_ratio"], rel=1e-12)
    assert gelu["perplexity zeroed"] == pytest.approx(math.exp(report["gelu"]["loss_writes_zeroed"]), rel=1e-15)


def test_the_figures_draw_the_reports_numbers():
    report = load_parity_report(SHIPPED_REPORT)
    traces = {trace.name: list(trace.y) for trace in layer_figure(report).data}
    assert traces["reconstruction"] == [layer["reconstruction"] for layer in report["layers"]]
    assert traces["agreement"] == [layer["agreement"] for layer in report["layers"]]
    assert traces["certified exact"] == [layer["certified"] for layer in report["layers"]]
    assert traces["parity write"] == [layer["write_over_residual"] for layer in report["layers"]]
    assert traces["GELU FFN write"] == report["gelu"]["write_over_residual"]
    assert traces["uses by the top-100 features"] == [layer["top100_share"] for layer in report["layers"]]
    lines = {trace.name: (list(trace.x), list(trace.y)) for trace in beam_figure(report).data}
    by_beam = report["layers"][2]["by_beam"]
    assert lines["L2 certified"] == ([16, 32, 64, 128], [by_beam[beam]["certified"] for beam in ("16", "32", "64", "128")])
    bars = {trace.name: list(trace.y) for trace in ablation_figure(report).data}
    assert bars == {"loss": [report["parity"]["loss"], report["gelu"]["loss"]],
                    "every write zeroed": [report["parity"]["loss_writes_zeroed"], report["gelu"]["loss_writes_zeroed"]]}


def _with(**changes) -> str:
    return json.dumps({**constructed_report(), **changes})


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist; write it with `circuitlab report parity`"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "is a JSON list, expected an object"),
        (json.dumps({"version": 1, "models": []}), "is not a parity report (model: Field required"),  # a legibility report
        (_with(layers=[]), "has no layers"),
        (_with(layers=constructed_report()["layers"][::-1]), "layers are numbered [1, 0], expected 0 to 1 in order"),
        (_with(gelu={**constructed_report()["gelu"], "write_over_residual": [0.5]}),
         "gelu.write_over_residual has 1 layers, the parity model 2"),
        (_with(parity={"loss": "3.0", "loss_writes_zeroed": 4.0}), "parity.loss: Input should be a valid number"),
    ],
    ids=["missing", "not-json", "list", "legibility-report", "no-layers", "misnumbered", "gelu-depth", "string-loss"],
)
def test_a_file_of_another_shape_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as error:
        load_parity_report(path)
    assert message in str(error.value)
