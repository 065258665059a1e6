"""circuitlab.analysis.parity_report and parity_figures: the verdicts against the parity issue's targets, the
tables and figures the dashboard's Parity page shows (numbers equal to the report's, verdicts recomputed from
them), reports written before the usage diagnostics read as "not measured", and clear errors for files of
another shape."""

from __future__ import annotations

import json
import math

import pytest

from circuitlab.analysis.parity_figures import (
    ablation_figure,
    beam_figure,
    layer_ablation_figure,
    layer_figure,
    report_firing_figure,
)
from circuitlab.analysis.parity_report import (
    NOT_MEASURED,
    TARGETS,
    ablation_table,
    beam_table,
    check_parity_report,
    layer_ablation_table,
    layer_table,
    load_parity_report,
    target_table,
    targets,
    usage_table,
)
from circuitlab.errors import UserError
from parity_fixtures import (
    CONSTRUCTED_LAYER_VERDICTS,
    CONSTRUCTED_MEASURED,
    CONSTRUCTED_USAGE_VERDICTS,
    CONSTRUCTED_VERDICTS,
    NEW_TARGETS,
    PRODUCT_REPORT,
    SHIPPED_REPORT,
    constructed_report,
    older_constructed_report,
    product_report,
    shipped_report,
)

REPORTS = {"shipped": shipped_report, "product": product_report, "constructed": constructed_report,
           "older": older_constructed_report}


def _expected_verdict(key: str, measured: float | None) -> str:
    """The verdict by the target's definition, written out apart from parity_report's code."""
    if measured is None:
        return NOT_MEASURED
    threshold = {"reconstruction": 0.05, "agreement": 0.99, "effective_features": 2000, "top_feature_share": 0.10,
                 "dead_share": 0.20, "mean_ablation_share": 0.5, "ablation_share": 0.5, "loss_ratio": 1.05,
                 "perplexity_ratio": 1.05}[key]
    met = {"reconstruction": measured < threshold, "agreement": measured >= threshold,
           "effective_features": measured >= threshold, "top_feature_share": measured <= threshold,
           "dead_share": measured < threshold, "mean_ablation_share": measured >= threshold,
           "ablation_share": measured >= threshold, "loss_ratio": measured <= threshold,
           "perplexity_ratio": measured <= threshold}[key]
    return "met" if met else "missed"


def test_the_targets_are_the_issues():
    assert {key: target.text for key, target in TARGETS.items()} == {
        "reconstruction": "< 0.05", "agreement": ">= 0.99", "effective_features": ">= 2000",
        "top_feature_share": "<= 0.1", "dead_share": "< 0.2", "mean_ablation_share": ">= 0.5",
        "ablation_share": ">= 0.5", "loss_ratio": "<= 1.05", "perplexity_ratio": "<= 1.05"}


@pytest.mark.parametrize("which", list(REPORTS))
def test_the_target_table_shows_the_reports_numbers_and_their_verdicts(which):
    """Measured = the worst layer's figure (or the report's ratio); the verdict follows from it by the target's
    definition, whatever the shipped model scored."""
    report = check_parity_report(REPORTS[which]())
    worst = {"reconstruction": max, "agreement": min, "effective_features": min, "top_feature_share": max,
             "dead_share": max}
    table = target_table(report)
    assert [row["target"] for row in table] == list(TARGETS)
    for row in table:
        key = row["target"]
        values = [layer.get(key) for layer in report["layers"]]
        if key in worst:
            expected = None if None in values else worst[key](values)
        else:
            expected = report.get(key)
        assert row["measured"] == expected, key
        assert row["verdict"] == _expected_verdict(key, expected), key
        assert row["target value"] == TARGETS[key].text


def test_the_first_models_report_says_not_measured_for_what_it_predates_and_keeps_the_scripts_numbers():
    report = load_parity_report(PRODUCT_REPORT)
    verdicts = {row["target"]: row["verdict"] for row in target_table(report)}
    assert {key for key, value in verdicts.items() if value == NOT_MEASURED} == set(NEW_TARGETS)
    # the figures the script judged when it wrote the file are the ones judged now (against today's thresholds)
    recomputed = targets(report)
    assert set(recomputed) == set(report["targets"])
    assert {key: value["measured"] for key, value in recomputed.items()} == {
        key: value["measured"] for key, value in report["targets"].items()}


