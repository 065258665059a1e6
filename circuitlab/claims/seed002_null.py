"""Seed 002's SELECTIVE read so that it discriminates (circuitlab.claims.selectivity): channels more decisive
than the 95th percentile of a pressure-free control, and sparse detectors counted apart.

Rows on the shipped legible-stories measure per channel on the natural held-out windows; its nulls are the
pressure-free control (gelu-stories' MLP pre-activations through sigmoid(4z), the same windows, the same
per-channel code) and the legible design randomly initialised. On the paper's configuration the SELECTIVE-beyond-null
rows measure legible-stories-uncentred (seed 002's uncentred operands, trained beside the shipped models) the same
way; the sparse-detector rows read the uncentred sweep's ON-rate histogram (its 1-5% bin).
"""

from __future__ import annotations

from typing import Any

import circuitlab.claims.seed002_sweep as sweep
from circuitlab.claims.context import UNCENTRED, Context
from circuitlab.claims.rows import NOT_MEASURED, Claim, Outcome, judged
from circuitlab.claims.selectivity import (
    CONTROL, NULL_QUANTILE, SPARSE_ON, channels, control_selective, crispness_cut, selective_beyond, share,
    sparse_detectors,
)
from circuitlab.stats import Estimate, binomial_interval

RANDOM = "random-init legible-stories"
CENTRED_SHIPPED = "centred operands (the shipped legible-stories)"
# Table 1 / 2 read SELECTIVE on the attention values (combined), Table 5 on the FFN operands
READ_ON_OPERANDS = {"attention": False, "ffn": True}
SURFACE_TEXT = {"attention": "attention value channels", "ffn": "FFN operand channels"}


def _selective(context: Context, surface: str, name: str = "legible-stories") -> Outcome:
    control = context.pressure_free_stats
    cut = crispness_cut(control)
    operand = READ_ON_OPERANDS[surface]
    stats, random_stats = context.legibility_stats_of(name), context.random_legibility_stats_of(name)
    estimate = share(selective_beyond(channels(stats, surface, operand), cut))
    threshold = round(share(selective_beyond(control, cut)).value, 2)
    random = f"random-init {name}"  # the null: the measured model's own design, randomly initialised
    nulls = {CONTROL: threshold, random: share(selective_beyond(channels(random_stats, surface, operand), cut)).value}
    n = len(channels(stats, surface, operand))
    ours = (f"{name}: {estimate.text(1)}% of {SURFACE_TEXT[surface]} SELECTIVE beyond the null (crispness > {cut:.3f}, the "
            f"control's {NULL_QUANTILE:.0%} quantile; {control_selective(context):.1f}% of the control's units are "
            f"SELECTIVE by the paper's thresholds)")
    found = judged(ours, estimate, threshold, ">", {random: nulls[random]},
                   note=f"exact binomial interval over {n} channels; threshold: the control's own share")
    return Outcome(found.ours, found.verdict, found.value, found.reason, found.estimate, nulls)


def attention_selective_beyond_null(context: Context) -> Outcome:
    return _selective(context, "attention")


def ffn_selective_beyond_null(context: Context) -> Outcome:
    return _selective(context, "ffn")


def _sparse(context: Context, surface: str) -> Outcome:
    estimate = share(sparse_detectors(channels(context.legible_stats, surface, True)))
    threshold = round(share(sparse_detectors(context.pressure_free_stats)).value, 2)
    random = share(sparse_detectors(channels(context.random_legible_stats, surface, True))).value
    n = len(channels(context.legible_stats, surface, True))
    ours = (f"{estimate.text(1)}% of {surface} operand channels are sparse detectors (ON for "
            f"{SPARSE_ON[0]:.0%}-{SPARSE_ON[1]:.0%} of tokens)")
    found = judged(ours, estimate, threshold, ">", {RANDOM: random},
                   note=f"exact binomial interval over {n} operand channels; threshold: the control's own share")
    return Outcome(found.ours, found.verdict, found.value, found.reason, found.estimate, {CONTROL: threshold, RANDOM: random})


def attention_sparse_detectors(context: Context) -> Outcome:
    return _sparse(context, "attention")


def ffn_sparse_detectors(context: Context) -> Outcome:
    return _sparse(context, "ffn")


def _histogram_share(model: dict[str, Any], surface: str) -> tuple[int, int] | None:
    """(operand channels in the histogram's [1%, 5%) ON bin, all operand channels) of one surface."""
    histogram = model.get("on_rate_histogram") or {}
    edges, counts = histogram.get("edges"), histogram.get(f"{surface} operator")
    if not edges or not counts or SPARSE_ON[0] not in edges or SPARSE_ON[1] not in edges:
        return None
    return int(counts[edges.index(SPARSE_ON[0])]), int(sum(counts))


