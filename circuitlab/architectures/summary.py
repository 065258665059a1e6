"""`circuitlab summary`: parameters per part and hook names of any config, preset or checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from circuitlab.config import ModelConfig
from circuitlab.presets import PRESETS


def build_from_spec(spec: str) -> Any:
    """A model folder, a shipped model name, a config.json path (untrained), or `preset:NAME` (untrained).

    A bare name that finds no trained model is an error, never a silent switch to the randomly initialised
    preset of that name: random weights are asked for by `preset:NAME`.
    """
    from circuitlab.architectures.weights import CheckpointError, refuse_pickle, shipped_models
    from circuitlab.errors import did_you_mean
    from circuitlab.resources import models_root
    from circuitlab.architectures.transformer import load_model
    from circuitlab.architectures.transformer import CircuitTransformer

    if spec.startswith("preset:"):
        name = spec[len("preset:"):]
        return CircuitTransformer(ModelConfig.preset(name))
    path = Path(spec)
    if path.is_file():
        refuse_pickle(path)
        return CircuitTransformer(ModelConfig.from_json(path))
    if path.is_dir() or (models_root() / spec).is_dir():
        return load_model(spec)
    if spec in PRESETS:
        raise CheckpointError(
            f"{spec!r} names no trained model: no folder {spec!r} here and no shipped model of that name in "
            f"{models_root()}. For the randomly initialised (untrained) preset, pass preset:{spec}"
        )
    guess = did_you_mean(spec, shipped_models() + [f"preset:{name}" for name in PRESETS])
    raise CheckpointError(
        f"{spec!r} is neither a model folder, a shipped model, a config.json, nor preset:NAME{guess} "
        f"(presets: {', '.join(sorted(PRESETS))})"
    )


def hook_shapes(model: Any, n_pos: int = 8) -> dict[str, tuple[int, ...]]:
    tokens = torch.zeros(1, min(n_pos, model.config.n_ctx), dtype=torch.long)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    return {name: tuple(value.shape) for name, value in cache.items()}


def summary_text(model: Any) -> str:
    config = model.config
    ffn = config.feedforward
    lines = [
        f"model {config.name or '(unnamed)'}  config hash {config.hash()[:12]}",
        f"  {config.n_layers} layers, d_model {config.d_model}, {config.n_heads} heads x {config.d_head}, "
        f"vocab {config.d_vocab}, context {config.n_ctx}, {config.positional} positions, {config.norm}"
        f"{', QK-norm' if config.attention.qk_norm else ''}, {'tied' if config.tied_embeddings else 'untied'} unembedding",
        f"  attention: {config.attention.describe(config.n_heads)}",
        f"  FFN: {ffn.describe()}",
    ]
    if config.bottleneck is not None:
        lines.append(f"  {config.bottleneck.design} bottleneck: {config.bottleneck.describe(config.d_model)}: "
                     f"{model.blocks[0].bottleneck.features_scored_per_token()} features scored per token")
    if config.selectivity.active:
        lines.append(f"  selectivity pressures: {config.selectivity.describe()}")
    lines.append("parameters per part:")
    counts = model.parameter_counts()
    for part, count in counts.items():
        lines.append(f"  {part:<12} {count:>14,}")
    lines.append(f"  {'active/token':<12} {model.active_parameters_per_token():>14,}")
    lines.append("hook points (shape for 1 x 8 tokens):")
    shapes = hook_shapes(model)
    for name, shape in shapes.items():
        if name.startswith("blocks.") and not name.startswith("blocks.0."):
            continue
        lines.append(f"  {name:<44} {list(shape)}")
    if config.n_layers > 1:
        lines.append(f"  ... the same for blocks.1 to blocks.{config.n_layers - 1}")
    return "\n".join(lines)
