"""What a claim, its outcome and its row are, and the verdict rules every seed's rows follow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Context = Any  # circuitlab.claims.context.Context (which imports this module)

VERDICTS = ("reproduced", "not reproduced", "not measured")
REPRODUCED, NOT_REPRODUCED, NOT_MEASURED = VERDICTS

VERDICT_RULES = """\
- **Percentages** (seed 002's legibility columns): reproduced when ours lies in the paper's range (or value)
  widened by 5 percentage points on each side (`PERCENT_TOLERANCE`); the paper's own designs and seeds
  spread over 5-20 points.
- **Comparisons** (A > B, the strongest layer, a count of neighbours): reproduced when the comparison holds on
  the numbers as printed (rounded as shown).
- **Clustering** (seed 000's "semantic clusters"): reproduced when the share of neighbours in the category is
  at least 1.5x what the shuffled labels give (`CLUSTER_LIFT`).
- **Quality parity** (seed 002): reproduced when the perplexity is within 10% of the baseline's
  (`PARITY_PPL_RATIO`); the paper calls LAMBADA perplexity 115.7 against 109.4 (6% apart) parity.
- **Not measured**: the experiment needs a set-up the shipped models lack (its reason says which); the row
  fills in from `analyses/results/*.json` when a run writes its result there.

Every number is measured by the function named in its row, on the shipped models (d_model 256, 4 layers; 6 for
legible-stories; trained on children's stories) or read by it from the committed results of the iso-FLOP
ladder (results/ladder), seed 002's pressure sweep (results/legible-sweep: four 6-layer models, one per
regime) and the parity report (results/parity), not on the papers' corpora and scales: a verdict says whether
the claim's pattern holds on these models, not that the paper's experiment was repeated."""

PERCENT_TOLERANCE = 5.0
CLUSTER_LIFT = 1.5
PARITY_PPL_RATIO = 1.10

# the package that exports every measuring function: a row names its function by this import path
_PACKAGE = __name__.rpartition(".")[0]


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: `ours` as printed in the file, `value` the headline number (None if none)."""

    ours: str
    verdict: str
    value: float | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


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
    """One row of analyses/claims.md."""

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percent_verdict(ours: float, low: float, high: float | None = None) -> str:
    """Reproduced when `ours` (percent, rounded to 0.1 as printed) lies in [low, high] +- PERCENT_TOLERANCE."""
    high = low if high is None else high
    ours = round(ours, 1)
    return REPRODUCED if low - PERCENT_TOLERANCE <= ours <= high + PERCENT_TOLERANCE else NOT_REPRODUCED


def holds(condition: bool) -> str:
    return REPRODUCED if condition else NOT_REPRODUCED
