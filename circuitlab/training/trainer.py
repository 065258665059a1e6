"""The training loop: AdamW, warmup-stable-decay, clipping, bf16 autocast, gradient accumulation, held-out
evaluation, selectivity pressures, a divergence guard, and checkpoints that resume bit for bit.

Optimizer (seed 000, appendix B.1): AdamW with weight decay 0.1 on matrices and the tied embedding, not on
vectors and scalars (circuitlab.training.batches.parameter_groups says why).

Data: `train_windows` holds fixed-length windows of seq_len + 1 tokens (inputs are the first seq_len, targets
the last seq_len). The order is a pure function of (seed, step): sample p of the run is window
perm_e[p mod n] of epoch e = p // n, each epoch a fresh seeded permutation. So the data position of a
checkpoint is just its step, and a resumed run draws exactly the batches the uninterrupted one would have.

Speed: on CUDA the model is compiled with torch.compile unless `compile=False` (CLI --no-compile); the
circuitlab fast paths are custom operators, so the compiled graph keeps them. On one CUDA device the default
`compile_mode` is "reduce-overhead": the compiled steps replay as CUDA graphs, so the GPU no longer waits while
the host launches each kernel (docs/performance.md). Runs over several ranks, models with a layer that cannot
be captured (the product parity bottleneck), and a run after it first runs out of GPU memory keep torch's
default mode (`default_compile_mode`). A step of `batch_size` sequences runs as micro-batches of `micro_batch`
sequences per rank with gradients accumulated (`micro_batch=0`, the default: batch_size / (ranks x
grad_accum)); with the default on one CUDA device, running out of memory halves the micro-batch and redoes the
step, so the largest micro-batch that fits is found while the effective batch stays the one asked for.

Checkpoints are written every `ckpt_every` steps by `circuitlab.training.resume` (atomic folders,
safetensors + JSON, never pickled). On CPU a resumed run logs losses bitwise equal to an uninterrupted run's.

Letters: B batch (sequences), T positions, V vocabulary, W window (seq_len + 1).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor, nn

from circuitlab.atomic import atomic_write_text
from circuitlab.training.resume import (
    StateHolder,
    check_compatible,
    find_checkpoint,
    optimizer_state,
    point_latest_at,
    read_checkpoint,
    truncate_log,
    remove_temporaries,
    restore_rng,
    write_checkpoint,
)
from circuitlab.distributed import DistributedContext, all_reduce_mean, autocast_for, barrier
from circuitlab.training.batches import WindowSampler, data_fingerprint, parameter_groups
from circuitlab.training.compile import compile_model, default_compile_mode
from circuitlab.training.ddp import unwrap_model, wrap_model
from circuitlab.training.evaluation import held_out_loss
from circuitlab.training.interrupt import InterruptFlag, TrainingInterrupted
from circuitlab.training.guard import DivergenceError, DivergenceGuard
from circuitlab.training.overfit import overfitting_warnings, report_warnings
from circuitlab.training.pressure import LOG_PREFIX, TERMS, pressure_scale
from circuitlab.training.schedule import budget_step, wsd_lr
from circuitlab.training.selection import BestWeights
from circuitlab.training.settings import RESUMABLE_CHANGES, TrainConfig

LOG_FILE = "train_log.jsonl"


@dataclass
class TrainResult:
    step: int  # optimizer steps completed
    tokens_seen: int
    train_seconds: float  # wall time spent training, summed over resumed sessions
    session_seconds: float  # of which this session
    eval_loss: float  # on all evaluation windows, of the model returned (the best evaluation's, with select_best)
    eval_ppl: float
    stopped: str  # "completed", "time limit", "time budget" (fit_to_time's end) or "stopped" (at fit's stop_at)
    log_path: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # overfitting signs (circuitlab.training.overfit)
    selected_step: int | None = None  # the step whose weights were kept (select_best), else None: the last


class Trainer:
    """Trains `model` on `train_windows`, evaluating on `eval_windows` (the validation split, when run by
    circuitlab.training.train), writing into `out_dir`.

    Under torchrun every rank builds the same Trainer (same data, same model init); rank 0 writes files.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_windows: Int[Tensor, "n_windows window"],
        eval_windows: Int[Tensor, "n_eval window"],
        out_dir: str | os.PathLike,
        device: torch.device | str = "cpu",
        context: DistributedContext | None = None,
        tokenizer: Any = None,
        progress: bool = True,
        clock_start: float | None = None,
    ):
        self.context = context or DistributedContext()
        # --max-minutes counts from here (or from the caller's time.monotonic() stamp, e.g. the command's start)
        self.clock_start = time.monotonic() if clock_start is None else clock_start
        config.validate(self.context.world_size)
        window = config.seq_len + 1
        for name, windows in (("training", train_windows), ("evaluation", eval_windows)):
            if windows.dim() != 2 or windows.shape[1] != window:
                raise ValueError(
                    f"{name} windows must have shape [n, seq_len + 1 = {window}], got {tuple(windows.shape)}"
                )
        if eval_windows.shape[0] < self.context.world_size:
            raise ValueError(f"need at least {self.context.world_size} evaluation windows, got {eval_windows.shape[0]}")
        model_config = unwrap_model(model).config
        if config.seq_len > model_config.n_ctx:
            raise ValueError(f"seq_len {config.seq_len} exceeds the model's context n_ctx={model_config.n_ctx}")
        self.config = config
        self.device = torch.device(device)
        self.out_dir = Path(out_dir)
        self.tokenizer = tokenizer
        self.progress = progress and self.context.is_main
        self.train_windows = train_windows
        self.eval_windows = eval_windows
        self.data_hash = data_fingerprint(train_windows)
        self.base_model = model.to(self.device)
        self.model = wrap_model(self.base_model, self.context, fsdp=config.fsdp)
        self.compiled = config.compile if config.compile is not None else self.device.type == "cuda"
        self._compile(config.compile_mode or default_compile_mode(self.base_model, self.device, self.context.enabled))
        self.compile_proven = False  # set by the first step that runs; until then a compile error falls back to eager
        per_rank = config.batch_size // self.context.world_size
        # sequences per forward/backward: the asked-for split, made smaller on running out of GPU memory
        self.micro_batch = config.micro_batch or per_rank // config.grad_accum
        self.micro_batch_picked = config.micro_batch == 0
        self.optimizer = torch.optim.AdamW(
            parameter_groups(self.base_model, config.weight_decay, config.decay_embeddings),
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            eps=config.adam_eps,
            # one fused kernel per step on CUDA (these models' steps are bound by launches, not flops)
            fused=self.device.type == "cuda" and not config.fsdp,
        )
        self.guard = DivergenceGuard(config.guard_window, config.guard_factor)
        self.best = BestWeights(self.out_dir, config.select_best)
        self.sampler = WindowSampler(train_windows.shape[0], config.batch_size, config.seed)
        self.step = 0
        self.train_seconds_before = 0.0
        self._session_start = time.monotonic()  # reset when fit() starts
        self.history: list[dict[str, Any]] = []
        # the parity bottleneck's reconstruction and usage-balance terms (architectures/bottleneck/); no bottleneck:
        # lambda_recon None
        bottleneck = unwrap_model(model).config.bottleneck
        self.lambda_recon, self.lambda_balance, self.n_features = (
            (float(bottleneck.lambda_recon), float(bottleneck.lambda_balance), 2 ** int(bottleneck.n_bits))
            if bottleneck is not None else (None, 0.0, 0))
        self.pressures = model_config.selectivity
        self._terms_seen: set[str] = set()

    # --- state -------------------------------------------------------------------------------------------

    @property
    def tokens_per_step(self) -> int:
        return self.config.batch_size * self.config.seq_len

    def _full_state(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Unsharded model and optimizer state (collective under FSDP; rank 0 receives them)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (
            get_model_state_dict(self.model, options=options),
            get_optimizer_state_dict(self.model, self.optimizer, options=options),
        )

    def save_checkpoint(self, name: str | None = None, point_latest: bool = True) -> Path:
        """Write a checkpoint of the state after `self.step` steps (every rank must call it)."""
        model_state, optim_state = self._full_state()
        final = self.out_dir / "checkpoints" / (name or f"step_{self.step:08d}")
        if self.context.is_main:
            state = {
                "step": self.step,
                "tokens_seen": self.step * self.tokens_per_step,
                "train_seconds": self.train_seconds_before + self._session_seconds(),
                "guard": self.guard.state_dict(),
                "best": self.best.state_dict(),
                "train_config": self.config.to_dict(),
                "model_config_hash": unwrap_model(self.base_model).config.hash(),
                "data": {
                    "fingerprint": self.data_hash,
                    "n_windows": int(self.train_windows.shape[0]),
                    "samples_consumed": self.step * self.config.batch_size,
                    "epoch": (self.step * self.config.batch_size) // int(self.train_windows.shape[0]),
                },
            }
            model = StateHolder(model_state, unwrap_model(self.base_model).config, self.tokenizer)
            write_checkpoint(final, model, optim_state, state, self.device)
            if point_latest:
                point_latest_at(final, self.step, self.config.keep_checkpoints)
        barrier(self.context)
        return final

    def load_checkpoint(self, folder: str | os.PathLike) -> None:
        """Restore model, optimizer, RNG, guard and step from a checkpoint folder (every rank reads it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

        state, tensors = read_checkpoint(folder)
        check_compatible(
            state, Path(folder), self.config.to_dict(), RESUMABLE_CHANGES,
            unwrap_model(self.base_model).config.hash(), self.data_hash, int(self.train_windows.shape[0]),
        )
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, tensors["model.safetensors"], options=options)
        set_optimizer_state_dict(self.model, self.optimizer, optimizer_state(state, tensors), options=options)
        restore_rng(state, tensors["rng.safetensors"], self.device)
        self.guard.load_state_dict(state["guard"])
        self.best.load_state_dict(state.get("best"))
        self.step = int(state["step"])
        self.train_seconds_before = float(state["train_seconds"])

    # --- loop --------------------------------------------------------------------------------------------

    def _session_seconds(self) -> float:
        return time.monotonic() - self._session_start

    @torch.no_grad()
    def evaluate(self, max_windows: int | None = None) -> float:
        """Mean next-token cross-entropy (nats) over the evaluation windows, split evenly across ranks."""
        self.model.eval()
        try:
            return held_out_loss(self._forward, self.eval_windows, self.context, self.device,
                                 self.config.eval_batch_size, max_windows)
        finally:
            self.model.train()

    def _compile(self, mode: str) -> None:
        """Set forward_model: the model compiled in `mode` (when compiling), else the model itself."""
        self.compile_mode = mode
        # CUDA graphs reuse their output buffers: each forward starts a new step (see _forward)
        self.forward_model, self.cuda_graphs = compile_model(self.model, self.compiled, mode, self.device)

    def _forward(self, tokens_BxT: Tensor, **kwargs):
        """The (compiled) model on one batch. Under CUDA graphs a forward's outputs live in buffers the next
        replay overwrites, so every forward is marked as a new step; each caller is done with the previous
        outputs (reduced to detached scalars) before it runs the next one."""
        if self.cuda_graphs and self.forward_model is not self.model:
            torch.compiler.cudagraph_mark_step_begin()
        return self.forward_model(tokens_BxT, **kwargs)

    def _log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.context.is_main:
            with open(self.out_dir / LOG_FILE, "a") as handle:
                handle.write(json.dumps(record) + "\n")

    def _truncate_log(self) -> None:
        """Drop log lines past the resumed step (a killed run may have logged steps it never checkpointed)."""
        if self.context.is_main:
            self.history = truncate_log(self.out_dir / LOG_FILE, self.step)

    def _micro_batch_context(self, micro: int) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce on all but the last micro-batch of a step."""
        if not self.context.enabled or micro == self._n_micro() - 1:
            return contextlib.nullcontext()
        if hasattr(self.model, "no_sync"):
            return self.model.no_sync()
        return contextlib.nullcontext()  # FSDP2 reduces every backward; correct, only slower

    def _n_micro(self) -> int:
        return (self.config.batch_size // self.context.world_size) // self.micro_batch

    def _smaller_micro_batch(self) -> int | None:
        """The largest divisor of the per-rank batch at most half the current micro-batch (None at 1)."""
        per_rank = self.config.batch_size // self.context.world_size
        return next((size for size in range(self.micro_batch // 2, 0, -1) if per_rank % size == 0), None)

    def _train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step. With a picked micro-batch on one CUDA device, running out of memory halves the
        micro-batch (more accumulation, the same effective batch) and redoes the step."""
        while True:
            try:
                stats = self._train_step_at(step)
                self.compile_proven = True
                return stats
            except torch.cuda.OutOfMemoryError:
                smaller = self._smaller_micro_batch()
                if not self.micro_batch_picked or self.context.enabled or smaller is None:
                    raise
                failure = None
            except Exception as error:  # noqa: BLE001 - a failed compilation falls back to eager, once
                if not self.compiled or self.compile_proven:
                    raise
                failure = (type(error).__name__, (str(error).strip().splitlines() or [""])[0][:300])
            # outside the except block, where the failed step's tensors (held by its traceback) are released
            self.optimizer.zero_grad(set_to_none=True)
            if failure is not None:
                if self.context.is_main:
                    print(f"warning: torch.compile failed on the first step ({failure[0]}: {failure[1]}); "
                          "training continues eager (pass --no-compile to skip compiling)", file=sys.stderr)
                self.forward_model = self.model
                self.compiled = self.cuda_graphs = False
                continue
            if self.cuda_graphs:
                # the graphs recorded at the larger micro-batch keep their memory pool: recompile without them
                torch._dynamo.reset()
                self._compile("default")
            torch.cuda.empty_cache()
            if self.context.is_main:
                print(f"note: out of GPU memory at micro-batch {self.micro_batch}; retrying step {step + 1} with "
                      f"{smaller} sequences per micro-batch ({self.config.batch_size // smaller} accumulated)",
                      file=sys.stderr)
            self.micro_batch = smaller

    def _schedule_step(self, step: int) -> int:
        """The step the decay reads (circuitlab.training.schedule.budget_step under fit_to_time)."""
        if not self.config.fit_to_time or self.config.max_minutes is None:
            return step
        used = (time.monotonic() - self.clock_start) / (60.0 * self.config.max_minutes)
        if self.context.world_size > 1:  # every rank reads the same clock share, so the ranks' rates agree
            used = float(all_reduce_mean(torch.tensor([used], device=self.device), self.context)[0])
        return budget_step(step, self.config.steps, used)

    def _train_step_at(self, step: int) -> dict[str, Any]:
        config = self.config
        lr = wsd_lr(step, config.steps, config.lr, config.warmup, config.decay_fraction, self._schedule_step(step))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        rows = self.sampler.batch_indices(step)
        per_rank = config.batch_size // self.context.world_size
        local_rows = rows[self.context.rank * per_rank : (self.context.rank + 1) * per_rank]
        per_micro, n_micro = self.micro_batch, self._n_micro()
        lm_total = torch.zeros((), device=self.device)
        selectivity_total = torch.zeros((), device=self.device)
        reconstruction_total = torch.zeros((), device=self.device)
        balance_total = torch.zeros((), device=self.device)
        scale_total = torch.zeros((), device=self.device)
        pressures = self.pressures
        term_totals = torch.zeros(len(TERMS), device=self.device)
        for micro in range(n_micro):
            batch = self.train_windows[local_rows[micro * per_micro : (micro + 1) * per_micro]].to(self.device).long()
            inputs_BxT, targets_BxT = batch[:, :-1], batch[:, 1:]
            with self._micro_batch_context(micro):
                with autocast_for(self.device):
                    logits_BxTxV, aux = self._forward(inputs_BxT, return_aux=True)
                lm_loss = F.cross_entropy(logits_BxTxV.float().reshape(-1, logits_BxTxV.shape[-1]), targets_BxT.reshape(-1))
                # the pressure schedule (circuitlab.training.pressure): ramp, then a cap relative to the LM loss
                scale = pressure_scale(step, lm_loss.detach(), aux["selectivity"].detach().float(), pressures)
                selectivity = scale * aux["selectivity"].float()
                loss = lm_loss + selectivity
                if self.lambda_recon is not None:
                    reconstruction = aux["reconstruction"].float()
                    loss = loss + self.lambda_recon * reconstruction + self.lambda_balance * aux["balance"].float()
                    reconstruction_total += reconstruction.detach()
                    balance_total += aux["balance"].detach().float()
                (loss / n_micro).backward()
            if self.cuda_graphs and micro == 0 and n_micro > 1:
                # the first micro-batch's gradients are outputs of a CUDA graph, which the next micro-batch's
                # replay overwrites: move them out before accumulating into them (later ones add in place)
                for parameter in self.base_model.parameters():
                    if parameter.grad is not None:
                        parameter.grad = parameter.grad.clone()
            lm_total += lm_loss.detach()
            selectivity_total += selectivity.detach()
            scale_total += scale
            terms = aux["selectivity_terms"]
            term_totals += torch.stack([
                scale * terms[name].detach().float() if name in terms else scale.new_zeros(()) for name in TERMS
            ])
            self._terms_seen.update(terms)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for group in self.optimizer.param_groups for p in group["params"]],
            config.grad_clip if config.grad_clip > 0 else math.inf,
        )
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        stats = all_reduce_mean(
            torch.cat([torch.stack([lm_total, selectivity_total, scale_total, reconstruction_total, balance_total]), term_totals])
            / n_micro,
            self.context,
        ).tolist()
        loss, selectivity_value, norm = stats[0], stats[1], float(grad_norm)
        pressure_log = {}
        if self._terms_seen:  # each pressure in nats/token, as added to the loss (after ramp and cap)
            pressure_log = {f"{LOG_PREFIX}{name}": value for name, value in zip(TERMS, stats[5:]) if name in self._terms_seen}
            pressure_log["pressure_scale"] = stats[2]
        if self.lambda_recon is not None:
            # relative reconstruction error of the FFN writes (mean over layers); loss holds the LM loss only
            pressure_log["reconstruction"] = stats[3]
            # m / balance: the Simpson effective number of features of the batch's code (bottleneck/usage.py)
            pressure_log["effective_features"] = self.n_features / stats[4] if stats[4] > 0 else 0.0
        if not (math.isfinite(loss) and math.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise DivergenceError(
                f"non-finite {'loss' if not math.isfinite(loss) else 'gradient norm'} at step {step + 1} "
                f"(loss {loss}, grad norm {norm}): training diverged; lower the learning rate or raise the warmup",
                step + 1,
            )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": loss, "lr": lr, "grad_norm": norm, "selectivity": selectivity_value, **pressure_log}

    def fit(self, resume: bool = False, stop_at: int | None = None) -> TrainResult:
        """Train until `config.steps` (or the time limit); returns the final held-out loss and bookkeeping.

        resume: continue from the newest checkpoint in `out_dir` (a fresh start when there is none).
        stop_at: end this session after that step with a checkpoint, as a kill would (tests use it to split
            one run into two sessions); the schedule still runs to `config.steps`.
        Ctrl-C ends the session after the step in progress with a checkpoint and raises TrainingInterrupted
        (circuitlab.training.interrupt); `fit(resume=True)` continues from it.
        """
        from tqdm.auto import tqdm

        config = self.config
        if self.context.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            remove_temporaries(self.out_dir)
        barrier(self.context)
        if resume:
            checkpoint = find_checkpoint(self.out_dir)
            if checkpoint is not None:
                self.load_checkpoint(checkpoint)
                self._truncate_log()
        if self.step == 0 and self.context.is_main:
            (self.out_dir / LOG_FILE).write_text("")
        self._session_start = time.monotonic()
        stopped = "completed"
        bar = tqdm(total=config.steps, initial=self.step, disable=not self.progress, desc="train", unit="step",
                   dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10.0)
        self.model.train()
        with InterruptFlag() as interrupts, bar:  # Ctrl-C: stop after this step with a checkpoint
            while self.step < config.steps:
                try:
                    record = self._train_step(self.step)
                except DivergenceError as error:  # non-finite: raised before the bad update was applied
                    error.checkpoint = str(self.save_checkpoint(name=f"diverged_step_{error.step:08d}", point_latest=False))
                    raise
                self.step += 1
                diverged = None
                try:
                    running = self.guard.update(self.step, record["loss"])
                except DivergenceError as error:
                    diverged, running = error, self.guard.running_loss
                record = {
                    "step": self.step,
                    **record,
                    "running_loss": running,
                    "tokens_seen": self.step * self.tokens_per_step,
                    "elapsed": round(self.train_seconds_before + self._session_seconds(), 3),
                }
                if diverged is not None:  # log the step that tripped the guard, keep its state for inspection
                    self._log(record)
                    diverged.checkpoint = str(self.save_checkpoint(name=f"diverged_step_{diverged.step:08d}", point_latest=False))
                    raise diverged
                if (config.eval_every and self.step % config.eval_every == 0) or self.step == config.steps:
                    eval_loss = self.evaluate(config.eval_sequences)
                    record.update(eval_loss=eval_loss, eval_ppl=math.exp(eval_loss))
                    self.best.offer(self.step, eval_loss, self.full_model_state, self.context)
                self._log(record)
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                **({"recon": f"{record['reconstruction']:.3f}"} if "reconstruction" in record else {}),
                                **({"ppl": f"{record['eval_ppl']:.2f}"} if "eval_ppl" in record else {}))
                if interrupts.any_rank(self.context, self.device):
                    raise TrainingInterrupted(self.step, str(self.save_checkpoint()))
                if config.ckpt_every and self.step % config.ckpt_every == 0:
                    self.save_checkpoint()
                if stop_at is not None and self.step >= stop_at and self.step < config.steps:
                    stopped = "stopped"
                elif config.max_minutes is not None and self.step < config.steps and self._time_is_up():
                    stopped = "time budget" if config.fit_to_time else "time limit"
                if stopped != "completed":
                    self.save_checkpoint()
                    break
        selected_step = self.best.restore(self.model, self.step)  # the lowest evaluation loss's weights
        eval_loss = self.evaluate()
        warnings = overfitting_warnings(
            self.history, int(self.train_windows.shape[0]) * config.seq_len, self.step * self.tokens_per_step
        )
        report_warnings(warnings, self.history, lambda message: self._log({"step": self.step, "warning": message}),
                        self.context.is_main)
        return TrainResult(
            step=self.step, tokens_seen=self.step * self.tokens_per_step,
            train_seconds=self.train_seconds_before + self._session_seconds(), session_seconds=self._session_seconds(),
            eval_loss=eval_loss, eval_ppl=math.exp(eval_loss), stopped=stopped, selected_step=selected_step,
            log_path=self.out_dir / LOG_FILE, history=self.history, warnings=warnings,
        )

    def _time_is_up(self) -> bool:
        """True once --max-minutes have passed on any rank's clock, so every rank stops after the same step."""
        over = float(time.monotonic() - self.clock_start > 60.0 * self.config.max_minutes)
        return bool(all_reduce_mean(torch.tensor([over], device=self.device), self.context)[0] > 0)

    def full_model_state(self) -> dict[str, Tensor]:
        """The trained weights, unsharded, on CPU (collective under FSDP; complete on rank 0)."""
        return self._full_state()[0]
