"""Write the prompts the natural stories of data/natural/ are written to (TinyStories' recipe).

Each prompt draws one noun, one verb and one adjective from data/natural/prompt_words.json and one to three
story features (dialogue, a twist, a moral, ...); the writer must use the three words and show the features.
Prompts come in two seeded series, so the same file comes out every time:

- ids 0-3599 (seed 0) draw from the word list's first version (its first `first_version_counts` entries of
  each kind, 16 features) and carry no length: those stories run to about 170-250 words;
- ids from 3600 (seed 1) draw from the whole list and carry `words`, a target length between 80 and 500
  words, so short and long stories both occur.

    python scripts/story_prompts.py > data/natural/prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

WORDS = Path(__file__).resolve().parents[1] / "data" / "natural" / "prompt_words.json"
FIRST_SERIES = 3600
# Target lengths of the second series, drawn uniformly from this list (mean 225 words).
LENGTHS = (80, 100, 120, 150, 180, 200, 220, 250, 280, 320, 380, 450, 500, 120, 160, 200)


def _series(words: dict, n: int, seed: int, first_id: int, lengths: bool) -> list[dict]:
    rng = random.Random(seed)
    prompts = []
    for index in range(first_id, first_id + n):
        prompt = {
            "id": index,
            "noun": rng.choice(words["noun"]),
            "verb": rng.choice(words["verb"]),
            "adjective": rng.choice(words["adjective"]),
            "features": sorted(rng.sample(words["feature"], rng.choice((1, 2, 2, 3)))),
        }
        if lengths:
            prompt["words"] = rng.choice(LENGTHS)
        prompts.append(prompt)
    return prompts


def make_prompts(n: int) -> list[dict]:
    """The first `n` prompts: the first series from the word list's first version, then the second."""
    words = json.loads(WORDS.read_text(encoding="utf-8"))
    counts = words["first_version_counts"]
    first_words = {kind: words[kind][:count] for kind, count in counts.items()}
    prompts = _series(first_words, min(n, FIRST_SERIES), seed=0, first_id=0, lengths=False)
    if n > FIRST_SERIES:
        prompts += _series(words, n - FIRST_SERIES, seed=1, first_id=FIRST_SERIES, lengths=True)
    return prompts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30000, help="number of prompts (default 30000)")
    args = parser.parse_args(argv)
    for prompt in make_prompts(args.n):
        sys.stdout.write(json.dumps(prompt) + "\n")


if __name__ == "__main__":
    main()
