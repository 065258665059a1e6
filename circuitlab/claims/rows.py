"""What a claim, its outcome and its row are, the five verdicts and the rule that decides them (`judge`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from circuitlab.stats import Estimate

Context = Any  # circuitlab.claims.context.Context (which imports this module)

VERDICTS = ("reproduced", "contradicted", "inconclusive", "not tested at the paper's scale", "not measured")
REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_AT_SCALE, NOT_MEASURED = VERDICTS
PAPER = "paper"  # the config of a row judged on the paper's own configuration; deviations name theirs

VERDICT_RULES = """\
- **Reproduced / contradicted**: only when the 95% interval of the effect (a percentile bootstrap over the
  units the measurement is made of: stories, pairs, tokens, query circuits, heads or layers, as the row says;
  an exact binomial interval for counts) lies wholly on the claim's side of the row's threshold (reproduced)
  or wholly on the other side (contradicted). An interval that straddles the threshold, or a row with no
  interval, is **inconclusive** (`judge`).
- **Nulls**: every interpretability metric is measured again where no interpretable structure is built in
  (the dense gelu-stories model, a randomly initialised model of the same design, shuffled labels, raw token
  embeddings, or the unpressured model of a sweep). A metric that a null also passes (its point value meets
  the same rule) cannot read "reproduced": the row is inconclusive with "metric at ceiling" in its reason.
  Where a fixed threshold saturates (seed 002's SELECTIVE: a pressure-free control, gelu-stories' MLP
  pre-activations standardised per unit through sigmoid(4z), scores about 100%), the metric is also read
  against the null's distribution (a channel counts only above the control's 95th percentile; sparse
  detectors are counted apart) in rows of their own, each saying how in its rule.
- **Not tested at the paper's scale**: a claim about scale whose experiment lies more than 10x below the
  paper's smallest setting, or that repeats its training data, with both numbers in the row.
- **Not measured**: the experiment needs a set-up the shipped models lack (the reason says which); the row
  fills in from `analyses/results/*.json` when a run writes its result there.
- **Config**: a row is judged on the paper's configuration ("paper"); a deviation from it (a centred operand,
  a product-grid code, a whole-layer swap) is a row of its own named by its config, and does not decide the
  paper's claim.

