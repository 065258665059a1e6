"""Regenerate the documentation's numbers that a command prints (and no results file holds), so the two cannot
drift apart. Each block sits between `<!-- numbers:NAME -->` and `<!-- /numbers:NAME -->` in its page:

- legibility (docs/generated/legibility.md): the table `circuitlab legibility legible-stories` prints (default
  arguments), one row per surface

    .venv/bin/python scripts/doc_numbers.py           # rewrite the blocks
    .venv/bin/python scripts/doc_numbers.py --check   # exit 1 when a page differs from a fresh run
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "generated" / "legibility.md"
LEGIBILITY_MODEL = "legible-stories"
HEADER = ("| design | surface | channels | atom crisp | ON % | alive operands | SELECTIVE | CONSTANT | FUZZY |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")


def legibility_summary(model_name: str = LEGIBILITY_MODEL):
    """The summary `circuitlab legibility MODEL` prints, computed by the command's own code and defaults."""
    import torch

    from circuitlab.analysis.legibility import legibility_stats
    from circuitlab.analysis.legibility import legibility_summary as summarise
    from circuitlab.cli import build_parser
    from circuitlab.cli.causal import _held_out_tokens, _load

    args = build_parser().parse_args(["legibility", model_name, "--quiet"])
    model = _load(args.model)
    with torch.no_grad():
        tokens = _held_out_tokens(model, args)
        stats = legibility_stats(model, tokens, batch_size=args.batch_size, progress=False)
    return summarise(stats, model.config.name)


def legibility_table(summary) -> str:
    """The markdown table of a legibility summary (percentages as the command prints them)."""
    rows = []
    for row in summary.itertuples(index=False):
        rows.append(f"| {row.design} | {row.surface} | {int(row.n_channels)} | {row.atom_crisp:.1f}% | "
                    f"{row.on_percent:.1f} | {row.alive:.1f}% | {row.selective:.1f}% | {row.constant:.1f}% | "
                    f"{row.fuzzy:.1f}% |\n")
    return HEADER + "".join(rows)


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- numbers:{name} -->\n)(.*?)(<!-- /numbers:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE.name} has no <!-- numbers:{name} --> block")
    return pattern.sub(lambda match: match.group(1) + body + match.group(3), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from a fresh run")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    fresh = replace_block(text, "legibility", legibility_table(legibility_summary()))
    if args.check:
        if fresh != text:
            print(f"{PAGE}'s numbers differ from a fresh run: run scripts/doc_numbers.py", file=sys.stderr)
            return 1
        print(f"{PAGE.name}'s numbers match a fresh run")
        return 0
    PAGE.write_text(fresh, encoding="utf-8")
    print(f"{PAGE.name} updated" if fresh != text else f"{PAGE.name} already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
