"""Warmup-stable-decay schedule values and the divergence guard on synthetic loss sequences."""

from __future__ import annotations

import math
import random

import pytest

from circuitlab.training.guard import DivergenceError, DivergenceGuard
from circuitlab.training.schedule import wsd_lr, wsd_multiplier


def test_wsd_schedule_values():
    peak, steps, warmup = 1e-3, 1000, 100  # decay over the last 200 steps: decay_start = 800
    assert wsd_lr(0, steps, peak, warmup) == 0.0  # warm up from zero
    assert wsd_lr(50, steps, peak, warmup) == pytest.approx(0.5 * peak, rel=1e-12)
    assert wsd_lr(100, steps, peak, warmup) == peak
    assert wsd_lr(799, steps, peak, warmup) == peak
    assert wsd_lr(800, steps, peak, warmup) == peak  # progress 0
    assert wsd_lr(850, steps, peak, warmup) == pytest.approx(peak * (1 - math.sqrt(0.25)), rel=1e-12)
    assert wsd_lr(999, steps, peak, warmup) == pytest.approx(peak * (1 - math.sqrt(199 / 200)), rel=1e-12)
    values = [wsd_multiplier(s, steps, warmup) for s in range(steps)]
    assert all(b >= a for a, b in zip(values[:100], values[1:101]))
    assert all(b <= a for a, b in zip(values[100:], values[101:]))


def test_wsd_schedule_overlapping_warmup_and_decay_and_errors():
    # 10 steps, warmup 9, decay 2: at step 9 both apply
    assert wsd_multiplier(9, 10, 9, 0.2) == pytest.approx(1.0 * (1 - math.sqrt(1 / 2)))
    assert wsd_multiplier(8, 10, 9, 0.2) == pytest.approx((8 / 9) * (1 - math.sqrt(0)))
    assert wsd_multiplier(3, 10, 0, 0.0) == 1.0
    with pytest.raises(ValueError, match="outside"):
        wsd_multiplier(10, 10, 2)
    with pytest.raises(ValueError, match="decay_fraction"):
        wsd_multiplier(0, 10, 2, 1.5)


def healthy_losses_with_spikes(n: int = 3000, seed: int = 0) -> list[float]:
    """A converging run (6 -> 3.4 nats) with noise and isolated spikes to ppl ~6000 (seed 002, A.3)."""
    rng = random.Random(seed)
    losses = []
    for step in range(n):
        loss = 3.4 + 2.6 * math.exp(-step / 300) + rng.gauss(0, 0.05)
        if rng.random() < 0.02:
            loss = math.log(6000) + rng.random()  # one window flips: perplexity in the thousands
        losses.append(loss)
    # a few back-to-back spikes and one absurd one must not fire either
    losses[2000:2005] = [9.0] * 5
    losses[2500] = 80.0
    return losses


def diverging_losses(n: int = 3000, turn: int = 1600, seed: int = 1) -> list[float]:
    """Descends like a healthy run, then climbs steadily (seed 002, membership head-75)."""
    rng = random.Random(seed)
    losses = []
    for step in range(n):
        loss = 3.4 + 2.6 * math.exp(-step / 300) + rng.gauss(0, 0.05)
        if step > turn:
            loss += 0.004 * (step - turn)
        losses.append(loss)
    return losses


def run_guard(losses: list[float], guard: DivergenceGuard) -> int | None:
    try:
        for step, loss in enumerate(losses, start=1):
            guard.update(step, loss)
    except DivergenceError as error:
        return error.step
    return None


def test_guard_ignores_isolated_spikes():
    losses = healthy_losses_with_spikes()
    assert sum(loss > math.log(100) for loss in losses) >= 40  # the pattern really has spikes
    assert run_guard(losses, DivergenceGuard(window=50, factor=2.0)) is None


def test_an_instantaneous_threshold_would_fire_on_the_same_spikes():
    """The control: the spikes are big enough to fool a guard keyed on the instantaneous loss."""
    losses = healthy_losses_with_spikes()
    best = min(losses[:100])
    assert any(loss - best > math.log(2.0) for loss in losses[1000:])


def test_guard_fires_on_a_sustained_rise():
    losses = diverging_losses()
    fired = run_guard(losses, DivergenceGuard(window=50, factor=2.0))
    assert fired is not None
    # the noiseless curve's median crosses best + ln 2 near the step where the added rise is ln 2 nats,
    # plus half a window of lag; the best running loss sits a little below the floor value at the turn
    rise_steps = math.log(2.0) / 0.004
    assert 1600 + rise_steps - 60 <= fired <= 1600 + rise_steps + 60, fired


def test_guard_fires_at_once_on_non_finite_loss():
    guard = DivergenceGuard(window=50)
    for step in range(1, 11):
        guard.update(step, 3.0)
    with pytest.raises(DivergenceError, match="non-finite") as caught:
        guard.update(11, float("nan"))
    assert caught.value.step == 11
    with pytest.raises(DivergenceError):
        DivergenceGuard(window=50).update(1, float("inf"))


def test_guard_state_round_trip_makes_the_same_decision():
    losses = diverging_losses()
    whole = run_guard(losses, DivergenceGuard(window=40, factor=1.5))
    first = DivergenceGuard(window=40, factor=1.5)
    for step, loss in enumerate(losses[:1000], start=1):
        first.update(step, loss)
    second = DivergenceGuard(window=2, factor=3.0)
    second.load_state_dict(first.state_dict())
    try:
        for step, loss in enumerate(losses[1000:], start=1001):
            second.update(step, loss)
        resumed = None
    except DivergenceError as error:
        resumed = error.step
    assert whole is not None and resumed == whole


def test_guard_rejects_bad_settings():
    with pytest.raises(ValueError, match="factor"):
        DivergenceGuard(factor=1.0)
    with pytest.raises(ValueError, match="window"):
        DivergenceGuard(window=1)


def test_budget_step_and_the_decay_it_drives():
    from circuitlab.training.schedule import budget_step, wsd_lr

    assert budget_step(10, 1000, 0.0) == 10  # the budget behind the steps: the step itself
    assert budget_step(10, 1000, 0.5) == 500  # the budget ahead: its share as a step
    assert budget_step(10, 1000, 1.7) == 999  # never past the last step
    # decay read at step 900 of 1000 (halfway through the last 20%), warm-up at step 5 of 10
    assert wsd_lr(5, 1000, 1.0, 10, 0.2, decay_step=900) == pytest.approx(0.5 * (1 - 0.5**0.5))
    assert wsd_lr(50, 1000, 1.0, 10, 0.2, decay_step=50) == wsd_lr(50, 1000, 1.0, 10, 0.2) == 1.0
