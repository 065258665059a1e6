"""Legibility of trained legible models, side by side with seed 002 (circuitlab.analysis.legibility_report).

    python scripts/legibility_report.py results/legible-sweep/legible-* --json results/legible-sweep/legibility_regimes.json \
        --markdown results/legible-sweep/legibility_regimes.md --figure results/legible-sweep/legibility_regimes.png
    python scripts/legibility_report.py --from-json results/legible-sweep/legibility_regimes.json --markdown ... --figure ...

For each model folder, on the held-out split of the natural stories (data/natural): perplexity; per surface
(attention, NC-FFN operators, NC-FFN quantifiers), per layer and per head the SELECTIVE / CONSTANT / FUZZY
shares, ON-fractions, crispness and alive operand channels; the legible share of the logit attribution; and
the pressures the model trained under (its metrics.json). The JSON is what the notebook
(analyses/06_legibility_regimes.ipynb) and the dashboard read; --from-json re-renders markdown and figure
from it without the models. The figure is written as HTML, and as PNG where a renderer exists (kaleido or
Chromium); a .png path also gets the .html beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="model folders (or shipped model names)")
    parser.add_argument("--json", help="write the report JSON here")
    parser.add_argument("--markdown", help="write the markdown tables here")
    parser.add_argument("--figure", help="write the figure here (.png: PNG where a renderer exists, plus .html)")
    parser.add_argument("--from-json", help="render an existing report JSON instead of measuring models")
    parser.add_argument("--seq-len", type=int, default=256, help="held-out window length (default 256)")
    parser.add_argument("--max-windows", type=int, default=None, help="use at most this many held-out windows")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    from circuitlab.analysis.legibility_report import (
        load_report,
        measure_models,
        regime_table,
        report_figure,
        report_markdown,
    )
    from circuitlab.atomic import atomic_write_text
    from circuitlab.errors import UserError

    try:
        if args.from_json:
            if args.models:
                raise UserError("give model folders or --from-json, not both")
            report = load_report(args.from_json)
        else:
            if not args.models:
                raise UserError("give at least one model folder (or --from-json REPORT)")
            if not (args.json or args.markdown or args.figure):
                raise UserError("say where the report goes: --json, --markdown and/or --figure")
            import torch

            device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
            report = measure_models(args.models, seq_len=args.seq_len, max_windows=args.max_windows,
                                    batch_size=args.batch_size, device=device, progress=not args.quiet)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
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
            print(f"no PNG renderer (kaleido or chromium): {target.with_suffix('.html')} written only; rerender "
                  f"elsewhere with --from-json", file=sys.stderr)

    columns = ("model", "regime", "design", "alive", "on_percent", "atom_crisp", "selective", "ppl", "legible_share")
    print(" | ".join(columns))
    for row in regime_table(report):
        print(" | ".join(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in columns))
    for model in report["models"]:
        print(f"{model['name']}: alive target (>= 50% of FFN and attention operands) "
              f"{'met' if model['meets_alive_target'] else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
