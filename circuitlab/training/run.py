"""`train(...)`: one training run from Python, the same run `circuitlab train` makes.

    from circuitlab.config import ModelConfig
    from circuitlab.training import DataSpec, TrainConfig, train

    outcome = train("runs/tiny", ModelConfig.preset("tiny-sgatlin"), TrainConfig(steps=300, seq_len=128),
                    DataSpec(n_stories=3000, vocab_size=2048))
    outcome.metrics["held_out_ppl"], outcome.warnings, outcome.out / "card.md"

It prepares (or reuses) the tokenized corpus, trains (resumably, under torchrun when launched so), saves the
model folder, measures fact accuracy on the generated stories, and writes metrics.json and card.md.
A run that diverges raises `circuitlab.training.guard.DivergenceError` (after saving its state).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError
from circuitlab.atomic import atomic_write_text
from circuitlab.training.corpus import DataSpec
from circuitlab.training.settings import TrainConfig
from circuitlab.training.trainer import LOG_FILE, TrainResult


@dataclass
class TrainOutcome:
    """What a run produced: its folder, the loop's result (None after prepare_only), its metrics (rank 0)."""

    out: Path
    result: TrainResult | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    model: Any = None  # the trained model (rank 0)

    @property
    def warnings(self) -> list[str]:
        return [] if self.result is None else list(self.result.warnings)


def check_out_folder(out: Path, resume: bool) -> None:
    if resume or not out.exists():
        return
    existing = [name for name in (LOG_FILE, "checkpoints", "metrics.json") if (out / name).exists()]
    if existing:
        raise UserError(
            f"--out {out} already holds a run ({', '.join(existing)}); pass --resume to continue it, or choose "
            "another --out folder"
        )


def _device_description(device: Any, world_size: int) -> str:
    import torch

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return f"{world_size} x {name} (bf16 autocast)" if world_size > 1 else f"{name} (bf16 autocast)"
    return f"cpu ({torch.get_num_threads()} threads{f', {world_size} processes' if world_size > 1 else ''}, float32)"


# float32 weights, their gradients and AdamW's two moments: a floor on what training holds per parameter
TRAINING_BYTES_PER_PARAMETER = 16


