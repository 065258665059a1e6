"""The verdict rule (`judge`) on constructed estimates, the scale rule, the exact binomial interval, and that an
outcome cannot say "reproduced" or "contradicted" without an interval."""

from __future__ import annotations

import math

import pytest

from circuitlab.claims import (
    CONTRADICTED, INCONCLUSIVE, NOT_AT_SCALE, NOT_MEASURED, REPRODUCED, VERDICTS, Outcome, judge, judged, no_interval,
    percent_range, scale_judgement,
)
from circuitlab.stats import Estimate, binomial_interval, bootstrap_pairs_over_seeds


def test_there_are_five_verdicts():
    assert VERDICTS == ("reproduced", "contradicted", "inconclusive", "not tested at the paper's scale", "not measured")


@pytest.mark.parametrize("estimate, threshold, direction, expected", [
    (Estimate(2.0, 1.6, 2.4), 1.5, ">", REPRODUCED),        # the whole interval clears the threshold
    (Estimate(1.6, 1.4, 1.8), 1.5, ">", INCONCLUSIVE),      # straddles it
    (Estimate(1.0, 0.8, 1.2), 1.5, ">", CONTRADICTED),      # the whole interval on the other side
    (Estimate(1.4, 1.3, 1.5), 1.5, ">", CONTRADICTED),      # at most the threshold: the claim "> 1.5" fails
    (Estimate(1.6, 1.5, 1.7), 1.5, ">", INCONCLUSIVE),      # touching from above is not clearing
    (Estimate(0.1, 0.05, 0.2), 0.3, "<", REPRODUCED),
    (Estimate(0.4, 0.31, 0.5), 0.3, "<", CONTRADICTED),
    (Estimate(0.3, 0.2, 0.4), 0.3, "<", INCONCLUSIVE),
    (Estimate(32.0, 28.0, 36.0), (25.0, 40.0), "within", REPRODUCED),
    (Estimate(20.0, 18.0, 22.0), (25.0, 40.0), "within", CONTRADICTED),
    (Estimate(42.0, 41.0, 44.0), (25.0, 40.0), "within", CONTRADICTED),
    (Estimate(26.0, 23.0, 29.0), (25.0, 40.0), "within", INCONCLUSIVE),
    (Estimate(2.0), 1.5, ">", INCONCLUSIVE),                # no interval: cannot clear anything
])
def test_judge_on_constructed_estimates(estimate, threshold, direction, expected):
    assert judge(estimate, threshold, direction).verdict == expected


def test_a_null_that_passes_the_rule_makes_the_metric_at_ceiling():
    effect = Estimate(4.3, 3.9, 4.7)
    found = judge(effect, 1.5, ">", nulls={"gelu-stories": Estimate(5.1, 4.8, 5.4), "shuffled labels": 1.0})
    assert found.verdict == INCONCLUSIVE and "metric at ceiling" in found.reason and "gelu-stories 5.1" in found.reason
    # a plain number, and a null that fails, leave the verdict alone; a null not measured is named as such
    assert judge(effect, 1.5, ">", nulls={"random init": 1.6}).verdict == INCONCLUSIVE
    clean = judge(effect, 1.5, ">", nulls={"random init": 1.1, "shuffled labels": 1.0, "gelu-stories": None})
    assert clean.verdict == REPRODUCED and "gelu-stories not measured" in clean.reason
    # a null that passes does not rescue a contradicted effect
    assert judge(Estimate(1.0, 0.9, 1.1), 1.5, ">", nulls={"gelu-stories": 3.0}).verdict == CONTRADICTED
    # "within": the null's point value is read against the same range
    assert judge(Estimate(30, 28, 32), (25, 40), "within", nulls={"control": 100.0}).verdict == REPRODUCED
    assert judge(Estimate(30, 28, 32), (25, 40), "within", nulls={"control": 33.0}).verdict == INCONCLUSIVE


