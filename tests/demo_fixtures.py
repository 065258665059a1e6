"""Tiny models and `circuitlab demo --fast` run folders for the demo and dashboard tests.

Random-weight tiny versions of the four shipped designs (sgatlin, legible with saturated operands for the
legibility page, parity bottleneck, GELU baseline) share a BPE tokenizer trained on 1000 generated stories
with 1536 tokens, enough for most fact nouns and adjectives to be single tokens (so the fact pairs exist). Building twice in one session is cheap: the second
`circuitlab demo` finds every artifact cached.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 1536
MODELS = ("tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-gelu")
CARD = "# {name}\n\nA random-weight {name} model for the dashboard tests.\n"
TRAIN_LOG = [
    {"step": 1, "loss": 7.4, "lr": 1e-4, "running_loss": 7.4},
    {"step": 2, "loss": 6.9, "lr": 2e-4, "running_loss": 7.15},
    {"step": 3, "loss": 6.1, "lr": 3e-4, "running_loss": 6.8, "eval_loss": 6.3, "eval_ppl": 544.6},
]


def make_tiny_models(root: Path) -> dict[str, Path]:
    """Model folders root/<preset> (config, weights, tokenizer, card.md, train_log.jsonl), made once."""
    import torch

    from circuitlab import CircuitTransformer, ModelConfig
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    folders = {name: root / name for name in MODELS}
    if all((folder / "model.safetensors").exists() for folder in folders.values()):
        return folders
    tokenizer = train_tokenizer([story.text for story in generate_stories(1000)], vocab_size=VOCAB, show_progress=False)
    for index, (name, folder) in enumerate(folders.items()):
        torch.manual_seed(index)
        model = CircuitTransformer(ModelConfig.preset(name).replace(d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
        if name == "tiny-legible":
            _saturate_bounded_channels(model)
        model.save(folder)
        (folder / "card.md").write_text(CARD.format(name=name))
        (folder / "train_log.jsonl").write_text("".join(json.dumps(record) + "\n" for record in TRAIN_LOG))
    return folders


def _saturate_bounded_channels(model) -> None:
    """Large operand weights push the sigmoids to their rails, as trained legible models do (seed 002):
    random small weights leave every channel near 0.5, so nothing would fire and the channel browser
    would have no contexts to show."""
    import torch

    with torch.no_grad():
        for block in model.blocks:
            for name in ("W_A", "W_B"):
                getattr(block.attn, name).mul_(60.0)
            block.mlp.W_in.mul_(60.0)


def build_runs(base: Path) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    """(runs root, {preset: model folder}, {preset: run folder}) after `circuitlab demo --fast --no-serve`."""
    from circuitlab.cli import main

    models = make_tiny_models(base / "models")
    runs_root = base / "runs"
    runs = {}
    for name, folder in models.items():
        status = main(["demo", str(folder), "--runs", str(runs_root), "--fast", "--no-serve", "--quiet"])
        assert status == 0, f"circuitlab demo {folder} exited with {status}"
        runs[name] = runs_root / name
    return runs_root, models, runs
