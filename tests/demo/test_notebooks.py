"""The analysis notebooks (analyses/*.ipynb), their helpers and their runner.

Every notebook executes top to bottom in fast mode (CIRCUITLAB_FAST=1) in a fresh kernel of this interpreter:
against the shipped models when all four exist under models/, else against tiny models trained in this
session (tests/conftest.py) and linked under the shipped names. The side-by-side tables the notebooks print
must agree with the numbers printed next to them (a reading such as "agrees" is generated from the numbers,
so the check recomputes it from the printed values). Helpers are tested directly: the SVD stand-in for UMAP
separates separable codes, PNG rendering produces a PNG of the figure's size, model lookup follows
CIRCUITLAB_MODELS_DIR, and the runner starts kernels of this interpreter and reports failures.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from circuitlab.claims import PERCENT_TOLERANCE

ROOT = Path(__file__).resolve().parents[2]
ANALYSES = ROOT / "analyses"
NOTEBOOKS = sorted(path.name for path in ANALYSES.glob("[0-9]*.ipynb"))
STAND_INS = {
    "sgatlin-stories": "tiny-sgatlin", "gelu-stories": "tiny-gelu",
    "legible-stories": "tiny-legible", "parity-stories": "tiny-parity",
}
QUERY = "Once upon a time, there was a big dog named Max. Max had a red ball that he played with every day."
NUMBER = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run_notebooks = _load("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
nbsupport = _load("nbsupport", ANALYSES / "nbsupport.py")


# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def notebook_models(request, tmp_path_factory) -> Path | None:
    """None when the four shipped models exist (the notebooks then read models/), else a folder of
    tiny trained models under the shipped names."""
    from circuitlab.resources import models_root

    if all((models_root() / name / "model.safetensors").is_file() for name in STAND_INS):
        return None
    tiny = request.getfixturevalue("tiny_trained_models")
    root = tmp_path_factory.mktemp("notebook_models")
    for shipped, preset in STAND_INS.items():
        (root / shipped).symlink_to(tiny[preset], target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def run_notebook(notebook_models, tmp_path_factory):
    """Execute a notebook in fast mode once per set of extra environment variables; returns the notebook."""
    cache = tmp_path_factory.mktemp("notebook_cache")
    executed = {}

    def run(name: str, **extra_env: str):
        key = (name, tuple(sorted(extra_env.items())))
        if key not in executed:
            env = {
                "CIRCUITLAB_FAST": "1", "CIRCUITLAB_CACHE": str(cache), "CIRCUITLAB_FIGURES_DIR": None,
                "CIRCUITLAB_MODEL": None,
                "CIRCUITLAB_MODELS_DIR": str(notebook_models) if notebook_models is not None else None,
                **extra_env,
            }
            executed[key] = run_notebooks.execute_notebook(ANALYSES / name, timeout=600, env=env)
        return executed[key]

    return run


def model_folder(notebook_models: Path | None, name: str) -> Path:
    if notebook_models is not None:
        return notebook_models / name
    from circuitlab.resources import models_root

    return models_root() / name


# ------------------------------------------------------------------------------------ reading outputs


def outputs(notebook) -> list[dict]:
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]


def stream_text(notebook) -> str:
    return "".join(output["text"] for output in outputs(notebook) if output["output_type"] == "stream")


def markdown_outputs(notebook) -> list[str]:
    return [
        output["data"]["text/markdown"] for output in outputs(notebook)
        if output["output_type"] in ("display_data", "execute_result") and "text/markdown" in output.get("data", {})
    ]


def comparison_rows(notebook, title: str) -> list[dict[str, str]]:
    """The rows of the side-by-side table whose markdown starts with `**{title}`."""
    for text in markdown_outputs(notebook):
        if text.startswith(f"**{title}"):
            rows = []
            for line in text.splitlines():
                cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
                if len(cells) == 4 and cells[0] not in ("quantity", "---"):
                    rows.append(dict(zip(("quantity", "paper", "ours", "reading"), [c.replace("\\|", "|") for c in cells])))
            return rows
    raise AssertionError(f"no side-by-side table titled {title!r}; markdown outputs: {[t[:60] for t in markdown_outputs(notebook)]}")


def row(rows: list[dict[str, str]], quantity_start: str) -> dict[str, str]:
    for candidate in rows:
        if candidate["quantity"].startswith(quantity_start):
            return candidate
    raise AssertionError(f"no row starting {quantity_start!r} in {[r['quantity'] for r in rows]}")


def numbers(text: str) -> list[float]:
    return [float(value) for value in re.findall(NUMBER, text.replace(",", ""))]


# ---------------------------------------------------------------------------------- notebook execution


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom_in_fast_mode(run_notebook, name):
    notebook = run_notebook(name)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code_cells and all(cell.get("execution_count") for cell in code_cells), "a code cell did not run"
    errors = [output for output in outputs(notebook) if output["output_type"] == "error"]
    assert not errors, errors
    assert "mode: FAST" in stream_text(notebook)
    tables = [text for text in markdown_outputs(notebook) if "| quantity | paper | ours | reading |" in text]
    assert tables, "the notebook printed no side-by-side comparison"
    figures = [o for o in outputs(notebook) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figures, "the notebook showed no plotly figure"
    verdicts = [text for text in markdown_outputs(notebook) if text.startswith("**Verdicts from analyses/claims.md**")]
    assert len(verdicts) == 1, "the notebook ends with the verdicts of analyses/claims.md for its claims"
    rows = [line for line in verdicts[0].splitlines()[3:] if line.startswith("| ")]
    assert rows and all(re.search(r"\| \*\*(reproduced|contradicted|inconclusive|not tested at the paper's scale|not measured)( \(.*\))?\*\* \|$", line) for line in rows), rows


@pytest.mark.slow
def test_circuit_clusters_table_3_has_k_neighbours_per_query_token(run_notebook, notebook_models):
    from circuitlab import load_model

    notebook = run_notebook("01_circuit_clusters.ipynb")
    tokenizer = load_model(model_folder(notebook_models, "sgatlin-stories")).tokenizer
    n_query_tokens = len(tokenizer.encode(QUERY))
    table_3 = next(o["text"] for o in outputs(notebook) if o["output_type"] == "stream" and o["text"].startswith(" Pos  Token"))
    # header + k rows per query token: exact search returns k neighbours for every token
    assert len(table_3.rstrip("\n").splitlines()) == 1 + n_query_tokens * nbsupport.Sizes.fast().search_k
    rows = comparison_rows(notebook, "Semantic score")
    models = [r for r in rows if r["quantity"].endswith("(mean over layers)")]
    assert {r["quantity"].split(":")[0] for r in models} == set(STAND_INS), "every architecture gets a score"
    for record in models:
        score, baseline, lift = numbers(record["ours"])[:3]
        assert 0 <= score <= 1 and 0 <= baseline <= 1
        assert lift == pytest.approx(score / baseline, rel=0.01, abs=0.01)
        assert record["reading"] == ("above chance" if lift > 1.2 else "near chance")


@pytest.mark.slow
def test_nie_readings_follow_the_printed_numbers(run_notebook):
    notebook = run_notebook("02_factual_recall_nie.ipynb")
    rows = comparison_rows(notebook, "Figure 7")
    noun, final = numbers(row(rows, "noun vs final")["ours"])
    assert row(rows, "noun vs final")["reading"] == ("agrees" if noun > final else "disagrees")
    strongest = row(rows, "strongest single layer")
    best, *per_layer = numbers(strongest["ours"])
    by_layer = per_layer[1::2]  # "L0: 0.24, L1: 0.00" -> layer, value, layer, value
    assert by_layer[int(best)] == max(by_layer), "the named layer has the largest printed NIE"
    assert strongest["reading"] == ("agrees" if best == 1 else "disagrees")
    across = next(text for text in markdown_outputs(notebook) if text.startswith("**Across architectures"))
    assert across.count("\n* **") == len(STAND_INS), "every architecture is patched"


@pytest.mark.slow
def test_neuron_usage_readings_follow_the_printed_numbers(run_notebook):
    notebook = run_notebook("03_neuron_usage.ipynb")
    rows = comparison_rows(notebook, "Figure 8")
    low, high = numbers(row(rows, "neurons used")["ours"])[:2]
    assert 0 <= low <= high <= 100
    assert (row(rows, "neurons used")["reading"] == "agrees") == (low >= 90)
    gini = numbers(row(rows, "Gini")["ours"])[0]
    assert 0 <= gini <= 1
    assert (row(rows, "Gini")["reading"] == "close (within 0.1)") == (abs(gini - 0.58) <= 0.1)
    shared, other, ratio = numbers(row(rows, "co-activation")["ours"])[:3]
    assert ratio == pytest.approx(shared / other, rel=0.01, abs=0.01)
    assert row(rows, "co-activation")["reading"] == ("agrees" if ratio > 1.1 else "disagrees")
    assert any(text.startswith("**Parity features**") for text in markdown_outputs(notebook))


@pytest.mark.slow
def test_legibility_readings_follow_the_printed_numbers(run_notebook):
    notebook = run_notebook("04_legible_attention_and_ffn.ipynb")
    rows = comparison_rows(notebook, "Tables 1 and 5")
    checked = 0
    for record in rows:
        if record["paper"] == "not reported":
            continue
        paper = numbers(record["paper"].replace("–", " "))
        ours = numbers(record["ours"])[0]
        low, high = paper[0], paper[-1]
        tolerance = PERCENT_TOLERANCE  # the rule of analyses/claims.md
        expected = (f"close (within {tolerance:g} points)" if low - tolerance <= ours <= high + tolerance
                    else ("higher" if ours > high else "lower"))
        assert record["reading"] == expected, record
        assert 0 <= ours <= 100
        checked += 1
    assert checked >= 8, "Table 1 (attention) and Table 5 (FFN) rows are both compared"
    assert any(r["quantity"].startswith("FFN op-crisp") for r in rows)
    depth = comparison_rows(notebook, "Figure 2(a)")
    shallow, deep = numbers(row(depth, "attention SELECTIVE")["ours"])
    assert row(depth, "attention SELECTIVE")["reading"] == (
        "rises with depth" if deep > shallow + 5 else ("flat" if abs(deep - shallow) <= 5 else "falls with depth")
    )


@pytest.mark.slow
def test_reading_a_prediction_attribution_is_exact_and_read(run_notebook):
    notebook = run_notebook("05_reading_a_prediction.ipynb")
    text = stream_text(notebook)
    logit, parts = re.search(r"logit (-?\d+\.\d+); parts sum to (-?\d+\.\d+)", text).groups()
    assert logit == parts, "direct logit attribution parts must sum to the model's logit"
    rows = comparison_rows(notebook, "Figure 5")
    share = numbers(row(rows, "legible share")["ours"])[0]
    assert 0 <= share <= 100
    readings = next(t for t in markdown_outputs(notebook) if t.startswith("**The largest named operators"))
    assert readings.count("fires on") >= 2, "each named operator's operands are read"
    baseline = comparison_rows(notebook, "Figure 1")
    heads, blocks = numbers(row(baseline, "median rank")["ours"])[:2]
    assert row(baseline, "median rank")["reading"] == (
        "heads less coherent than FFN blocks" if heads > blocks else "heads as coherent as FFN blocks"
    )


@pytest.mark.slow
def test_a_notebook_skips_what_does_not_apply_with_a_reason(run_notebook, notebook_models):
    sgatlin = model_folder(notebook_models, "sgatlin-stories")
    notebook = run_notebook("04_legible_attention_and_ffn.ipynb", CIRCUITLAB_MODEL=str(sgatlin))
    assert not [o for o in outputs(notebook) if o["output_type"] == "error"]
    assert "skipping every section of this notebook: model" in stream_text(notebook)
    assert "has no bounded channels" in stream_text(notebook)


# ------------------------------------------------------------------------------------------- helpers


def test_svd_stand_in_separates_two_groups_of_codes():
    from scipy.sparse import csr_matrix

    rng = np.random.default_rng(0)
    rows, columns, values = [], [], []
    for row_index in range(40):
        base = 0 if row_index < 20 else 50  # two groups on disjoint neurons
        chosen = base + rng.choice(10, size=4, replace=False)
        rows += [row_index] * 4
        columns += chosen.tolist()
        values += rng.uniform(0.5, 1.5, size=4).tolist()
    codes = csr_matrix((values, (rows, columns)), shape=(40, 64))
    coordinates = nbsupport.svd_reducer(codes)
    assert coordinates.shape == (40, 2) and coordinates.dtype == np.float32
    np.testing.assert_array_equal(coordinates, nbsupport.svd_reducer(codes))  # deterministic
    first, second = coordinates[:20], coordinates[20:]
    gap = np.linalg.norm(first.mean(0) - second.mean(0))
    spread = max(np.linalg.norm(first - first.mean(0), axis=1).max(), np.linalg.norm(second - second.mean(0), axis=1).max())
    assert gap > 2 * spread, (gap, spread)


def test_comparison_table_escapes_pipes_and_keeps_rows():
    table = nbsupport.comparison_table([("a | b", "1", "2", "ok"), ("c", "x\ny", "3", "—")])
    lines = table.splitlines()
    assert lines[0] == "| quantity | paper | ours | reading |" and len(lines) == 4
    assert lines[2] == "| a \\| b | 1 | 2 | ok |"
    assert lines[3] == "| c | x y | 3 | — |"


def test_model_lookup_follows_models_dir(tmp_path, monkeypatch):
    (tmp_path / "sgatlin-stories").mkdir()
    monkeypatch.setenv("CIRCUITLAB_MODELS_DIR", str(tmp_path))
    folder, why = nbsupport.find_model_folder("sgatlin-stories")
    assert folder == tmp_path / "sgatlin-stories" and why == ""
    folder, why = nbsupport.find_model_folder("gelu-stories")
    assert folder is None and str(tmp_path / "gelu-stories") in why
    assert nbsupport.load("gelu-stories", required=False) is None
    with pytest.raises(FileNotFoundError, match="CIRCUITLAB_MODELS_DIR"):
        nbsupport.load("gelu-stories")
    monkeypatch.setenv("CIRCUITLAB_MODEL", str(tmp_path / "sgatlin-stories"))
    assert nbsupport.main_model_spec("legible-stories") == str(tmp_path / "sgatlin-stories")


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return struct.unpack(">II", data[16:24])


def test_show_writes_html_and_png_and_embeds_the_png(tmp_path, monkeypatch):
    import IPython.display
    import plotly.graph_objects as go

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw=False: shown.append(bundle))
    monkeypatch.setenv("CIRCUITLAB_FIGURES_DIR", str(tmp_path))
    figure = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]))
    figure.update_layout(title="two by two", width=400, height=300)
    nbsupport.show(figure, "grid")
    assert (tmp_path / "grid.html").is_file()
    (bundle,) = shown
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["z"] == [[1, 2], [3, 4]]
    if (tmp_path / "grid.png").exists():
        width, height = _png_size(tmp_path / "grid.png")
        assert width >= 400 and height >= 300
        assert "image/png" in bundle
    else:
        assert nbsupport.save_png(figure, tmp_path / "again.png") is None, "a renderer exists but show() made no PNG"
        assert "image/png" not in bundle


class _FlakyFigure:
    """A figure whose export fails `failures` times (a render that timed out), then writes a file."""

    def __init__(self, failures: int):
        self.failures, self.calls = failures, 0

    def write_image(self, path, format, scale):
        self.calls += 1
        Path(path).write_bytes(b"partial")
        if self.calls <= self.failures:
            raise RuntimeError("the browser did not start in time")
        Path(path).write_bytes(b"png bytes")


def test_a_png_render_that_fails_once_is_tried_again_and_one_that_keeps_failing_gives_none(tmp_path):
    from circuitlab.figures import PNG_ATTEMPTS, write_png

    once = _FlakyFigure(failures=1)
    assert write_png(once, tmp_path / "once.png") == tmp_path / "once.png"
    assert once.calls == 2 and (tmp_path / "once.png").read_bytes() == b"png bytes"
    always = _FlakyFigure(failures=PNG_ATTEMPTS)
    assert write_png(always, tmp_path / "never.png") is None and always.calls == PNG_ATTEMPTS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["once.png"]  # no partial file left behind


def test_runner_uses_this_interpreter_and_passes_the_environment(tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import os, sys\nprint(sys.executable)\nprint(os.environ.get('CIRCUITLAB_FAST'))\nprint(os.getcwd())"),
    ])
    path = tmp_path / "probe.ipynb"
    nbformat.write(notebook, path)
    executed = run_notebooks.execute_notebook(path, timeout=120, env={"CIRCUITLAB_FAST": "1"})
    printed = executed.cells[0].outputs[0]["text"].splitlines()
    assert Path(printed[0]).resolve() == Path(sys.executable).resolve()
    assert printed[1] == "1"
    assert Path(printed[2]).resolve() == tmp_path.resolve()


def test_runner_reports_a_failing_notebook_and_keeps_it(tmp_path, monkeypatch):
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "01_broken.ipynb"
    nbformat.write(notebook, path)
    original = path.read_bytes()
    with pytest.raises(CellExecutionError) as caught:
        run_notebooks.execute_notebook(path, timeout=120)
    assert caught.value.notebook.cells[0].execution_count == 1
    monkeypatch.setattr(run_notebooks, "FAILED", tmp_path / "failed")
    assert run_notebooks.main([str(path), "--models-dir", str(tmp_path)]) == 1
    assert path.read_bytes() == original, "a failed notebook is not overwritten"
    assert (tmp_path / "failed" / "01_broken.failed.ipynb").is_file()


def test_runner_rejects_bad_arguments(tmp_path):
    assert run_notebooks.main([str(tmp_path / "missing.ipynb")]) == 2
    assert run_notebooks.main(["--models-dir", str(tmp_path / "nowhere")]) == 2


def test_every_notebook_is_valid_and_names_the_python3_kernel():
    import nbformat

    assert len(NOTEBOOKS) == 7
    for name in NOTEBOOKS:
        notebook = nbformat.read(ANALYSES / name, as_version=4)
        nbformat.validate(notebook)
        assert notebook.metadata["kernelspec"]["name"] == "python3"
        assert notebook.cells[0].cell_type == "markdown" and "Redoes" in notebook.cells[0].source
