"""Warmup-stable-decay learning rate (seed 000, section 3 and appendix B.1).

The rate warms up linearly from zero over `warmup` steps, stays at the peak, and over the last
`decay_fraction` of the steps falls back towards zero along a square root:

    lr(s) = peak * min(s / warmup, 1)                              for s < decay_start
    lr(s) = peak * min(s / warmup, 1) * (1 - sqrt(p)),  p = (s - decay_start) / (steps - decay_start)

with `decay_start = steps - round(decay_fraction * steps)`. Steps count optimizer updates from 0; step 0
has rate 0 (it only primes Adam's moment estimates), the last step a small positive rate.
"""

from __future__ import annotations

import math


def wsd_multiplier(step: int, total_steps: int, warmup_steps: int, decay_fraction: float = 0.2) -> float:
    """The factor in [0, 1] that multiplies the peak learning rate at optimizer step `step`."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if not 0.0 <= decay_fraction <= 1.0:
        raise ValueError(f"decay_fraction must lie in [0, 1], got {decay_fraction}")
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} lies outside the schedule's {total_steps} steps")
    warm = 1.0 if warmup_steps == 0 else min(step / warmup_steps, 1.0)
    decay_steps = int(round(decay_fraction * total_steps))
    decay_start = total_steps - decay_steps
    if decay_steps == 0 or step < decay_start:
        return warm
    progress = (step - decay_start) / decay_steps
    return warm * (1.0 - math.sqrt(progress))  # seed 000, appendix B.1: square-root decay


def wsd_lr(step: int, total_steps: int, peak_lr: float, warmup_steps: int, decay_fraction: float = 0.2,
           decay_step: int | None = None) -> float:
    """Learning rate at optimizer step `step` of a warmup-stable-decay schedule; `decay_step` (default `step`)
    is the step the decay reads, warm-up always reads `step` (budget_step gives it under a time budget)."""
    if decay_step is None or decay_step == step:
        return peak_lr * wsd_multiplier(step, total_steps, warmup_steps, decay_fraction)
    warm = 1.0 if warmup_steps == 0 else min(step / warmup_steps, 1.0)
    return peak_lr * warm * wsd_multiplier(decay_step, total_steps, 0, decay_fraction)


def budget_step(step: int, total_steps: int, budget_used: float) -> int:
    """The step the decay reads when a run has a time budget (`circuitlab train --fit-to-time`): whichever is
    further along, the optimizer step or the share of the budget used as a step of `total_steps`. A run that
    cannot reach `total_steps` in time so still ends its decay as the budget ends."""
    return min(total_steps - 1, max(step, int(budget_used * total_steps)))
