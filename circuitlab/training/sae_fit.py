"""Training a sparse autoencoder on a table of activations: circuitlab's AdamW groups and warmup-stable-decay
schedule (circuitlab.training.schedule), with the decoder kept at unit-norm columns.

The autoencoder comes in as an argument (the model lives in circuitlab.analysis.sae, which training does not
import): anything with `init_from_data_(x)`, `loss(x) -> (loss, parts)`, `project_decoder_grad_()` and
`normalise_decoder_()` trains here. Each step:

    lr = wsd_lr(step)                      linear warmup, constant, square-root decay over the last 20%
    loss.backward()
    project_decoder_grad_()                no gradient along a decoder column (it stays on the sphere)
    clip the gradient norm (when set); AdamW step
    normalise_decoder_()                   unit-norm columns again

Batches are rows of the activation table, drawn without replacement in a seeded order per pass (a pure
function of seed and pass, as the language model's windows are).

Letters: N tokens, D d_model.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Protocol

import torch
from torch import Tensor

from circuitlab.training.batches import parameter_groups
from circuitlab.training.schedule import wsd_lr


class DictionaryTrainee(Protocol):
    """What the loop needs of an autoencoder (circuitlab.analysis.sae.TopKSAE is one)."""

    def init_from_data_(self, x_NxD: Tensor) -> None: ...
    def loss(self, x_NxD: Tensor) -> tuple[Tensor, dict[str, Tensor]]: ...
    def project_decoder_grad_(self) -> None: ...
    def normalise_decoder_(self) -> None: ...


def batch_rows(n_rows: int, batch_size: int, step: int, seed: int) -> Tensor:
    """The row ids of step `step`: passes over the rows in seeded permutations, batches taken in order (the
    last partial batch of a pass is dropped, so every batch has `batch_size` rows)."""
    per_pass = n_rows // batch_size
    if per_pass == 0:
        raise ValueError(f"{n_rows} activation rows are fewer than one batch of {batch_size}")
    epoch, index = divmod(step, per_pass)
    return _pass_order(n_rows, seed, epoch)[index * batch_size : (index + 1) * batch_size]


@functools.lru_cache(maxsize=2)
def _pass_order(n_rows: int, seed: int, epoch: int) -> Tensor:
    """The seeded permutation of one pass, drawn once per pass (a randperm of ~10^6 rows takes ~10-25 ms of CPU,
    as long as a full-size GPU step). Read only: callers slice it."""
    return torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def fit_dictionary(sae: Any, activations_NxD: Tensor, steps: int, batch_size: int, lr: float, warmup: int,
                   decay_fraction: float = 0.2, weight_decay: float = 0.0, grad_clip: float | None = None,
                   seed: int = 0, log_every: int = 50, progress: bool = True, what: str = "sparse autoencoder") -> dict:
    """Train `sae` (a DictionaryTrainee, on the activations' device) for `steps` AdamW steps; returns the
    record of the run: its settings, tokens seen, and the loss parts every `log_every` steps and at the end."""
    from tqdm.auto import tqdm

    if steps < 1 or batch_size < 1 or lr <= 0 or warmup < 0:
        raise ValueError(f"steps ({steps}), batch_size ({batch_size}) must be positive, lr ({lr}) > 0, warmup >= 0")
    n_rows = activations_NxD.shape[0]
    sae.init_from_data_(activations_NxD[batch_rows(n_rows, batch_size, 0, seed)])
    optimizer = torch.optim.AdamW(parameter_groups(sae, weight_decay), lr=lr, betas=(0.9, 0.999))
    log = []
    bar = tqdm(range(steps), desc=what, unit="step", file=sys.stderr, disable=not progress)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = wsd_lr(step, steps, lr, warmup, decay_fraction)
        batch_NxD = activations_NxD[batch_rows(n_rows, batch_size, step, seed).to(activations_NxD.device)]
        loss, parts = sae.loss(batch_NxD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sae.project_decoder_grad_()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(sae.parameters(), grad_clip)
        optimizer.step()
        sae.normalise_decoder_()
        if step % log_every == 0 or step == steps - 1:
            entry = {"step": step, "lr": optimizer.param_groups[0]["lr"], "loss": float(loss.detach()),
                     **{name: float(value) for name, value in parts.items()}}
            log.append(entry)
            bar.set_postfix(loss=f"{entry['loss']:.4f}", dead=f"{entry.get('dead_share', 0.0):.3f}")
    return {"steps": steps, "batch_size": batch_size, "lr": lr, "warmup": warmup, "decay_fraction": decay_fraction,
            "weight_decay": weight_decay, "grad_clip": grad_clip, "seed": seed, "rows": n_rows,
            "tokens_seen": steps * batch_size, "final": log[-1], "log": log}
