"""analyses/claims.md and analyses/claims.json: the rows as one markdown table per seed and as a JSON list (one
source for every number the README and notebooks print), and reading both back."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from circuitlab.claims.context import Sizes
from circuitlab.claims.rows import JSON_FIELDS, PAPER, VERDICT_RULES, VERDICTS, ClaimRow
from circuitlab.errors import UserError

COLUMNS = ("id", "place", "config", "claim", "paper", "ours", "95% interval", "nulls", "verdict", "reason", "rule",
           "measured by")
SEED_TITLES = {
    "000": "Seed 000: sparsely gated linear neurons (sgatlin)",
    "002": "Seed 002: legible attention values and NC-FFN",
    "003": "Seed 003: the parity bottleneck (only the abstract, introduction and decoder are available)",
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict_counts(rows: Sequence[ClaimRow] | Sequence[dict]) -> dict[str, int]:
    """How many rows read each verdict, in VERDICTS order."""
    verdicts = [row["verdict"] if isinstance(row, dict) else row.verdict for row in rows]
    return {verdict: verdicts.count(verdict) for verdict in VERDICTS}


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items())


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def render_claims(rows: Sequence[ClaimRow], fast: bool, sizes: Sizes, command: str) -> str:
    counts = verdict_counts(rows)
    paper_counts = verdict_counts([row for row in rows if row.config == PAPER])
    lines = [
        "# The papers' claims, measured on the shipped models",
        "",
        f"Written by `{command}` ({'fast mode: small samples, for CI' if fast else 'full mode'}); do not edit by hand.",
        "Sizes: " + ", ".join(f"{key} {value}" for key, value in sizes.__dict__.items()) + ".",
        "",
        f"Verdicts: {counts_text(counts)}.",
        f"On the papers' configurations: {counts_text(paper_counts)} (the other rows are deviations, each named "
        "in its config column). The same rows, with every number, are in claims.json.",
        "",
        "## How a verdict is decided",
        "",
        VERDICT_RULES,
    ]
    for seed, title in SEED_TITLES.items():
        seed_rows = [row for row in rows if row.seed == seed]
        if not seed_rows:
            continue
        lines += ["", f"## {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        for row in seed_rows:
            measured_by = f"`{row.measured_by}`" if row.measured_by else "-"
            interval = "-" if row.ci95 is None else f"[{_number(row.ci95[0])}, {_number(row.ci95[1])}]"
            nulls = "-" if not row.null else "; ".join(f"{name} {_number(value) if value is not None else 'not measured'}"
                                                      for name, value in row.null.items())
            cells = [row.id, row.place, row.config, row.claim, row.paper, row.ours, interval, nulls,
                     f"**{row.verdict}**", row.reason or "-", row.rule, measured_by]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^\| (s\d{3}-[\w-]+) \|")


def read_claims(path: str | Path) -> list[dict[str, str]]:
    """The rows of a claims.md as dicts keyed by COLUMNS (verdict without the bold marks)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist: write it with `python scripts/claims.py --out {path}`")
    rows = []
    for line in path.read_text().splitlines():
        if not _ROW.match(line):
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != len(COLUMNS):
            raise UserError(f"{path}: a claims row has {len(cells)} cells, expected {len(COLUMNS)}: {line[:80]}")
        row = dict(zip(COLUMNS, cells))
        row["verdict"] = row["verdict"].strip("*")
        rows.append(row)
    return rows


def claims_json(rows: Sequence[ClaimRow]) -> str:
    """analyses/claims.json: a list of rows, each with JSON_FIELDS (then seed, place and ours)."""
    return json.dumps([row.as_json() for row in rows], indent=1, ensure_ascii=False) + "\n"


def read_claims_json(path: str | Path) -> list[dict]:
    """The rows of a claims.json, checked for JSON_FIELDS and a known verdict."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist: write it with `python scripts/claims.py`")
    rows = json.loads(path.read_text())
    for row in rows:
        missing = [name for name in JSON_FIELDS if name not in row]
        if missing or row["verdict"] not in VERDICTS:
            raise UserError(f"{path}: row {row.get('id', '?')!r} lacks {missing} or has an unknown verdict")
    return rows