def test_the_constructed_report_meets_and_misses_what_it_was_built_to():
    report = check_parity_report(constructed_report())
    table = target_table(report)
    assert {row["target"]: row["verdict"] for row in table} == CONSTRUCTED_VERDICTS
    assert {row["target"]: row["measured"] for row in table} == CONSTRUCTED_MEASURED
    assert [(row["reconstruction verdict"], row["agreement verdict"]) for row in layer_table(report)] == CONSTRUCTED_LAYER_VERDICTS
    assert [(row["effective features verdict"], row["top feature share verdict"], row["dead share verdict"])
            for row in usage_table(report)] == CONSTRUCTED_USAGE_VERDICTS


@pytest.mark.parametrize("which", list(REPORTS))
def test_the_layer_and_usage_tables_show_the_reports_numbers(which):
    report = REPORTS[which]()
    rows, usage = layer_table(check_parity_report(report)), usage_table(report)
    m = 2 ** report["design"]["n_bits"]
    gelu = report["gelu"]
    assert [row["layer"] for row in rows] == [row["layer"] for row in usage] == list(range(len(report["layers"])))
    for row, used, layer in zip(rows, usage, report["layers"], strict=True):
        assert row["reconstruction"] == layer["reconstruction"]
        assert row["agreement"] == layer["agreement"]
        assert row["certified"] == layer["certified"]
        assert row["write / residual"] == layer["write_over_residual"]
        assert row["GELU write / residual"] == gelu["write_over_residual"][layer["layer"]]
        assert row["coherence"] == layer["coherence"]
        assert (row["reconstruction target"], row["agreement target"]) == ("< 0.05", ">= 0.99")
        assert row["reconstruction verdict"] == _expected_verdict("reconstruction", layer["reconstruction"])
        assert row["agreement verdict"] == _expected_verdict("agreement", layer["agreement"])
        assert used["features used"] == layer["distinct_features"]
        assert used["share of dictionary"] == layer["distinct_features"] / m
        assert used["top-100 share"] == layer["top100_share"]
        assert used["features over 10%"] == layer.get("over_10_percent")
        assert used["participation ratio"] == layer.get("participation_ratio")
        gelu_ratio = None if gelu.get("participation_ratio") is None else gelu["participation_ratio"][layer["layer"]]
        assert used["GELU participation ratio"] == gelu_ratio
        for key, label in (("effective_features", "effective features"), ("top_feature_share", "top feature share"),
                           ("dead_share", "dead share")):
            assert used[label] == layer.get(key)
            assert used[f"{label} target"] == TARGETS[key].text
            assert used[f"{label} verdict"] == _expected_verdict(key, layer.get(key))


@pytest.mark.parametrize("which", ["constructed", "older"])
def test_a_report_without_a_gelu_model_says_not_measured(which):
    report = REPORTS[which]()
    for key in ("gelu", "ablation_share", "perplexity_ratio", "mean_ablation_share", "loss_ratio"):
        report.pop(key, None)
    report = check_parity_report(report)
    verdicts = {row["target"]: (row["measured"], row["verdict"]) for row in target_table(report)}
    for key in ("ablation_share", "perplexity_ratio", "mean_ablation_share", "loss_ratio"):
        assert verdicts[key] == (None, NOT_MEASURED)
    assert verdicts["reconstruction"] == (0.05, "missed")
    assert [row["model"] for row in ablation_table(report)] == ["parity"]
    assert all(row["GELU write / residual"] is None for row in layer_table(report))
    assert all(row["GELU participation ratio"] is None for row in usage_table(report))
    assert [trace.name for trace in layer_figure(report).data if "GELU" in trace.name] == []
    if which == "constructed":  # the parity model's own ablations per layer stay, the GELU columns are empty
        rows = layer_ablation_table(report)
        assert [row["parity zeroed"] for row in rows] == [0.5, 0.25, pytest.approx(0.8)]
        assert {row["GELU zeroed"] for row in rows} == {None} and {row["zeroed share"] for row in rows} == {None}


