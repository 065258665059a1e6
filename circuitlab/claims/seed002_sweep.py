"""Seed 002's rows read from the pressure sweeps: the paper's configuration (results/legible-sweep-uncentred:
uncentred NC-FFN operands, the paper's lambdas) decides each claim; the same rows on circuitlab's centred
sweep (results/legible-sweep) are deviation rows of their own (`_centred`, config CENTRED).

Intervals: the results files keep per-head (attention, 24 heads) and per-layer (FFN operators, 6 layers) rates,
not per-token values, so a rate is bootstrapped over heads or layers (weighted by their operand channels): the
interval says how much the rate varies over the model's units, not over held-out text. Nulls: the sweep's
no-pressure model, the same architecture trained without any pressure; a pressure claim its null also meets is
"metric at ceiling".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from circuitlab.claims.context import Context
from circuitlab.claims.rows import NOT_MEASURED, Outcome, combine, decide, no_interval, percent_range
from circuitlab.errors import UserError
from circuitlab.stats import Estimate, bootstrap_ratio

SWEEP_MISSING = ("needs the pressure sweep's results (results/legible-sweep-uncentred/legibility_regimes.json of "
                 "`circuitlab report legibility`: no pressure, sparsity alone, crispness alone, both)")
REGIMES = ("none", "sparsity alone", "crispness alone", "both pressures")
PRESSURED = REGIMES[1:]
NULL = "no pressure"
CENTRED = "centred operands"
# seed 002's operand ON rates per regime (percent): Table 1 (attention, Boolean head-100), Table 5 (NC-FFN)
PAPER_ON = {"attention": {"sparsity alone": 2.2, "crispness alone": 12.1, "both pressures": 0.9},
            "ffn": {"none": 0.9, "crispness alone": 32.7, "both pressures": 3.5}}
# summary column -> unit column (by_head / by_layer hold fractions)
UNIT_COLUMN = {"on_percent": "on_fraction"}


def sweep_models(context: Context, field: str = "legible_sweep") -> dict[str, dict[str, Any]] | None:
    """The sweep's models by regime, or None when no sweep results are given."""
    record = context.result_file(field)
    if record is None:
        return None
    models = record.get("models")
    if not isinstance(models, list) or not all(isinstance(m, dict) and "regime" in m for m in models):
        raise UserError(f"{getattr(context, field)}: 'models' must be a list of models with a 'regime'")
    return {model["regime"]: model for model in models}


def operator_summary(model: dict[str, Any], surface: str) -> dict[str, Any]:
    """The operator family's summary row of one surface (Tables 1 and 5 leave the quantifiers out)."""
    for row in model.get("summary", []):
        if row.get("surface") == surface and row.get("family", "operator") == "operator":
            return row
    raise UserError(f"sweep model {model.get('name', '?')!r} has no {surface} operator summary")


def unit_rows(model: dict[str, Any], surface: str) -> list[dict[str, Any]]:
    """Attention heads (by_head), or the FFN operator rows of each layer (by_layer)."""
    if surface == "attention" and model.get("by_head"):
        return model["by_head"]
    return [row for row in model.get("by_layer", []) if row.get("surface") == surface
            and row.get("family", "operator") == "operator" and "n_operands" in row]


def unit_estimate(model: dict[str, Any], surface: str, column: str) -> Estimate:
    """A summary percentage with its bootstrap interval over heads or layers (operand-weighted); the summary's
    value alone when the file keeps no units."""
    units = unit_rows(model, surface)
    key = UNIT_COLUMN.get(column, column)
    if len(units) < 2 or not all(key in row for row in units):
        return Estimate(float(operator_summary(model, surface)[column]))
    weights = np.array([float(row["n_operands"]) for row in units])
    values = np.array([100 * float(row[key]) for row in units])
    return bootstrap_ratio(values * weights, weights)


