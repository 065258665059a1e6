"""The iso-FLOP ladder (seed 000, section 3.1 and Figure 3): every FFN design trained at several ladder scales,
each scale with one training FLOP budget shared by all designs, loss recorded against FLOPs.

    from circuitlab.training.ladder import LadderSettings, plan_runs, run_ladder
    results = run_ladder("runs/ladder", LadderSettings(scales=(1, 2, 3), archs=("mlp", "swiglu", "sgatlin")))

Budgets: scale s gets `budget_scale * BASE_BUDGET * 4 ** (s - 1)` training FLOPs (count_flops convention:
3x the forward pass, attention included). A run's token count is its budget divided by its own training
FLOPs per token, so a design that costs less per token trains on more tokens: the comparison is at equal
compute, as in seed 000. The defaults are tiny next to seed 000's (1e17 to 6e18 FLOPs, scales 2 to 8, GPT-2
vocabulary, sequences of 2048): scales 1 to 3 here have 0.4M to 14M active parameters, sequences of 256 and
budgets of 6e13 to 1e15 FLOPs, so that the whole sweep takes minutes on one GPU.

Runs are `circuitlab train` processes (several at once on each GPU, round robin over the GPUs); finished runs
(metrics.json present with the planned step count) are skipped when the sweep is run again. The results
JSON holds one record per run; circuitlab.training.ladder_report words seed 000's comparative claims from it
(`verdicts(results)`) and writes the table and the figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import circuitlab.architectures.registry as registry
from circuitlab.config import ModelConfig, ladder_config, ladder_designs, scaling_ladder
from circuitlab.presets import LADDER_ABLATIONS
from circuitlab.errors import UserError
from circuitlab.flops import count_flops

BASE_BUDGET = 6e13  # training FLOPs of scale 1 at --budget-scale 1; x4 per scale
RESULTS_FILE = "ladder_results.json"
TABLE_FILE = "ladder_table.md"
FIGURE_FILE = "ladder_loss_vs_flops.html"
LADDER_FFN_TYPES = ladder_designs()
ABLATIONS = LADDER_ABLATIONS  # run at the smallest scale, every seed
ALL_ARCHS = (*LADDER_FFN_TYPES, *ABLATIONS)
ARCH_LABELS = {name: registry.FEEDFORWARDS[name].label for name in LADDER_FFN_TYPES} | {
    "sgatlin-gelu": "sgatlin + GELU (ablation)"}


def arch_config(scale: int, arch: str, **overrides: Any) -> ModelConfig:
    """The ladder config of a design (`ladder_config`) or of an ablation (a ladder design with changes)."""
    if arch not in ABLATIONS:
        return ladder_config(scale, arch, **overrides)
    base, changes = ABLATIONS[arch]
    config = ladder_config(scale, base, **overrides)
    return config.replace(feedforward={**config.feedforward.model_dump(), **changes}, name=f"ladder-{arch}-{scale}")


def base_arch(arch: str) -> str:
    return ABLATIONS[arch][0] if arch in ABLATIONS else arch


@dataclass
class LadderSettings:
    """What the sweep trains. `seeds`: every seed runs at the smallest scale, the first seed at the others."""

    scales: tuple[int, ...] = (1, 2, 3)
    archs: tuple[str, ...] = LADDER_FFN_TYPES
    ablations: tuple[str, ...] = tuple(ABLATIONS)  # at the smallest scale only, every seed
    seeds: tuple[int, ...] = (0, 1)
    budget_scale: float = 1.0
    seq_len: int = 256
    batch_size: int = 64
    lr: float = 1e-3
    grad_clip: float = 1.0
    max_warmup: int = 100  # warmup = min(max_warmup, steps // 10)
    device: str = "auto"
    jobs_per_gpu: int = 10
    gpus: tuple[str, ...] = ()  # CUDA device ids to spread runs over; () = every visible GPU (or the CPU)
    max_minutes: float | None = 5.0  # per run: stop cleanly and record it (metrics say "time limit")
    natural: str | None = "data/natural"
    natural_upsample: int = 3
    n_stories: int = 40000
    held_out_stories: int = 1000
    tokenizer: str | None = "models/sgatlin-stories/tokenizer.json"
    vocab_size: int = 8192  # used only when no tokenizer is given (one is trained on the mixture)
    keep_models: bool = False  # keep each run's model.safetensors (large for sgatlin and PEER)
    in_process: bool = False  # run each training in this process, one after the other (tests, debugging)
    # torch.compile each run: off by default, since runs of a minute or two would spend a good part of it
    # compiling (ten at once on the CPU cores), and the MoE's per-expert batch sizes change every step
    compile: bool = False
    min_steps: int = 2

    def validate(self) -> None:
        if not self.scales or any(not isinstance(s, int) or s < 1 for s in self.scales):
            raise UserError(f"--scales must be positive integers, got {list(self.scales)}")
        unknown = [arch for arch in self.archs if arch not in LADDER_FFN_TYPES]
        if not self.archs or unknown:
            raise UserError(f"--archs must name ladder designs ({', '.join(LADDER_FFN_TYPES)}), got {list(self.archs)}")
        if any(arch not in ABLATIONS for arch in self.ablations):
            raise UserError(f"--ablations must name ablations ({', '.join(ABLATIONS)}), got {list(self.ablations)}")
        if not self.seeds:
            raise UserError("--seeds needs at least one seed")
        if not 0 < self.budget_scale < float("inf"):
            raise UserError(f"--budget-scale must be a positive number, got {self.budget_scale}")
        if not 0 < self.lr < float("inf"):
            raise UserError(f"--lr must be a positive number, got {self.lr}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise UserError(f"--max-minutes must be positive, got {self.max_minutes}")
        if self.jobs_per_gpu < 1:
            raise UserError(f"--jobs must be positive, got {self.jobs_per_gpu}")
        for name in ("seq_len", "batch_size", "min_steps"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be positive, got {getattr(self, name)}")
        if self.tokenizer is not None and not Path(self.tokenizer).is_file():
            raise UserError(f"--tokenizer {self.tokenizer}: no such file")
        if self.natural is not None and not Path(self.natural).is_dir():
            raise UserError(f"--natural {self.natural}: no such folder")


def budget_for(scale: int, budget_scale: float = 1.0) -> float:
    """Training FLOPs of one run at `scale`."""
    return budget_scale * BASE_BUDGET * 4 ** (scale - 1)


@dataclass
class PlannedRun:
    arch: str
    scale: int
    seed: int
    name: str
    budget_flops: float
    training_flops_per_token: int
    steps: int
    warmup: int
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    flops: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.steps * self.flops["tokens_per_step"]


def plan_runs(settings: LadderSettings, d_vocab: int) -> list[PlannedRun]:
    """Every run of the sweep, largest scale first (the longest runs start first)."""
    settings.validate()
    smallest = min(settings.scales)
    runs = []
    for scale in sorted(set(settings.scales), reverse=True):
        seeds = settings.seeds if scale == smallest else settings.seeds[:1]
        archs = list(settings.archs) + (list(settings.ablations) if scale == smallest else [])
        for seed in seeds:
            for arch in archs:
                config = arch_config(scale, arch, d_vocab=d_vocab, n_ctx=settings.seq_len)
                count = count_flops(config, settings.seq_len)
                budget = budget_for(scale, settings.budget_scale)
                tokens_per_step = settings.batch_size * settings.seq_len
                steps = max(settings.min_steps, round(budget / (count.training_per_token * tokens_per_step)))
                runs.append(PlannedRun(
                    arch=arch, scale=scale, seed=seed, name=f"{arch}-s{scale}-seed{seed}", budget_flops=budget,
                    training_flops_per_token=count.training_per_token, steps=steps,
                    warmup=min(settings.max_warmup, steps // 10), config=config.to_dict(),
                    flops={**count.to_dict(), "tokens_per_step": tokens_per_step},
                ))
    return runs


# --- running -------------------------------------------------------------------------------------------------


def _mixture_args(settings: LadderSettings, tokenizer: str) -> list[str]:
    args = ["--n-stories", str(settings.n_stories), "--held-out-stories", str(settings.held_out_stories),
            "--tokenizer", tokenizer]
    if settings.natural is not None:
        args += ["--natural", settings.natural, "--natural-upsample", str(settings.natural_upsample)]
    return args


def _data_spec(settings: LadderSettings, tokenizer: str | None) -> Any:
    from circuitlab.training.corpus import DataSpec

    return DataSpec(
        n_stories=settings.n_stories, n_held_out=settings.held_out_stories, vocab_size=settings.vocab_size,
        tokenizer_path=tokenizer, natural_dir=settings.natural, natural_upsample=settings.natural_upsample,
    )


def prepare(out: Path, settings: LadderSettings) -> tuple[str, int, int]:
    """Tokenize and pack the mixture once into out/data (every run reads it). Returns (tokenizer path, vocab,
    training tokens)."""
    from circuitlab.training.corpus import prepare_data

    prepared = prepare_data(_data_spec(settings, settings.tokenizer), settings.seq_len, out / "data",
                            show_progress=not settings.in_process)
    tokenizer = settings.tokenizer
    if tokenizer is None:  # trained here: every run reuses the file
        tokenizer = str(out / "tokenizer.json")
        prepared.tokenizer.save(tokenizer)
    return tokenizer, prepared.tokenizer.vocab_size, int(prepared.manifest["train_tokens"])


def _train_args(run: PlannedRun, settings: LadderSettings, out: Path, tokenizer: str) -> list[str]:
    folder = out / "runs" / run.name
    args = [
        "train", "--config", str(out / "configs" / f"{run.name}.json"), "--out", str(folder),
        "--steps", str(run.steps), "--batch-size", str(settings.batch_size), "--seq-len", str(settings.seq_len),
        "--lr", str(settings.lr), "--warmup", str(run.warmup), "--grad-clip", str(settings.grad_clip),
        "--eval-every", "0", "--ckpt-every", "0", "--seed", str(run.seed), "--device", settings.device,
        "--data-dir", str(out / "data"), "--save-dtype", "bf16", "--quiet",
        "--compile" if settings.compile else "--no-compile",
        *_mixture_args(settings, tokenizer),
    ]
    if settings.max_minutes is not None:
        args += ["--max-minutes", str(settings.max_minutes)]
    return args


def _finished(folder: Path, run: PlannedRun) -> dict[str, Any] | None:
    """The run's metrics when it finished with the planned settings (else None)."""
    try:
        metrics = json.loads((folder / "metrics.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    planned = metrics.get("train_settings", {}).get("steps") == run.steps and metrics.get("seed") == run.seed
    return metrics if planned and metrics.get("config_hash") == ModelConfig.from_dict(run.config).hash() else None


def _reusable(metrics: dict[str, Any] | None, train_tokens: int) -> bool:
    """A finished run is kept by a later call only when it reached its budget (not stopped by the time
    limit) on the same training mixture (same token count: a changed story generator retrains it)."""
    return (metrics is not None and metrics.get("stopped") == "completed"
            and metrics.get("data", {}).get("train_tokens") == train_tokens)


def _visible_gpus(settings: LadderSettings) -> list[str | None]:
    if settings.gpus:
        return list(settings.gpus)
    if settings.device == "cpu" or settings.in_process:
        return [None]
    import torch

    if not torch.cuda.is_available():
        return [None]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [part.strip() for part in visible.split(",") if part.strip()] if visible else []
    return ids or [str(i) for i in range(torch.cuda.device_count())]


def _record(run: PlannedRun, metrics: dict[str, Any] | None, status: str) -> dict[str, Any]:
    d_model, n_layers, d_ffw = scaling_ladder(run.scale, base_arch(run.arch))
    record: dict[str, Any] = {
        "arch": run.arch, "scale": run.scale, "seed": run.seed, "name": run.name, "status": status,
        "d_model": d_model, "n_layers": n_layers, "d_ffw": d_ffw, "budget_flops": run.budget_flops,
        "planned_steps": run.steps, "warmup": run.warmup, "flops": run.flops, "config": run.config,
    }
    if metrics is not None:
        tokens = int(metrics["tokens_seen"])
        record.update(
            steps=metrics["steps"], tokens=tokens, training_flops=tokens * run.training_flops_per_token,
            natural_loss=metrics.get("natural_held_out_loss"),
            # without the natural stories the one held-out set is the generated stories'
            generated_loss=metrics.get("generated_held_out_loss", None if metrics.get("held_out_sets") else metrics["held_out_loss"]),
            held_out_loss=metrics["held_out_loss"], stopped=metrics["stopped"], train_seconds=metrics["train_seconds"],
            wall_seconds=metrics["wall_seconds"], device=metrics["device"], parameters=metrics["parameters"],
        )
    return record


def run_ladder(out: str | os.PathLike, settings: LadderSettings, progress: bool = True) -> dict[str, Any]:
    """Train every planned run not yet finished, then write the results JSON, table and figure into `out`."""
    settings.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if progress else (lambda text: None)
    say(f"ladder: preparing the training mixture in {out / 'data'}")
    tokenizer, vocab, train_tokens = prepare(out, settings)
    runs = plan_runs(settings, vocab)
    (out / "configs").mkdir(exist_ok=True)
    for run in runs:
        ModelConfig.from_dict(run.config).to_json(out / "configs" / f"{run.name}.json")
    say(f"ladder: {len(runs)} runs ({', '.join(settings.archs)} at scales {sorted(set(settings.scales))}, seeds "
        f"{list(settings.seeds)} and the ablations {list(settings.ablations)} at the smallest); budgets " + ", ".join(
            f"scale {s}: {budget_for(s, settings.budget_scale):.2g} FLOPs" for s in sorted(set(settings.scales))))

    for run in runs:
        say(f"  {run.name}: {run.flops['active_parameters'] / 1e6:.2f}M active of {run.flops['total_parameters'] / 1e6:.1f}M "
            f"parameters, {run.training_flops_per_token / 1e6:.1f}M training FLOPs/token, {run.steps} steps = "
            f"{run.tokens / 1e6:.2f}M tokens")
    done: dict[str, dict[str, Any]] = {}
    todo = []
    for run in runs:
        metrics = _finished(out / "runs" / run.name, run)
        if _reusable(metrics, train_tokens):
            done[run.name] = metrics
        else:
            todo.append(run)
    if done:
        say(f"ladder: {len(done)} runs already finished on this mixture, skipped")
    failed = _execute(todo, settings, out, tokenizer, done, say, progress)

    records = [
        _record(run, done.get(run.name), "done" if run.name in done else "failed" if run.name in failed else "missing")
        for run in runs
    ]
    results = {
        "settings": {**asdict(settings), "base_budget": BASE_BUDGET, "tokenizer": tokenizer, "d_vocab": vocab},
        "runs": records,
        "sweep_seconds": time.monotonic() - started,
    }
    from circuitlab.training.ladder_report import verdicts, write_outputs

    results["verdicts"] = [asdict(v) for v in verdicts(results)]
    write_outputs(out, results)
    say(f"ladder: {sum(r['status'] == 'done' for r in records)} of {len(records)} runs done in "
        f"{results['sweep_seconds']:.0f} s; results in {out / RESULTS_FILE}, {out / TABLE_FILE}, {out / FIGURE_FILE}")
    if failed:
        raise UserError(f"{len(failed)} ladder runs failed ({', '.join(sorted(failed))}); see their logs in "
                        f"{out / 'runs'}/<name>.log, then run the same command again (finished runs are skipped)")
    return results


def _execute(todo: list[PlannedRun], settings: LadderSettings, out: Path, tokenizer: str,
             done: dict[str, dict[str, Any]], say: Any, progress: bool) -> set[str]:
    """Run `todo` (in this process, or as concurrent `circuitlab train` processes); fill `done`."""
    from tqdm.auto import tqdm

    failed: set[str] = set()
    bar = tqdm(total=len(todo), desc="ladder runs", unit="run", disable=not progress or not todo)
    for run in todo:
        folder = out / "runs" / run.name
        if folder.exists():  # an unfinished or outdated attempt: runs keep no checkpoints, so start again
            shutil.rmtree(folder)
    if settings.in_process:
        from circuitlab.cli import main

        for run in todo:
            status = main(_train_args(run, settings, out, tokenizer))
            _collect(run, out, settings, done, failed, status, say)
            bar.update()
        bar.close()
        return failed

    gpus = _visible_gpus(settings)
    slots = {gpu: settings.jobs_per_gpu for gpu in gpus}
    (out / "runs").mkdir(exist_ok=True)
    # the runs import this very circuitlab, wherever the command was started
    package_root = str(Path(__file__).resolve().parents[2])
    python_path = os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))
    pending = list(todo)
    active: dict[str, tuple[subprocess.Popen, PlannedRun, str | None, Any]] = {}
    shown = ""
    try:
        while pending or active:
            for gpu in gpus:
                while pending and slots[gpu] > 0:
                    run = pending.pop(0)
                    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                           "PYTHONPATH": python_path}
                    if gpu is not None:
                        env["CUDA_VISIBLE_DEVICES"] = gpu
                    log = open(out / "runs" / f"{run.name}.log", "w")
                    process = subprocess.Popen([sys.executable, "-m", "circuitlab.cli", *_train_args(run, settings, out, tokenizer)],
                                               stdout=log, stderr=subprocess.STDOUT, env=env)
                    active[run.name] = (process, run, gpu, log)
                    slots[gpu] -= 1
            state = f"running {len(active)}, waiting {len(pending)}"
            if state != shown:  # only on changes: logs of the sweep stay short
                bar.set_postfix_str(state)
                shown = state
            time.sleep(0.5)
            for name, (process, run, gpu, log) in list(active.items()):
                if process.poll() is None:
                    continue
                log.close()
                del active[name]
                slots[gpu] += 1
                _collect(run, out, settings, done, failed, process.returncode, say)
                bar.update()
    finally:
        for process, _, _, log in active.values():  # interrupted: stop the runs this sweep started
            process.terminate()
            log.close()
        bar.close()
    return failed


def _collect(run: PlannedRun, out: Path, settings: LadderSettings, done: dict[str, dict[str, Any]],
             failed: set[str], status: int, say: Any) -> None:
    folder = out / "runs" / run.name
    metrics = _finished(folder, run) if status == 0 else None
    if metrics is None:
        failed.add(run.name)
        say(f"ladder: {run.name} failed (exit status {status}); log: {out / 'runs' / f'{run.name}.log'}")
        return
    done[run.name] = metrics
    if not settings.keep_models:
        (folder / "model.safetensors").unlink(missing_ok=True)
    say(f"ladder: {run.name} done: {metrics['tokens_seen']:,} tokens, natural loss "
        f"{_fmt(metrics.get('natural_held_out_loss'))}, generated loss {_fmt(metrics.get('generated_held_out_loss'))}"
        f" ({metrics['stopped']}, {metrics['train_seconds']:.0f} s)")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
