"""`circuitlab patch | dla | legibility`: the causal and attribution analyses from the command line.

MODEL is a preset name (random weights), a config.json, a model folder or a shipped model name.
User errors (bad arguments, missing files, analyses that do not apply) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError


def _load(spec: str) -> Any:
    from circuitlab.architectures.summary import build_from_spec

    model = build_from_spec(spec)
    model.eval()
    return model


def _require_tokenizer(model: Any, why: str) -> Any:
    if getattr(model, "tokenizer", None) is None:
        raise UserError(f"model {model.config.name or '(unnamed)'} has no tokenizer, {why}")
    return model.tokenizer


def _write_figure(figure: Any, path: str | None) -> None:
    if path:
        from circuitlab.figures import write_figure

        write_figure(figure, path)  # plotly.min.js beside it, shared by the figures of that folder; opens offline
        print(f"wrote {path}")


def _write_table(table: Any, path: str | None) -> None:
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".parquet":
        table.to_parquet(target)
    elif target.suffix == ".csv":
        table.to_csv(target, index=False)
    else:
        raise UserError(f"--out {path}: write .csv or .parquet")
    print(f"wrote {path}")


def _parse_ids(text: str, what: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise UserError(f"{what} must be token ids separated by commas, got {text!r}") from None


# --- patch ------------------------------------------------------------------------------------------------


def run_patch(args: argparse.Namespace) -> int:
    from circuitlab.analysis.pairs import read_pairs
    from circuitlab.analysis.patching import (
        as_patch_pair, excluded_report, nie_grid, nie_heatmap, nie_summary, no_counted_pairs,
    )

    model = _load(args.model)
    if args.pairs:
        pairs = read_pairs(args.pairs)
    else:
        tokenizer = _require_tokenizer(model, "so fact pairs cannot be built; give --pairs FILE.json with token ids")
        from circuitlab.data.facts import build_fact_pairs

        pairs = build_fact_pairs(tokenizer, seed=args.seed, n_pairs=args.n_pairs)
    pairs = [as_patch_pair(pair, index, model=model) for index, pair in enumerate(pairs)]
    layers = None
    if args.layers:
        bad = [spec for spec in args.layers if spec != "all" and not spec.lstrip("-").isdigit()]
        if bad:
            raise UserError(f"--layers takes layer numbers or 'all', got {', '.join(map(repr, bad))}")
        layers = [spec if spec == "all" else int(spec) for spec in args.layers]
    if args.positions:
        positions = [int(p) if p.lstrip("-").isdigit() else p for p in args.positions]
    else:  # the default roles every pair can be patched at, as the demo chooses them
        from circuitlab.analysis.patching import positions_for

        positions, note = positions_for(pairs)
        if note:
            print(note)
    heads: Any = None
    if args.heads:
        heads = "each" if args.heads == "each" else _parse_ids(args.heads, "--heads")
    table = nie_grid(
        model, pairs, layers=layers, positions=positions, hooks=args.hooks or None, heads=heads,
        batch_size=args.batch_size, progress=not args.quiet, min_difference=args.min_difference,
    )
    summary = nie_summary(table)
    report = excluded_report(table)
    if report:
        print(report)
    undefined = no_counted_pairs(table)
    if undefined:
        _write_table(table, args.out)  # the per-pair m values still say how far apart the pairs are
        raise UserError(undefined + ("" if args.out is None else f"; the per-pair table is in {args.out}"))
    print(f"NIE over {len(pairs)} pairs, hooks: {table['hooks'].iloc[0]}")
    if "head" in summary.columns:
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    else:
        grid = summary.pivot_table(index="layer", columns="position", values="nie", aggfunc="mean", sort=False)
        print(grid.to_string(float_format=lambda v: f"{v:.3f}"))
    _write_table(table, args.out)
    _write_figure(nie_heatmap(table), args.figure)
    return 0


# --- dla --------------------------------------------------------------------------------------------------


def _token_arg(text: str | None, token_id: int | None, what: str) -> int | str | None:
    if text is not None and token_id is not None:
        raise UserError(f"give --{what} or --{what}-id, not both")
    return token_id if token_id is not None else text


def run_dla(args: argparse.Namespace) -> int:
    from circuitlab.analysis.attribution import dla_figures, dla_overview_figure, direct_logit_attribution

    model = _load(args.model)
    if args.tokens:
        prompt: Any = _parse_ids(args.prompt, "PROMPT (with --tokens)")
    else:
        _require_tokenizer(model, "so a text prompt cannot be tokenized; pass token ids with --tokens")
        prompt = args.prompt
    table = direct_logit_attribution(
        model, prompt, target=_token_arg(args.target, args.target_id, "target"), position=args.position,
        baseline_token=_token_arg(args.baseline, args.baseline_id, "baseline"), units=not args.no_units,
    )
    attrs = table.attrs
    what = f"logit({attrs['target']!r})" + (f" - logit({attrs['baseline']!r})" if attrs["baseline_id"] is not None else "")
    components = table[table["level"] == "component"]
    print(f"{what} at position {attrs['position']} = {attrs['logit']:.4f}; parts sum to {components['value'].sum():.4f}")
    columns = ["component", "value", "operation", "target_rank", "promote_tokens"]
    shown = components.reindex(components["value"].abs().sort_values(ascending=False).index)[: args.top]
    print(shown[columns].to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
    units = table[table["level"] == "unit"]
    if not units.empty:
        print("largest FFN units (they decompose the FFN rows):")
        shown = units.reindex(units["value"].abs().sort_values(ascending=False).index)[: args.top]
        print(shown[columns].to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
    _write_table(table.assign(promote_tokens=table["promote_tokens"].map(lambda v: " | ".join(v) if isinstance(v, list) else None)), args.out)
    if args.figure:
        _write_figure(dla_overview_figure(table), args.figure)
        stem = Path(args.figure)
        for layer, figure in dla_figures(table).items():
            _write_figure(figure, str(stem.with_name(f"{stem.stem}_layer{layer}{stem.suffix}")))
    return 0


# --- legibility -------------------------------------------------------------------------------------------


def _held_out_tokens(model: Any, args: argparse.Namespace) -> Any:
    import torch

    from circuitlab.analysis.legibility import held_out_windows

    if args.tokens_file:
        path = Path(args.tokens_file)
        if path.suffix == ".npy":
            import numpy as np

            tokens = torch.as_tensor(np.load(path, allow_pickle=False)).long()
        elif path.suffix == ".json":
            tokens = torch.tensor(json.loads(path.read_text()), dtype=torch.long)
        else:
            raise UserError(f"--tokens-file {path}: give a .npy or .json array of token ids [sequences, pos]")
        if tokens.dim() != 2:
            raise UserError(f"--tokens-file {path} holds shape {tuple(tokens.shape)}; need [sequences, pos]")
        return tokens
    _require_tokenizer(model, "so text cannot be tokenized; give --tokens-file with token ids")
    if args.text:
        from circuitlab.data._io import read_utf8

        texts = [read_utf8(p) for p in args.text]  # names the file when it is not UTF-8
    else:
        from circuitlab.data.stories import held_out_stories

        texts = [story.text for story in held_out_stories(args.stories)]
    windows = held_out_windows(model, texts, seq_len=min(args.seq_len, model.cfg.n_ctx))
    return windows[: args.batches * args.batch_size] if args.batches else windows


def run_legibility(args: argparse.Namespace) -> int:
    from circuitlab.analysis.channel_names import name_channels
    from circuitlab.analysis.legibility import (
        bounded_channel_groups,
        legibility_by_layer,
        legibility_stats,
        legibility_summary,
    )
    from circuitlab.analysis.legibility_figures import head_selectivity_heatmap, regimes_by_layer_figure

    model = _load(args.model)
    bounded_channel_groups(model)  # fails fast, before reading any text, when nothing is bounded
    tokens = _held_out_tokens(model, args)
    stats = legibility_stats(model, tokens, batch_size=args.batch_size, progress=not args.quiet)
    print(f"legibility over {int(tokens.numel())} held-out tokens")
    print(legibility_summary(stats, model.config.name).to_string(index=False))
    print("by layer (fractions):")
    print(legibility_by_layer(stats).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.name:
        selective = stats[(stats["regime"] == "SELECTIVE") & stats["combined"]]
        chosen = selective.sort_values("variance", ascending=False).head(args.name)
        named = name_channels(model, tokens, chosen, min_count=args.min_count, batch_size=args.batch_size, progress=not args.quiet)
        print(f"{len(named)} most variable SELECTIVE channels, named by P(fire | token):")
        print(named[["surface", "layer", "head", "channel", "role", "crispness", "fires", "label"]].to_string(index=False))
    _write_table(stats, args.out)
    _write_figure(regimes_by_layer_figure(stats), args.figure)
    if args.head_figure:
        _write_figure(head_selectivity_heatmap(stats), args.head_figure)
    return 0


# --- registration -----------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    from circuitlab.analysis.pairs import EXAMPLE as PAIR_EXAMPLE
    from circuitlab.analysis.pairs import MIN_LOGIT_DIFFERENCE
    patch = subparsers.add_parser(
        "patch", help="normalized indirect effect of patching circuits (seed 000, section 4.3)",
        description="NIE grid over layers x positions for clean/counterfactual pairs (fact pairs by default).",
    )
    patch.add_argument("model", help="model folder, shipped model name, config.json or preset:NAME (untrained)")
    patch.add_argument("--pairs", help="JSON list of text pairs, e.g. [" + PAIR_EXAMPLE + "] (format: README, "
                       "'patching pairs'), or of token ids; default: the fact pairs")
    patch.add_argument("--min-difference", type=float, default=MIN_LOGIT_DIFFERENCE,
                       help="pairs whose m(x_patch) - m(x_clean) is smaller than this in size (nats) are reported "
                            f"and left out of the means (default {MIN_LOGIT_DIFFERENCE})")
    patch.add_argument("--n-pairs", type=int, default=None, help="fact pairs to use (default all)")
    patch.add_argument("--seed", type=int, default=0, help="fact pair shuffling seed")
    patch.add_argument("--layers", nargs="+", help="layers to patch: ints and/or 'all' (default: each and all)")
    patch.add_argument("--positions", nargs="+", help="roles ('noun', 'final', a role the pairs name), 'all' or integer "
                       "positions (default: noun, final and all, where every pair can be patched there)")
    patch.add_argument("--hooks", nargs="+", help="hook templates with {layer}, patched together (default: the natural code)")
    patch.add_argument("--heads", help="'each' or comma-separated indices along the hooks' third axis")
    patch.add_argument("--batch-size", type=int, default=64, help="interventions per forward pass")
    patch.add_argument("--out", help="write the per-pair table (.csv or .parquet)")
    patch.add_argument("--figure", help="write the heatmap (.html)")
    patch.add_argument("--quiet", action="store_true", help="no progress bar")
    patch.set_defaults(func=run_patch)

    dla = subparsers.add_parser(
        "dla", help="direct logit attribution of one prediction",
        description="Decompose a logit into embedding, heads, FFN blocks and FFN units, with promote signatures.",
    )
    dla.add_argument("model", help="model folder, shipped model name, config.json or preset:NAME (untrained)")
    dla.add_argument("prompt", help="the prompt text (or token ids with --tokens)")
    dla.add_argument("--tokens", action="store_true", help="PROMPT is comma-separated token ids")
    dla.add_argument("--target", help="target token text (default: the model's top prediction)")
    dla.add_argument("--target-id", type=int, help="target token id")
    dla.add_argument("--baseline", help="attribute logit(target) - logit(baseline)")
    dla.add_argument("--baseline-id", type=int, help="baseline token id")
    dla.add_argument("--position", type=int, default=-1, help="position to attribute (default last)")
    dla.add_argument("--top", type=int, default=15, help="rows to print per table")
    dla.add_argument("--no-units", action="store_true", help="skip the per-unit rows")
    dla.add_argument("--out", help="write the table (.csv or .parquet)")
    dla.add_argument("--figure", help="write the overview heatmap (.html) and one figure per layer beside it")
    dla.set_defaults(func=run_dla)

    legibility = subparsers.add_parser(
        "legibility", help="crispness / ON / SELECTIVE-CONSTANT-FUZZY of bounded channels (seed 002)",
        description="Legibility metrics of every bounded channel over held-out text (generated held-out stories by default).",
    )
    legibility.add_argument("model", help="model folder, shipped model name, config.json or preset:NAME (untrained)")
    legibility.add_argument("--text", nargs="+", help="held-out text files (default: generated held-out stories)")
    legibility.add_argument("--tokens-file", help="pre-tokenized held-out ids [sequences, pos] (.npy or .json)")
    legibility.add_argument("--stories", type=int, default=400, help="held-out stories to generate")
    legibility.add_argument("--seq-len", type=int, default=256, help="tokens per window")
    legibility.add_argument("--batches", type=int, default=12, help="batches of windows to read (0 = all)")
    legibility.add_argument("--batch-size", type=int, default=8, help="windows per batch")
    legibility.add_argument("--name", type=int, default=10, help="name this many SELECTIVE channels (0 = none)")
    legibility.add_argument("--min-count", type=int, default=5, help="min occurrences of a token to name a channel by it")
    legibility.add_argument("--out", help="write per-channel statistics (.csv or .parquet)")
    legibility.add_argument("--figure", help="write regimes by layer (.html)")
    legibility.add_argument("--head-figure", help="write the per-head SELECTIVE heatmap (.html)")
    legibility.add_argument("--quiet", action="store_true", help="no progress bar")
    legibility.set_defaults(func=run_legibility)
