"""Write the prompts the natural stories of data/natural/ were written to (TinyStories' recipe).

Each prompt draws one noun, one verb and one adjective from data/natural/prompt_words.json and one to three
story features (dialogue, a twist, a moral, ...); the writer must use the three words and show the features.
Seeded, so the same file comes out every time:

    python scripts/story_prompts.py --n 3600 --seed 0 > data/natural/prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

WORDS = Path(__file__).resolve().parents[1] / "data" / "natural" / "prompt_words.json"


def make_prompts(n: int, seed: int) -> list[dict]:
    words = json.loads(WORDS.read_text(encoding="utf-8"))
    rng = random.Random(seed)
    prompts = []
    for index in range(n):
        prompts.append({
            "id": index,
            "noun": rng.choice(words["noun"]),
            "verb": rng.choice(words["verb"]),
            "adjective": rng.choice(words["adjective"]),
            "features": sorted(rng.sample(words["feature"], rng.choice((1, 2, 2, 3)))),
        })
    return prompts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3600, help="number of prompts")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(argv)
    for prompt in make_prompts(args.n, args.seed):
        sys.stdout.write(json.dumps(prompt) + "\n")


if __name__ == "__main__":
    main()
