"""Check natural stories before they join the corpus; exits non-zero when any story fails.

    python scripts/check_stories.py                          # every story of data/natural/stories
    python scripts/check_stories.py data/natural/stories/part_05000.txt ...   # these files, against the rest

A story fails when:
- its id is not a prompt id, or is given twice (in the corpus or in the files checked);
- it has fewer than 80 or more than 500 words, or, where its prompt names a length (`words`), fewer than half
  or more than 1.6 times that length;
- it leaves out its prompt's noun, verb or adjective (any inflection counts);
- it shares a span of 12 words (case-folded, punctuation ignored) with any other story;
- it repeats its prompt's template: it talks about the prompt itself (the words "noun", "verb", "adjective",
  "prompt", a feature's name such as "foreshadowing"), or its opening sentence, with the prompt's three words
  masked, is the opening sentence of another story (a fill-in frame: "There was a ADJ NOUN who loved to VERB");
- its prompt asks for dialogue and it has no quoted speech, or it carries markup (a title line, '#', '*').
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.data.natural import story_problems  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="story files to check (default: all); the rest of the corpus is the reference")
    parser.add_argument("--folder", default=str(ROOT / "data" / "natural"), help="folder with prompts.jsonl and stories/")
    parser.add_argument("--max-report", type=int, default=200, help="print at most this many problems")
    args = parser.parse_args(argv)
    problems, checked = story_problems(args.folder, [Path(f) for f in args.files] or None)
    for line in problems[: args.max_report]:
        print(line)
    if len(problems) > args.max_report:
        print(f"... and {len(problems) - args.max_report} more")
    print(f"checked {checked:,} stories: {len(problems):,} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