Every number is measured by the function named in its row, on the shipped models (d_model 256, 4 layers; 6 for
legible-stories; trained on children's stories) or read by it from the committed results of the iso-FLOP
ladder (results/ladder), seed 002's pressure sweeps (results/legible-sweep-uncentred: the paper's uncentred
operands; results/legible-sweep: centred) and the parity report (results/parity), not on the papers' corpora
and scales: a verdict says whether the claim's pattern holds on these models, not that the paper's experiment
was repeated."""

# the package that exports every measuring function: a row names its function by this import path
_PACKAGE = __name__.rpartition(".")[0]

Null = Estimate | float | None


def _value(null: Null) -> float | None:
    if null is None:
        return None
    value = null.value if isinstance(null, Estimate) else float(null)
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str


def _side(value: float, threshold: float | tuple[float, float], direction: str) -> bool:
    """Whether one number meets the rule."""
    if direction == ">":
        return value > threshold
    if direction == "<":
        return value < threshold
    low, high = threshold
    return low <= value <= high


def rule_text(threshold: float | tuple[float, float], direction: str) -> str:
    if direction == "within":
        return f"within [{threshold[0]:g}, {threshold[1]:g}]"
    return f"{direction} {threshold:g}"


def judge(estimate: Estimate | None, threshold: float | tuple[float, float], direction: str = ">",
          nulls: Mapping[str, Null] | None = None) -> Judgement:
    """The verdict of an effect against its rule: `direction` ">" (the claim holds above `threshold`), "<"
    (below) or "within" (`threshold` a (low, high) range).

    Reproduced when the whole 95% interval meets the rule, contradicted when the whole interval misses it (for
    "within": lies wholly outside the range), inconclusive when it straddles the threshold or there is no
    interval. A reproduced effect whose null (any of `nulls`: name -> estimate, number, or None when not
    measured) also meets the rule by its point value turns inconclusive: "metric at ceiling"."""
    if direction not in (">", "<", "within"):
        raise ValueError(f"direction must be '>', '<' or 'within', got {direction!r}")
    if direction == "within" and not (isinstance(threshold, tuple) and threshold[0] <= threshold[1]):
        raise ValueError(f"'within' needs a (low, high) threshold, got {threshold!r}")
    rule = rule_text(threshold, direction)
    if estimate is None or math.isnan(estimate.value):
        return Judgement(NOT_MEASURED, "nothing was measured")
    if estimate.low is None:
        return Judgement(INCONCLUSIVE, f"{estimate.value:.4g} has no 95% interval (a single unit), so the rule ({rule}) "
                                       "cannot be cleared")
    low, high = estimate.low, estimate.high
    interval = f"95% interval [{low:.4g}, {high:.4g}]"
    if direction == "within":
        inside, outside = threshold[0] <= low and high <= threshold[1], high < threshold[0] or low > threshold[1]
    elif direction == ">":
        inside, outside = low > threshold, high <= threshold
    else:
        inside, outside = high < threshold, low >= threshold
    passing = {name: _value(null) for name, null in (nulls or {}).items()}
    passing = {name: value for name, value in passing.items() if value is not None and _side(value, threshold, direction)}
    if inside:
        if passing:
            names = ", ".join(f"{name} {value:.4g}" for name, value in passing.items())
            return Judgement(INCONCLUSIVE, f"metric at ceiling: the {interval} meets the rule ({rule}), but so does "
                                           f"the null ({names})")
        nulls_text = "" if not nulls else "; no null meets it (" + ", ".join(
            f"{name} {'not measured' if _value(v) is None else f'{_value(v):.4g}'}" for name, v in nulls.items()) + ")"
        return Judgement(REPRODUCED, f"the {interval} meets the rule ({rule}){nulls_text}")
    if outside:
        return Judgement(CONTRADICTED, f"the {interval} lies wholly outside the rule ({rule})")
    return Judgement(INCONCLUSIVE, f"the {interval} straddles the rule's threshold ({rule})")


def scale_judgement(ours: tuple[float, float], paper: tuple[float, float], unit: str,
                    repeats: float | None = None) -> Judgement | None:
    """"Not tested at the paper's scale" when our largest setting is more than 10x below the paper's smallest,
    or the run saw its training data more than once (`repeats` passes); None when the scale suffices."""
    def shown(low: float, high: float) -> str:  # one setting is one number, a range two
        return f"{low:.2g}" if f"{low:.2g}" == f"{high:.2g}" else f"{low:.2g}-{high:.2g}"

    span = f"ours {shown(*ours)} {unit}, the paper's {shown(*paper)} {unit}"
    if ours[1] * 10 < paper[0]:
        extra = "" if repeats is None else f"; up to {repeats:.1f} passes over the training data"
        return Judgement(NOT_AT_SCALE, f"more than 10x below the paper's smallest setting ({span}){extra}")
    if repeats is not None and repeats > 1:
        return Judgement(NOT_AT_SCALE, f"the run repeats its training data ({repeats:.1f} passes; {span})")
    return None


CLUSTER_LIFT = 1.5  # seed 000's clustering: the share of same-category neighbours over the shuffled labels
PARITY_PPL_RATIO = 1.10  # seed 002's quality parity: LAMBADA ppl 115.7 vs 109.4 (6% apart) is called parity
PERCENT_TOLERANCE = 5.0  # percentage rows: the paper's range widened by 5 points each side (its seeds spread 5-20)


def percent_range(low: float, high: float | None = None) -> tuple[float, float]:
    """The paper's percentage (or range) widened by PERCENT_TOLERANCE on each side: a "within" threshold."""
    high = low if high is None else high
    return (low - PERCENT_TOLERANCE, high + PERCENT_TOLERANCE)


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: `ours` as printed, `value` the headline number (None if none), `estimate` its
    interval, `nulls` the same metric where no structure is built in (name -> value, None: not measured)."""

    ours: str
    verdict: str
    value: float | None = None
    reason: str = ""
    estimate: Estimate | None = None
    nulls: dict[str, float | None] | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.verdict in (REPRODUCED, CONTRADICTED) and (self.estimate is None or self.estimate.low is None):
            raise ValueError(f"{self.verdict!r} needs an estimate with a 95% interval (rule 1): {self.ours!r}")


def judged(ours: str, estimate: Estimate | None, threshold: float | tuple[float, float], direction: str = ">",
           nulls: Mapping[str, Null] | None = None, note: str = "") -> Outcome:
    """An outcome whose verdict and reason are `judge`'s, with `note` (how the interval was drawn) appended."""
    found = judge(estimate, threshold, direction, nulls)
    reason = found.reason + (f"; {note}" if note else "")
    null_values = None if nulls is None else {name: _value(null) for name, null in nulls.items()}
    value = None if estimate is None else estimate.value
    return Outcome(ours, found.verdict, value, reason, estimate, null_values)


def no_interval(ours: str, value: float | None, meets: bool, why: str,
                nulls: Mapping[str, Null] | None = None) -> Outcome:
    """An inconclusive outcome for a measurement that has no interval (a single prompt, a single model), saying
    whether its point value meets the rule and why no interval applies."""
    null_values = None if nulls is None else {name: _value(null) for name, null in nulls.items()}
    reason = f"no 95% interval: {why}; the point value {'meets' if meets else 'misses'} the rule"
    return Outcome(ours, INCONCLUSIVE, value, reason, Estimate(value) if value is not None else None, null_values)


