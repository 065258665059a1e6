"""The checkpoint a run keeps: the weights of its lowest evaluation (validation) loss.

Every periodic evaluation (TrainConfig.eval_every, and the last step) offers the loss it measured; when it is
the lowest so far, the weights are written to `<out>/checkpoints/best.safetensors` (atomically, with the
step and loss in its header). At the end of `fit` those weights replace the last step's, so a run that went
past its best (the held-out loss rising while the training loss falls) returns its best model, chosen on the
validation split and never on the held-out split the card reports. The best so far is part of every
checkpoint's state, so a resumed run keeps choosing among all its evaluations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from circuitlab.distributed import DistributedContext, barrier

BEST_FILE = "best.safetensors"


class BestWeights:
    """The lowest evaluation loss seen, its step, and its weights on disk (when `enabled`)."""

    def __init__(self, out_dir: Path, enabled: bool = True):
        self.path = Path(out_dir) / "checkpoints" / BEST_FILE
        self.enabled = enabled
        self.loss = math.inf
        self.step: int | None = None

    def offer(self, step: int, loss: float, full_state: Callable[[], dict[str, Tensor]], context: DistributedContext) -> bool:
        """Keep the weights of `step` when `loss` is the lowest so far (every rank calls it: gathering the
        weights is collective under FSDP)."""
        if not self.enabled or not loss < self.loss:
            return False
        from circuitlab.architectures.weights import save_tensors

        state = full_state()
        if context.is_main:
            save_tensors(state, self.path, metadata={"step": str(step), "loss": repr(loss)})
        barrier(context)
        self.loss, self.step = float(loss), int(step)
        return True

    def restore(self, model: nn.Module, current_step: int) -> int | None:
        """Load the best weights into `model` (every rank); the step they are from, or None when the last
        step's weights stay (not enabled, never evaluated, or the last step was the best)."""
        if not self.enabled or self.step is None or self.step == current_step:
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        from circuitlab.architectures.weights import load_tensors

        tensors, _ = load_tensors(self.path)
        set_model_state_dict(model, tensors, options=StateDictOptions(full_state_dict=True))
        return self.step

    def state_dict(self) -> dict[str, Any]:
        return {"loss": None if math.isinf(self.loss) else self.loss, "step": self.step}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.loss = math.inf if state.get("loss") is None else float(state["loss"])
        self.step = state.get("step")
