"""Committed HTML figures open offline once `python -m circuitlab.figures FOLDER` has written plotly.min.js."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs

from circuitlab.figures import main, write_figure, write_plotly_js

ROOT = Path(__file__).resolve().parents[2]


def test_the_script_file_is_the_one_write_figure_references(tmp_path):
    figure_path = write_figure(go.Figure(go.Bar(x=[1, 2], y=[3, 4])), tmp_path / "figures" / "bar.html")
    written_by_plotly = (figure_path.parent / "plotly.min.js").read_text()
    (figure_path.parent / "plotly.min.js").unlink()
    script = write_plotly_js(figure_path.parent)
    assert script.read_text() == written_by_plotly == get_plotlyjs()
    assert re.search(r'src="plotly\.min\.js"', figure_path.read_text())


def test_the_command_writes_every_folder_and_refuses_a_missing_one(tmp_path, capsys):
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
    assert main([str(folder) for folder in folders]) == 0
    assert all((folder / "plotly.min.js").stat().st_size > 1_000_000 for folder in folders)
    assert capsys.readouterr().out.count("wrote ") == 2
    with pytest.raises(SystemExit) as error:
        main([str(tmp_path / "missing")])
    assert error.value.code == 2


def test_committed_figures_load_plotly_from_their_folder_or_the_cdn_and_the_script_is_not_committed():
    html = [*ROOT.glob("results/*/*.html"), *ROOT.glob("analyses/figures/*.html")]
    local = [path for path in html if 'src="plotly.min.js"' in path.read_text(errors="replace")]
    cdn = [path for path in html if 'src="https://cdn.plot.ly/' in path.read_text(errors="replace")]
    assert html and sorted(local + cdn) == sorted(html)  # every figure loads plotly one of the two ways
    assert ROOT / "results" / "ladder" / "ladder_loss_vs_flops.html" in local  # the folders the command is for
    tracked = subprocess.run(["git", "ls-files", "*plotly.min.js"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:  # inside a git checkout
        assert tracked.stdout.strip() == ""


def test_module_runs_as_a_command(tmp_path):
    result = subprocess.run([sys.executable, "-m", "circuitlab.figures", str(tmp_path)], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plotly.min.js").is_file()