def sweep_sparse_detectors(context: Context, surface: str, field: str = "legible_sweep") -> Outcome:
    """The crispness-alone model's share of sparse detectors on one surface against the no-pressure model's."""
    crisp, plain = sweep.regime(context, "crispness alone", field), sweep.regime(context, "none", field)
    for model in (crisp, plain):
        if isinstance(model, Outcome):
            return model
    counts, null_counts = _histogram_share(crisp, surface), _histogram_share(plain, surface)
    if counts is None or null_counts is None:
        return Outcome("-", NOT_MEASURED, None, f"the sweep's on_rate_histogram has no {SPARSE_ON[0]:.0%}-"
                       f"{SPARSE_ON[1]:.0%} bin for {surface} operators")
    found = binomial_interval(*counts)
    estimate = Estimate(100 * found.value, 100 * found.low, 100 * found.high)
    null = round(100 * null_counts[0] / null_counts[1], 2)
    ours = (f"{crisp['name']}: {estimate.text(1)}% of {surface} operand channels ON for {SPARSE_ON[0]:.0%}-"
            f"{SPARSE_ON[1]:.0%} of tokens (no pressure {null:.1f}%)")
    found = judged(ours, estimate, null, ">", note=f"exact binomial interval over {counts[1]} operand channels of "
                   f"{crisp['name']}; threshold: the no-pressure model's share")
    return Outcome(found.ours, found.verdict, found.value, found.reason, found.estimate, {sweep.NULL: null})


def paper_attention_sparse(context: Context) -> Outcome:
    return sweep_sparse_detectors(context, "attention")


def paper_ffn_sparse(context: Context) -> Outcome:
    return sweep_sparse_detectors(context, "ffn")


def _paper_beyond(context: Context, surface: str) -> Outcome:
    from circuitlab.claims.seed002 import _uncentred

    return _uncentred(context) or _selective(context, surface, UNCENTRED)


def paper_attention_beyond_null(context: Context) -> Outcome:
    return _paper_beyond(context, "attention")


def paper_ffn_beyond_null(context: Context) -> Outcome:
    return _paper_beyond(context, "ffn")


PAPER_BEYOND = ("crisp, contextual detectors (sec. 4.1); its 30-35% (attention) and 25% (FFN) SELECTIVE use the fixed "
                "thresholds, which the pressure-free control passes too, so they are not comparable")
_BEYOND = (f"a channel counts as SELECTIVE only when not CONSTANT (variance >= 0.003) and its crispness exceeds the "
           f"{NULL_QUANTILE:.0%} quantile of the same statistic over the pressure-free control's units (gelu-stories "
           "MLP pre-activations standardised per unit, through sigmoid(4z), on the same natural held-out windows); the "
           "95% interval (exact binomial over channels) of the share must lie above the control's own share (about 5% "
           "by construction); null: the legible design randomly initialised")
_SPARSE = (f"sparse detectors, counted apart from SELECTIVE: operand channels ON (v > 0.9) for {SPARSE_ON[0]:.0%}-"
           f"{SPARSE_ON[1]:.0%} of tokens; the 95% interval (exact binomial over channels) of their share must lie "
           "above the pressure-free control's share; null: the legible design randomly initialised")

_SPARSE_SWEEP = (f"sparse detectors, counted apart from SELECTIVE: operand channels ON (v > 0.9) for {SPARSE_ON[0]:.0%}-"
                 f"{SPARSE_ON[1]:.0%} of tokens (the sweep's ON-rate histogram bin); the 95% interval (exact binomial "
                 "over operand channels) of the crispness-alone model's share above the no-pressure model's (its null)")
PAPER_SPARSE = ("no per-channel number (a reading of ours): a detector is off by default and on somewhere (sec. 4.1); "
                "crispness alone keeps the operators alive (ON {on})")


def _claims(surface: str, name: str, place: str, on: str) -> tuple[Claim, ...]:
    measures = {"attention": (paper_attention_beyond_null, attention_selective_beyond_null, paper_attention_sparse,
                              attention_sparse_detectors),
                "ffn": (paper_ffn_beyond_null, ffn_selective_beyond_null, paper_ffn_sparse, ffn_sparse_detectors)}
    paper_beyond, centred_beyond, paper_sparse, centred_sparse = measures[surface]
    short = {"attention": "attn", "ffn": "ffn"}[surface]
    beyond = f"Crispness alone makes {name} SELECTIVE beyond what a pressure-free sigmoid gives"
    sparse = f"Crispness alone leaves sparse detectors among the {SURFACE_TEXT[surface].split()[0]} operand channels, beyond a null"
    return (
        Claim(f"s002-{short}-beyond-null", "002", place, beyond, PAPER_BEYOND, _BEYOND, paper_beyond),
        Claim(f"s002-{short}-sparse", "002", place, sparse, PAPER_SPARSE.format(on=on), _SPARSE_SWEEP, paper_sparse),
        Claim(f"s002-{short}-beyond-null-centred", "002", place, beyond, PAPER_BEYOND, _BEYOND, centred_beyond,
              config=CENTRED_SHIPPED),
        Claim(f"s002-{short}-sparse-centred", "002", place, sparse, PAPER_SPARSE.format(on=on), _SPARSE, centred_sparse,
              config=CENTRED_SHIPPED),
    )


CLAIMS: tuple[Claim, ...] = (
    _claims("attention", "attention value channels", "sec. 4.1, 5.4; Tables 1 and 2", "12.1%")
    + _claims("ffn", "FFN operand channels", "sec. 4.1, 5.3; Table 5", "32.7%")
)