def device_memory_bytes(device: Any) -> int | None:
    """Total memory of a CUDA device, or the machine's physical memory for the CPU; None when unknown."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # not a POSIX system that reports it
        return None


def check_model_fits(config: Any, device: Any, world_size: int = 1, fsdp: bool = False) -> int:
    """Refuse, before any data work, a config whose parameters alone cannot be trained on `device`.

    The parameter count comes from building the model on the meta device (no memory) with the smallest
    vocabulary a tokenizer can have, so it never overestimates; activations are not counted either. Returns
    the count."""
    import torch

    from circuitlab.architectures.transformer import CircuitTransformer
    from circuitlab.data.tokenizer import MIN_VOCAB_SIZE

    with torch.device("meta"):
        parameters = sum(p.numel() for p in CircuitTransformer(config.replace(d_vocab=MIN_VOCAB_SIZE)).parameters())
    available = device_memory_bytes(device)
    if available is None:
        return parameters
    per_device = TRAINING_BYTES_PER_PARAMETER * parameters / (world_size if fsdp else 1)
    # processes on the CPU share the machine's memory; on CUDA each rank has its own device
    needed = per_device * (world_size if device.type == "cpu" else 1)
    if needed > available:
        raise UserError(
            f"the model config{f' {config.name!r}' if config.name else ''} has at least {parameters:,} parameters: "
            f"training needs at least {needed / 2**30:,.1f} GiB for weights, gradients and AdamW moments, but "
            f"{'the machine has' if device.type == 'cpu' else f'{device} has'} {available / 2**30:,.1f} GiB; "
            "reduce d_model, n_layers or the feed-forward width" + ("" if fsdp or world_size == 1 else ", or shard with --fsdp")
        )
    return parameters



def train(
    out: str | os.PathLike,
    model_config: Any,
    train_config: TrainConfig | None = None,
    data: DataSpec | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
    device: str = "auto",
    resume: bool = False,
    prepare_only: bool = False,
    threads: int | None = None,
    save_dtype: str | None = None,
    card_notes: str = "",
    command: str | None = None,
    progress: bool = True,
) -> TrainOutcome:
    """Train `model_config` (its d_vocab follows the tokenizer) on `data` into the folder `out`.

    train_config: the loop's settings (TrainConfig(); its seed also seeds the weights and the data split).
    data: the corpus (DataSpec(): generated stories). data_dir: the tokenized-corpus cache (default out/data).
    resume: continue from the newest checkpoint in `out`. prepare_only: build the data cache and stop.
    save_dtype: "bf16" saves the final weights in bfloat16 (default float32).
    command: how the run was started, recorded in metrics.json and the card (default: this call).
    """
    started = time.monotonic()
    cpu_started = time.process_time()
    import torch

    from circuitlab.distributed import (
        barrier,
        broadcast_object,
        device_for,
        launched_by_torchrun,
        setup_distributed,
        teardown_distributed,
    )
    from circuitlab.training.ddp import unwrap_model

    train_config = train_config or TrainConfig()
    data = data or DataSpec()
    out = Path(out)
    if threads is not None:
        if threads <= 0:
            raise UserError(f"--threads must be positive, got {threads}")
        torch.set_num_threads(threads)
    if train_config.fsdp and not launched_by_torchrun():
        raise UserError("--fsdp shards a model across processes: launch with torchrun --nproc_per_node=N")
    if train_config.seq_len > model_config.n_ctx:
        raise UserError(f"--seq-len {train_config.seq_len} exceeds the model's context n_ctx={model_config.n_ctx}")
    out_existed = out.exists()
    context = setup_distributed(device)
    try:
        train_config.validate(context.world_size)
        check_out_folder(out, resume or prepare_only)  # on every rank, so all of them stop together
        torch_device = device_for(context, device)
        check_model_fits(model_config, torch_device, context.world_size, train_config.fsdp)  # before minutes of data work
        if torch_device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        data_dir = Path(data_dir) if data_dir else out / "data"

        from circuitlab.training.corpus import prepare_data

        error = None
        if context.is_main:  # rank 0 builds the cache, the others read it
            try:
                prepared = prepare_data(data, train_config.seq_len, data_dir, show_progress=progress)
            except Exception as caught:  # re-raised on every rank below, so no rank waits forever
                error = caught
        error_text = broadcast_object(None if error is None else f"{type(error).__name__}: {error}", context)
        if error is not None:
            raise error
        if error_text is not None:
            raise UserError(f"rank 0 could not prepare the data ({error_text})")
        if not context.is_main:
            prepared = prepare_data(data, train_config.seq_len, data_dir, show_progress=False)
        barrier(context)
        manifest = prepared.manifest
        if context.is_main:
            print(
                f"data: {manifest['source']}: {manifest['train_windows']} training windows "
                f"({manifest['train_tokens']:,} tokens), {manifest['held_out_windows']} held-out windows; "
                f"tokenizer vocabulary {prepared.tokenizer.vocab_size}",
                file=sys.stderr,
            )
        if prepare_only:
            return TrainOutcome(out=out)

        model_config = model_config.replace(d_vocab=prepared.tokenizer.vocab_size)
        from circuitlab.architectures.transformer import CircuitTransformer
        from circuitlab.training.resume import find_checkpoint
        from circuitlab.training.trainer import Trainer

        model = CircuitTransformer(model_config, tokenizer=prepared.tokenizer)
        model.reset_parameters(seed=train_config.seed)
        if resume and context.is_main and find_checkpoint(out) is None:
            print(f"note: no checkpoint in {out}; starting from scratch", file=sys.stderr)
        trainer = Trainer(
            model, train_config, prepared.train_windows, prepared.validation_windows, out, device=torch_device,
            context=context, tokenizer=prepared.tokenizer, progress=progress, clock_start=started,
        )
        result = trainer.fit(resume=resume)
        from circuitlab.training.corpus import evaluate_sets

        vocab = prepared.tokenizer.vocab_size
        held_out = evaluate_sets(trainer, {"held_out": prepared.held_out_windows}, vocab)["held_out"]
        set_metrics = evaluate_sets(trainer, prepared.held_out_sets, vocab)
        full_state = trainer.full_model_state() if train_config.fsdp else None
        outcome = TrainOutcome(out=out, result=result)
        if context.is_main:
            if full_state is None:
                final_model = unwrap_model(trainer.base_model)
            else:
                final_model = CircuitTransformer(model_config, tokenizer=prepared.tokenizer)
                final_model.load_state_dict(full_state)
                final_model.to(torch_device)
            if command is None:
                command = (f"circuitlab.training.train({str(out)!r}, ModelConfig {model_config.name!r}, "
                           f"{train_config.to_dict()}, data source {data.source!r})")
            outcome.model = final_model
            outcome.metrics = _finish(
                out, final_model, result, train_config, data, prepared, torch_device, context.world_size,
                (started, cpu_started), held_out, command=command, save_dtype=save_dtype, card_notes=card_notes,
                set_metrics=set_metrics,
            )
        barrier(context)
        return outcome
    except BaseException:
        if context.is_main and not out_existed:
            remove_if_empty(out)  # a run that failed before writing anything leaves no folder behind
        raise
    finally:
        teardown_distributed(context)


def remove_if_empty(folder: Path) -> bool:
    """Delete `folder` when it holds no files (empty subfolders only); whether it did."""
    if not folder.is_dir() or any(path.is_file() or path.is_symlink() for path in folder.rglob("*")):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def _pressure_rows(pressures: dict[str, Any]) -> dict[str, str]:
    """Card rows: each selectivity pressure beside the LM loss (nats/token) at step 1 and at the end."""
    rows = {"selectivity pressures": pressures["rule"]}
    for when, label in (("first", "step 1"), ("first_unscaled", "step 1 at full strength (no ramp, no cap)"),
                        ("final", "last 10% of steps")):
        if when in pressures:
            part = pressures[when]
            terms = ", ".join(f"{name} {value:.4f}" for name, value in part.items()
                              if name not in ("step", "steps", "lm_loss", "total"))
            rows[f"pressure vs LM loss, {label} (nats/token)"] = (
                f"pressure {part['total']:.4f} ({terms}) vs LM loss {part['lm_loss']:.4f}")
    return rows


def natural_story_losses(model: Any, data: Any, tokenizer: Any, out: Path) -> dict[str, Any]:
    """The natural held-out stories' loss read one story at a time (circuitlab.training.evaluation), with its
    bootstrap 95% interval over stories; the per-story numbers go to <out>/held_out_stories.npz (story ids,
    summed negative log-likelihood, tokens), which the baselines and the seed table pair with theirs."""
    import numpy as np

    from circuitlab.stats import bootstrap_ratio
    from circuitlab.training.evaluation import document_losses
    from circuitlab.data.natural import load_natural_stories

    stories = load_natural_stories(data.natural_dir).held_out()
    documents = tokenizer.encode_batch([story.text for story in stories])
    nll, counts = document_losses(model, documents, tokenizer.eos_id)
    np.savez(out / "held_out_stories.npz", ids=np.array([story.id for story in stories]), nll=nll, tokens=counts)
    estimate = bootstrap_ratio(nll, counts)
    return {"loss": estimate.value, "ci95": estimate.ci95, "stories": len(stories), "tokens": int(counts.sum())}


def _finish(
    out, model, result, train_config, data, prepared, device, world_size, started, held_out, *, command, save_dtype,
    card_notes, set_metrics=None,
) -> dict[str, Any]:
    """Save the model folder, measure fact accuracy, write metrics.json and card.md (rank 0).

    started: (time.monotonic(), time.process_time()) at the start of the run. held_out: evaluate_sets' entry
    for all held-out windows (loss, ppl, unigram_entropy, tokens)."""
    import torch

    from circuitlab.architectures.weights import save_model
    from circuitlab.training.card import write_card
    from circuitlab.training.pressure import pressure_summary

    model.eval()
    save_model(model, out, dtype=torch.bfloat16 if save_dtype == "bf16" else None)
    per_story = natural_story_losses(model, data, prepared.tokenizer, out) if data.natural_dir is not None else None
    fact_accuracy, fact_note, distant_accuracy = None, None, None
    if data.source == "stories":  # the facts are stated in the generated stories only
        from circuitlab.data import distant_fact_accuracy
        from circuitlab.data import fact_accuracy as measure_facts

        try:
            with torch.no_grad():
                fact_accuracy, table = measure_facts(lambda tokens: model(tokens.to(device)), prepared.tokenizer)
                distant_accuracy, _ = distant_fact_accuracy(lambda tokens: model(tokens.to(device)), prepared.tokenizer)
            fact_note = (f"{int(table['correct'].sum())} of {len(table)} single-token facts after 'The [noun] was'; "
                         f"{100 * distant_accuracy:.1f}% with words between noun and 'was' (DISTANT_PROMPTS)")
        except ValueError as error:
            fact_note = f"not measured: {error}"
    parameters = sum(p.numel() for p in model.parameters())
    # the parity bottleneck's relative reconstruction error of the FFN writes, over the last logged steps
    recent = [r["reconstruction"] for r in result.history if "reconstruction" in r][-50:]
    reconstruction = sum(recent) / len(recent) if recent else None
    # earlier sessions' training time plus all of this run (data, training, evaluation, saving)
    wall_seconds = result.train_seconds - result.session_seconds + (time.monotonic() - started[0])
    entropy = held_out["unigram_entropy"]
    epochs = result.tokens_seen / max(1, int(prepared.manifest["train_tokens"]))
    metrics = {
        "name": model.config.name or out.name,
        "held_out_loss": held_out["loss"],
        "held_out_ppl": held_out["ppl"],
        "held_out_unigram_entropy": entropy,
        "validation_loss": result.eval_loss,
        **({"natural_held_out_per_story": per_story} if per_story is not None else {}),
        "selected_step": result.selected_step if result.selected_step is not None else result.step,
        "epochs": epochs,  # passes over the training windows
        **({"natural_story_passes": epochs * data.natural_upsample} if data.natural_dir is not None else {}),
        **{f"{name}_held_out_{key}": value for name, values in (set_metrics or {}).items()
           for key, value in values.items() if key in ("loss", "unigram_entropy")},
        "held_out_sets": set_metrics or {},
        "held_out": data.held_out_description(),
        "fact_accuracy": fact_accuracy,
        "fact_accuracy_distant": distant_accuracy,
        "fact_accuracy_detail": fact_note,
        **({"train_reconstruction": reconstruction} if reconstruction is not None else {}),
        "tokens_seen": result.tokens_seen,
        "steps": result.step,
        "stopped": result.stopped,
        "train_seconds": result.train_seconds,
        "wall_seconds": wall_seconds,
        "cpu_seconds": time.process_time() - started[1],  # this run, this process, all its threads
        "device": _device_description(device, world_size),
        "world_size": world_size,
        "command": command,
        "seed": train_config.seed,
        "parameters": parameters,
        "config_hash": model.config.hash(),
        "tokenizer_hash": prepared.tokenizer.hash(),
        "data": prepared.manifest,
        "train_settings": train_config.to_dict(),
        "warnings": list(result.warnings),
        "pressures": {"rule": model.config.selectivity.describe(), **pressure_summary(result.history)},
    }
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    write_card(
        out, command=command, seed=train_config.seed, tokens_seen=result.tokens_seen, wall_seconds=wall_seconds,
        device=metrics["device"], held_out_ppl=held_out["ppl"], fact_accuracy=fact_accuracy,
        held_out_sets={name: values["ppl"] for name, values in (set_metrics or {}).items()} or None,
        held_out_description=data.held_out_description(),
        config=model.config, design_notes=card_notes, parameter_count=parameters,
        train_settings={k: v for k, v in train_config.to_dict().items() if v not in (None, False)},
        extra_metrics={
            "held-out loss (nats/token)": f"{held_out['loss']:.4f}",
            **({"natural held-out loss, each story read alone (nats/token, 95% interval over stories)":
                f"{per_story['loss']:.4f} [{per_story['ci95'][0]:.4f}, {per_story['ci95'][1]:.4f}] "
                f"({per_story['stories']:,} stories, {per_story['tokens']:,} tokens)"} if per_story else {}),
            "validation loss of the kept weights (nats/token)":
                f"{result.eval_loss:.4f} (step {metrics['selected_step']} of {result.step})",
            "passes over the training data": (
                f"{epochs:.2f}" + (f" (each natural training story seen about {epochs * data.natural_upsample:.1f} times)"
                                   if data.natural_dir is not None else "")),
            "held-out unigram entropy (nats/token)": f"{entropy:.4f}",
            **{f"{name} held-out loss / unigram entropy (nats/token)":
               f"{values['loss']:.4f} / {values['unigram_entropy']:.4f} ({values['tokens']:,} tokens)"
               for name, values in (set_metrics or {}).items()},
            **_pressure_rows(metrics["pressures"]),
            "facts": fact_note or "n/a",
            **({f"bottleneck reconstruction error, training (mean of the last {len(recent)} steps)":
                f"{reconstruction:.4f}"} if reconstruction is not None else {}),
            "corpus": prepared.manifest["source"],
            "stopped": result.stopped,
        },
        warnings=result.warnings,
    )
    print(
        f"done: {result.step} steps, {result.tokens_seen:,} tokens, held-out ppl {held_out['ppl']:.3f} "
        f"(loss {held_out['loss']:.4f}, unigram entropy {entropy:.4f})"
        + "".join(f", {name} held-out loss {values['loss']:.4f}" for name, values in (set_metrics or {}).items())
        + (f", fact accuracy {100 * fact_accuracy:.1f}%" if fact_accuracy is not None else "")
        + f"; model in {out}" + ("" if result.stopped == "completed" else f" (stopped: {result.stopped})"),
        file=sys.stderr,
    )
    return metrics
