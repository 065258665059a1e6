"""`circuitlab db build|query|info|semantic`, `embed`, `usage` on a tiny saved model."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from circuitdb_fixtures import tiny_model, tokenizer
from circuitlab.cli import main


def run(argv: list[str]) -> int:
    return main(argv)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    model = tiny_model("tiny-sgatlin")
    model.save(root / "model")
    assert run(["db", "build", "--model", str(root / "model"), "--stories", "8", "--out", str(root / "db"), "--quiet"]) == 0
    return root


def test_build_and_info(saved, capsys):
    assert run(["db", "info", str(saved / "db")]) == 0
    out = capsys.readouterr().out
    assert "layer 1: sgatlin codes of size 128, 8 non-zeros" in out and "recall@10" in out
    assert run(["db", "info", str(saved / "db"), "--json"]) == 0
    assert '"format": "circuitlab.circuitdb"' in capsys.readouterr().out


def test_query_prints_table_and_writes_files(saved, capsys):
    csv, html = saved / "hits.csv", saved / "hits.html"
    assert run(["db", "query", str(saved / "db"), "Lily had a red ball.", "-k", "4", "--csv", str(csv), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    hits = pd.read_csv(csv)
    n_tokens = len(tokenizer().encode("Lily had a red ball."))
    assert len(hits) == 4 * n_tokens and set(hits["layer"]) == {0}  # default: the penultimate of layers [0, 1]
    assert out.count("«") == 4 * n_tokens and "Neighbour top predictions" in out
    assert "plotly" in html.read_text() and "heatmap" in html.read_text()
    assert run(["db", "query", str(saved / "db"), "--circuit", "0", "5", "--layer", "1", "-k", "3", "--approximate"]) == 0
    out = capsys.readouterr().out
    assert "approximate search" in out and out.count("0.00e+00") >= 2  # each stored circuit finds itself


def test_user_errors_are_one_line(saved, capsys):
    other = tiny_model("tiny-gelu")
    other.save(saved / "gelu")
    assert run(["db", "query", str(saved / "db"), "hello", "--model", str(saved / "gelu")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "model config hash" in error
    assert run(["db", "info", str(saved / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert run(["db", "query", str(saved / "db"), "--circuit", "999999"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert run(["db", "query", str(saved / "db")]) == 2
    assert run(["usage", str(saved / "db"), "--layers", "7"]) == 2
    assert "layer 7 is not in this database" in capsys.readouterr().err


def test_semantic_usage_and_embed(saved, capsys, monkeypatch):
    assert run(["db", "semantic", str(saved / "db"), "--queries", "100", "--shuffles", "3"]) == 0
    assert "baseline" in capsys.readouterr().out
    assert run(["usage", str(saved / "db"), "--out-dir", str(saved / "usage"), "--csv", str(saved / "usage.csv")]) == 0
    table = pd.read_csv(saved / "usage.csv")
    assert table["layer"].tolist() == [0, 1] and table["fraction_used"].between(0, 1).all()
    assert sorted(p.name for p in (saved / "usage").iterdir()) == ["plotly.min.js", "usage_layer0.html", "usage_layer1.html", "usage_summary.html"]  # one plotly.js, shared

    from circuitlab.analysis import embedding

    def fake_umap(*args, **kwargs):
        return lambda codes, knn=None: np.zeros((codes.shape[0], 2), np.float32)

    monkeypatch.setattr(embedding, "umap_reducer", fake_umap)
    coordinates = saved / "coords.csv"
    assert run(["embed", str(saved / "db"), "--tokens", "5", "--neighbors", "5", "--csv", str(coordinates),
                "--out", str(saved / "map.html"), "--cache-dir", str(saved / "cache")]) == 0
    frame = pd.read_csv(coordinates)
    assert set(frame["layer"]) == {0, 1} and frame["token_id"].nunique() == 5
    assert (saved / "map.html").exists()


def test_usage_refuses_an_output_folder_that_is_a_file_or_the_csv(saved, capsys):
    """Exit 2 with a message, before any work, when --out-dir is a file or the same path as --csv."""
    a_file = saved / "not_a_folder"
    a_file.write_text("x")
    assert run(["usage", str(saved / "db"), "--out-dir", str(a_file)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    same = saved / "same"
    assert run(["usage", str(saved / "db"), "--out-dir", str(same), "--csv", str(same)]) == 2
    assert "name the same path" in capsys.readouterr().err
    assert not same.exists()
