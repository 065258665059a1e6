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