def test_judge_reports_the_interval_and_rule_and_rejects_bad_rules():
    found = judge(Estimate(1.6, 1.4, 1.8), 1.5, ">")
    assert "[1.4, 1.8]" in found.reason and "> 1.5" in found.reason
    assert judge(None, 1.5).verdict == NOT_MEASURED and judge(Estimate(math.nan), 1.5).verdict == NOT_MEASURED
    with pytest.raises(ValueError):
        judge(Estimate(1, 0, 2), 1.0, ">=")
    with pytest.raises(ValueError):
        judge(Estimate(1, 0, 2), 1.0, "within")


def test_outcomes_need_an_interval_to_reproduce_or_contradict():
    with pytest.raises(ValueError, match="95% interval"):
        Outcome("x", REPRODUCED, 1.0)
    with pytest.raises(ValueError, match="95% interval"):
        Outcome("x", CONTRADICTED, 1.0, estimate=Estimate(1.0))
    outcome = judged("x", Estimate(2.0, 1.8, 2.2), 1.5, ">", nulls={"gelu-stories": Estimate(1.1, 1.0, 1.2)},
                     note="bootstrap over 10 queries")
    assert (outcome.verdict, outcome.value, outcome.nulls) == (REPRODUCED, 2.0, {"gelu-stories": 1.1})
    assert outcome.reason.endswith("bootstrap over 10 queries")
    single = no_interval("y", 3.0, True, "one prompt")
    assert single.verdict == INCONCLUSIVE and "one prompt" in single.reason and "meets" in single.reason


def test_scale_rule_names_both_settings():
    found = scale_judgement((6e13, 9.6e14), (1e17, 6e18), "FLOPs", repeats=9.1)
    assert found.verdict == NOT_AT_SCALE
    assert all(text in found.reason for text in ("6e+13-9.6e+14", "1e+17-6e+18", "9.1 passes"))
    assert scale_judgement((2e16, 1e17), (1e17, 6e18), "FLOPs") is None  # within 10x of the smallest
    one = scale_judgement((5.2e6, 5.2e6), (1.3e9, 1.3e9), "parameters")  # one setting each: one number each
    assert "(ours 5.2e+06 parameters, the paper's 1.3e+09 parameters)" in one.reason
    assert scale_judgement((2e16, 1e17), (1e17, 6e18), "FLOPs", repeats=2.0).verdict == NOT_AT_SCALE
    assert percent_range(30, 35) == (25.0, 40.0) and percent_range(12) == (7.0, 17.0)


def test_exact_binomial_interval_against_known_values():
    # Clopper-Pearson for 10 of 10: [0.6915, 1]; 0 of 10: [0, 0.3085]; 5 of 10: [0.1871, 0.8129]
    assert binomial_interval(10, 10).low == pytest.approx(0.69150, abs=1e-4) and binomial_interval(10, 10).high == 1.0
    assert binomial_interval(0, 10).high == pytest.approx(0.30850, abs=1e-4)
    half = binomial_interval(5, 10)
    assert (half.value, round(half.low, 4), round(half.high, 4)) == (0.5, 0.1871, 0.8129)
    with pytest.raises(ValueError):
        binomial_interval(11, 10)


def test_seed_bootstrap_widens_with_the_spread_between_seeds():
    same = bootstrap_pairs_over_seeds([[1.0, 1.1, 0.9] * 5] * 3, n_resamples=300)
    apart = bootstrap_pairs_over_seeds([[1.0, 1.1, 0.9] * 5, [2.0, 2.1, 1.9] * 5, [3.0, 3.1, 2.9] * 5], n_resamples=300)
    assert same.value == pytest.approx(1.0) and apart.value == pytest.approx(2.0)
    assert (apart.high - apart.low) > 5 * (same.high - same.low)


def test_a_stories_bootstrap_gives_no_interval_that_misses_its_value():
    import numpy as np

    from circuitlab.claims.seed000 import _stories_interval

    straddling = np.linspace(0.70, 0.80, 101)
    estimate, note = _stories_interval(straddling, 0.7512, 3)
    assert (estimate.value, estimate.low, estimate.high) == (0.751, round(np.percentile(straddling, 2.5), 3),
                                                            round(np.percentile(straddling, 97.5), 3))
    assert "51% of them below" in note
    estimate, note = _stories_interval(straddling, 0.805, 3)  # every resample below the value: biased
    assert estimate.low is None and estimate.value == 0.805 and note.startswith("100% of 101 resamples")
