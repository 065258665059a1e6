"""The dashboard, page by page, under streamlit's AppTest: every page renders its key elements without an
exception, missing artifacts say which command makes them, and odd input gives a message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the dashboard end to end: every page rendered for every model

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from circuitlab.demo.runfolder import RUN_MANIFEST
from demo_fixtures import build_runs

APP = str(Path(__file__).resolve().parents[2] / "apps" / "app.py")
PAGES = {
    "Overview": "views/overview.py",
    "Circuit lookup": "views/lookup.py",
    "Circuit map": "views/circuit_map.py",
    "Patching": "views/patching.py",
    "Legibility": "views/legibility.py",
    "Pressure regimes": "views/regimes.py",
    "Parity bottleneck": "views/parity.py",
    "Attribution": "views/attribution.py",
    "Neurons": "views/neurons.py",
}


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    return build_runs(tmp_path_factory.getbasetemp() / "circuitlab-demo")


def open_page(run: Path, page: str) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=120)
    app.session_state["run_path"] = str(run)
    app.run()
    app.switch_page(PAGES[page])
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert [title.value for title in app.title] == [page]
    return app


def plotly_charts(app: AppTest) -> list:
    return list(app.get("plotly_chart"))


def texts(elements) -> str:
    return " ".join(str(element.value) for element in elements)


# ---------------------------------------------------------------------------------------- every page


# the pages about one design, and the models they describe
DESCRIBED = {"Pressure regimes": {"tiny-legible"}, "Parity bottleneck": {"tiny-parity"}}
MODELS = ["tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-gelu"]


@pytest.mark.parametrize("page", list(PAGES))
@pytest.mark.parametrize("model", MODELS)
def test_every_page_renders_for_every_model_it_describes(demo_runs, model, page):
    _, _, runs = demo_runs
    if model not in DESCRIBED.get(page, MODELS):
        pytest.skip(f"{page} is not shown for {model}")
    app = open_page(runs[model], page)
    assert not app.error, texts(app.error)
    # the one warning a page may show: random-weight tiny models can tell no fact pair apart, so there is no NIE
    # to draw (the Patching page says why instead of drawing an empty heatmap)
    warnings = [text for text in (str(element.value) for element in app.warning) if "no NIE to average" not in text]
    assert not warnings, warnings


@pytest.mark.parametrize("model", MODELS)
def test_design_pages_appear_only_for_the_models_they_describe(demo_runs, model):
    _, _, runs = demo_runs
    app = AppTest.from_file(APP, default_timeout=120)
    app.session_state["run_path"] = str(runs[model])
    app.run()
    for page, described in DESCRIBED.items():
        if model in described:
            app.switch_page(PAGES[page])
            app.run()
            assert [title.value for title in app.title] == [page]
        else:
            with pytest.raises(Exception, match="Could not find a navigation page"):
                app.switch_page(PAGES[page])


def test_overview_shows_card_training_curve_parameters_and_artifacts(demo_runs):
    from circuitlab import load_model

    _, models, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Overview")
    model = load_model(models["tiny-sgatlin"])
    metrics = {metric.label: metric.value for metric in app.metric}
    assert metrics["parameters"] == f"{model.parameter_counts()['total']:,}"
    assert metrics["active parameters per token"] == f"{model.active_parameters_per_token():,}"
    assert "A random-weight tiny-sgatlin model" in texts(app.markdown)
    assert len(plotly_charts(app)) == 2  # the training curve and the shipped models' validation curves
    artifacts = app.dataframe[1].value
    assert set(artifacts["artifact"]) == {"card", "corpus", "circuitdb", "semantic", "umap", "usage", "nie", "legibility", "dla"}
    assert dict(zip(artifacts["artifact"], artifacts["status"]))["legibility"] == "not applicable"


def test_lookup_renders_the_heatmap_and_the_table_of_neighbours(demo_runs):
    _, models, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Circuit lookup")
    assert len(plotly_charts(app)) == 1
    table = app.dataframe[0].value
    assert {"query_token", "distance", "context", "top_predictions"} <= set(table.columns)
    assert table["rank"].max() == 5
    app.slider[0].set_value(3)
    app.text_area[0].input("Tom was happy.")
    app.button[0].click()
    app.run()
    assert not app.exception
    table = app.dataframe[0].value
    assert table["rank"].max() == 3 and len(table) == 3 * table["query_position"].nunique()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("The turtle was slow. " * 80, "longer than"),
        ("x, " * 6000, "longer than"),
    ],
)
def test_lookup_odd_input_gives_a_message(demo_runs, text, expected):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Circuit lookup")
    app.text_area[0].input(text)
    app.button[0].click()
    app.run()
    assert not app.exception
    assert expected in texts(app.warning)
    assert not plotly_charts(app)


@pytest.mark.parametrize("text", ["🙂🚀 ✓", "中文 العربية", "\x00\x07", "<|endoftext|>"])
def test_lookup_unusual_characters_still_work(demo_runs, text):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Circuit lookup")
    app.text_area[0].input(text)
    app.button[0].click()
    app.run()
    assert not app.exception and not app.warning and not app.error
    assert len(plotly_charts(app)) == 1


def test_circuit_map_switches_layer_colour_and_token_filter(demo_runs):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Circuit map")
    assert len(plotly_charts(app)) == 2  # the map and the semantic score
    app.radio[0].set_value("token")
    next(box for box in app.selectbox if box.label == "Layer").set_value(0)
    app.run()
    assert not app.exception
    next(box for box in app.selectbox if box.label == "Layer").set_value("all layers")
    app.run()
    assert not app.exception and len(plotly_charts(app)) == 2
    assert "circuits of 30 tokens" in texts(app.caption)  # --fast maps the 30 most frequent tokens
    tokens = app.multiselect[0].options
    app.multiselect[0].select(tokens[0])
    app.run()
    assert not app.exception
    assert "circuits of 1 token" in texts(app.caption)
    assert set(app.multiselect[0].value) == {tokens[0]}


def test_patching_shows_the_fact_grid_and_patches_a_typed_pair(demo_runs):
    from circuitlab import load_model
    from circuitlab.data.facts import single_token_facts

    _, models, runs = demo_runs
    tokenizer = load_model(models["tiny-sgatlin"]).tokenizer
    clean, patch = single_token_facts(tokenizer)[:2]
    app = open_page(runs["tiny-sgatlin"], "Patching")
    no_nie = "no NIE to average" in texts(app.warning)  # random weights may tell no fact pair apart
    assert len(plotly_charts(app)) == (0 if no_nie else 1)
    inputs = app.text_input
    inputs[0].input(f"The {clean.noun} was")
    inputs[1].input(clean.adjective)
    inputs[2].input(f"The {patch.noun} was")
    inputs[3].input(patch.adjective)
    app.button[0].click()
    app.run()
    assert not app.exception
    # the tiny model's weights are random, so its two logit differences are close: the page says so and still
    # draws the pair's NIE
    m = {metric.label: float(metric.value) for metric in app.metric}
    small = abs(m["m(counterfactual)"] - m["m(clean)"]) < 0.5
    shown = [text for text in (str(element.value) for element in app.warning) if "no NIE to average" not in text]
    assert [("below 0.5" in text) for text in shown] == ([True] if small else [])
    assert len(plotly_charts(app)) == (1 if no_nie else 2)
    assert {metric.label for metric in app.metric} == {"m(clean)", "m(counterfactual)"}


@pytest.mark.parametrize(
    "clean, clean_answer, patch, patch_answer, expected",
    [
        ("", "x", "The fox was", "y", "empty"),
        ("The fox was", "", "The fox was", "y", "empty"),
        ("The fox was", "a", "The cat was", "a", "same token"),
        ("The fox was", "supercalifragilistic", "The cat was", "a", "single tokens"),
        ("word " * 200, "a", "The cat was", "b", "longer than"),
    ],
)
def test_patching_form_odd_input_gives_a_message(demo_runs, clean, clean_answer, patch, patch_answer, expected):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Patching")
    for field, value in zip(app.text_input, (clean, clean_answer, patch, patch_answer)):
        field.input(value)
    app.button[0].click()
    app.run()
    assert not app.exception
    assert expected in texts(app.warning)


def test_attribution_shows_demo_prompts_and_a_typed_prompt(demo_runs):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Attribution")
    assert len(plotly_charts(app)) == 2  # overview heatmap and layer detail of the first demo prompt
    metrics = {metric.label: float(metric.value) for metric in app.metric}
    logit_label = next(label for label in metrics if label.startswith("logit of"))
    assert metrics[logit_label] == pytest.approx(metrics["sum of the parts"], abs=2e-3)
    app.text_input[0].input("Lily went to the")
    app.button[0].click()
    app.run()
    assert not app.exception and not app.warning
    assert len(plotly_charts(app)) == 4


@pytest.mark.parametrize("prompt, target, expected", [("", "", "empty"), ("Lily went", "zzzqqqxxx", "single tokens"),
                                                      ("The turtle was slow. " * 80, "", "longer than")])
def test_attribution_odd_input_gives_a_message(demo_runs, prompt, target, expected):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Attribution")
    app.text_input[0].input(prompt)
    app.text_input[1].input(target)
    app.button[0].click()
    app.run()
    assert not app.exception
    assert expected in texts(app.warning)


def test_legibility_page_figures_and_channel_contexts(demo_runs):
    import pandas as pd

    _, _, runs = demo_runs
    app = open_page(runs["tiny-legible"], "Legibility")
    assert len(plotly_charts(app)) == 2  # regimes by layer, per-head heatmap
    summary = app.dataframe[0].value
    assert set(summary["surface"]) == {"attention", "ffn"}
    channels = pd.read_parquet(runs["tiny-legible"] / "legibility_channels.parquet")
    selective = channels[channels["combined"] & (channels["regime"] == "SELECTIVE") & (channels["surface"] == "attention")
                         & (channels["layer"] == 0)]
    assert len(selective) > 0  # the saturated operands make detectors
    labels = next(box for box in app.selectbox if box.label == "Channel").options
    assert len(labels) == len(selective)
    app.button[0].click()
    app.run()
    assert not app.exception and not app.error
    contexts = app.dataframe[-1].value
    assert contexts.columns.tolist() == ["token", "p_fire", "fires", "count", "lift", "value", "context"]
    assert (contexts["value"] > 0.9).all() and contexts["context"].str.contains(r"\[").all()
    regime = next(box for box in app.selectbox if box.label == "Regime")
    regime.set_value("any")
    app.run()
    assert not app.exception


def test_regimes_page_reads_a_report_and_says_how_to_make_a_missing_one(demo_runs, tmp_path, monkeypatch):
    import json

    import torch

    from circuitlab import CircuitTransformer, ModelConfig
    from circuitlab.analysis.legibility_report import build_report, measure_model
    from circuitlab.architectures.weights import save_model

    _, _, runs = demo_runs
    models = []
    for preset in ("tiny-legible", "tiny-membership"):
        model = CircuitTransformer(ModelConfig.preset(preset))
        model.reset_parameters(seed=0)
        save_model(model, tmp_path / preset)
        windows = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
        models.append(measure_model(tmp_path / preset, windows=windows, progress=False))
    report = build_report(models)
    (tmp_path / "report.json").write_text(json.dumps(report))

    monkeypatch.setenv("CIRCUITLAB_REGIMES_REPORT", str(tmp_path / "report.json"))
    app = open_page(runs["tiny-legible"], "Pressure regimes")
    assert not app.error and not app.warning
    table = app.dataframe[0].value
    assert list(table["model"].unique()) == ["tiny-legible", "tiny-membership"]
    assert len(plotly_charts(app)) == 1
    comparison = app.dataframe[1].value
    assert len(comparison) == len(report["comparison"]) and "seed 002, Table" in " ".join(comparison["source"])
    choice = next(box for box in app.selectbox if box.label == "Model")
    choice.set_value("tiny-membership")
    app.run()
    assert not app.exception

    monkeypatch.setenv("CIRCUITLAB_REGIMES_REPORT", str(tmp_path / "absent.json"))
    app = open_page(runs["tiny-legible"], "Pressure regimes")
    assert "No legibility report at" in texts(app.info) and "circuitlab report legibility" in texts(app.code)
    (tmp_path / "broken.json").write_text('{"version": 0}')
    monkeypatch.setenv("CIRCUITLAB_REGIMES_REPORT", str(tmp_path / "broken.json"))
    app = open_page(runs["tiny-legible"], "Pressure regimes")
    assert "cannot be read as a legibility report" in texts(app.error)


_THRESHOLDS = {"reconstruction": ("<", 0.05), "agreement": (">=", 0.99), "effective_features": (">=", 2000),
               "top_feature_share": ("<=", 0.10), "dead_share": ("<", 0.20), "mean_ablation_share": (">=", 0.5),
               "ablation_share": (">=", 0.5), "loss_ratio": ("<=", 1.05), "perplexity_ratio": ("<=", 1.05)}
_WORST = {"reconstruction": max, "agreement": min, "effective_features": min, "top_feature_share": max,
          "dead_share": max}


def _verdict_of(key: str, measured: float | None) -> str:
    """The verdict on target `key` by the issue's definition."""
    if measured is None:
        return "not measured"
    sign, threshold = _THRESHOLDS[key]
    met = {"<": measured < threshold, "<=": measured <= threshold, ">=": measured >= threshold}[sign]
    return "met" if met else "missed"


