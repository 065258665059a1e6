"""The documentation: its generated parts match the results they report, and every README link resolves."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _docs_pages():
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_match_their_results():
    assert _docs_pages().main(["--check"]) == 0


def test_the_performance_table_reads_each_number_from_its_result_file(tmp_path, monkeypatch):
    pages = _docs_pages()
    (tmp_path / "run.json").write_text('{"date": "d", "device": "dev", "paired": [{"ratio": 0.613}]}')
    (tmp_path / "current.json").write_text(
        '{"rows": [{"group": "g", "what": "w", "file": "run.json", "field": "paired.0.ratio", "format": "{:.2f}x",'
        ' "target": ">= 0.5x", "check": ">=0.5"}]}')
    monkeypatch.setattr(pages, "RESULTS", tmp_path)
    assert "| w | 0.61x | >= 0.5x | yes | `run.json` | d dev |" in pages.performance_table()


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    lines = text.splitlines()
    assert lines[3].startswith("bash scripts/setup.sh") and lines[4].startswith("bash scripts/test.sh")
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_the_readme_claims_block_counts_the_papers_rows_and_keeps_each_scale_reason_short():
    pages = _docs_pages()
    row = {"claim": "a claim about scale", "paper": "x", "estimate": -0.1, "ci95": [-0.2, -0.05], "config": "paper",
           "reason": "more than 10x below the paper's smallest setting (ours 1e+13 FLOPs, the paper's 1e+17 FLOPs); "
                     "up to 2.0 passes over the training data"}
    rows = [{**row, "id": "big", "verdict": "not tested at the paper's scale"},
            {**row, "id": "held", "claim": "a claim that holds", "verdict": "reproduced", "reason": "clears the rule"},
            {**row, "id": "ours", "verdict": "reproduced", "config": "a deviation", "reason": ""}]
    text = pages.claims_section(rows)
    assert ("of the 2 rows judged on the papers' configurations, 1 reproduced, 0 contradicted, 0 inconclusive, "
            "1 not tested at the paper's scale, 0 not measured; 1 more rows measure") in text
    assert "(ours 1e+13 FLOPs, the paper's 1e+17 FLOPs))" in text and "passes over the training data" not in text
    assert "`held`" in text and "`ours`" not in text
