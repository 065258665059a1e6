"""Count the natural stories and write the counts into data/README.md (between the corpus_stats markers).

    python scripts/corpus_stats.py                 # rewrite data/README.md in place
    python scripts/corpus_stats.py --check         # print the table, change nothing

The counts come from circuitlab.data.natural (the same parser, checks and held-out split that training uses),
so the README always states what the loader reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.data.natural import HELD_OUT_PERCENT, VALIDATION_PERCENT, corpus_stats, load_natural_stories  # noqa: E402

START, END = "<!-- corpus_stats -->", "<!-- /corpus_stats -->"


def stats_table(stats: dict) -> str:
    rows = [
        ("stories", f"{stats['stories']:,} (written to {stats['prompts']:,} prompts)"),
        ("words", f"{stats['words']:,}"),
        ("distinct words (case-folded)", f"{stats['distinct_words']:,}"),
        ("training split", f"{stats['train_stories']:,} stories, {stats['train_words']:,} words"),
        ("validation split", f"{stats['validation_stories']:,} stories, {stats['validation_words']:,} words "
                             f"(the next {VALIDATION_PERCENT} of 100 buckets)"),
        ("held-out split", f"{stats['held_out_stories']:,} stories, {stats['held_out_words']:,} words "
                           f"(ids whose hash falls in {HELD_OUT_PERCENT} of 100 buckets)"),
        ("stories using their prompt's noun / verb / adjective",
         f"{stats['uses_noun']:.1%} / {stats['uses_verb']:.1%} / {stats['uses_adjective']:.1%} "
         f"(all three: {stats['uses_all_three']:.1%})"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def rewrite(readme: Path, table: str) -> None:
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{readme}: no {START} ... {END} block to rewrite")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=str(ROOT / "data" / "natural"), help="folder with prompts.jsonl and stories/")
    parser.add_argument("--readme", default=str(ROOT / "data" / "README.md"), help="README to rewrite")
    parser.add_argument("--check", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    table = stats_table(corpus_stats(load_natural_stories(args.folder)))
    print(table)
    if not args.check:
        rewrite(Path(args.readme), table)
        print(f"rewrote the counts in {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
