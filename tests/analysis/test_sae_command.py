"""`circuitlab report sae` and scripts/gpu_parity_sae.sh at tiny size on the CPU: autoencoders of the bottleneck's
m and k trained on the GELU model's writes over the natural training split and saved, loaded (not retrained)
on a second run, refused when made with other settings; the comparison written as JSON and markdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.data.tokenizer import CircuitTokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    tokenizer = CircuitTokenizer.from_file(ROOT / "models" / "sgatlin-stories" / "tokenizer.json")
    folders = {}
    for name in ("tiny-parity", "tiny-gelu"):
        model = CircuitTransformer(ModelConfig.preset(name, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
        model.reset_parameters(seed=0)
        folders[name] = tmp_path_factory.mktemp(name)
        model.save(folders[name])
    return folders


def _command(models, sae_dir, out, *extra):
    """`report sae` at tiny size, writing to `out` (None: to its default folder)."""
    from circuitlab.cli import main

    written = [] if out is None else ["--json", str(out / "comparison.json"), "--markdown", str(out / "comparison.md")]
    return main(["report", "sae", str(models["tiny-parity"]), "--gelu", str(models["tiny-gelu"]), "--sae-dir", str(sae_dir),
                 "--steps", "20", "--sae-batch-size", "128", "--lr", "3e-3", "--warmup", "2", "--train-tokens", "4096",
                 "--dead-after", "1024", "--tokens", "200", "--seq-len", "50", "--batch-size", "4", "--probe-stories", "8",
                 "--device", "cpu", "--quiet", *written, *extra])


def test_the_command_trains_saves_reloads_and_refuses_other_settings(tiny_models, tmp_path, capsys, monkeypatch):
    from circuitlab.analysis.parity_measure import natural_windows
    from circuitlab.analysis.sae import TopKSAE
    from circuitlab.analysis.sae_report import comparison_markdown, load_sae_comparison
    from circuitlab.architectures.transformer import load_model

    sae_dir = tmp_path / "sae"
    assert _command(tiny_models, sae_dir, tmp_path) == 0
    result = load_sae_comparison(tmp_path / "comparison.json")
    assert (tmp_path / "comparison.md").read_text() == comparison_markdown(result) + "\n"
    assert "| 1 | top-k SAE |" in capsys.readouterr().out
    gelu = load_model(tiny_models["tiny-gelu"])
    train_rows = natural_windows(gelu, ROOT / "data" / "natural", 4096, 50, split="train")[:, :-1].numel()
    for layer in range(2):
        sae, record = TopKSAE.load(sae_dir / f"layer_{layer}")
        assert (sae.n_latents, sae.k, sae.config.seed) == (1024, 8, layer)  # the bottleneck's m = 2^10 and k = 8
        assert record["hook"] == f"blocks.{layer}.hook_mlp_out" and record["split"] == "train"
        assert record["training"]["rows"] == train_rows and record["training"]["steps"] == 20
        assert [entry["step"] for entry in record["log"]] == [0, 19]
        torch.testing.assert_close(sae.W_dec.norm(dim=0), torch.ones(1024))
        assert result["sae"]["training"][layer]["tokens_seen"] == 20 * 128
    assert result["sae"]["config"]["n_latents"] == 1024 and result["tokens"] == 200

    # a second run loads the saved autoencoders and measures the same numbers
    written = [(sae_dir / f"layer_{layer}" / "sae.safetensors").stat().st_mtime_ns for layer in range(2)]
    again = tmp_path / "again"
    assert _command(tiny_models, sae_dir, again) == 0
    assert [(sae_dir / f"layer_{layer}" / "sae.safetensors").stat().st_mtime_ns for layer in range(2)] == written
    repeated = json.loads((again / "comparison.json").read_text())
    assert repeated["layers"] == result["layers"] and repeated["gelu"] == result["gelu"]

    # without --json or --markdown the comparison goes to results/parity/, where the Parity page reads it
    monkeypatch.setenv("CIRCUITLAB_RESULTS", str(tmp_path / "results"))
    assert _command(tiny_models, sae_dir, None) == 0
    default = load_sae_comparison(tmp_path / "results" / "parity" / "sae_comparison.json")
    assert default["layers"] == result["layers"]
    assert (tmp_path / "results" / "parity" / "sae_comparison.md").read_text() == comparison_markdown(default) + "\n"

    # autoencoders of other settings are refused, not silently compared
    assert _command(tiny_models, sae_dir, again, "--k", "4") == 2
    assert "other settings or another model" in capsys.readouterr().err


@pytest.mark.slow
def test_the_gpu_script_runs_end_to_end_at_tiny_size_on_the_cpu(tmp_path):
    environment = {**os.environ, "TINY": "1", "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    environment.pop("OUT", None)
    completed = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_parity_sae.sh"), str(tmp_path)], env=environment,
                               cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert completed.returncode == 0, completed.stderr[-3000:]
    from circuitlab.analysis.sae_report import load_sae_comparison

    result = load_sae_comparison(tmp_path / "sae_comparison.json")
    assert [layer["layer"] for layer in result["layers"]] == [0, 1]
    assert (tmp_path / "sae" / "layer_1" / "sae.safetensors").is_file()
    assert "report sae took" in completed.stdout and "| all | top-k SAE |" in completed.stdout
    log = (tmp_path / "report_sae.log").read_text()
    assert "| all | top-k SAE |" in log and "report sae took" in log
