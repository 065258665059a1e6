"""`circuitlab report legibility|parity|sae`: the reports of the runs that test the papers' claims, written as
JSON (and markdown, and a figure) for the claims file, the docs and the dashboard's pages. `report sae` trains
autoencoders as well as measuring, so its work is in circuitlab.cli.report_sae (it joins training and
analysis, which do not import each other)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from circuitlab.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="measure a report of legibility regimes or of a parity bottleneck",
                                   description="Measure the reports the dashboard's Pressure regimes and Parity pages "
                                               "and the claims file read.")
    kinds = parser.add_subparsers(dest="kind", metavar="<kind>", required=True)

    legibility = kinds.add_parser("legibility", help="the legible models of seed 002's pressure regimes side by side",
                                  description="Legibility of each model's bounded channels on the natural stories' "
                                              "held-out split (seed 002's Tables 1 and 5, Figures 2, 3 and 5).")
    legibility.add_argument("models", nargs="*", help="model folders (or shipped model names)")
    legibility.add_argument("--json", help="write the report JSON here")
    legibility.add_argument("--markdown", help="write the markdown tables here")
    legibility.add_argument("--figure", help="write the figure here (.png where a renderer exists, plus .html)")
    legibility.add_argument("--from-json", help="render an existing report JSON instead of measuring models")
    legibility.add_argument("--seq-len", type=int, default=256, help="held-out window length (default 256)")
    legibility.add_argument("--max-windows", type=int, default=None, help="use at most this many held-out windows")
    legibility.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    legibility.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    legibility.add_argument("--quiet", action="store_true", help="no progress bars")
    legibility.set_defaults(func=run_legibility)

    parity = kinds.add_parser("parity", help="a parity model's bottleneck on held-out natural text",
                              description="Reconstruction, encoder agreement, feature usage, coherence and write "
                                          "ablations of a parity model, against a GELU model (seed 003).")
    parity.add_argument("model", help="the parity model folder (or shipped name)")
    parity.add_argument("--gelu", default=None, help="the GELU model to compare with (e.g. gelu-stories)")
    parity.add_argument("--tokens", type=int, default=65536, help="held-out tokens to measure on (default 65536)")
    parity.add_argument("--natural", type=Path, default=None,
                        help="the natural stories folder (default: the shipped stories)")
    parity.add_argument("--seq-len", type=int, default=256, help="held-out window length (default 256)")
    parity.add_argument("--batch-size", type=int, default=16, help="windows per forward pass (default 16)")
    parity.add_argument("--beams", type=int, nargs="*", default=[16, 32, 64, 128],
                        help="beams at which to also measure encoder agreement")
    parity.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    parity.add_argument("--json", type=Path, default=None, help="write the figures here")
    parity.add_argument("--beam", type=int, default=None,
                        help="run the model's encoder at this beam instead of its configured one (a what-if; the "
                             "model is not retrained)")
    parity.add_argument("--pursuit-rounds", type=int, default=None,
                        help="run the encoder with this many rounds instead of its configured ones (a what-if)")
    parity.add_argument("--k", type=int, default=None,
                        help="code features per token instead of the configured k (a what-if; not retrained)")
    parity.set_defaults(func=run_parity)

    sae = kinds.add_parser(
        "sae", help="the parity bottleneck beside top-k sparse autoencoders of the same m and k",
        description="Train (or load) one top-k sparse autoencoder per layer on a GELU model's FFN writes over the "
                    "natural stories' training split, and compare it with the parity model's bottleneck on the "
                    "parity report's held-out tokens: reconstruction, loss added, feature usage and a word-category "
                    "probe (circuitlab.analysis.sae_compare).")
    sae.add_argument("model", help="the parity model folder (or shipped name)")
    sae.add_argument("--gelu", required=True, help="the GELU model whose FFN writes the autoencoders code")
    sae.add_argument("--sae-dir", type=Path, required=True,
                     help="folder of the autoencoders (layer_<l>/); a layer without one is trained and saved there")
    sae.add_argument("--retrain", action="store_true", help="train every layer's autoencoder again")
    sae.add_argument("--n-latents", type=int, default=None, help="m (default: the bottleneck's)")
    sae.add_argument("--k", type=int, default=None, help="latents per token (default: the bottleneck's k)")
    sae.add_argument("--k-aux", type=int, default=None, help="dead latents in the AuxK loss (default d_model / 2)")
    sae.add_argument("--dead-after", type=int, default=2**20,
                     help="tokens without firing after which a latent counts as dead (default 2^20)")
    sae.add_argument("--steps", type=int, default=4000, help="training steps per autoencoder (default 4000)")
    sae.add_argument("--sae-batch-size", type=int, default=4096, help="writes per training step (default 4096)")
    sae.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (default 5e-4)")
    sae.add_argument("--warmup", type=int, default=100, help="warmup steps (default 100)")
    sae.add_argument("--train-tokens", type=int, default=None,
                     help="natural training-split tokens to train on (default: the whole split)")
    sae.add_argument("--seed", type=int, default=0, help="seed of the autoencoders' start and batch order")
    sae.add_argument("--tokens", type=int, default=65536, help="held-out tokens to measure on (default 65536, as "
                                                                "`report parity`)")
    sae.add_argument("--natural", type=Path, default=None, help="the natural stories folder (default: the shipped stories)")
    sae.add_argument("--seq-len", type=int, default=256, help="held-out window length (default 256)")
    sae.add_argument("--batch-size", type=int, default=16, help="windows per forward pass")
    sae.add_argument("--probe-stories", type=int, default=400,
                     help="labelled generated stories (held-out seed) for the word-category probe (default 400)")
    sae.add_argument("--probe-seed", type=int, default=0, help="seed of the probe's train/test split of tokens")
    sae.add_argument("--probe-max-iter", type=int, default=1000,
                     help="most L-BFGS iterations of each probe (bounds its CPU time; default 1000)")
    sae.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    sae.add_argument("--json", type=Path, default=None,
                     help="write the comparison here (default, when neither --json nor --markdown is given: "
                          "results/parity/sae_comparison.json, where the dashboard's Parity page reads it)")
    sae.add_argument("--markdown", type=Path, default=None,
                     help="write its markdown table here (default as --json: results/parity/sae_comparison.md)")
    sae.add_argument("--quiet", action="store_true", help="no progress bars")
    sae.set_defaults(func=run_sae)


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_legibility(args: argparse.Namespace) -> int:
    from circuitlab.analysis.legibility_report import (
        load_report,
        measure_models,
        regime_table,
        report_figure,
        report_markdown,
    )
    from circuitlab.atomic import atomic_write_text

    if args.from_json:
        if args.models:
            raise UserError("give model folders or --from-json, not both")
        report = load_report(args.from_json)
    else:
        if not args.models:
            raise UserError("give at least one model folder (or --from-json REPORT)")
        if not (args.json or args.markdown or args.figure):
            raise UserError("say where the report goes: --json, --markdown and/or --figure")
        report = measure_models(args.models, seq_len=args.seq_len, max_windows=args.max_windows,
                                batch_size=args.batch_size, device=_device(args.device), progress=not args.quiet)
    if args.json and not args.from_json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.json), json.dumps(report, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.markdown), report_markdown(report) + "\n")
    if args.figure:
        from circuitlab.figures import write_figure, write_png

        figure = report_figure(report)
        target = Path(args.figure)
        write_figure(figure, target.with_suffix(".html"))
        if target.suffix == ".png" and write_png(figure, target) is None:
            print(f"no PNG renderer (kaleido finds no Chrome or Chromium): {target.with_suffix('.html')} written "
                  f"only; render the PNG elsewhere with --from-json", file=sys.stderr)
    columns = ("model", "regime", "design", "alive", "on_percent", "atom_crisp", "selective", "ppl", "legible_share")
    print(" | ".join(columns))
    for row in regime_table(report):
        print(" | ".join(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in columns))
    for model in report["models"]:
        print(f"{model['name']}: alive target (>= 50% of FFN and attention operands) "
              f"{'met' if model['meets_alive_target'] else 'not met'}")
    return 0


def run_parity(args: argparse.Namespace) -> int:
    from circuitlab.analysis.parity_measure import report, table

    overrides = {key: value for key, value in (("beam", args.beam), ("pursuit_rounds", args.pursuit_rounds),
                                               ("k", args.k)) if value is not None}
    result = report(args.model, args.gelu, args.tokens, args.natural, args.seq_len, args.batch_size,
                    _device(args.device), args.beams, overrides)
    print(table(result))
    if args.json is not None:
        from circuitlab.atomic import atomic_write_text

        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return 0


def run_sae(args: argparse.Namespace) -> int:
    from circuitlab.cli.report_sae import run

    args.device = _device(args.device)
    return run(args)
