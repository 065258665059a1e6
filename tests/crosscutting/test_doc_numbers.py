"""The documentation's measured numbers are the ones the commands print today (scripts/doc_numbers.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("doc_numbers", ROOT / "scripts" / "doc_numbers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_renders_the_summary_and_replaces_only_its_block():
    numbers = _script()
    summary = pd.DataFrame([{"design": "Boolean head-100", "surface": "attention", "n_channels": 1024, "atom_crisp": 99.94,
                             "on_percent": 41.86, "alive": 30.64, "selective": 39.36, "constant": 60.64, "fuzzy": 0.0}])
    table = numbers.legibility_table(summary)
    assert table.splitlines()[-1] == "| Boolean head-100 | attention | 1024 | 99.9% | 41.9 | 30.6% | 39.4% | 60.6% | 0.0% |"
    text = "before\n<!-- numbers:legibility -->\nold\n<!-- /numbers:legibility -->\nafter\n"
    assert numbers.replace_block(text, "legibility", table) == (
        "before\n<!-- numbers:legibility -->\n" + table + "<!-- /numbers:legibility -->\nafter\n")


@pytest.mark.slow
def test_the_documented_legibility_numbers_match_the_command():
    assert _script().main(["--check"]) == 0
