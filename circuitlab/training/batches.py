"""What each optimizer step reads: the AdamW parameter groups, the batches of training windows (a pure function
of seed and step, so a resumed run draws exactly the batches the uninterrupted one would have), and the
fingerprint that ties a checkpoint to its data.

Letters: W window (seq_len + 1).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor, nn


def parameter_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = True) -> list[dict[str, Any]]:
    """AdamW groups: matrices decayed, vectors and scalars (norm scales, biases, decay logits) not; the
    token/position embeddings follow `decay_embeddings`.

    Vectors and scalars are not decayed: decay would pull norm scales towards zero and quantifier decays
    towards a half-life of one token, a change of function, not a regulariser. Embeddings are decayed by
    default: seed 000 decays everything but scalar parameters, and the embedding is a matrix. The usual reason
    to exempt embeddings (a row is only updated when its token occurs, so decay keeps shrinking rare rows) is
    weaker here: every preset ties the embedding to the unembedding, so each row also gets a gradient from every
    softmax, and the matrix is the model's output layer, which decay regularises as in any dense layer. Rows
    of tokens that never occur shrink towards a logit of 0, which is harmless. `decay_embeddings=False` (CLI
    --no-embedding-decay) opts out, e.g. for untied embeddings."""
    decayed, undecayed = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad or param.numel() == 0:  # zero-size (e.g. W_V when every head is Boolean)
            continue
        is_embedding = name.split(".")[-1] in ("W_E", "W_pos")
        if param.dim() < 2 or (is_embedding and not decay_embeddings):
            undecayed.append(param)
        else:
            decayed.append(param)
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": undecayed, "weight_decay": 0.0},
    ]


def epoch_permutation(n_windows: int, seed: int, epoch: int) -> Tensor:
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n_windows, generator=generator)


class WindowSampler:
    """Global batch of optimizer step `step`: a pure function of (seed, step, n_windows)."""

    def __init__(self, n_windows: int, batch_size: int, seed: int):
        if n_windows <= 0:
            raise ValueError("the training data holds no windows: give more text or a shorter --seq-len")
        self.n_windows, self.batch_size, self.seed = n_windows, batch_size, seed
        self._cache: dict[int, Tensor] = {}

    def _perm(self, epoch: int) -> Tensor:
        if epoch not in self._cache:
            self._cache = {e: p for e, p in self._cache.items() if e >= epoch - 1}
            self._cache[epoch] = epoch_permutation(self.n_windows, self.seed, epoch)
        return self._cache[epoch]

    def batch_indices(self, step: int) -> Int[Tensor, "batch"]:
        positions = torch.arange(step * self.batch_size, (step + 1) * self.batch_size)
        epochs, offsets = positions // self.n_windows, positions % self.n_windows
        out = torch.empty(self.batch_size, dtype=torch.long)
        for epoch in epochs.unique().tolist():
            mask = epochs == epoch
            out[mask] = self._perm(int(epoch))[offsets[mask]]
        return out


def data_fingerprint(windows: Tensor) -> str:
    if hasattr(windows, "fingerprint"):  # windows on disk (circuitlab.training.streamed.ShardWindows)
        return windows.fingerprint()
    array = windows.contiguous().cpu().numpy()
    digest = hashlib.sha256()
    digest.update(str((array.shape, str(array.dtype))).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()