@pytest.mark.parametrize("which", list(REPORTS))
def test_the_beam_and_ablation_tables_show_the_reports_numbers(which):
    report = REPORTS[which]()
    beams = beam_table(check_parity_report(report))
    if all(layer.get("by_beam") is None for layer in report["layers"]):  # the linear design: no beam to vary
        assert beams == []
    else:
        expected = [(layer["layer"], int(beam), figures["agreement"], figures["certified"])
                    for layer in report["layers"] for beam, figures in layer["by_beam"].items()]
        assert sorted((row["layer"], row["beam"], row["agreement"], row["certified"]) for row in beams) == sorted(expected)
        assert {row["beam"] for row in beams if row["configured"]} == {report["design"]["beam"]}
        configured = {row["layer"]: row["agreement"] for row in beams if row["configured"]}
        assert configured == {layer["layer"]: layer["agreement"] for layer in report["layers"]}  # the headline beam

    parity, gelu = ablation_table(report)
    assert (parity["loss"], parity["loss zeroed"]) == (report["parity"]["loss"], report["parity"]["loss_writes_zeroed"])
    assert (gelu["loss"], gelu["loss zeroed"]) == (report["gelu"]["loss"], report["gelu"]["loss_writes_zeroed"])
    assert parity["loss mean-ablated"] == report["parity"].get("loss_writes_mean_ablated")
    assert parity["zeroing cost"] / gelu["zeroing cost"] == pytest.approx(report["ablation_share"], rel=1e-12)
    assert parity["perplexity"] / gelu["perplexity"] == pytest.approx(report["perplexity_ratio"], rel=1e-12)
    assert gelu["perplexity zeroed"] == pytest.approx(math.exp(report["gelu"]["loss_writes_zeroed"]), rel=1e-15)
    if report.get("mean_ablation_share") is None:
        assert parity["mean-ablation cost"] is None and layer_ablation_table(report) == []
    else:
        assert parity["mean-ablation cost"] / gelu["mean-ablation cost"] == pytest.approx(report["mean_ablation_share"], rel=1e-12)


def test_the_layer_ablation_table_shows_each_layers_costs_and_all_layers_at_once():
    report = constructed_report()
    rows = layer_ablation_table(check_parity_report(report))
    assert [row["layer"] for row in rows] == ["0", "1", "all"]
    parity, gelu = report["parity"], report["gelu"]
    for layer, row in enumerate(rows[:2]):
        assert row["parity zeroed"] == parity["zeroed_by_layer"][layer]
        assert row["parity mean-ablated"] == parity["mean_ablated_by_layer"][layer]
        assert row["GELU zeroed"] == gelu["zeroed_by_layer"][layer]
        assert row["GELU mean-ablated"] == gelu["mean_ablated_by_layer"][layer]
    assert [row["zeroed share"] for row in rows[:2]] == [0.5 / 1.5, 0.25 / 0.75]
    assert [row["mean-ablated share"] for row in rows[:2]] == [0.375 / 0.75, 0.125 / 0.5]
    everything = rows[2]
    assert everything["parity zeroed"] == pytest.approx(0.8, abs=1e-12)
    assert everything["parity mean-ablated"] == pytest.approx(0.625, abs=1e-12)
    assert everything["GELU zeroed"] == pytest.approx(2.0, abs=1e-12)
    assert everything["GELU mean-ablated"] == pytest.approx(1.0, abs=1e-12)
    assert everything["zeroed share"] == pytest.approx(report["ablation_share"], rel=1e-12)
    assert everything["mean-ablated share"] == pytest.approx(report["mean_ablation_share"], rel=1e-12)


@pytest.mark.parametrize("path", [SHIPPED_REPORT, PRODUCT_REPORT], ids=["shipped", "product"])
def test_the_figures_draw_the_reports_numbers(path):
    report = load_parity_report(path)
    traces = {trace.name: list(trace.y) for trace in layer_figure(report).data}
    assert traces["reconstruction"] == [layer["reconstruction"] for layer in report["layers"]]
    assert traces["agreement"] == [layer["agreement"] for layer in report["layers"]]
    assert traces["parity write"] == [layer["write_over_residual"] for layer in report["layers"]]
    assert traces["GELU FFN write"] == report["gelu"]["write_over_residual"]
    assert traces["uses by the top-100 features"] == [layer["top100_share"] for layer in report["layers"]]
    if path == SHIPPED_REPORT:  # the linear design: exhaustive (nothing to certify), usage measured
        assert traces.get("certified exact", [None] * 4) == [None] * 4
        assert traces["tokens using the top feature"] == [layer["top_feature_share"] for layer in report["layers"]]
        assert list(beam_figure(report).data) == []
        return
    assert traces["certified exact"] == [layer["certified"] for layer in report["layers"]]
    assert "tokens using the top feature" not in traces  # not measured in the first model's report
    lines = {trace.name: (list(trace.x), list(trace.y)) for trace in beam_figure(report).data}
    by_beam = report["layers"][2]["by_beam"]
    assert lines["L2 certified"] == ([16, 32, 64, 128], [by_beam[beam]["certified"] for beam in ("16", "32", "64", "128")])
    bars = {trace.name: list(trace.y) for trace in ablation_figure(report).data}
    assert bars == {"loss": [report["parity"]["loss"], report["gelu"]["loss"]],
                    "every write zeroed": [report["parity"]["loss_writes_zeroed"], report["gelu"]["loss_writes_zeroed"]]}
    firing = report_firing_figure(report)
    assert list(firing.data) == [] and "layer 0: not measured" in [note.text for note in firing.layout.annotations]