def _expected(report: dict) -> dict[str, tuple[float | None, str]]:
    """(measured, verdict) of every target, recomputed from the report: the worst layer's figure or the ratio."""
    expected = {}
    for key in _THRESHOLDS:
        if key in _WORST:
            values = [layer.get(key) for layer in report["layers"]]
            measured = None if None in values else _WORST[key](values)
        else:
            measured = report.get(key)
        expected[key] = (measured, _verdict_of(key, measured))
    return expected


def _frame(app: AppTest, column: str):
    """The page's table that has `column`."""
    frames = [frame.value for frame in app.dataframe if column in frame.value.columns]
    assert len(frames) == 1, column
    return frames[0]


def _parity_page_shows(app: AppTest, report: dict, comparison: dict | None) -> None:
    """Assert the Parity page shows `report`'s numbers and verdicts recomputed from them, and the comparison's."""
    expected = _expected(report)
    targets = _frame(app, "target value")
    assert list(targets["target"]) == list(_THRESHOLDS)
    assert list(targets["target value"]) == [f"{sign} {threshold:g}" for sign, threshold in _THRESHOLDS.values()]
    for row in targets.to_dict("records"):
        measured, verdict = expected[row["target"]]
        assert (None if row["measured"] != row["measured"] else row["measured"]) == measured, row["target"]  # NaN: none
        assert row["verdict"] == verdict, row["target"]
    assert [metric.value for metric in app.metric] == ["—" if value is None else f"{value:.3f}"
                                                       for value, _ in expected.values()]
    for (_, verdict), (sign, threshold) in zip(expected.values(), _THRESHOLDS.values()):
        shown = {"met": ":green[met]", "missed": ":red[missed]"}.get(verdict, verdict)
        assert f"target {sign} {threshold:g}: {shown}" in texts(app.markdown)
    layers = _frame(app, "agreement verdict")
    for column, key in [("reconstruction", "reconstruction"), ("agreement", "agreement"), ("certified", "certified"),
                        ("write / residual", "write_over_residual"), ("coherence", "coherence")]:
        assert layers[column].tolist() == [row[key] for row in report["layers"]], column
    assert layers["GELU write / residual"].tolist() == report["gelu"]["write_over_residual"]
    assert list(zip(layers["reconstruction verdict"], layers["agreement verdict"])) == [
        (_verdict_of("reconstruction", row["reconstruction"]), _verdict_of("agreement", row["agreement"]))
        for row in report["layers"]]
    usage = _frame(app, "effective features verdict")
    assert usage["features used"].tolist() == [row["distinct_features"] for row in report["layers"]]
    assert usage["top-100 share"].tolist() == [row["top100_share"] for row in report["layers"]]
    for column, key in [("effective features", "effective_features"), ("top feature share", "top_feature_share"),
                        ("dead share", "dead_share")]:
        shown = [None if value != value else value for value in usage[column].tolist()]  # NaN: not measured
        assert shown == [row.get(key) for row in report["layers"]], column
    if all(row.get("by_beam") for row in report["layers"]):  # the linear design's encoder has no beam
        assert len(_frame(app, "beam")) == sum(len(row["by_beam"]) for row in report["layers"])
    ablation = _frame(app, "zeroing cost")
    assert ablation["loss"].tolist() == [report["parity"]["loss"], report["gelu"]["loss"]]
    assert ablation["loss zeroed"].tolist() == [report["parity"]["loss_writes_zeroed"], report["gelu"]["loss_writes_zeroed"]]
    assert f"costs the parity model {report['ablation_share']:.3f} of what" in texts(app.markdown)
    by_layer = report["parity"].get("zeroed_by_layer") is not None
    if by_layer:
        costs = _frame(app, "parity mean-ablated")
        assert costs["parity zeroed"].tolist()[:-1] == report["parity"]["zeroed_by_layer"]
        assert costs["GELU mean-ablated"].tolist()[:-1] == report["gelu"]["mean_ablated_by_layer"]
    else:
        assert "predates the per-layer and mean ablations" in texts(app.info)
    has_beams = all(row.get("by_beam") for row in report["layers"])  # the linear design's encoder has no beam
    charts = 3 + has_beams + by_layer  # by layer, firing histograms, by beam, ablation (and by layer)
    if comparison is None:
        assert "No sparse autoencoder comparison at" in texts(app.info) and "circuitlab report sae" in texts(app.code)
    else:
        charts += 2
        table = _frame(app, "code")
        assert table["layer"].tolist() == ["0", "0", "1", "1", "all", "all"]
        assert table["probe accuracy"].tolist()[:4] == [comparison["layers"][layer][key]["probe"]
                                                        for layer in (0, 1) for key in ("parity", "sae")]
        assert table["loss added"].tolist()[4:] == [comparison["parity"]["loss_added"], comparison["gelu"]["loss_added"]]
    assert len(plotly_charts(app)) == charts


