"""Model cards: card.md beside a model's config.json, saying how it was made and how well it does.

A card records what a researcher needs to trust and reproduce a checkpoint: the exact command, seed,
tokens seen, wall time, device, held-out perplexity and fact accuracy, a summary of the architecture and
the training settings, and free-text design notes supplied by whoever trained it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from circuitlab.atomic import atomic_write_text
from circuitlab.config import ModelConfig

CARD_FILE = "card.md"
METRICS_FILE = "metrics.json"


def _architecture_lines(config: ModelConfig) -> list[str]:
    return [f"- {line}" for line in config.describe()] + [f"- selectivity pressures: {config.selectivity.describe()}"]


def _format_seconds(seconds: float) -> str:
    minutes, secs = divmod(float(seconds), 60.0)
    return f"{seconds:.1f} s ({int(minutes)} min {secs:.0f} s)"


def write_card(
    folder: str | os.PathLike,
    *,
    command: str,
    seed: int,
    tokens_seen: int,
    wall_seconds: float,
    device: str,
    held_out_ppl: float,
    fact_accuracy: float | None,
    held_out_sets: dict[str, float] | None = None,
    held_out_description: str = "held-out text the training never saw",
    config: ModelConfig | None = None,
    design_notes: str = "",
    train_settings: dict[str, Any] | None = None,
    parameter_count: int | None = None,
    extra_metrics: dict[str, Any] | None = None,
    title: str | None = None,
    warnings: list[str] | None = None,
) -> Path:
    """Write `folder/card.md` and return its path. `config` defaults to the folder's config.json.

    held_out_sets: {name: perplexity} of each held-out set when there are several (the natural stories and the
    generated ones): each gets its own column instead of the perplexity of their concatenation.
    held_out_description: what the held-out perplexity is measured on (DataSpec.held_out_description).
    warnings: training warnings (overfitting) shown right under the results."""
    folder = Path(folder)
    if config is None:
        config = ModelConfig.from_json(folder / "config.json")
    name = title or config.name or folder.name
    fact_text = "not measured" if fact_accuracy is None else f"{100 * fact_accuracy:.1f}%"
    lines = [
        f"# {name}",
        "",
        "## Results",
        "",
    ]
    perplexities = held_out_sets or {"held-out": held_out_ppl}
    lines += [
        "| " + " | ".join(f"{name} perplexity" for name in perplexities) + " | fact accuracy | tokens seen | wall time | device |",
        "|" + "---|" * (len(perplexities) + 4),
        "| " + " | ".join(f"{ppl:.3f}" for ppl in perplexities.values())
        + f" | {fact_text} | {tokens_seen:,} | {_format_seconds(wall_seconds)} | {device} |",
        "",
        f"Perplexity is measured on {held_out_description}; fact accuracy is the fraction of single-token noun -> "
        'adjective facts for which the model\'s top next token after "The [noun] was" is the adjective.',
        "",
    ]
    if warnings:
        lines += ["**Warnings from training:**", "", *[f"- {message}" for message in warnings], ""]
    if extra_metrics:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in extra_metrics.items()]
        lines.append("")
    lines += [
        "## Reproduce",
        "",
        f"Seed {seed}. Exact command:",
        "",
        "```",
        command,
        "```",
        "",
        "## Architecture",
        "",
        *_architecture_lines(config),
    ]
    if parameter_count is not None:
        lines.append(f"- parameters: {parameter_count:,}")
    lines.append(f"- config hash: `{config.hash()[:16]}`")
    lines.append("")
    if train_settings:
        lines += ["## Training settings", "", "| setting | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in train_settings.items()]
        lines.append("")
    lines += ["## Design notes", "", design_notes.strip() or "(none given)", ""]
    path = folder / CARD_FILE
    atomic_write_text(path, "\n".join(lines))
    return path


def write_card_from_metrics(folder: str | os.PathLike, design_notes: str = "", title: str | None = None) -> Path:
    """Rewrite `folder/card.md` from the folder's metrics.json (written by `circuitlab train`), e.g. to add notes."""
    folder = Path(folder)
    path = folder / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; train the model with `circuitlab train --out {folder}` first")
    metrics = json.loads(path.read_text())
    return write_card(
        folder,
        command=metrics["command"],
        seed=metrics["seed"],
        tokens_seen=metrics["tokens_seen"],
        wall_seconds=metrics["wall_seconds"],
        device=metrics["device"],
        held_out_ppl=metrics["held_out_ppl"],
        fact_accuracy=metrics.get("fact_accuracy"),
        held_out_sets={name: values["ppl"] for name, values in (metrics.get("held_out_sets") or {}).items()} or None,
        held_out_description=metrics.get("held_out", "held-out text the training never saw"),
        design_notes=design_notes,
        train_settings=metrics.get("train_settings"),
        parameter_count=metrics.get("parameters"),
        title=title,
        warnings=metrics.get("warnings"),
    )
