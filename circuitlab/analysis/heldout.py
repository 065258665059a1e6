"""A model's held-out loss per document, beside the count-based baselines, with bootstrap intervals.

Training evaluates packed windows that run across document boundaries; here each document is read alone, as
the baselines read it (circuitlab.analysis.ngram): the end-of-text separator, then its tokens, each token
predicted from what precedes it in the document. A document longer than the model's context is read in
consecutive pieces of n_ctx + 1 tokens (the first token of a piece is context only, so every token is
predicted exactly once, from at most n_ctx tokens before it). The result per document is its summed negative
log-likelihood and token count, so the loss is resampled by documents (circuitlab.analysis.stats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from circuitlab.analysis.stats import Estimate, bootstrap_difference, bootstrap_ratio


def _pieces(tokens: list[int], n_ctx: int) -> list[list[int]]:
    """Consecutive pieces of at most n_ctx + 1 tokens overlapping by one (every token predicted once)."""
    return [tokens[start:start + n_ctx + 1] for start in range(0, max(1, len(tokens) - 1), n_ctx)]


@torch.no_grad()
def model_document_losses(model: Any, documents: Sequence[Sequence[int]], eos: int, batch_size: int = 16,
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
            width = max(len(piece) for _, piece in batch)
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


def loss_estimate(nll: np.ndarray, counts: np.ndarray, seed: int = 0) -> Estimate:
    """The loss (nats/token) over documents with its 95% bootstrap interval."""
    return bootstrap_ratio(nll, counts, seed=seed)


def gap_estimate(nll_a: np.ndarray, nll_b: np.ndarray, counts: np.ndarray, seed: int = 0) -> Estimate:
    """loss(b) - loss(a) on the same documents (how far a is below b), with its paired 95% interval."""
    return bootstrap_difference(nll_b, counts, nll_a, counts, seed=seed)