def _units_note(model: dict[str, Any], surface: str) -> str:
    units = unit_rows(model, surface)
    return f"bootstrap over {len(units)} {'heads' if surface == 'attention' else 'layers'} of {model.get('name', '?')}"


def regime(context: Context, name: str, field: str) -> dict[str, Any] | Outcome:
    """The regime's model, or a "not measured" outcome saying what is missing."""
    models = sweep_models(context, field)
    if models is None:
        return Outcome("-", NOT_MEASURED, None, SWEEP_MISSING if field == "legible_sweep" else
                       "needs the centred sweep's results (results/legible-sweep/legibility_regimes.json)")
    if name not in models:
        return Outcome("-", NOT_MEASURED, None, f"the pressure sweep has no {name!r} model")
    return models[name]


def percent_row(context: Context, field: str, regime_name: str, surface: str, column: str, label: str,
                low: float, high: float | None = None, with_null: bool = True, direction: str = "within",
                extra_nulls: dict[str, float | None] | None = None) -> Outcome:
    """One percentage of one regime's model against the paper's range (+- PERCENT_TOLERANCE; with direction
    ">" or "<", against `low` itself), with the no-pressure model of the same sweep as its null."""
    model = regime(context, regime_name, field)
    if isinstance(model, Outcome):
        return model
    estimate = unit_estimate(model, surface, column)
    nulls = None
    if with_null and regime_name != "none":
        plain = regime(context, "none", field)
        nulls = {NULL: None if isinstance(plain, Outcome) else unit_estimate(plain, surface, column).value}
    if extra_nulls:
        nulls = {**(nulls or {}), **extra_nulls}
    ours = f"{model['name']}: {estimate.text(2 if abs(estimate.value) < 1 else 1)}% {label}"
    threshold = percent_range(low, high) if direction == "within" else low
    return decide(ours, estimate, threshold, direction, nulls, _units_note(model, surface),
                  "the results file keeps no per-unit rates")


def difference(a: dict[str, Any], b: dict[str, Any], surface: str, column: str) -> Estimate:
    """Rate of model a minus model b, each resampled over its own heads or layers."""
    ea, eb = unit_estimate(a, surface, column), unit_estimate(b, surface, column)
    if ea.low is None or eb.low is None:
        return Estimate(ea.value - eb.value)
    ua, ub = unit_rows(a, surface), unit_rows(b, surface)
    key = UNIT_COLUMN.get(column, column)
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(2000):
        ia, ib = rng.integers(0, len(ua), len(ua)), rng.integers(0, len(ub), len(ub))
        wa = np.array([ua[i]["n_operands"] for i in ia], float)
        wb = np.array([ub[i]["n_operands"] for i in ib], float)
        va = np.array([100 * ua[i][key] for i in ia], float)
        vb = np.array([100 * ub[i][key] for i in ib], float)
        draws.append((va * wa).sum() / wa.sum() - (vb * wb).sum() / wb.sum())
    low, high = np.percentile(draws, [2.5, 97.5])
    return Estimate(ea.value - eb.value, float(low), float(high))


