"""`circuitlab ladder`: seed 000's iso-FLOP comparison of FFN designs along its scaling ladder.

    circuitlab ladder --out runs/ladder --natural data/natural --tokenizer models/sgatlin-stories/tokenizer.json
    circuitlab ladder --out runs/ladder --archs sgatlin swiglu --scales 1 2 --seeds 0 --budget-scale 0.5
    circuitlab ladder --out runs/smoke --smoke --device cpu          # a few steps of tiny runs, one process

Each design (mlp, swiglu, sgatlin, peer, moe) trains at each --scales ladder scale for that scale's FLOP
budget (circuitlab.training.ladder); every --seeds seed runs at the smallest scale. With --sizes, every budget
trains the models of all those scales, every seed (iso-FLOP curves), and --lr-grid adds learning rates at the
smallest budget; no run sees a natural story more than --max-natural-passes times (2 by default). Runs are concurrent
`circuitlab train` processes, --jobs per GPU, spread over the visible GPUs. Writes ladder_results.json,
ladder_table.md and ladder_loss_vs_flops.html into --out; running the command again skips finished runs.
"""

from __future__ import annotations

import argparse

from circuitlab.resources import natural_root
import sys

from circuitlab.presets import LADDER_ABLATIONS

# --smoke: every code path of the sweep on a CPU (2 steps of batch 2 x 32 tokens per run; minutes, mostly start-up)
SMOKE = dict(budget_scale=1e-6, seq_len=32, batch_size=2, n_stories=40, held_out_stories=8, natural_upsample=1,
             max_minutes=None, scales=(1,), seeds=(0, 1))


def register(subparsers: argparse._SubParsersAction) -> None:
    # defaults (None here) come from circuitlab.training.ladder.LadderSettings, imported only when the verb runs
    parser = subparsers.add_parser(
        "ladder",
        help="iso-FLOP ladder: train each FFN design at several scales to a FLOP budget (seed 000, Figure 3)",
        description="Train each FFN design at each ladder scale for that scale's training FLOP budget "
        "(6e13 x 4^(scale-1) x --budget-scale; count_flops convention), record held-out loss vs FLOPs, and "
        "write a results JSON, a markdown table and the loss-vs-FLOPs figure. Far below seed 000's budgets "
        "(1e17 to 6e18 FLOPs): a sweep of minutes on one GPU.",
    )
    parser.add_argument("--out", default="runs/ladder", help="results folder (default runs/ladder)")
    parser.add_argument("--archs", nargs="+", default=None,
                        help="FFN designs on the ladder: mlp, swiglu, sgatlin, peer, moe (default: all of them)")
    parser.add_argument("--ablations", nargs="*", default=None, choices=sorted(LADDER_ABLATIONS),
                        help="ablations run at the smallest scale with every seed (default both of seed 000's Table 1: "
                        "sgatlin-peer-router, PEER's router in place of sgatlin's gating, and sgatlin-gelu: seed 000's "
                        "nonlinearity ablation, a GELU on each sgatlin neuron); --ablations alone runs none")
    parser.add_argument("--scales", nargs="+", type=int, default=None,
                        help="ladder scales (seed 000, appendix B.2: d_model 128 x scale, 2 x scale layers; default 1 2 3)")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="seeds run at the smallest scale; the other scales run the first (default 0 1); with "
                        "--sizes, every seed runs at every budget and size")
    parser.add_argument("--sizes", nargs="+", type=int, default=None,
                        help="ladder scales of the models trained at every budget: an iso-FLOP curve per design and "
                        "budget, every seed at every budget and size (default: each budget trains its own scale)")
    parser.add_argument("--budget-scale", type=_budget_scale, default=None,
                        help="multiply every scale's FLOP budget (default 1); 'max': the largest budgets at which no "
                        "run sees a natural story more than --max-natural-passes times")
    parser.add_argument("--max-natural-passes", type=float, default=None,
                        help="refuse runs that would see a natural training story more often (default 2)")
    parser.add_argument("--lr-grid", nargs="+", type=float, default=None,
                        help="other peak learning rates, run at the smallest budget for every design and size, first "
                        "seed (e.g. 3e-4 3e-3)")
    parser.add_argument("--device", default=None, help="auto (default), cpu, cuda")
    parser.add_argument("--jobs", type=int, default=None, help="concurrent runs per GPU (default 10)")
    parser.add_argument("--gpus", nargs="+", default=None, help="CUDA device ids to use (default: every visible GPU)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="per run: stop cleanly after this long (recorded as 'time limit'; default 5)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 256)")
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per step (default 64)")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3, seed 000)")
    parser.add_argument("--natural", nargs="?", const=str(natural_root()), default=None, metavar="DIR",
                        help="natural stories mixed into the generated ones (default: the stories circuitlab ships)")
    parser.add_argument("--no-natural", action="store_true", help="generated stories only")
    parser.add_argument("--natural-upsample", type=int, default=None,
                        help="copies of each natural training story (default 1)")
    parser.add_argument("--n-stories", type=int, default=None, help="generated training stories (default 60000)")
    parser.add_argument("--held-out-stories", type=int, default=None, help="generated held-out stories (default 1000)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer.json shared by all runs (default models/sgatlin-stories/tokenizer.json)")
    parser.add_argument("--keep-models", action="store_true", help="keep each run's model.safetensors")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each run (default off: short runs would spend much of their time compiling)")
    parser.add_argument("--in-process", action="store_true",
                        help="run the trainings one after the other in this process (debugging; no --jobs)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny CPU check of the whole sweep: scale 1, two seeds, two steps of 2 x 32 tokens per run")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: write the results, table and figure from the runs already in --out (a "
                        "sweep cut short); the runs not there are listed as missing")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=run_ladder_command)


def _budget_scale(text: str) -> float | str:
    if text == "max":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'max', got {text!r}") from None


# LadderSettings field <- command-line option (argparse dest)
_OPTIONS = dict(
    scales="scales", sizes="sizes", lr_grid="lr_grid", max_natural_passes="max_natural_passes", archs="archs",
    ablations="ablations", seeds="seeds", budget_scale="budget_scale", seq_len="seq_len",
    batch_size="batch_size", lr="lr", device="device", jobs_per_gpu="jobs", gpus="gpus", max_minutes="max_minutes",
    natural="natural", natural_upsample="natural_upsample", n_stories="n_stories",
    held_out_stories="held_out_stories", tokenizer="tokenizer",
)


def settings_from(args: argparse.Namespace):
    from circuitlab.training.ladder import LadderSettings

    settings: dict = {}
    if args.smoke:
        settings.update(SMOKE)
    for field, option in _OPTIONS.items():
        value = getattr(args, option)
        if value is not None:
            settings[field] = tuple(dict.fromkeys(value)) if isinstance(value, list) else value
    if args.no_natural:
        settings["natural"] = None
    settings.update(keep_models=args.keep_models, in_process=args.in_process, compile=args.compile)
    return LadderSettings(**settings)


def run_ladder_command(args: argparse.Namespace) -> int:
    from circuitlab.cli.ladder_runs import run_ladder

    results = run_ladder(args.out, settings_from(args), progress=not args.quiet, report_only=args.report_only)
    if not args.quiet:
        from circuitlab.training.ladder import TABLE_FILE
        from pathlib import Path

        sys.stdout.write((Path(args.out) / TABLE_FILE).read_text())
    return 0 if args.report_only or all(run["status"] == "done" for run in results["runs"]) else 1
