"""`circuitlab summary`: parameters per part and hook names of any config, preset or checkpoint folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from circuitlab.config import PRESETS, ModelConfig


def build_from_spec(spec: str) -> Any:
    """A model folder, a shipped model name, a config.json path, or a preset ("preset:NAME" forces the
    randomly initialised preset when a shipped model has the same name)."""
    from circuitlab.architectures.checkpoint import CheckpointError, load_model, models_root
    from circuitlab.architectures.transformer import CircuitTransformer

    if spec.startswith("preset:"):
        name = spec[len("preset:"):]
        return CircuitTransformer(ModelConfig.preset(name))
    path = Path(spec)
    if path.is_file():
        return CircuitTransformer(ModelConfig.from_json(path))
    if path.is_dir() or (models_root() / spec).is_dir():
        try:
            return load_model(spec)
        except CheckpointError as error:
            raise ValueError(str(error)) from None
    if spec in PRESETS:
        return CircuitTransformer(ModelConfig.preset(spec))
    raise ValueError(
        f"{spec!r} is neither a model folder, a shipped model, a config.json, nor a preset "
        f"({', '.join(sorted(PRESETS))})"
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
        f"  attention values: {config.attention.value_mode} on {config.attention.n_special} of {config.n_heads} heads",
        f"  FFN: {ffn.type}, d_ffw {ffn.d_ffw}"
        + (f", {ffn.n_channels} channels, k {ffn.k}, d_key {ffn.d_key}" if ffn.type == "sgatlin" else "")
        + (f", rho {ffn.rho}, {ffn.n_quantifiers} quantifiers" if ffn.type == "ncffn" else ""),
    ]
    if config.bottleneck is not None:
        bn = config.bottleneck
        block = model.blocks[0].bottleneck
        lines.append(
            f"  parity bottleneck: m = 2^{bn.n_bits} features, k {bn.k}, levels of {bn.bits_per_level} bits, "
            f"beams {list(bn.beams)}: {block.features_scored_per_token()} features scored per token"
        )
    if config.selectivity.active:
        lines.append(f"  selectivity pressures: {config.selectivity}")
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


def run(args: argparse.Namespace) -> int:
    print(summary_text(build_from_spec(args.model)))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("summary", help="parameters per part and hook names of a model")
    parser.add_argument("model", nargs="?", default="sgatlin-stories",
                        help="model folder, shipped model, config.json or preset (preset:NAME forces the "
                             "untrained preset; default: sgatlin-stories)")
    parser.set_defaults(func=run)
