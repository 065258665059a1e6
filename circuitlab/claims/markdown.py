"""analyses/claims.md: rendering the rows as one markdown table per seed, and reading them back."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from circuitlab.claims.context import Sizes
from circuitlab.claims.rows import NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, VERDICT_RULES, VERDICTS, ClaimRow
from circuitlab.errors import UserError

COLUMNS = ("id", "place", "claim", "paper", "ours", "verdict", "reason", "rule", "measured by")
SEED_TITLES = {
    "000": "Seed 000: sparsely gated linear neurons (sgatlin)",
    "002": "Seed 002: legible attention values and NC-FFN",
    "003": "Seed 003: the parity bottleneck (only the abstract, introduction and decoder are available)",
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_claims(rows: Sequence[ClaimRow], fast: bool, sizes: Sizes, command: str) -> str:
    counts = {verdict: sum(row.verdict == verdict for row in rows) for verdict in VERDICTS}
    lines = [
        "# The papers' claims, measured on the shipped models",
        "",
        f"Written by `{command}` ({'fast mode: small samples, for CI' if fast else 'full mode'}); do not edit by hand.",
        "Sizes: " + ", ".join(f"{key} {value}" for key, value in sizes.__dict__.items()) + ".",
        "",
        f"Verdicts: {counts[REPRODUCED]} reproduced, {counts[NOT_REPRODUCED]} not reproduced, "
        f"{counts[NOT_MEASURED]} not measured.",
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
            cells = [row.id, row.place, row.claim, row.paper, row.ours, f"**{row.verdict}**", row.reason or "-",
                     row.rule, measured_by]
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
