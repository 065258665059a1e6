"""Training: AdamW with warmup-stable-decay, divergence guard, resumable checkpoints, torchrun DDP/FSDP.

`train(...)` (circuitlab.training.run) makes one whole run from Python, the same run `circuitlab train`
makes; `Trainer` (circuitlab.training.trainer) is the loop for callers who bring their own token windows.
"""

from circuitlab.training.corpus import DataSpec
from circuitlab.training.run import TrainOutcome, train
from circuitlab.training.trainer import TrainConfig, Trainer, TrainResult

__all__ = ["DataSpec", "TrainConfig", "TrainOutcome", "TrainResult", "Trainer", "train"]
