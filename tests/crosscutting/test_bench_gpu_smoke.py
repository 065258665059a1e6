"""benchmarks/bench_gpu.py on tiny presets on the CPU (--smoke): the paired rounds and their report add up.
Timings here mean nothing; the test checks the bookkeeping that the GPU run's targets are read from."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("triton", reason="the smoke run forces the Triton fast paths through the CPU interpreter")


def _bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paired_rounds_give_the_median_ratio_and_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    bench = _bench_gpu()
    code = bench.main(["--smoke", "--out", str(tmp_path), "--skip", "layers,parts,training",
                       "--pairs", "legible-stories:gelu-stories-6l"])
    assert code == 0
    results = json.loads((tmp_path / "bench_gpu.json").read_text())
    (row,) = results["paired"]
    assert row["ok"], row.get("error")
    rounds = row["round_ms"]
    ratios = sorted(b / p for p, b in zip(rounds["legible-stories"], rounds["gelu-stories-6l"]))
    assert len(ratios) == row["rounds"] == 7
    assert row["round_ratios"] == pytest.approx(ratios)
    assert row["ratio"] == pytest.approx(ratios[3]) and row["ratio_range"] == pytest.approx([ratios[0], ratios[-1]])
    table = (tmp_path / "bench_gpu.md").read_text()
    assert "| legible-stories | gelu-stories-6l |" in table and f"| {row['ratio']:.2f} |" in table
    assert ("| yes |" if row["ratio"] >= 0.7 else "| no |") in table.split("| legible-stories | gelu-stories-6l |")[1]
    # the router section: both forward designs and both sort-key widths give the same answer
    router = results["router"]
    assert router["designs_agree"] and router["segments_agree"]
    assert set(router["fwd_ms"]) == {"rows", "tiled"} and "same gates and indices: yes" in table


def test_bad_pairs_are_refused(tmp_path):
    bench = _bench_gpu()
    with pytest.raises(SystemExit) as error:
        bench.main(["--smoke", "--out", str(tmp_path), "--pairs", "legible-stories:no-such-preset"])
    assert error.value.code == 2
