"""Ctrl-C during training: the first one stops the run after the step in progress, with a checkpoint; a
second one stops it at once.

A KeyboardInterrupt raised in the middle of a step could land between the optimizer's update and the step
counter, so the state it left would match no step. Instead, while `fit` runs, SIGINT only sets a flag; the
loop reads it after each whole step (under torchrun, the ranks agree through one all-reduce, since the
signal reaches them at different moments), writes a checkpoint and raises TrainingInterrupted, which the
command reports with how to continue. A second Ctrl-C raises KeyboardInterrupt as usual.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import torch

from circuitlab.distributed import DistributedContext, all_reduce_sum


class TrainingInterrupted(Exception):
    """The run stopped on Ctrl-C after `step` steps, with its state saved in `checkpoint`."""

    def __init__(self, step: int, checkpoint: str):
        super().__init__(f"interrupted after step {step}; the state is saved in {checkpoint}")
        self.step = step
        self.checkpoint = checkpoint


class InterruptFlag:
    """Within its `with` block, SIGINT sets `requested` instead of raising (main thread only; elsewhere the
    handler cannot be installed and Ctrl-C keeps its usual effect)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> InterruptFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: stopping after this step with a checkpoint (Ctrl-C again to stop at once)", file=sys.stderr)

    def any_rank(self, context: DistributedContext, device: torch.device) -> bool:
        """Whether any rank was interrupted (a collective under torchrun: every rank calls it every step)."""
        if not context.enabled:
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
        return bool(all_reduce_sum(flag, context).item() > 0)
