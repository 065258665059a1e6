"""Divergence guard: stop a run whose running perplexity climbs, let isolated spikes pass.

Seed 002 (appendix A.3) separates two things that look alike on a loss curve. A true divergence is a
sustained climb of the cumulative (running) perplexity, a positive-feedback runaway that a looser threshold
only postpones. Healthy runs with binarised operators throw isolated instantaneous spikes (a handful of
near-binary gates flip on one batch; perplexity touches hundreds or thousands and returns) that do not move
the running value; a guard keyed to the instantaneous loss false-positives on them.

So the guard keys on a robust running loss, the median of the last `window` step losses, and fires when it
has risen more than `ln(factor)` nats (perplexity times `factor`) above the lowest running loss seen so far.
A median ignores anything that touches fewer than half the steps in its window, however large, so a spike
never fires the guard, while a climb must persist for at least half a window before it can. An EMA would
not do: one spike of ln(6000) nats moves an EMA with rate 0.05 by 0.4 nats, a perplexity factor of 1.5.
A non-finite loss aborts at once: there is nothing to recover from after NaN weights.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any


class DivergenceError(RuntimeError):
    """Training diverged; `step` is the optimizer step and `checkpoint` the folder saved for inspection."""

    def __init__(self, message: str, step: int, checkpoint: str | None = None):
        super().__init__(message)
        self.step = step
        self.checkpoint = checkpoint

    def __str__(self) -> str:
        text = self.args[0]
        if self.checkpoint is not None:
            text += f"; the last state is saved in {self.checkpoint} for inspection"
        return text


class DivergenceGuard:
    """Watches per-step losses; `update` raises DivergenceError on a sustained rise or a non-finite loss.

    window: number of recent step losses whose median is the running loss (default 50).
    factor: running-perplexity ratio over its best value that counts as divergence (default 2.0, loose on
        purpose: seed 002 sets its guard loosely because tight guards abort healthy runs).
    """

    def __init__(self, window: int = 50, factor: float = 2.0):
        if window < 2:
            raise ValueError(f"divergence guard window must be >= 2 steps, got {window}")
        if factor <= 1.0:
            raise ValueError(f"divergence guard factor must exceed 1 (a perplexity ratio), got {factor}")
        self.window = window
        self.factor = factor
        self.recent: deque[float] = deque(maxlen=window)
        self.best_running = math.inf
        self.best_step = -1

    @property
    def running_loss(self) -> float | None:
        """Median of the last `window` losses, or None until the window is full."""
        return statistics.median(self.recent) if len(self.recent) == self.window else None

    def update(self, step: int, loss: float) -> float | None:
        """Record the loss of optimizer step `step`; returns the running loss (None while warming up)."""
        if not math.isfinite(loss):
            raise DivergenceError(f"loss is {loss} at step {step}: training diverged (non-finite loss)", step)
        self.recent.append(float(loss))
        running = self.running_loss
        if running is None:
            return None
        if running < self.best_running:
            self.best_running, self.best_step = running, step
        elif running - self.best_running > math.log(self.factor):
            raise DivergenceError(
                f"running perplexity rose from {math.exp(self.best_running):.4g} (step {self.best_step}) to "
                f"{math.exp(running):.4g} at step {step}, more than the guard's factor {self.factor:g} "
                f"(median loss over the last {self.window} steps): training diverged. Lower the learning rate, "
                "raise the warmup, or loosen the guard (--guard-factor) if this rise is expected",
                step,
            )
        return running

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state, so a resumed run makes the same decisions as an uninterrupted one."""
        return {
            "window": self.window,
            "factor": self.factor,
            "recent": list(self.recent),
            "best_running": None if math.isinf(self.best_running) else self.best_running,
            "best_step": self.best_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = int(state["window"])
        self.factor = float(state["factor"])
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        self.best_running = math.inf if state["best_running"] is None else float(state["best_running"])
        self.best_step = int(state["best_step"])
