"""The run comparison table of scripts/train_shipped.sh: per-seed rows, mean ± spread, and the verdicts."""

from __future__ import annotations

import json

import pytest

from circuitlab.training.compare import collect_runs, main, runs_table


def _metrics(folder, seed, natural, generated, facts):
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({
        "seed": seed, "natural_held_out_loss": natural, "generated_held_out_loss": generated,
        "natural_held_out_unigram_entropy": 6.0, "generated_held_out_unigram_entropy": 5.0,
        "fact_accuracy": facts, "fact_accuracy_distant": None if facts is None else facts / 2, "tokens_seen": 1000, "wall_seconds": 120.0, "held_out_loss": 9.9}))


def test_table_and_seed_spread(tmp_path, capsys):
    _metrics(tmp_path / "gelu", 0, 3.0, 1.00, 0.5)
    _metrics(tmp_path / "gelu-seed1", 1, 3.2, 1.02, 0.7)
    _metrics(tmp_path / "sgatlin", 0, 3.1, 1.50, None)
    _metrics(tmp_path / "sgatlin-seed1", 1, 3.0, 1.52, None)
    _metrics(tmp_path / "parity", 0, 3.5, 2.0, 0.1)
    (tmp_path / "gelu-seed1.log").write_text("a run's log beside its folder")
    runs = collect_runs(tmp_path, ["gelu", "sgatlin", "parity"])
    assert [len(seeds) for seeds in runs.values()] == [2, 2, 1]
    table = runs_table(runs)
    assert "| gelu | mean ± spread of 2 | 3.100 ± 0.200 | 1.010 ± 0.020 | | 60.0 ± 20.0% | | |" in table
    assert "| sgatlin | mean ± spread of 2 | 3.050 ± 0.100 | 1.510 ± 0.020 | | n/a | | |" in table
    assert "| parity | 0 | 3.500 | 2.000 | 6.000 / 5.000 | 10.0% / 5.0% | 1,000 | 2.0 min |" in table
    # natural: |3.1 - 3.05| = 0.05 < spread 0.2; generated: 0.5 > 0.02
    assert "natural held-out loss: gelu vs sgatlin differ by 0.050 nats/token, which does not exceed the seed spread (0.200)" in table
    assert "generated held-out loss: gelu vs sgatlin differ by 0.500 nats/token, which exceeds the seed spread (0.020)" in table
    assert main([str(tmp_path), "gelu"]) == 0 and "| gelu | 1 |" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="no finished run of legible"):
        collect_runs(tmp_path, ["legible"])