def depth_difference(model: dict[str, Any]) -> tuple[list[float], Estimate]:
    """Attention SELECTIVE (percent) by layer, and deep half minus shallow half, resampling the heads of each."""
    heads = model.get("by_head") or []
    layers = sorted({row["layer"] for row in heads})
    rows = sorted((r for r in model.get("by_layer", []) if r.get("surface") == "attention"
                   and r.get("family", "operator") == "operator"), key=lambda r: r["layer"])
    if len(rows) < 2:
        raise UserError(f"sweep model {model.get('name', '?')!r} has fewer than 2 attention layers in 'by_layer'")
    selective = [round(100 * float(r["selective"]), 1) for r in rows]
    middle = len(selective) // 2
    value = sum(selective[middle:]) / (len(selective) - middle) - sum(selective[:middle]) / middle
    if len(layers) < 2:
        return selective, Estimate(value)
    cut = layers[len(layers) // 2]
    shallow = np.array([100 * r["selective"] for r in heads if r["layer"] < cut])
    deep = np.array([100 * r["selective"] for r in heads if r["layer"] >= cut])
    rng = np.random.default_rng(0)
    draws = [deep[rng.integers(0, deep.size, deep.size)].mean() - shallow[rng.integers(0, shallow.size, shallow.size)].mean()
             for _ in range(2000)]
    low, high = np.percentile(draws, [2.5, 97.5])
    return selective, Estimate(float(deep.mean() - shallow.mean()), float(low), float(high))


# the rows (each takes the sweep field: "legible_sweep" is the paper's configuration)

def both_collapse(context: Context, field: str) -> Outcome:
    parts = {"attention": percent_row(context, field, "both pressures", "attention", "on_percent", "ON", 0.2, 0.9),
             "ffn": percent_row(context, field, "both pressures", "ffn", "on_percent", "ON", 1.9, 3.5)}
    if any(part.verdict == NOT_MEASURED for part in parts.values()):
        return next(part for part in parts.values() if part.verdict == NOT_MEASURED)
    return combine("operands ON: " + "; ".join(f"{k} {v.ours}" for k, v in parts.items()), parts)


def plain_illegible(context: Context, field: str) -> Outcome:
    parts = {"op-crisp": percent_row(context, field, "none", "ffn", "atom_crisp", "FFN op-crisp", 50),
             "SELECTIVE": percent_row(context, field, "none", "ffn", "selective_operands",
                                      "of FFN operand channels SELECTIVE", 0)}
    if any(part.verdict == NOT_MEASURED for part in parts.values()):
        return next(part for part in parts.values() if part.verdict == NOT_MEASURED)
    return combine("; ".join(part.ours for part in parts.values()), parts)


def sparsity_inert(context: Context, field: str) -> Outcome:
    return percent_row(context, field, "sparsity alone", "ffn", "atom_crisp", "FFN op-crisp (sparsity alone; the "
                       "sweep's sparsity presses the operands, Table 5's the operator output)", 51)


def on_rates(context: Context, field: str, surface: str) -> Outcome:
    parts = {name: percent_row(context, field, name, surface, "on_percent", f"ON (paper {paper}%)", paper, with_null=False)
             for name, paper in PAPER_ON[surface].items()}
    missing = [part for part in parts.values() if part.verdict == NOT_MEASURED]
    if missing:
        return missing[0]
    return combine("; ".join(part.ours for part in parts.values()), parts)


def crispness_keeps_on(context: Context, field: str) -> Outcome:
    models = sweep_models(context, field)
    if models is None or "crispness alone" not in models or len(models) < 2:
        return regime(context, "crispness alone", field) if models is None or "crispness alone" not in models else \
            Outcome("-", NOT_MEASURED, None, "the pressure sweep needs the crispness-alone model and another regime")
    crisp, parts = models["crispness alone"], {}
    for surface in ("attention", "ffn"):
        for name, model in models.items():
            if name == "crispness alone":
                continue
            diff = difference(crisp, model, surface, "on_percent")
            parts[f"{surface} vs {name}"] = decide(f"{diff.text(1)} points", diff, 0.0, ">",
                                                   note="each model bootstrapped over its heads or layers",
                                                   why="the results file keeps no per-unit rates")
    ours = "crispness alone minus each other regime, operands ON: " + "; ".join(f"{k} {v.ours}" for k, v in parts.items())
    return combine(ours, parts)


def depth(context: Context, field: str) -> Outcome:
    models = sweep_models(context, field)
    if models is None:
        return regime(context, "none", field)
    pressured = [name for name in PRESSURED if name in models]
    if not pressured:
        return Outcome("-", NOT_MEASURED, None, "the pressure sweep has no pressured model")
    parts, texts = {}, []
    for name in pressured:
        selective, diff = depth_difference(models[name])
        texts.append(f"{name} {'/'.join(f'{v:.0f}' for v in selective)}% (deep minus shallow {diff.text(1)})")
        parts[name] = decide(texts[-1], diff, 0.0, ">", note="heads of each half resampled",
                             why="the results file keeps no per-head rates")
    return combine("attention SELECTIVE by layer: " + "; ".join(texts), parts)


def legible_share(context: Context, field: str) -> Outcome:
    model = regime(context, "crispness alone", field)
    if isinstance(model, Outcome):
        return model
    attribution = model.get("attribution") or {}
    if "share_mean" not in attribution:
        return Outcome("-", NOT_MEASURED, None, f"sweep model {model['name']!r} has no logit attribution")
    share = round(100 * float(attribution["share_mean"]), 1)
    parts = attribution.get("parts_mean", {})
    detail = ", ".join(f"{name.replace('_', ' ')} {100 * float(v):.1f}%" for name, v in parts.items())
    ours = (f"{model['name']}: {share:.1f}% legible, mean over {attribution.get('n_positions', '?')} held-out "
            f"positions ({detail})")
    return no_interval(ours, share, abs(share - 75) <= 15, "the results file keeps the mean over positions only")


# the end-to-end model's legibility (sec. 5.4, Table 5) read from the sweep's crispness-alone model

def e2e(surface: str, column: str, label: str, low: float, high: float | None = None) -> Callable[[Context, str], Outcome]:
    def measure(context: Context, field: str) -> Outcome:
        extra = None
        if column in ("selective", "selective_operands"):  # the fixed thresholds pass the pressure-free control too
            from circuitlab.claims.selectivity import CONTROL, control_selective

            extra = {CONTROL: control_selective(context)}
        return percent_row(context, field, "crispness alone", surface, column, label, low, high, extra_nulls=extra)
    return measure


def alive(context: Context, field: str) -> Outcome:
    parts = {surface: percent_row(context, field, "crispness alone", surface, "alive",
                                  f"of {surface} operand channels alive", 50, direction=">")
             for surface in ("ffn", "attention")}
    if any(part.verdict == NOT_MEASURED for part in parts.values()):
        return next(part for part in parts.values() if part.verdict == NOT_MEASURED)
    return combine("; ".join(part.ours for part in parts.values()), parts)


def e2e_depth(context: Context, field: str) -> Outcome:
    model = regime(context, "crispness alone", field)
    if isinstance(model, Outcome):
        return model
    selective, diff = depth_difference(model)
    ours = f"{model['name']}: SELECTIVE by layer {'/'.join(f'{v:.0f}' for v in selective)}% (deep minus shallow {diff.text(1)})"
    plain = regime(context, "none", field)
    nulls = None if isinstance(plain, Outcome) else {NULL: depth_difference(plain)[1].value}
    return decide(ours, diff, 0.0, ">", nulls, "heads of each half resampled", "the results file keeps no per-head rates")


def ffn_crisp_every_layer(context: Context, field: str) -> Outcome:
    model = regime(context, "crispness alone", field)
    if isinstance(model, Outcome):
        return model
    crisp = [round(100 * float(r["atom_crisp"]), 1) for r in sorted(unit_rows(model, "ffn"), key=lambda r: r["layer"])]
    if not crisp:
        return Outcome("-", NOT_MEASURED, None, f"sweep model {model['name']!r} has no FFN operator layers")
    plain = regime(context, "none", field)
    nulls = None if isinstance(plain, Outcome) else {
        NULL: min(round(100 * float(r["atom_crisp"]), 1) for r in unit_rows(plain, "ffn"))}
    ours = f"{model['name']}: operand crispness by layer " + ", ".join(f"{v:.1f}%" for v in crisp)
    return no_interval(ours, min(crisp), min(crisp) > 50, "the results file keeps one rate per layer", nulls)
