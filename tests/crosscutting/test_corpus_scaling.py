"""scripts/corpus_scaling.py: the paired loss difference on shared held-out stories and the log-linear estimate,
against hand computations."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("corpus_scaling", ROOT / "scripts" / "corpus_scaling.py")
corpus_scaling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus_scaling)


def _npz(path: Path, ids, nll, tokens) -> Path:
    np.savez(path, ids=np.asarray(ids), nll=np.asarray(nll, dtype=float), tokens=np.asarray(tokens, dtype=float))
    return path


def test_paired_difference_reads_only_the_shared_stories(tmp_path):
    before = _npz(tmp_path / "before.npz", [1, 2, 3], [30.0, 40.0, 99.0], [10, 20, 5])
    after = _npz(tmp_path / "after.npz", [2, 1, 7], [36.0, 27.0, 1.0], [20, 10, 3])  # story 3 and 7 not shared
    found = corpus_scaling.paired(before, after)
    assert found["stories"] == 2 and found["tokens"] == 30
    assert found["before"] == pytest.approx(70 / 30) and found["after"] == pytest.approx(63 / 30)
    assert found["difference"] == pytest.approx(-7 / 30)
    assert found["ci95"][0] <= found["difference"] <= found["ci95"][1]


def test_paired_difference_refuses_another_tokenizer(tmp_path):
    before = _npz(tmp_path / "before.npz", [1], [3.0], [10])
    after = _npz(tmp_path / "after.npz", [1], [3.0], [11])
    with pytest.raises(SystemExit, match="token counts"):
        corpus_scaling.paired(before, after)


def test_log_linear_projection_by_hand():
    # a fall of 0.1 nats over e-fold growth: slope 0.1 per unit of log(tokens); 0.2 more nats take e^2 more tokens
    assert corpus_scaling.projection(2.8, -0.1, math.e, 1e6) == pytest.approx(1e6 * math.exp(2.0))
    assert corpus_scaling.projection(2.5, -0.1, math.e, 1e6) == pytest.approx(1e6)  # already below the target
    assert corpus_scaling.projection(2.8, 0.02, 1.2, 1e6) is None  # no fall
