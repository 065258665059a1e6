"""A new user's path beyond the shipped examples: the CLI package and its exit statuses, explicit presets,
pickles refused by content, the one patching-pair format, untrustworthy pairs left out of means, the demo on
one's own model, text and pairs (never writing into the model folder), databases that name their model, and
the dashboard's process tree ending on SIGTERM and SIGINT."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from circuitlab.cli import build_parser, main
from circuitlab.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


# --- the CLI package ---------------------------------------------------------------------------------------


def _subparsers(parser):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subparsers(sub))


def test_every_option_of_every_verb_has_help_text():
    missing = [
        f"{verb} {action.option_strings or action.dest}"
        for verb, sub in _subparsers(build_parser())
        for action in sub._actions
        if action.help is None and action.__class__.__name__ != "_SubParsersAction"
    ]
    assert missing == []


def test_version_and_a_help_that_loads_no_heavy_library():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    version = subprocess.run([sys.executable, "-m", "circuitlab.cli", "--version"], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("circuitlab ")
    # --help must not import torch (or pandas, plotly): the start-up cost of every command
    probe = ("import sys\nfrom circuitlab.cli import build_parser\nbuild_parser().format_help()\n"
             "print(sorted(m for m in ('torch', 'pandas', 'plotly', 'numpy', 'transformer_lens') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
    shown = subprocess.run([sys.executable, "-m", "circuitlab.cli", "--help"], capture_output=True, text=True,
                           env=env, cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "demo" in shown.stdout


def test_only_the_user_error_class_exits_with_status_2(monkeypatch, capsys):
    import circuitlab.cli.summary as summary

    def raise_key_error(args):
        raise KeyError("a bug")

    monkeypatch.setattr(summary, "run", raise_key_error)
    with pytest.raises(KeyError):
        main(["summary", "x"])

    def raise_user_error(args):
        raise UserError("bad input\nsecond line")

    monkeypatch.setattr(summary, "run", raise_user_error)
    assert main(["summary", "x"]) == 2
    assert capsys.readouterr().err == "circuitlab summary: error: bad input second line\n"


def test_the_training_command_line_is_the_one_typed():
    from circuitlab.cli.train import command_line

    args = build_parser().parse_args(["train", "--preset", "tiny-gelu", "--out", "runs/a b", "--resume"])
    args.argv = ["train", "--preset", "tiny-gelu", "--out", "runs/a b", "--resume"]
    assert command_line(args, 1) == "circuitlab train --preset tiny-gelu --out 'runs/a b'"
    assert command_line(args, 2).startswith("torchrun --nproc_per_node=2 -m circuitlab.cli train --preset")


def test_the_dashboard_imports_its_handlers_from_modules_that_need_no_streamlit_or_cli():
    importers = sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "apps").rglob("*.py")
        if path.name != "screenshots.py" and ("circuitlab.cli" in path.read_text() or "circuitlab.demo import" in path.read_text())
    )
    assert importers == []  # apps/ read circuitlab.demo.inputs / readers / runfolder / pipeline, never the CLI
    probe = ("import sys\nimport circuitlab.demo.inputs, circuitlab.demo.readers, circuitlab.demo.runfolder\n"
             "print(sorted(m for m in ('streamlit', 'circuitlab.cli', 'torch') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


# --- model names, presets, pickles --------------------------------------------------------------------------


def test_a_name_without_a_trained_model_is_never_a_random_preset(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CIRCUITLAB_MODELS", str(tmp_path / "no-models-here"))
    monkeypatch.chdir(tmp_path)
    assert main(["dla", "sgatlin-stories", "The turtle was"]) == 2
    err = capsys.readouterr().err
    assert "names no trained model" in err and "preset:sgatlin-stories" in err
    assert main(["summary", "preset:tiny-gelu"]) == 0  # asked for explicitly: fine
    from circuitlab.architectures.weights import CheckpointError
    from circuitlab.architectures.transformer import load_model

    with pytest.raises(CheckpointError, match="circuitlab downloads nothing"):
        load_model("sgatlin-stories")


@pytest.mark.parametrize("kind", ["pickle", "torch_zip"])
def test_pickles_are_refused_by_content_not_by_name(tmp_path, capsys, kind):
    path = tmp_path / "weights.json"  # a harmless-looking name
    if kind == "pickle":
        path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
    assert main(["summary", str(path)]) == 2
    assert "is a pickle" in capsys.readouterr().err
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.data").write_bytes(path.read_bytes())
    from circuitlab.architectures.weights import CheckpointError
    from circuitlab.architectures.transformer import load_model

    with pytest.raises(CheckpointError, match="weights.data.*never unpickles"):
        load_model(folder)


# --- the pair format ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def word_model():
    """A tiny random sgatlin model whose tokenizer has whole words for a few answers."""
    from circuitlab import CircuitTransformer, ModelConfig
    from circuitlab.data.tokenizer import train_tokenizer

    texts = ["The turtle was slow. The rabbit was fast. The cat was soft. The dog was big."] * 40
    tokenizer = train_tokenizer(texts, vocab_size=300, show_progress=False)
    config = ModelConfig.preset("tiny-sgatlin").replace(d_vocab=tokenizer.vocab_size)
    model = CircuitTransformer(config)
    model.tokenizer = tokenizer
    return model.eval()


def test_text_pairs_name_the_missing_key_with_an_example(word_model):
    from circuitlab.analysis.patching import nie_grid
    from circuitlab.analysis.pairs import PairFormatError

    with pytest.raises(PairFormatError, match=r"lacks the key 'patch_answer'.*\{\"clean\": \"The turtle was\""):
        nie_grid(word_model, [{"clean": "The turtle was", "patch": "The rabbit was", "clean_answer": "slow"}])
    with pytest.raises(PairFormatError, match="unknown key 'answer'"):
        nie_grid(word_model, [{"clean": "a", "patch": "b", "clean_answer": "slow", "patch_answer": "fast", "answer": 1}])
    with pytest.raises(PairFormatError, match="lacks the keys 'patch_tokens', 'clean_answer_id', 'patch_answer_id'"):
        nie_grid(word_model, [{"clean_tokens": [1, 2]}])


def test_a_text_pair_is_the_same_pair_in_python_cli_and_dashboard(word_model, tmp_path):
    from circuitlab.demo.inputs import custom_patch_pair
    from circuitlab.analysis.pairs import text_pair

    record = {"clean": "The turtle was", "patch": "The rabbit was", "clean_answer": "slow", "patch_answer": "fast",
              "noun_position": 2}
    pair = text_pair(word_model, record)
    tokenizer = word_model.tokenizer
    assert pair.clean_tokens == (tokenizer.eos_id, *tokenizer.encode("The turtle was"))
    assert pair.clean_answer_id == tokenizer.encode(" slow")[0] and pair.roles["noun"] == (2, 2)
    typed, positions, message = custom_patch_pair(word_model, "The turtle was", "The rabbit was", "slow", "fast")
    assert message is None and typed.clean_tokens == pair.clean_tokens and typed.patch_tokens == pair.patch_tokens
    assert (typed.clean_answer_id, typed.patch_answer_id) == (pair.clean_answer_id, pair.patch_answer_id)


def test_pairs_with_a_small_logit_difference_are_reported_and_left_out_of_means(word_model):
    from circuitlab.analysis.patching import excluded_pairs, excluded_report, nie_grid, nie_heatmap, nie_summary

    records = [
        {"clean": "The turtle was", "patch": "The rabbit was", "clean_answer": "slow", "patch_answer": "fast"},
        {"clean": "The cat was", "patch": "The dog was", "clean_answer": "soft", "patch_answer": "big"},
        {"clean": "The dog was", "patch": "The turtle was", "clean_answer": "big", "patch_answer": "slow"},
    ]
    everything = nie_grid(word_model, records, positions=["final"], progress=False, min_difference=0.0)
    differences = (everything.drop_duplicates("pair")["m_patch"] - everything.drop_duplicates("pair")["m_clean"]).abs()
    # a threshold between the smallest and the largest difference leaves out exactly the smaller pairs
    threshold = float(differences.sort_values().iloc[1]) + 1e-6
    table = nie_grid(word_model, records, positions=["final"], progress=False, min_difference=threshold)
    small = set(differences.index[differences < threshold].map(lambda row: int(everything.loc[row, "pair"])))
    assert set(excluded_pairs(table)["pair"]) == small and 0 < len(small) < 3
    kept = table[~table["pair"].isin(small)]
    summary = nie_summary(table)
    for (layer, position), cell in kept.groupby(["layer", "position"], sort=False):
        got = summary[(summary["layer"] == layer) & (summary["position"] == position)]
        assert got["nie"].iloc[0] == pytest.approx(cell["nie"].mean()) and got["n_pairs"].iloc[0] == len(cell)
    report = excluded_report(table)
    assert report.startswith(f"left out of the means: {len(small)} of 3 pairs") and f"{threshold:g} nats" in report
    assert excluded_report(everything) is None
    assert f"{3 - len(small)} of 3 pairs" in nie_heatmap(table).layout.title.text
    none_counted = nie_grid(word_model, records, positions=["final"], progress=False, min_difference=1e9)
    z = nie_heatmap(none_counted).data[0].z
    assert len(z) == word_model.cfg.n_layers + 1 and all(v != v for row in z for v in row)  # all blank (NaN)


# --- the demo on one's own model and data -------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_model(tmp_path_factory, word_model):
    """A model saved where `circuitlab train --out runs/mymodel` would put it, with its card and log."""
    root = tmp_path_factory.mktemp("own")
    folder = root / "runs" / "mymodel"
    word_model.save(folder)
    (folder / "card.md").write_text("# my model\n")
    (folder / "train_log.jsonl").write_text('{"step": 1, "loss": 5.0}\n')
    corpus = root / "text"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The turtle was slow.\n\nThe rabbit was fast and the cat was soft.\n")
    (corpus / "b.txt").write_text("The dog was big. The turtle was slow.\n")
    pairs = root / "pairs.json"
    pairs.write_text(json.dumps([
        {"clean": "The turtle was", "patch": "The rabbit was", "clean_answer": "slow", "patch_answer": "fast",
         "noun_position": 2},
    ]))
    return root, folder, corpus, pairs


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_demo_on_own_model_text_and_pairs_never_writes_into_the_model_folder(own_model, capsys):
    root, folder, corpus, pairs = own_model
    before = _digests(folder)
    status = main(["demo", str(folder), "--corpus", str(corpus), "--pairs", str(pairs), "--runs", str(root / "runs"),
                   "--fast", "--no-serve", "--quiet"])
    assert status == 0, capsys.readouterr().err
    assert _digests(folder) == before  # the model folder is untouched
    run = root / "runs" / "mymodel-demo"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["corpus"] == str(corpus.resolve()) and manifest["pairs"] == str(pairs.resolve())
    texts = [json.loads(line)["text"] for line in (run / "corpus.jsonl").read_text().splitlines()]
    assert "The dog was big. The turtle was slow." in [t.strip() for t in texts]
    nie = pd.read_parquet(run / "nie.parquet")
    assert set(nie["pair_name"]) == {"pair 0"} and {"noun", "final", "all"} <= set(nie["position"])
    # the database records its model: a text query needs no --model
    assert main(["db", "query", str(run / "circuitdb"), "The turtle was slow", "-k", "2"]) == 0
    assert "layer" in capsys.readouterr().out
    # a run folder named onto the model folder is refused
    assert main(["demo", str(folder), "--runs", str(root / "runs"), "--name", "mymodel", "--fast", "--no-serve"]) == 2
    assert "never writes into a model folder" in capsys.readouterr().err
    assert _digests(folder) == before


def test_demo_without_fact_tokens_points_at_pairs(own_model, capsys):
    root, folder, corpus, _ = own_model
    status = main(["demo", str(folder), "--corpus", str(corpus), "--runs", str(root / "runs2"), "--fast", "--no-serve",
                   "--quiet"])
    assert status == 0
    manifest = json.loads((root / "runs2" / "mymodel" / "manifest.json").read_text())
    assert "--pairs FILE" in manifest["artifacts"]["nie"]["skipped"]


# --- the dashboard's process tree -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_dashboard_process_tree_ends_on_a_signal(tmp_path, sig):
    """serve() with a stand-in for streamlit that starts a grandchild server: the banner comes only once the
    port is held, and the signal ends the whole tree (no server left behind holding the port)."""
    port = _free_port()
    pids = tmp_path / "pids"
    fake = tmp_path / "fake_streamlit.py"
    fake.write_text(textwrap.dedent(f"""
        import os, socket, subprocess, sys, time
        server = ("import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                  "s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(600)")
        time.sleep(0.5)
        child = subprocess.Popen([sys.executable, "-c", server])
        open({str(pids)!r}, "w").write(str(child.pid))
        child.wait()
    """))
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import circuitlab.cli.demo as demo
        demo.dashboard_command = lambda run, host, port: [sys.executable, {str(fake)!r}]
        demo.importlib.util.find_spec = lambda name: True
        demo.app_path = lambda: Path({str(fake)!r})
        sys.exit(demo.serve(Path("run"), "127.0.0.1", {port}))
    """))
    process = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    banner = process.stdout.readline()
    assert "dashboard for run at http://127.0.0.1:" in banner
    assert _listening(port)  # the banner came after the port was held
    grandchild = int(pids.read_text())
    process.send_signal(sig)
    assert process.wait(timeout=30) == 128 + sig
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("the dashboard's server outlived the signal")
    assert not _listening(port)


