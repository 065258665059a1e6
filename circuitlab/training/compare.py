"""Compare finished runs: a markdown table of their metrics, with the spread over seeds.

    python -m circuitlab.training.compare runs/shipped sgatlin-stories gelu-stories legible-stories

reads `<run>/<name>/metrics.json` (seed 0) and `<run>/<name>-seed<N>/metrics.json` (other seeds) for every
name. A model trained with several seeds gets one row per seed and a row with the mean and the spread
(max - min); the closing lines say, for each pair of models with several seeds, whether their difference in
each held-out loss exceeds the larger of their two spreads.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

LOSS_KEYS = (("natural_held_out_loss", "natural held-out loss"), ("generated_held_out_loss", "generated held-out loss"))


def collect_runs(run: str | Path, names: list[str]) -> dict[str, list[dict]]:
    """name -> metrics of its seeds, seed 0 first."""
    run = Path(run)
    found: dict[str, list[dict]] = {}
    for name in names:
        seeds = [p for p in run.glob(f"{name}-seed*") if p.is_dir() and p.name.rsplit("seed", 1)[1].isdigit()]
        folders = [run / name] + sorted(seeds, key=lambda p: int(p.name.rsplit("seed", 1)[1]))
        metrics = [json.loads((folder / "metrics.json").read_text()) for folder in folders if (folder / "metrics.json").is_file()]
        if not metrics:
            raise FileNotFoundError(f"{run / name}/metrics.json: no finished run of {name}")
        found[name] = metrics
    return found


def _value(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    if value is None and key.endswith("_held_out_loss"):  # a run with one held-out set
        value = metrics.get("held_out_loss") if key.startswith("generated") else None
    return value


def _cell(values: list[float | None], fmt: str) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    if len(present) == 1:
        return format(present[0], fmt)
    mean = sum(present) / len(present)
    return f"{format(mean, fmt)} ± {format(max(present) - min(present), fmt)}"


def runs_table(runs: dict[str, list[dict]]) -> str:
    header = ("| model | seed | natural held-out loss | generated held-out loss | unigram entropy (natural / generated) "
              "| fact accuracy (adjacent / distant) | tokens | wall time |")
    lines = [header, "|" + "---|" * 8]
    for name, seeds in runs.items():
        for metrics in seeds:
            entropy = " / ".join(
                "n/a" if metrics.get(f"{part}_held_out_unigram_entropy") is None else f"{metrics[f'{part}_held_out_unigram_entropy']:.3f}"
                for part in ("natural", "generated"))
            facts = " / ".join("n/a" if metrics.get(key) is None else f"{100 * metrics[key]:.1f}%"
                               for key in ("fact_accuracy", "fact_accuracy_distant"))
            lines.append(
                f"| {name} | {metrics.get('seed', 0)} | {_cell([_value(metrics, 'natural_held_out_loss')], '.3f')} "
                f"| {_cell([_value(metrics, 'generated_held_out_loss')], '.3f')} | {entropy} "
                f"| {facts} | {metrics['tokens_seen']:,} "
                f"| {metrics['wall_seconds'] / 60:.1f} min |")
        if len(seeds) > 1:
            facts = [None if m.get("fact_accuracy") is None else 100 * m["fact_accuracy"] for m in seeds]
            fact_cell = _cell(facts, ".1f") + ("%" if any(v is not None for v in facts) else "")
            lines.append(
                f"| {name} | mean ± spread of {len(seeds)} | {_cell([_value(m, 'natural_held_out_loss') for m in seeds], '.3f')} "
                f"| {_cell([_value(m, 'generated_held_out_loss') for m in seeds], '.3f')} | | {fact_cell} | | |")
    lines.append("")
    lines.extend(seed_spread_verdicts(runs))
    return "\n".join(lines)


def seed_spread_verdicts(runs: dict[str, list[dict]]) -> list[str]:
    """One line per pair of multi-seed models and held-out set: difference of means vs the larger spread."""
    verdicts = []
    seeded = {name: seeds for name, seeds in runs.items() if len(seeds) > 1}
    for (name_a, seeds_a), (name_b, seeds_b) in itertools.combinations(seeded.items(), 2):
        for key, label in LOSS_KEYS:
            a = [v for v in (_value(m, key) for m in seeds_a) if v is not None]
            b = [v for v in (_value(m, key) for m in seeds_b) if v is not None]
            if len(a) < 2 or len(b) < 2:
                continue
            difference = abs(sum(a) / len(a) - sum(b) / len(b))
            spread = max(max(a) - min(a), max(b) - min(b))
            verdict = "exceeds" if difference > spread else "does not exceed"
            verdicts.append(f"- {label}: {name_a} vs {name_b} differ by {difference:.3f} nats/token, which {verdict} "
                            f"the seed spread ({spread:.3f})")
    return verdicts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m circuitlab.training.compare RUN_FOLDER NAME [NAME ...]", file=sys.stderr)
        return 2
    print(runs_table(collect_runs(argv[0], argv[1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