def test_parity_page_shows_the_shipped_report_and_a_constructed_one(demo_runs, tmp_path, monkeypatch):
    import json

    from parity_fixtures import constructed_report, constructed_sae_comparison, shipped_report

    _, _, runs = demo_runs
    monkeypatch.delenv("CIRCUITLAB_PARITY_REPORT", raising=False)
    monkeypatch.setenv("CIRCUITLAB_SAE_COMPARISON", str(tmp_path / "no_comparison.json"))
    app = open_page(runs["tiny-parity"], "Parity bottleneck")  # the default: results/parity/parity_report.json
    assert not app.error and not app.warning
    _parity_page_shows(app, shipped_report(), None)

    report, comparison = constructed_report(), constructed_sae_comparison()
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "comparison.json").write_text(json.dumps(comparison))
    monkeypatch.setenv("CIRCUITLAB_PARITY_REPORT", str(tmp_path / "report.json"))
    monkeypatch.setenv("CIRCUITLAB_SAE_COMPARISON", str(tmp_path / "comparison.json"))
    app = open_page(runs["tiny-parity"], "Parity bottleneck")
    assert not app.error and not app.warning
    _parity_page_shows(app, report, comparison)
    assert "target >= 0.5: :red[missed]" in texts(app.markdown) and "target <= 1.05: :green[met]" in texts(app.markdown)

    (tmp_path / "broken.json").write_text(json.dumps({**comparison, "kind": "parity"}))
    monkeypatch.setenv("CIRCUITLAB_SAE_COMPARISON", str(tmp_path / "broken.json"))
    app = open_page(runs["tiny-parity"], "Parity bottleneck")
    assert "cannot be read as a sparse autoencoder comparison" in texts(app.error)

    monkeypatch.setenv("CIRCUITLAB_PARITY_REPORT", str(tmp_path / "absent.json"))
    app = open_page(runs["tiny-parity"], "Parity bottleneck")
    assert "No parity report at" in texts(app.info) and "circuitlab report parity" in texts(app.code)
    (tmp_path / "regimes.json").write_text('{"version": 1, "models": []}')  # another report's shape
    monkeypatch.setenv("CIRCUITLAB_PARITY_REPORT", str(tmp_path / "regimes.json"))
    app = open_page(runs["tiny-parity"], "Parity bottleneck")
    assert "cannot be read as a parity report" in texts(app.error) and "Field required" in texts(app.error)
    assert not plotly_charts(app)


