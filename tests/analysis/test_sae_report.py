"""circuitlab.analysis.sae_report: the sparse autoencoder comparison read and checked, and its table, markdown
and figures showing the file's numbers (nothing recomputed), on a constructed comparison; clear errors for
files of another shape."""

from __future__ import annotations

import json

import pytest

from circuitlab.analysis.sae_report import (
    CODES,
    check_sae_comparison,
    comparison_figure,
    comparison_firing_figure,
    comparison_markdown,
    comparison_table,
    load_sae_comparison,
)
from circuitlab.errors import UserError
from parity_fixtures import constructed_report, constructed_sae_comparison

FIELDS = {"reconstruction": "reconstruction", "loss added": "loss_added", "effective features": "effective_features",
          "top feature share": "top_feature_share", "features over 10%": "over_10_percent", "dead share": "dead_share",
          "probe accuracy": "probe", "raw-write probe accuracy": "raw_probe"}


def test_the_table_shows_every_layer_and_code_and_the_loss_of_all_layers_at_once():
    report = check_sae_comparison(constructed_sae_comparison())
    rows = comparison_table(report)
    assert [(row["layer"], row["code"]) for row in rows] == [
        ("0", "parity bottleneck"), ("0", "top-k SAE"), ("1", "parity bottleneck"), ("1", "top-k SAE"),
        ("all", "parity bottleneck"), ("all", "top-k SAE")]
    for row in rows[:4]:
        figures = report["layers"][int(row["layer"])]["parity" if row["code"] == "parity bottleneck" else "sae"]
        for column, key in FIELDS.items():
            assert row[column] == figures[key], column
        assert row["majority baseline"] == 0.375
    assert rows[4]["loss added"] == 0.125 and rows[5]["loss added"] == 0.25  # parity coded - uncoded; GELU spliced - plain
    assert all(rows[4][column] is None and rows[5][column] is None for column in FIELDS if column != "loss added")


def test_the_markdown_writes_the_numbers_of_the_file():
    text = comparison_markdown(constructed_sae_comparison())
    lines = text.splitlines()
    assert lines[0].startswith("parity bottleneck of models/made-up-parity beside top-k sparse autoencoders (m 4,096, k 8)")
    assert "| 0 | top-k SAE | 0.1250 | +0.0625 | 1,500.0 | 0.500 | 2 | 0.250 | 0.750 | 0.875 |" in lines
    assert "| 1 | parity bottleneck | 0.5000 | +0.0938 | 999.5 | 0.062 | 0 | 0.002 | 0.688 | 0.750 |" in lines
    assert "| all | top-k SAE | - | +0.2500 | - | - | - | - | - | - |" in lines
    assert "GELU loss 2.9000; every write replaced by its autoencoder's reconstruction 3.1500 (+0.2500)" in text
    assert "parity loss 3.0000; every bottleneck skipped (writes uncoded) 2.8750 (coding adds +0.1250)" in text
    assert "800 training and 200 test tokens" in text and "majority class 0.375" in text


def test_the_figures_draw_the_files_numbers():
    report = constructed_sae_comparison()
    bars = {}
    for trace in comparison_figure(report).data:
        bars.setdefault(trace.name, []).append(list(trace.y))
    for key, name in CODES.items():
        reconstruction, loss_added, effective = bars[name]
        assert reconstruction == [layer[key]["reconstruction"] for layer in report["layers"]]
        assert loss_added == [layer[key]["loss_added"] for layer in report["layers"]]
        assert effective == [layer[key]["effective_features"] for layer in report["layers"]]
        assert bars[f"{name}: code"] == [[layer[key]["probe"] for layer in report["layers"]]]
        assert bars[f"{name}: raw write"] == [[layer[key]["raw_probe"] for layer in report["layers"]]]
    assert [shape.y0 for shape in comparison_figure(report).layout.shapes] == [0.375]  # the majority baseline
    firing = comparison_firing_figure(report)
    assert firing.layout.xaxis.type == "log"
    steps = [(trace.name, list(trace.y)) for trace in firing.data]
    expected = [(name, layer[key]["firing_histogram"]["counts"] + layer[key]["firing_histogram"]["counts"][-1:])
                for key, name in CODES.items() for layer in report["layers"]]
    assert steps == expected
    assert [note.text for note in firing.layout.annotations] == [
        "layer 0: dead parity bottleneck 410, top-k SAE 1,024", "layer 1: dead parity bottleneck 8, top-k SAE 2,048"]


def _broken(change) -> str:
    report = constructed_sae_comparison()
    change(report)
    return json.dumps(report)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist; write it with `circuitlab report sae`"),
        ("{not json", "is not JSON"),
        ("[1]", "is a JSON list, expected an object"),
        (json.dumps(constructed_report()), "is not a sparse autoencoder comparison (kind: Field required"),
        (_broken(lambda report: report.update(kind="parity")), "is a 'parity' report, not a sparse autoencoder"),
        (_broken(lambda report: report.update(layers=report["layers"][::-1])), "layers are numbered [1, 0]"),
        (_broken(lambda report: report["layers"][1]["sae"].update(probe="0.5")),
         "layers.1.sae.probe: Input should be a valid number"),
        (_broken(lambda report: report["layers"][0]["parity"]["firing_histogram"].update(counts=[1, 2])),
         "layer 0's parity firing_histogram has 2 counts for 8 edges"),
    ],
    ids=["missing", "not-json", "list", "parity-report", "other-kind", "misnumbered", "string-probe", "histogram-bins"],
)
def test_a_file_of_another_shape_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "comparison.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as error:
        load_sae_comparison(path)
    assert message in str(error.value)
