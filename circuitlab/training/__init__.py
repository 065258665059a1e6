"""Training: AdamW with warmup-stable-decay, divergence guard, resumable checkpoints, torchrun DDP/FSDP.

`train(...)` (circuitlab.training.run) makes one whole run from Python, the same run `circuitlab train`
makes; `Trainer` (circuitlab.training.trainer) is the loop for callers who bring their own token windows.

The names below import on first use, so importing one submodule loads no other.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DataSpec": "circuitlab.training.corpus",
    "TrainOutcome": "circuitlab.training.run",
    "train": "circuitlab.training.run",
    "TrainConfig": "circuitlab.training.settings",
    "Trainer": "circuitlab.training.trainer",
    "TrainResult": "circuitlab.training.trainer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab.training' has no attribute {name!r}")


__all__ = sorted(_LAZY)