def test_neurons_page_shows_usage_and_says_when_it_does_not_apply(demo_runs):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Neurons")
    assert len(plotly_charts(app)) == 2
    assert set(app.dataframe[0].value["layer"]) == {0, 1}
    app = open_page(runs["tiny-legible"], "Neurons")
    assert "does not apply" in texts(app.info) and not plotly_charts(app)


# ---------------------------------------------------------------------------------- missing artifacts


@pytest.mark.parametrize(
    "page, removed, what",
    [
        ("Circuit map", "umap_L0.parquet", "UMAP maps"),
        ("Circuit lookup", "circuitdb", "circuit database"),
        ("Patching", "nie.parquet", "NIE grid"),
        ("Attribution", "dla.parquet", "direct logit attribution"),
        ("Neurons", "usage.json", "neuron usage"),
    ],
)
def test_a_missing_artifact_names_itself_and_the_command_that_makes_it(demo_runs, tmp_path, page, removed, what):
    _, _, runs = demo_runs
    copy = tmp_path / "runs" / "tiny-sgatlin"
    shutil.copytree(runs["tiny-sgatlin"], copy)
    target = copy / removed
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    app = open_page(copy, page)
    assert f"This run folder has no {what}" in texts(app.warning)
    command = texts(app.code)
    assert command.startswith("circuitlab demo ") and "--fast" in command


