"""Running the iso-FLOP ladder (`circuitlab ladder`): prepare the mixture once, train every planned run not yet
finished as `circuitlab train` processes (or in this process, one after the other, for tests), then write the
results JSON, table and figure. The plan, the budgets and the records are circuitlab.training.ladder's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import circuitlab.cli.train as train_verb
from circuitlab.cli.entry import run_command
from circuitlab.config import ModelConfig
from circuitlab.errors import UserError
from circuitlab.training.ladder import (
    BASE_BUDGET,
    FIGURE_FILE,
    RESULTS_FILE,
    TABLE_FILE,
    LadderSettings,
    PlannedRun,
    budget_for,
    check_passes,
    finished_metrics,
    largest_budget_scale,
    plan_runs,
    reusable,
    run_record,
)
from circuitlab.training.ladder_report import verdicts, write_outputs


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
        "--lr", str(run.lr), "--warmup", str(run.warmup), "--grad-clip", str(settings.grad_clip),
        "--eval-every", "0", "--ckpt-every", "0", "--seed", str(run.seed), "--device", settings.device,
        "--data-dir", str(out / "data"), "--save-dtype", "bf16", "--quiet",
        "--compile" if settings.compile else "--no-compile",
        *_mixture_args(settings, tokenizer),
    ]
    if settings.max_minutes is not None:
        args += ["--max-minutes", str(settings.max_minutes)]
    return args


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


def run_ladder(out: str | os.PathLike, settings: LadderSettings, progress: bool = True,
               report_only: bool = False) -> dict[str, Any]:
    """Train every planned run not yet finished, then write the results JSON, table and figure into `out`.
    `report_only`: train nothing and prepare no data; write them from the runs already in `out` (a sweep cut
    short), the others recorded as "missing"."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if progress else (lambda text: None)
    if report_only:
        tokenizer, vocab, train_tokens = _from_finished_runs(out, settings)
    else:
        say(f"ladder: preparing the training mixture in {out / 'data'}")
        tokenizer, vocab, train_tokens = prepare(out, settings)
    budget_scale = settings.budget_scale
    if budget_scale == "max":
        budget_scale = largest_budget_scale(settings, vocab, train_tokens)
        say(f"ladder: budget scale {budget_scale:g}: the largest at which no run sees a natural story more than "
            f"{settings.max_natural_passes:g} times ({train_tokens:,} training tokens in the mixture)")
    runs = plan_runs(settings, vocab, budget_scale)
    check_passes(runs, settings, train_tokens)
    passes_per_token = None if settings.natural is None else settings.natural_upsample / train_tokens
    (out / "configs").mkdir(exist_ok=True)
    for run in runs:
        ModelConfig.from_dict(run.config).to_json(out / "configs" / f"{run.name}.json")
    sizes = f" sizes {list(settings.sizes)} at every budget," if settings.sizes else ""
    say(f"ladder: {len(runs)} runs ({', '.join(settings.archs)} at scales {sorted(set(settings.scales))},{sizes} seeds "
        f"{list(settings.seeds)} and the ablations {list(settings.ablations)} at the smallest"
        + (f", learning rates {list(settings.lr_grid)} there" if settings.lr_grid else "") + "); budgets " + ", ".join(
            f"scale {s}: {budget_for(s, budget_scale):.2g} FLOPs" for s in sorted(set(settings.scales))))

    if not report_only:
        for run in runs:
            say(f"  {run.name}: {run.flops['active_parameters'] / 1e6:.2f}M active of {run.flops['total_parameters'] / 1e6:.1f}M "
                f"parameters, {run.training_flops_per_token / 1e6:.1f}M training FLOPs/token, {run.steps} steps = "
                f"{run.tokens / 1e6:.2f}M tokens")
    done: dict[str, dict[str, Any]] = {}
    todo = []
    for run in runs:
        metrics = finished_metrics(out / "runs" / run.name, run)
        if reusable(metrics, train_tokens) or (report_only and metrics is not None):
            done[run.name] = metrics
        else:
            todo.append(run)
    if done:
        say(f"ladder: {len(done)} runs already finished on this mixture" + (", skipped" if not report_only else ""))
    failed = set() if report_only else _execute(todo, settings, out, tokenizer, done, say, progress)

    records = [
        run_record(run, done.get(run.name), "done" if run.name in done else "failed" if run.name in failed else "missing",
                   passes_per_token)
        for run in runs
    ]
    results = {
        "settings": {**settings.model_dump(mode="json"), "base_budget": BASE_BUDGET, "tokenizer": tokenizer, "d_vocab": vocab,
                     "budget_scale_used": budget_scale, "train_tokens": train_tokens},
        "runs": records,
        # --report-only trains nothing: its seconds are the report's, not the sweep's
        "report_seconds" if report_only else "sweep_seconds": time.monotonic() - started,
    }
    if report_only:
        results["report_only"] = True
    results["verdicts"] = [asdict(v) for v in verdicts(results)]
    write_outputs(out, results)
    missing = [record["name"] for record in records if record["status"] == "missing"]
    say(f"ladder: {sum(r['status'] == 'done' for r in records)} of {len(records)} runs done in "
        f"{time.monotonic() - started:.0f} s; results in {out / RESULTS_FILE}, {out / TABLE_FILE}, {out / FIGURE_FILE}"
        + (f"; {len(missing)} runs missing (run the command without --report-only to train them)" if missing else ""))
    if failed:
        raise UserError(f"{len(failed)} ladder runs failed ({', '.join(sorted(failed))}); see their logs in "
                        f"{out / 'runs'}/<name>.log, then run the same command again (finished runs are skipped)")
    return results


def _from_finished_runs(out: Path, settings: LadderSettings) -> tuple[str, int, int]:
    """(tokenizer, vocabulary, training tokens of the mixture) for --report-only: the tokenizer from the
    settings, the mixture's size from the finished runs' metrics (which must agree)."""
    import json

    from circuitlab.data.tokenizer import CircuitTokenizer

    if settings.tokenizer is None:
        raise UserError("--report-only needs the sweep's --tokenizer (the vocabulary sizes the models)")
    found = set()
    for path in sorted((out / "runs").glob("*/metrics.json")):
        try:
            found.add(json.loads(path.read_text())["data"]["train_tokens"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not found:
        raise UserError(f"--report-only: no finished runs in {out / 'runs'} (no metrics.json with the mixture's size)")
    if len(found) > 1:
        raise UserError(f"--report-only: the runs in {out / 'runs'} trained on different mixtures "
                        f"({', '.join(f'{n:,}' for n in sorted(found))} training tokens); keep one sweep per folder")
    vocab = CircuitTokenizer.from_file(settings.tokenizer).vocab_size
    return settings.tokenizer, vocab, found.pop()


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
        for run in todo:
            status = run_command((train_verb,), _train_args(run, settings, out, tokenizer))
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
    metrics = finished_metrics(folder, run) if status == 0 else None
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
