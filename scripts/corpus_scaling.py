"""What the natural corpus's growth bought the shipped models, and what the loss target would need.

The shipped models were trained twice with the same tokenizer, settings and number of passes: on the
22,350-story corpus (results/corpus-scaling/corpus-22350: each run's per-story held-out losses and metrics, kept
from commits 5c317e0 and 22085ee) and on the 27,275-story corpus (results/models). The newer held-out split
holds every older held-out story (the split is a hash of the story), so the two runs of a model and seed compare
on the same stories: the paired difference of their held-out loss, with a bootstrap 95% interval over those
stories. Only runs that made their full steps both times are compared (a run its time budget stopped measures
the budget, not the data).

From that difference, a two-point extrapolation: if the loss falls linearly in log(natural training tokens)
(a local power law), reaching TARGET nats/token on the held-out split takes
    tokens_now * exp((loss_now - TARGET) / slope),    slope = -difference / log(tokens_now / tokens_before).
Two points fix one slope and no curvature; the figure is an order of magnitude, not a forecast.

    python scripts/corpus_scaling.py                 # prints the table, writes results/corpus-scaling/scaling.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.stats import bootstrap_difference  # noqa: E402

MODELS = ("gelu-stories", "sgatlin-stories", "legible-stories", "parity-stories")
TARGET = 2.6  # issue 36's held-out target, nats/token


def paired(before: Path, after: Path) -> dict:
    """The paired loss difference (after - before) on the held-out stories both runs read."""
    a, b = np.load(after), np.load(before)
    common, in_a, in_b = np.intersect1d(a["ids"], b["ids"], return_indices=True)
    if common.size == 0:
        raise SystemExit(f"{after} and {before} share no held-out story")
    if not np.array_equal(a["tokens"][in_a], b["tokens"][in_b]):
        raise SystemExit(f"{after} and {before}: the shared stories have other token counts (another tokenizer?)")
    found = bootstrap_difference(a["nll"][in_a], a["tokens"][in_a], b["nll"][in_b], b["tokens"][in_b])
    tokens = a["tokens"][in_a]
    return {"stories": int(common.size), "tokens": int(tokens.sum()),
            "before": float(b["nll"][in_b].sum() / tokens.sum()), "after": float(a["nll"][in_a].sum() / tokens.sum()),
            "difference": found.value, "ci95": [found.low, found.high]}


def projection(loss_now: float, difference: float, growth: float, tokens_now: float) -> float | None:
    """Natural training tokens at which the log-linear trend through the two runs reaches TARGET."""
    if difference >= 0:
        return None  # no fall: the trend never reaches it
    slope = -difference / math.log(growth)
    return tokens_now * math.exp(max(loss_now - TARGET, 0.0) / slope)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, default=ROOT / "results" / "corpus-scaling" / "corpus-22350")
    parser.add_argument("--after", type=Path, default=ROOT / "results" / "models")
    parser.add_argument("--tokens-before", type=float, default=None,
                        help="natural training tokens of the earlier runs (default: from results/baselines)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "corpus-scaling" / "scaling.json")
    args = parser.parse_args(argv)

    baselines = json.loads((ROOT / "results" / "baselines" / "natural.json").read_text())
    sizes = json.loads((args.before / "sizes.json").read_text())
    generated = sizes["generated_training_tokens"]
    tokens_after = baselines["training_tokens"] - generated
    tokens_before = args.tokens_before or sizes["mixture_training_tokens"] - generated
    growth = tokens_after / tokens_before
    rows = []
    for name in MODELS:
        for seed in (0, 1, 2):
            before_metrics = json.loads((args.before / f"{name}-seed{seed}.json").read_text())
            after_metrics = json.loads((args.after / name / f"seed{seed}" / "metrics.json").read_text())
            row = {"model": name, "seed": seed, "before_stopped": before_metrics.get("stopped"),
                   "after_stopped": after_metrics.get("stopped")}
            if row["before_stopped"] == row["after_stopped"] == "completed":
                row.update(paired(args.before / f"{name}-seed{seed}.npz", args.after / name / f"seed{seed}" / "held_out_stories.npz"))
                loss_now = after_metrics["natural_held_out_per_story"]["loss"]
                needed = projection(loss_now, row["difference"], growth, tokens_after)
                row.update(loss_now=loss_now, tokens_for_target=needed)
            rows.append(row)
    record = {"target": TARGET, "natural_tokens_before": tokens_before, "natural_tokens_after": tokens_after,
              "growth": growth, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"natural training tokens {tokens_before:,.0f} -> {tokens_after:,.0f} ({growth:.3f}x); same tokenizer, "
          "two passes")
    print("| model | seed | shared held-out stories | loss before | loss after | difference [95% interval] | "
          f"natural tokens for {TARGET} (log-linear) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if "difference" not in row:
            print(f"| {row['model']} | {row['seed']} | not compared: stopped by its time budget "
                  f"({row['before_stopped']} / {row['after_stopped']}) | | | | |")
            continue
        needed = "never (no fall)" if row["tokens_for_target"] is None else f"{row['tokens_for_target'] / 1e6:,.0f}M"
        print(f"| {row['model']} | {row['seed']} | {row['stories']:,} | {row['before']:.3f} | {row['after']:.3f} | "
              f"{row['difference']:+.3f} [{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}] | {needed} |")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
