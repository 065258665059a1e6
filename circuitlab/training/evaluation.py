"""Held-out losses: the one the loop reports (mean next-token cross-entropy in nats over packed windows, split
evenly across ranks and summed over them), and the loss of each document read alone (`document_losses`).

Training evaluates packed windows that run across document boundaries; `document_losses` reads each document
as the count baselines read it (circuitlab.analysis.ngram): the end-of-text separator, then its tokens, each
token predicted from what precedes it in the document. A document longer than the model's context is read in
consecutive pieces of n_ctx + 1 tokens (the first token of a piece is context only, so every token is predicted
exactly once, from at most n_ctx tokens before it). Per document it gives the summed negative log-likelihood
and the token count, so the loss can be resampled by documents (circuitlab.stats)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor

from circuitlab.distributed import autocast_for
from circuitlab.distributed import DistributedContext, all_reduce_sum


@torch.no_grad()
def held_out_loss(
    forward: Callable[[Tensor], Tensor], windows: Int[Tensor, "n window"], context: DistributedContext,
    device: torch.device, batch_size: int, max_windows: int | None = None,
) -> float:
    """Mean next-token cross-entropy of `forward` (tokens -> logits) over `windows` (the first `max_windows`),
    each rank taking every world_size-th window; every rank gets the same number."""
    if max_windows is not None and max_windows > 0:
        windows = windows[:max_windows]
    usable = (windows.shape[0] // context.world_size) * context.world_size
    local = windows[:usable][context.rank :: context.world_size]
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    for start in range(0, local.shape[0], batch_size):
        batch = local[start : start + batch_size].to(device).long()
        with autocast_for(device):
            logits_BxTxV = forward(batch[:, :-1])
        loss_sum = F.cross_entropy(
            logits_BxTxV.float().reshape(-1, logits_BxTxV.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
        )
        totals += torch.stack([loss_sum.double(), torch.tensor(batch[:, 1:].numel(), device=device, dtype=torch.float64)])
    totals = all_reduce_sum(totals, context)
    return float(totals[0] / totals[1])


def _pieces(tokens: list[int], n_ctx: int) -> list[list[int]]:
    """Consecutive pieces of at most n_ctx + 1 tokens overlapping by one (every token predicted once)."""
    return [tokens[start:start + n_ctx + 1] for start in range(0, max(1, len(tokens) - 1), n_ctx)]


@torch.no_grad()
def document_losses(model: Any, documents: Sequence[Sequence[int]], eos: int, batch_size: int = 16,
                          progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(summed negative log-likelihood in nats, predicted tokens) of each document under `model`."""
    from tqdm.auto import tqdm

    n_ctx = model.cfg.n_ctx
    device = next(model.parameters()).device
    pieces = [(number, piece) for number, tokens in enumerate(documents)
              for piece in _pieces([eos, *map(int, tokens)], n_ctx) if len(piece) > 1]
    pieces.sort(key=lambda item: len(item[1]))  # similar lengths share a batch: little padding
    nll = np.zeros(len(documents))
    counts = np.zeros(len(documents))
    was_training = model.training
    model.eval()
    try:
        for start in tqdm(range(0, len(pieces), batch_size), desc="held-out documents", disable=not progress):
            batch = pieces[start:start + batch_size]
            # widths rounded up to a multiple of 64 (the padding is masked; attention is causal): a few shapes
            # instead of one per document length, so kernels tuned or compiled per shape are not redone per batch
            width = min(-(-max(len(piece) - 1 for _, piece in batch) // 64) * 64, n_ctx) + 1
            tokens = torch.full((len(batch), width), eos, dtype=torch.long)
            mask = torch.zeros((len(batch), width - 1), dtype=torch.bool)
            for row, (_, piece) in enumerate(batch):
                tokens[row, :len(piece)] = torch.tensor(piece)
                mask[row, :len(piece) - 1] = True
            tokens = tokens.to(device)
            logits = model(tokens[:, :-1]).float()
            losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none").cpu()
            for row, (number, _) in enumerate(batch):
                nll[number] += float(losses[row][mask[row]].sum())
                counts[number] += int(mask[row].sum())
    finally:
        model.train(was_training)
    return nll, counts
