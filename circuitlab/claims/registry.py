"""The registry of every seed's claims, in the order of analyses/claims.md, and the measuring of its rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import circuitlab.claims.seed000 as seed000
import circuitlab.claims.seed000_natural as seed000_natural
import circuitlab.claims.seed002 as seed002
import circuitlab.claims.seed002_null as seed002_null
import circuitlab.claims.seed003 as seed003
from circuitlab.claims.context import Context
from circuitlab.claims.rows import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, REPRODUCED, Claim, ClaimRow
from circuitlab.errors import UserError

CLAIMS: tuple[Claim, ...] = seed000.CLAIMS + seed000_natural.natural_claims(seed000.CLAIMS) + seed002.CLAIMS + seed002_null.CLAIMS + seed003.CLAIMS


def claim_by_id(claim_id: str) -> Claim:
    for claim in CLAIMS:
        if claim.id == claim_id:
            return claim
    raise UserError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


def measure_claim(claim: Claim, context: Context, results: dict[str, dict[str, Any]] | None = None) -> ClaimRow:
    """One row: the claim's own measurement, else a results-file entry, else "not measured" with its reason."""
    results = context.results() if results is None else results
    base = dict(id=claim.id, seed=claim.seed, place=claim.place, claim=claim.claim, paper=claim.paper, rule=claim.rule,
                config=claim.config)
    entry = results.get(claim.id)
    if claim.measure is not None:
        outcome = claim.measure(context)
        if outcome.verdict != NOT_MEASURED or entry is None:
            estimate = outcome.estimate
            return ClaimRow(**base, ours=outcome.ours, verdict=outcome.verdict, reason=outcome.reason,
                            measured_by=claim.measured_by, value=outcome.value,
                            ci95=None if estimate is None else estimate.ci95, null=outcome.nulls)
    if entry is not None:
        value, ci95, verdict = entry.get("value"), entry.get("ci95"), entry["verdict"]
        reason = str(entry.get("reason", ""))
        if verdict in (REPRODUCED, CONTRADICTED) and not (isinstance(ci95, list) and len(ci95) == 2):
            verdict, reason = INCONCLUSIVE, f"the results file says {entry['verdict']!r} without a 95% interval (ci95)"
        return ClaimRow(**base, ours=str(entry["ours"]), verdict=verdict, reason=reason,
                        measured_by=f"{entry.get('measured_by', '')} (analyses/results/{entry['source']})".strip(),
                        value=float(value) if isinstance(value, (int, float)) else None,
                        ci95=[float(x) for x in ci95] if isinstance(ci95, list) and len(ci95) == 2 else None,
                        null=entry.get("null") if isinstance(entry.get("null"), dict) else None)
    return ClaimRow(**base, ours="-", verdict=NOT_MEASURED, reason=claim.blocked, measured_by="")


def measure_claims(context: Context, ids: Iterable[str] | None = None) -> list[ClaimRow]:
    """Rows of every claim (or of `ids`), in registry order, with a progress bar."""
    from tqdm.auto import tqdm

    wanted = None if ids is None else set(ids)
    chosen = [claim for claim in CLAIMS if wanted is None or claim.id in wanted]
    if wanted is not None and len(chosen) != len(wanted):
        unknown = wanted - {claim.id for claim in chosen}
        raise UserError(f"unknown claim ids: {', '.join(sorted(unknown))}")
    results = context.results()
    return [measure_claim(claim, context, results) for claim in tqdm(chosen, desc="claims", disable=not context.progress)]
