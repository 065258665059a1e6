"""Overfitting warnings: the two signs on made-up logs, and a real run on a tiny corpus through `train(...)`."""

from __future__ import annotations

import json

import pytest
import torch

from circuitlab.config import ModelConfig
from circuitlab.training import DataSpec, TrainConfig, train
from circuitlab.training.overfit import overfitting_warnings


def log(eval_losses: dict[int, float], train_losses: dict[int, float]) -> list[dict]:
    return [
        {"step": step, "loss": loss, "running_loss": loss, **({"eval_loss": eval_losses[step]} if step in eval_losses else {})}
        for step, loss in sorted(train_losses.items())
    ]


def test_held_out_loss_rising_while_train_loss_falls_is_named_with_its_numbers():
    history = log({10: 3.0, 20: 2.5, 30: 2.7}, {10: 3.1, 20: 2.4, 30: 1.9})
    (warning,) = overfitting_warnings(history, train_tokens=10**6, tokens_seen=10**5)
    assert "rose from 2.500 at step 20 to 2.700 at step 30" in warning and "fell from 2.400 to 1.900" in warning
    # a rise within the threshold, a rise while the training loss rises too, and a falling held-out loss: silent
    assert overfitting_warnings(log({10: 3.0, 20: 2.5, 30: 2.59}, {10: 3.1, 20: 2.4, 30: 1.9}), 10**6, 10**5) == []
    assert overfitting_warnings(log({10: 3.0, 20: 2.5, 30: 2.7}, {10: 3.1, 20: 2.4, 30: 2.6}), 10**6, 10**5) == []
    assert overfitting_warnings(log({10: 3.0, 20: 2.5, 30: 2.4}, {10: 3.1, 20: 2.4, 30: 1.9}), 10**6, 10**5) == []


def test_many_passes_over_a_small_corpus_is_named_with_its_numbers():
    (warning,) = overfitting_warnings([], train_tokens=1000, tokens_seen=20_001)
    assert "20,001 tokens, 20 passes over a corpus of 1,000 training tokens" in warning
    assert overfitting_warnings([], train_tokens=1000, tokens_seen=20_000) == []


def test_training_on_a_tiny_corpus_warns_in_the_log_metrics_and_card(tmp_path):
    text = tmp_path / "tiny.txt"
    paragraphs = [f"The {animal} was {adjective}. It sat by the {place} all day." for animal, adjective, place in
                  (("cat", "slow", "door"), ("dog", "kind", "tree"), ("fox", "shy", "river"), ("owl", "wise", "barn"))]
    text.write_text("\n\n".join(paragraphs * 3))  # about 0.6 KB
    threads = torch.get_num_threads()
    try:
        outcome = train(
            tmp_path / "run", ModelConfig.preset("tiny-gelu"),
            TrainConfig(steps=60, batch_size=4, seq_len=16, lr=3e-3, warmup=3, eval_every=20, ckpt_every=0,
                        eval_sequences=4),
            DataSpec(source="text", paths=[str(text)], vocab_size=300, held_out_fraction=0.25),
            threads=1, progress=False,
        )
    finally:
        torch.set_num_threads(threads)
    train_tokens = outcome.metrics["data"]["train_windows"] * 16
    assert outcome.result.tokens_seen == 60 * 4 * 16 and train_tokens * 20 < outcome.result.tokens_seen
    passes = [w for w in outcome.warnings if "passes over a corpus" in w]
    assert len(passes) == 1 and f"{train_tokens:,} training tokens" in passes[0]
    records = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["warning"] for r in records if "warning" in r] == outcome.warnings
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["warnings"] == outcome.warnings
    card = (tmp_path / "run" / "card.md").read_text()
    assert "Warnings from training" in card and passes[0] in card
