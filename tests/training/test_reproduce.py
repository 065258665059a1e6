"""scripts/reproduce/seed000_tinystories.sh end to end on the tiny local dataset it makes (TINY=1): the same
streamed path, settings flags and model folder as the full run on TinyStories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_seed000_tinystories_script_runs_end_to_end_on_a_tiny_dataset(tmp_path):
    out = tmp_path / "seed000"
    env = {**os.environ, "TINY": "1", "OUT": str(out), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "reproduce" / "seed000_tinystories.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert (config["n_layers"], config["d_model"], config["n_heads"], config["n_ctx"]) == (4, 256, 4, 1024)
    assert config["feedforward"]["type"] == "sgatlin"
    settings = metrics["train_settings"]
    assert (settings["lr"], settings["weight_decay"], settings["warmup"], settings["grad_clip"]) == (1e-3, 0.1, 100, 2.0)
    assert "(streamed)" in metrics["data"]["source"] and metrics["data"]["shards"].startswith("shards-")
    assert f"{metrics['held_out_loss']:.3f}" in done.stdout
    # run again: everything is found done (the shards and the finished run), nothing is redone
    again = subprocess.run(["bash", str(ROOT / "scripts" / "reproduce" / "seed000_tinystories.sh")], env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(list((out / "data").glob("shards-*"))) == 1 and "tokenizing" not in again.stderr