def test_a_taken_port_is_an_error_before_any_banner(tmp_path, capsys):
    from circuitlab.cli.demo import serve

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} .* already in use"):
            serve(tmp_path, "127.0.0.1", port)
    assert "dashboard for" not in capsys.readouterr().out


# --- figures ---------------------------------------------------------------------------------------------------


def test_the_circuit_map_gives_every_one_of_many_categories_its_own_colour():
    from circuitlab.analysis.embedding import embedding_figure
    from circuitlab.figures import distinct_colors

    categories = [f"category {i:02d}" for i in range(40)]
    coordinates = pd.DataFrame({"x": range(80), "y": range(80), "layer": 0, "token": "t", "context": "c",
                                "category": categories * 2})
    figure = embedding_figure(coordinates)
    colors = {trace.name: trace.marker.color for trace in figure.data}
    assert len(colors) == 40 and len(set(colors.values())) == 40
    many = distinct_colors(300)
    assert len(set(many)) == 300 and all(len(c) == 7 and c.startswith("#") for c in many)


def test_figures_share_one_plotly_js_beside_them(tmp_path):
    import plotly.graph_objects as go

    from circuitlab.figures import write_figure

    for name in ("a.html", "b.html", "c.html"):
        write_figure(go.Figure(go.Bar(y=[1, 2])), tmp_path / name)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["a.html", "b.html", "c.html", "plotly.min.js"]
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000
    for name in ("a.html", "b.html", "c.html"):
        html = (tmp_path / name).read_text()
        assert len(html) < 100_000 and 'src="plotly.min.js"' in html and "cdn.plot.ly" not in html


def test_dla_figures_in_one_folder_share_plotly_js(tmp_path, capsys):
    status = main(["dla", "preset:tiny-legible", "1,2,3,4,5", "--tokens", "--target-id", "9",
                   "--figure", str(tmp_path / "dla.html")])
    assert status == 0
    html = sorted(tmp_path.glob("*.html"))
    assert len(html) >= 2 and sum(p.stat().st_size for p in html) < 200_000 * len(html)
    assert [p.name for p in tmp_path.glob("*.js")] == ["plotly.min.js"]
