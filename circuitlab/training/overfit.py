"""Overfitting warnings, read off a finished run's log: a model that memorises a small corpus looks fine by
its training loss alone (3.3 KB of text trains to loss 0.001 at held-out perplexity 668,908).

Two signs, each reported once with the numbers behind it:
- memorising: the validation loss rose by more than `rise` nats above its best evaluation while the
  training loss (its running median) kept falling since that evaluation;
- many passes: the run trained on more than `max_passes` times the corpus' training tokens.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

RISE_NATS = 0.1  # perplexity up ~10% from its best: beyond the evaluation noise of the shipped runs
MAX_PASSES = 20.0  # the shipped story models see their corpus about once; the tiny presets ~1.5 times


def overfitting_warnings(
    history: Sequence[dict[str, Any]],
    train_tokens: int,
    tokens_seen: int,
    *,
    rise: float = RISE_NATS,
    max_passes: float = MAX_PASSES,
) -> list[str]:
    """Warnings (plain sentences) about overfitting in a training log; [] when there is no sign of it.

    history: the log records (`step`, `loss`, `running_loss`, and `eval_loss` on evaluation steps).
    train_tokens: distinct training tokens in the corpus; tokens_seen: tokens the run trained on.
    """
    warnings = []
    evaluations = [record for record in history if "eval_loss" in record]
    if len(evaluations) >= 2:
        best = min(evaluations, key=lambda record: record["eval_loss"])
        last = evaluations[-1]
        # the running (median) loss once the guard's window is full, the step's own loss before
        train_then = best.get("running_loss") if best.get("running_loss") is not None else best["loss"]
        train_now = last.get("running_loss") if last.get("running_loss") is not None else last["loss"]
        if last["step"] > best["step"] and last["eval_loss"] - best["eval_loss"] > rise and train_now < train_then:
            warnings.append(
                f"overfitting: the validation loss rose from {best['eval_loss']:.3f} at step {best['step']} to "
                f"{last['eval_loss']:.3f} at step {last['step']} while the training loss fell from {train_then:.3f} "
                f"to {train_now:.3f}; the model is memorising its training text. The run keeps the weights of its "
                "lowest validation loss (unless --keep-last); train on more text to do better"
            )
    if train_tokens > 0 and tokens_seen > max_passes * train_tokens:
        warnings.append(
            f"overfitting risk: the run trained on {tokens_seen:,} tokens, {tokens_seen / train_tokens:,.0f} passes "
            f"over a corpus of {train_tokens:,} training tokens (more than {max_passes:.0f} passes); its training "
            "loss says little about text it has not seen. Use a larger corpus or fewer --steps"
        )
    return warnings


def report_warnings(warnings: list[str], history: Sequence[dict[str, Any]], log: Callable[[str], None], printed: bool) -> None:
    """Log each warning the history does not hold yet (a resumed run logged it before) and print it."""
    logged = {record.get("warning") for record in history}
    for message in warnings:
        if message not in logged:
            log(message)
        if printed:
            print(f"warning: {message}", file=sys.stderr)