Measure = Callable[["Context"], Outcome]


@dataclass(frozen=True)
class Claim:
    id: str
    seed: str  # "000" | "002" | "003"
    place: str  # section / figure / table
    claim: str  # one line, our words
    paper: str  # the paper's number or statement
    rule: str  # how this row's verdict is decided
    measure: Measure | None = None
    blocked: str = ""  # why the shipped models cannot measure it (rows without `measure`)
    config: str = PAPER  # "paper", or the name of the deviation from the paper this row measures

    @property
    def measured_by(self) -> str:
        if self.measure is None:
            return ""
        module = self.measure.__module__
        if module.startswith(f"{_PACKAGE}."):  # seed000, seed002, seed003: named as circuitlab.claims exports them
            module = _PACKAGE
        return f"{module}.{self.measure.__qualname__}"


@dataclass(frozen=True)
class ClaimRow:
    """One row of analyses/claims.md and analyses/claims.json."""

    id: str
    seed: str
    place: str
    claim: str
    paper: str
    ours: str
    verdict: str
    reason: str
    rule: str
    measured_by: str
    value: float | None = None
    ci95: list[float] | None = None
    null: dict[str, float | None] | None = None
    config: str = PAPER

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def as_json(self) -> dict[str, Any]:
        """The row as analyses/claims.json holds it (JSON_FIELDS, then seed, place and ours)."""
        def number(x: float | None) -> float | None:
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)

        return {"id": self.id, "claim": self.claim, "paper": self.paper, "estimate": number(self.value),
                "ci95": None if self.ci95 is None else [number(x) for x in self.ci95],
                "null": None if self.null is None else {k: number(v) for k, v in self.null.items()},
                "config": self.config, "verdict": self.verdict, "reason": self.reason, "rule": self.rule,
                "measured_by": self.measured_by, "seed": self.seed, "place": self.place, "ours": self.ours}


JSON_FIELDS = ("id", "claim", "paper", "estimate", "ci95", "null", "config", "verdict", "reason", "rule", "measured_by")


def binomial_outcome(ours: str, successes: int, trials: int, threshold: float, what: str,
                     nulls: Mapping[str, Null] | None = None) -> Outcome:
    """A count out of `trials` judged as a share above `threshold`, with its exact binomial interval."""
    from circuitlab.stats import binomial_interval

    return judged(ours, binomial_interval(successes, trials), threshold, ">", nulls,
                  f"exact binomial interval of {successes} {what} of {trials}")


def decide(ours: str, estimate: Estimate, threshold: float | tuple[float, float], direction: str = ">",
           nulls: Mapping[str, Null] | None = None, note: str = "", why: str = "") -> Outcome:
    """`judged` when the estimate has an interval, else `no_interval` (saying `why`) on its point value."""
    if estimate.low is not None:
        return judged(ours, estimate, threshold, direction, nulls, note)
    passing = [f"{name} {_value(null):.4g}" for name, null in (nulls or {}).items()
               if _value(null) is not None and _side(_value(null), threshold, direction)]
    if passing:
        why += f"; a null meets the rule too, so it could not read reproduced (metric at ceiling: {', '.join(passing)})"
    return no_interval(ours, estimate.value, _side(estimate.value, threshold, direction), why, nulls)


def combine(ours: str, parts: Mapping[str, Outcome]) -> Outcome:
    """One outcome from several that must all hold: reproduced when every part is, contradicted when any part
    is, otherwise inconclusive (and, when no part has an interval, whether every point value meets its rule)."""
    items = list(parts.items())
    nulls = {f"{name}: {k}": v for name, part in items for k, v in (part.nulls or {}).items()} or None
    reason = "; ".join(f"{name}: {part.reason}" for name, part in items)
    for verdict in (CONTRADICTED, REPRODUCED):
        chosen = [part for _, part in items if part.verdict == verdict]
        if (verdict == CONTRADICTED and chosen) or (verdict == REPRODUCED and len(chosen) == len(items)):
            return Outcome(ours, verdict, chosen[0].value, reason, chosen[0].estimate, nulls)
    if all(part.estimate is None or part.estimate.low is None for _, part in items):
        meets = all("point value meets" in part.reason for _, part in items)
        return no_interval(ours, items[0][1].value, meets, f"none of {', '.join(name for name, _ in items)} has one",
                           nulls)
    return Outcome(ours, INCONCLUSIVE, items[0][1].value, reason, items[0][1].estimate, nulls)
