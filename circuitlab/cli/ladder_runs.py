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
    finished_metrics,
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
        "--lr", str(settings.lr), "--warmup", str(run.warmup), "--grad-clip", str(settings.grad_clip),
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


def run_ladder(out: str | os.PathLike, settings: LadderSettings, progress: bool = True) -> dict[str, Any]:
    """Train every planned run not yet finished, then write the results JSON, table and figure into `out`."""
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
        metrics = finished_metrics(out / "runs" / run.name, run)
        if reusable(metrics, train_tokens):
            done[run.name] = metrics
        else:
            todo.append(run)
    if done:
        say(f"ladder: {len(done)} runs already finished on this mixture, skipped")
    failed = _execute(todo, settings, out, tokenizer, done, say, progress)

    records = [
        run_record(run, done.get(run.name), "done" if run.name in done else "failed" if run.name in failed else "missing")
        for run in runs
    ]
    results = {
        "settings": {**settings.model_dump(mode="json"), "base_budget": BASE_BUDGET, "tokenizer": tokenizer, "d_vocab": vocab},
        "runs": records,
        "sweep_seconds": time.monotonic() - started,
    }
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