def test_a_damaged_artifact_is_a_message_not_a_traceback(demo_runs, tmp_path):
    _, _, runs = demo_runs
    copy = tmp_path / "runs" / "tiny-sgatlin"
    shutil.copytree(runs["tiny-sgatlin"], copy)
    (copy / "nie.parquet").write_bytes(b"PAR1 not really parquet")
    app = open_page(copy, "Patching")
    assert "cannot be read" in texts(app.error)
    assert "circuitlab demo" in texts(app.code)


def test_a_folder_that_is_not_a_run_says_how_to_make_one(tmp_path):
    app = AppTest.from_file(APP, default_timeout=60)
    app.session_state["run_path"] = str(tmp_path / "nowhere")
    app.run()
    assert not app.exception
    assert "circuitlab demo" in texts(app.error) + texts(app.code)


def test_the_sidebar_offers_the_other_runs_beside_this_one(demo_runs):
    _, _, runs = demo_runs
    app = open_page(runs["tiny-sgatlin"], "Overview")
    picker = app.sidebar.selectbox[0]
    assert picker.options == ["tiny-gelu", "tiny-legible", "tiny-parity", "tiny-sgatlin"]
    picker.set_value("tiny-legible")
    app.run()
    assert Path(app.session_state["run_path"]) == runs["tiny-legible"].resolve()
    assert (Path(app.session_state["run_path"]) / RUN_MANIFEST).is_file()