def test_the_new_figures_draw_the_constructed_reports_numbers():
    report = constructed_report()
    traces = {trace.name: list(trace.y) for trace in layer_figure(report).data}
    assert traces["tokens using the top feature"] == [0.1, 0.25]
    assert "reconstruction of the write's variation" not in traces  # not in a report before it was measured
    assert [row["reconstruction of the variation"] for row in layer_table(report)] == [None, None]
    for layer, (centred, share) in zip(report["layers"], [(0.4, 0.01), (0.08, 0.9)], strict=True):
        layer.update(centred_reconstruction=centred, variance_share=share)
    report["gelu"]["variance_share"] = [0.95, 0.85]
    report = check_parity_report(report)
    traces = {trace.name: list(trace.y) for trace in layer_figure(report).data}
    assert traces["reconstruction of the write's variation"] == [0.4, 0.08]
    rows = layer_table(report)
    assert [(row["write variation share"], row["GELU write variation share"]) for row in rows] == [(0.01, 0.95), (0.9, 0.85)]
    report["gelu"]["variance_share"] = [0.95]
    with pytest.raises(UserError, match="gelu.variance_share has 1 layers, the parity model 2"):
        check_parity_report(report)
    firing = report_firing_figure(report)
    assert len(firing.data) == 2 and firing.layout.xaxis.type == "log"
    for trace, layer in zip(firing.data, report["layers"], strict=True):
        histogram = layer["firing_histogram"]
        assert list(trace.x) == histogram["edges"]
        assert list(trace.y)[:-1] == histogram["counts"]  # a step per bin; the last count is repeated to close it
    titles = [note.text for note in firing.layout.annotations]
    assert titles == ["layer 0: dead parity 410", "layer 1: dead parity 1,024"]
    bars = {trace.name: list(trace.y) for trace in ablation_figure(report).data}
    assert bars["every write mean-ablated"] == [report["parity"]["loss_writes_mean_ablated"],
                                                report["gelu"]["loss_writes_mean_ablated"]]
    costs = {trace.name: list(trace.y) for trace in layer_ablation_figure(report).data}
    assert costs["parity mean-ablated"] == [row["parity mean-ablated"] for row in layer_ablation_table(report)]
    assert costs["GELU zeroed"][:2] == report["gelu"]["zeroed_by_layer"]


def _with(**changes) -> str:
    return json.dumps({**constructed_report(), **changes})


def _with_layer(field, value) -> str:
    report = constructed_report()
    report["layers"][1][field] = value
    return json.dumps(report)


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
        (_with(parity={**constructed_report()["parity"], "mean_ablated_by_layer": [0.1, 0.2, 0.3]}),
         "parity.mean_ablated_by_layer has 3 layers, the parity model 2"),
        (_with(parity={"loss": "3.0", "loss_writes_zeroed": 4.0}), "parity.loss: Input should be a valid number"),
        (_with_layer("dead_share", "0.25"), "layers.1.dead_share: Input should be a valid number"),
        (_with_layer("firing_histogram", {"edges": [1e-7, 1.0], "counts": [1, 2], "dead": 0}),
         "layer 1's firing_histogram has 2 counts for 2 edges"),
    ],
    ids=["missing", "not-json", "list", "legibility-report", "no-layers", "misnumbered", "gelu-depth",
         "by-layer-depth", "string-loss", "string-share", "histogram-bins"],
)
def test_a_file_of_another_shape_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as error:
        load_parity_report(path)
    assert message in str(error.value)
