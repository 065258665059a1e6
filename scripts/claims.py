"""Measure every testable headline claim of seeds 000, 002 and 003 on the shipped models; write analyses/claims.md
and analyses/claims.json (the same rows: the one source of every claims number the README and notebooks print).

    python scripts/claims.py                       # full mode (a few minutes on 2 CPU cores)
    python scripts/claims.py --fast                # small samples, about a minute (what CI runs)
    python scripts/claims.py --only s000-nie-layer s002-attn-depth --print   # some rows, to the terminal
    python scripts/claims.py --models-dir runs/models --results analyses/results --out /tmp/claims.md

Rows whose experiment the shipped models cannot run read the committed results of the iso-FLOP ladder
(results/ladder), seed 002's pressure sweep (results/legible-sweep) and the parity report (results/parity), and
otherwise `analyses/results/*.json` when a run has written a result there (format: circuitlab/claims/__init__.py).
The registry, the rules and the measuring functions live in circuitlab.claims (one module per seed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.claims import Context, claims_json, counts_text, measure_claims, render_claims, verdict_counts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="small samples (CI): about a minute on 2 CPU cores")
    parser.add_argument("--out", type=Path, default=ROOT / "analyses" / "claims.md", help="where to write the file")
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the rows as JSON (default: --out with the suffix .json)")
    parser.add_argument("--models-dir", type=Path, default=None,
                        help="a folder laid out like models/ (default: the shipped models)")
    parser.add_argument("--results", type=Path, default=ROOT / "analyses" / "results",
                        help="folder of results JSON files that fill rows the shipped models cannot measure")
    parser.add_argument("--ladder", type=Path, default=ROOT / "results" / "ladder" / "ladder_results.json",
                        help="results of `circuitlab ladder` (fills seed 000's iso-FLOP rows when present)")
    parser.add_argument("--legible-sweep", type=Path,
                        default=ROOT / "results" / "legible-sweep-uncentred" / "legibility_regimes.json",
                        help="results of `circuitlab report legibility` on seed 002's pressure sweep in the paper's "
                             "configuration (uncentred operands): judges seed 002's rows")
    parser.add_argument("--legible-sweep-centred", type=Path,
                        default=ROOT / "results" / "legible-sweep" / "legibility_regimes.json",
                        help="the same on circuitlab's centred sweep (its deviation rows)")
    parser.add_argument("--parity-report", type=Path, default=ROOT / "results" / "parity" / "parity_report.json",
                        help="results of `circuitlab report parity` (fills seed 003's reconstruction and ablation rows)")
    parser.add_argument("--sae-comparison", type=Path, default=ROOT / "results" / "parity" / "sae_comparison.json",
                        help="results of `circuitlab report sae` (fills seed 003's probing row)")
    parser.add_argument("--uncentred-model", type=Path,
                        default=ROOT / "results" / "models" / "legible-stories-uncentred" / "seed0",
                        help="legible-stories with seed 002's uncentred operands (judges seed 002's quality, "
                             "attribution and SELECTIVE-beyond-null rows on the paper's configuration)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="measure only these claim ids")
    parser.add_argument("--print", action="store_true", help="print the file instead of writing it")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    import torch

    started = time.perf_counter()
    context = Context(fast=args.fast, models_dir=args.models_dir, results_dir=args.results, ladder_results=args.ladder,
                      legible_sweep=args.legible_sweep,
                      legible_sweep_centred=args.legible_sweep_centred, parity_report=args.parity_report,
                      sae_comparison=args.sae_comparison, uncentred_model=args.uncentred_model,
                      progress=not args.quiet)
    with torch.no_grad():
        rows = measure_claims(context, args.only)
    command = "python scripts/claims.py" + (" --fast" if args.fast else "")
    text = render_claims(rows, args.fast, context.sizes, command)
    if args.print:
        print(text)
    else:
        from circuitlab.atomic import atomic_write_text

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, text)
        atomic_write_text(args.json or args.out.with_suffix(".json"), claims_json(rows))
    width = max(len(row.id) for row in rows)
    for row in rows:
        print(f"{row.id:<{width}}  {row.verdict:<15}  {row.ours[:90]}", file=sys.stderr)
    print(f"{len(rows)} claims ({counts_text(verdict_counts(rows))}) in {time.perf_counter() - started:.0f} s"
          + ("" if args.print else f"; wrote {args.out} and {args.json or args.out.with_suffix('.json')}"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    from circuitlab.errors import UserError

    try:
        sys.exit(main())
    except UserError as error:  # a user's mistake (a missing model, a bad results file): one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
