"""What the iso-FLOP ladder found: verdicts on seed 000's comparative claims, the markdown table and the
loss-vs-FLOPs figure, all computed from a results JSON of `circuitlab ladder` (circuitlab.training.ladder).

    from circuitlab.training.ladder_report import load_results, verdicts
    for verdict in verdicts(load_results("results/ladder/ladder_results.json")):
        print(verdict.claim, verdict.verdict, verdict.detail)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from circuitlab.atomic import atomic_write_text
from circuitlab.errors import UserError
from circuitlab.training.ladder import ALL_ARCHS, ARCH_LABELS, FIGURE_FILE, RESULTS_FILE, TABLE_FILE


def load_results(path: str | Path) -> dict[str, Any]:
    """A results JSON written by `circuitlab ladder` (the file, or the folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"cannot read ladder results {path}: {error}") from error
    if not isinstance(results, dict) or not isinstance(results.get("runs"), list):
        raise UserError(f"{path} is not a ladder results file (no 'runs' list)")
    return results


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


# --- verdicts ---------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    claim: str  # seed 000's claim, in a few words
    verdict: str  # "supported" | "contradicted" | "mixed" | "within noise" | "not measured"
    detail: str  # the numbers behind it
    # per budget: {"budget", "scale", "gap" (ours minus the best other, nats), "low", "high" (its 95% interval
    # over seeds, None with one seed), "ours", "ours_size", "other", "other_size"}
    effects: list[dict[str, Any]] = field(default_factory=list)


N_RESAMPLES = 2000


def _loss(run: dict[str, Any], metric: str) -> float | None:
    value = run.get(metric)
    return None if value is None or not math.isfinite(value) else float(value)


def default_metric(results: dict[str, Any]) -> str:
    """natural_loss when the sweep had the natural held-out stories, else generated_loss."""
    return "natural_loss" if any(_loss(run, "natural_loss") is not None for run in results["runs"]) else "generated_loss"


def main_lr(results: dict[str, Any]) -> float | None:
    """The sweep's peak learning rate (runs at other rates are its learning-rate grid)."""
    return results.get("settings", {}).get("lr")


def _main_runs(results: dict[str, Any], metric: str) -> list[tuple[dict[str, Any], float]]:
    """(run, loss) of every run at the main learning rate that finished its whole FLOP budget (runs stopped by
    the time limit spent less than the budget: they are left out of iso-FLOP comparisons)."""
    lr = main_lr(results)
    found = []
    for run in results["runs"]:
        value = _loss(run, metric)
        if (run.get("status") == "done" and run.get("stopped") == "completed" and value is not None
                and (lr is None or run.get("lr", lr) == lr)):
            found.append((run, value))
    return found


def cells(results: dict[str, Any], metric: str | None = None) -> dict[tuple[str, int, int], list[float]]:
    """{(arch, budget scale, model size): [loss of each seed]} at the main learning rate."""
    metric = metric or default_metric(results)
    table: dict[tuple[str, int, int], list[float]] = {}
    for run, value in _main_runs(results, metric):
        table.setdefault((run["arch"], run["scale"], run.get("size", run["scale"])), []).append(value)
    return table


def losses_by(results: dict[str, Any], metric: str | None = None) -> dict[tuple[str, int], list[float]]:
    """{(arch, budget scale): [loss of each seed at the design's best size for that budget]} (best: the lowest
    mean over seeds; with one size per budget, that size)."""
    table: dict[tuple[str, int], list[float]] = {}
    for (arch, scale, size), values in cells(results, metric).items():
        best = table.get((arch, scale))
        if best is None or statistics.mean(values) < statistics.mean(best):
            table[(arch, scale)] = values
    return table


def seed_spread(results: dict[str, Any], metric: str | None = None) -> dict[str, float]:
    """Per design, the largest standard deviation of the loss over seeds among its cells at the smallest budget
    (designs with 2+ seeds)."""
    table = cells(results, metric)
    if not table:
        return {}
    smallest = min(scale for _, scale, _ in table)
    spread: dict[str, float] = {}
    for (arch, scale, _), values in table.items():
        if scale == smallest and len(values) >= 2:
            spread[arch] = max(spread.get(arch, 0.0), statistics.stdev(values))
    return spread


def _best_size(cell: dict[int, list[float]]) -> tuple[float, int]:
    """(mean loss over seeds, size) of a design's best size at one budget; `cell`: {size: [loss of each seed]}."""
    size = min(cell, key=lambda s: statistics.mean(cell[s]))
    return statistics.mean(cell[size]), size


def _gap_interval(mine: dict[int, list[float]], others: dict[str, dict[int, list[float]]],
                  seed: int) -> tuple[float | None, float | None]:
    """95% percentile interval of (ours at its best size) minus (the best other design at its best size),
    resampling each cell's seeds with replacement (a cell of one seed stays at its value); None when the best
    size of ours or of the best other design has a single seed."""
    best_other = min(others, key=lambda a: _best_size(others[a])[0])
    for cell in (mine, others[best_other]):
        if len(cell[_best_size(cell)[1]]) < 2:
            return None, None
    rng = np.random.default_rng(seed)

    def resampled(cell: dict[int, list[float]]) -> np.ndarray:  # [N_RESAMPLES] best-size loss of each resample
        means = [np.asarray(values)[rng.integers(0, len(values), (N_RESAMPLES, len(values)))].mean(axis=1)
                 for values in cell.values()]
        return np.min(means, axis=0)

    ours = resampled(mine)
    other = np.min([resampled(cell) for cell in others.values()], axis=0)
    low, high = np.percentile(ours - other, [2.5, 97.5])
    return float(low), float(high)


def tuned_gap(results: dict[str, Any], ours: str, others: list[str], metric: str) -> dict[str, Any] | None:
    """At the smallest budget, with the learning-rate grid: ours minus the best of `others`, each design at its
    best (size, learning rate) cell (the main rate's cells are seed means, the grid's one seed), and the grid's
    rates each design lacks. None without a grid."""
    grid = [row for row in lr_grid(results, metric) if row["arch"] in (ours, *others)]
    if not grid:
        return None
    rates = sorted({rate for row in grid for rate in row["losses"]})
    best: dict[str, float] = {}
    lacking: dict[str, list[float]] = {}
    for row in grid:
        best[row["arch"]] = min(best.get(row["arch"], math.inf), min(row["losses"].values()))
        lacking.setdefault(row["arch"], [])
    for arch in lacking:
        have = {rate for row in grid if row["arch"] == arch for rate in row["losses"]}
        lacking[arch] = [rate for rate in rates if rate not in have]
    present = [a for a in others if a in best]
    if ours not in best or not present:
        return None
    other = min(present, key=best.get)
    return dict(gap=best[ours] - best[other], other=other, lacking={a: r for a, r in lacking.items() if r})


def _compare(results: dict[str, Any], claim: str, ours: str, others: list[str], expect_lower: bool,
             metric: str) -> Verdict:
    """Does `ours` reach a lower (expect_lower) or not-lower loss than the best of `others` at each budget, each
    design at its best size? With 2+ seeds per cell the gap's 95% interval over seeds decides (an interval that
    holds 0 is a tie); with one seed, a gap within twice the largest seed standard deviation at the smallest
    budget is a tie."""
    table = cells(results, metric)
    spread = seed_spread(results, metric)
    noise = 2 * max(spread.values()) if spread else 0.0
    by_budget: dict[int, dict[str, dict[int, list[float]]]] = {}
    for (arch, scale, size), values in table.items():
        by_budget.setdefault(scale, {}).setdefault(arch, {})[size] = values
    scales = sorted(scale for scale, archs in by_budget.items() if ours in archs and any(a in archs for a in others))
    if not scales:
        return Verdict(claim, "not measured", f"no finished runs of {ours} and of {' / '.join(others)} at a common budget")
    budgets = {run["scale"]: float(run["budget_flops"]) for run in results["runs"] if "budget_flops" in run}
    effects = []
    for scale in scales:
        archs = by_budget[scale]
        mine_value, mine_size = _best_size(archs[ours])
        best_arch = min((a for a in others if a in archs), key=lambda a: _best_size(archs[a])[0])
        other_value, other_size = _best_size(archs[best_arch])
        low, high = _gap_interval(archs[ours], {a: archs[a] for a in others if a in archs}, seed=scale)
        effects.append(dict(budget=budgets.get(scale), scale=scale, gap=mine_value - other_value, low=low, high=high,
                            ours=ours, ours_size=mine_size, other=best_arch, other_size=other_size))
    with_interval = all(e["low"] is not None for e in effects)
    if with_interval:
        lower = [e["high"] < 0 for e in effects]
        higher = [e["low"] > 0 for e in effects]
    else:
        lower = [e["gap"] < -noise for e in effects]
        higher = [e["gap"] > noise for e in effects]
    sized = any(len(cell) > 1 for archs in by_budget.values() for cell in archs.values())

    def where(e: dict[str, Any]) -> str:
        return f"{e['budget']:.2g} FLOPs" if e["budget"] is not None else f"scale {e['scale']}"

    def gap_text(e: dict[str, Any]) -> str:
        sizes = f" (best sizes {e['ours_size']} and {e['other_size']})" if sized else ""
        interval = f" [{e['low']:+.3f}, {e['high']:+.3f}]" if with_interval else ""
        return f"{where(e)}: {ours} {e['gap']:+.3f}{interval} nats vs {e['other']}{sizes}"

    detail = "; ".join(gap_text(e) for e in effects)
    if with_interval:
        detail += f" ({metric.replace('_', ' ')}, iso-FLOP per budget; 95% intervals over seeds, an interval holding 0 is a tie)"
    else:
        detail += f" ({metric.replace('_', ' ')}, iso-FLOP per budget; ties within {noise:.3f} nats = 2 x the largest seed sd)"
    if expect_lower:
        verdict = ("supported" if all(lower) else "contradicted" if all(higher) else
                   "within noise" if not any(lower) and not any(higher) else "mixed")
    else:  # the claim: `ours` does not beat the others (e.g. PEER's router does not help)
        verdict = ("supported" if not any(lower) else "contradicted" if all(lower) else "mixed")
    tuned = tuned_gap(results, ours, others, metric)
    if tuned is not None:
        # the learning-rate grid: does the comparison survive each design at its best rate of the grid?
        detail += (f"; at the smallest budget with each design at its best learning rate and size of the grid: {ours} "
                   f"{tuned['gap']:+.3f} nats vs {tuned['other']}")
        if tuned["lacking"]:
            detail += " (the grid lacks " + ", ".join(
                f"{a} at {', '.join(f'{r:g}' for r in rates)}" for a, rates in tuned["lacking"].items()) + ")"
        # a reversal beyond the widest interval of the main comparison (or the seed noise without intervals)
        margin = max((e["high"] - e["low"] for e in effects), default=noise) if with_interval else noise
        reverses = tuned["gap"] > margin if expect_lower else tuned["gap"] < -margin
        if verdict == "supported" and reverses:
            verdict = "mixed"
            detail += "; tuned, the order reverses, so the main rate's verdict does not stand"
    return Verdict(claim, verdict, detail, effects)


def verdicts(results: dict[str, Any], metric: str | None = None) -> list[Verdict]:
    """Seed 000's comparative claims checked against the ladder's results, on the natural held-out loss when the
    sweep had it (else the generated one), in this order: sgatlin against the dense designs, the whole PEER
    layer against sgatlin, sgatlin against sgatlin + GELU, sgatlin + PEER router against sgatlin, and (when
    the sweep planned MoE runs) sgatlin against the MoE, "not measured" while none has completed."""
    metric = metric or default_metric(results)
    found = {arch for arch, _ in losses_by(results, metric)}
    dense = [arch for arch in ("mlp", "swiglu") if arch in found]
    out = [_compare(results, "sgatlin reaches a lower loss than dense FFNs (GELU MLP, SwiGLU) at equal training FLOPs",
                    "sgatlin", dense or ["mlp", "swiglu"], True, metric)]
    peer = _compare(results, "the whole PEER layer does not beat sgatlin at equal FLOPs (seed 000 swaps only the "
                    "router: the sgatlin + PEER router ablation below)", "peer", ["sgatlin"], False, metric)
    out.append(peer)
    claim = "adding a nonlinearity to sgatlin's neurons makes it worse (sgatlin vs sgatlin + GELU, same gates)"
    if "sgatlin-gelu" in found:
        out.append(_compare(results, claim, "sgatlin", ["sgatlin-gelu"], True, metric))
    else:
        nonlinear = Verdict(
            claim, "not measured",
            "the sweep ran no sgatlin + GELU ablation; the designs with nonlinear experts (PEER, MoE) also "
            "differ in routing, so they do not isolate the nonlinearity")
        if "peer" in found and "sgatlin" in found:
            indirect = _compare(results, "", "peer", ["sgatlin"], False, metric)
            nonlinear.detail += f"; indirect evidence, PEER (GELU experts) vs sgatlin (linear): {indirect.detail}"
        out.append(nonlinear)
    claim = "PEER's router in place of sgatlin's gating network does not beat it (seed 000's router swap)"
    if "sgatlin-peer-router" in found:
        out.append(_compare(results, claim, "sgatlin-peer-router", ["sgatlin"], False, metric))
    else:
        out.append(Verdict(claim, "not measured", "the sweep ran no sgatlin + PEER router ablation"))
    claim = "sgatlin reaches a lower loss than the MoE FFN at equal training FLOPs"
    if "moe" in found:
        out.append(_compare(results, claim, "sgatlin", ["moe"], True, metric))
    elif any(run["arch"] == "moe" for run in results["runs"]):
        planned = [row for row in coverage(results) if row["arch"] == "moe"]
        out.append(Verdict(claim, "not measured", "no MoE run completed its budget (" + "; ".join(
            f"{row['budget']:.2g} FLOPs: {row['planned']} planned, {row['stopped_early']} stopped early, "
            f"{row['missing']} missing" for row in planned) + ")"))
    return out


def lr_grid(results: dict[str, Any], metric: str | None = None) -> list[dict[str, Any]]:
    """The learning-rate grid at the smallest budget: per design and size, the loss at each rate (the main rate's
    the mean over seeds) and the best rate."""
    metric = metric or default_metric(results)
    lr = main_lr(results)
    runs = [run for run in results["runs"] if run.get("status") == "done" and run.get("stopped") == "completed"
            and _loss(run, metric) is not None]
    rates = sorted({run.get("lr", lr) for run in runs})
    if lr is None or len(rates) < 2:
        return []
    smallest = min(run["scale"] for run in runs)
    rows = []
    for arch in ALL_ARCHS:
        for size in sorted({run.get("size", run["scale"]) for run in runs if run["arch"] == arch}):
            mine = [run for run in runs if run["arch"] == arch and run["scale"] == smallest
                    and run.get("size", run["scale"]) == size]
            losses = {}
            for rate in rates:
                values = [_loss(run, metric) for run in mine if run.get("lr", lr) == rate]
                if values:
                    losses[rate] = statistics.mean(values)
            if len(losses) >= 2:
                rows.append(dict(arch=arch, size=size, losses=losses, best=min(losses, key=losses.get)))
    return rows


# --- outputs -------------------------------------------------------------------------------------------------


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    atomic_write_text(out / RESULTS_FILE, json.dumps(results, indent=1) + "\n")
    atomic_write_text(out / TABLE_FILE, markdown_table(results))
    try:
        from circuitlab.figures import write_figure

        write_figure(loss_vs_flops_figure(results), out / FIGURE_FILE)
    except ModuleNotFoundError as error:  # plotly is optional for the sweep itself
        print(f"ladder: no figure ({error})", file=sys.stderr)


def coverage(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per design and budget scale: how many runs the plan holds, and how many of them completed their budget,
    stopped before it (the time limit; kept, but entering no verdict) or are missing (never trained, or killed)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for run in results["runs"]:
        row = rows.setdefault((run["arch"], run["scale"]), dict(
            arch=run["arch"], scale=run["scale"], budget=run["budget_flops"], planned=0, completed=0, stopped_early=0,
            missing=0))
        row["planned"] += 1
        if run["status"] == "missing":
            row["missing"] += 1
        elif run.get("stopped") == "completed":
            row["completed"] += 1
        else:
            row["stopped_early"] += 1
    return [rows[key] for key in sorted(rows, key=lambda key: (key[1], key[0]))]


def coverage_markdown(results: dict[str, Any]) -> list[str]:
    rows = coverage(results)
    total = {name: sum(row[name] for row in rows) for name in ("planned", "completed", "stopped_early", "missing")}
    lines = [(f"Runs: {total['completed']} of {total['planned']} planned completed their budget, "
              f"{total['stopped_early']} stopped before it (no verdict reads them), {total['missing']} missing."),
             "", "| design | budget | planned | completed | stopped early | missing |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {ARCH_LABELS.get(row['arch'], row['arch'])} | {row['budget']:.2g} | {row['planned']} | "
              f"{row['completed']} | {row['stopped_early']} | {row['missing']} |" for row in rows]
    return lines + [""]


def markdown_table(results: dict[str, Any]) -> str:
    lines = coverage_markdown(results) + [
        ("| design | budget scale | size | d_model x layers | FFN width | parameters | active / token | "
         "train FLOPs / token | budget | tokens | natural passes | lr | seed | natural loss | generated loss | stopped |"),
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lr = main_lr(results)
    for run in sorted(results["runs"], key=lambda r: (r["scale"], r.get("size", r["scale"]), r["arch"], r.get("lr", lr) or 0, r["seed"])):
        flops = run["flops"]
        passes = run.get("natural_passes")
        lines.append(
            f"| {ARCH_LABELS.get(run['arch'], run['arch'])} | {run['scale']} | {run.get('size', run['scale'])} | "
            f"{run['d_model']} x {run['n_layers']} | "
            f"{run['d_ffw']:,} | {flops['total_parameters'] / 1e6:.1f}M | {flops['active_parameters'] / 1e6:.2f}M | "
            f"{flops['training_per_token'] / 1e6:.1f}M | {run['budget_flops']:.2g} | "
            f"{run.get('tokens', 0) / 1e6:.2f}M | {'n/a' if passes is None else f'{passes:.2f}'} | "
            f"{run.get('lr', lr) or 'n/a':g} | {run['seed']} | {_fmt(run.get('natural_loss'))} | "
            f"{_fmt(run.get('generated_loss'))} | {run.get('stopped', run['status'])} |"
        )
    spread = seed_spread(results)
    if spread:
        lines += ["", f"Largest seed standard deviation of the {default_metric(results).replace('_', ' ')} among each design's "
                  "runs at the smallest budget: " + ", ".join(
                      f"{ARCH_LABELS.get(arch, arch)} {value:.3f}" for arch, value in sorted(spread.items())) + "."]
    grid = lr_grid(results)
    if grid:
        rates = sorted({rate for row in grid for rate in row["losses"]})
        lines += ["", (f"Learning-rate grid at the smallest budget ({default_metric(results).replace('_', ' ')}; the "
                       f"main rate {lr:g} is the mean over seeds, the others one seed):"), "",
                  "| design | size | " + " | ".join(f"lr {rate:g}" for rate in rates) + " | best |",
                  "|---|---:|" + "---:|" * len(rates) + "---|"]
        lines += [f"| {ARCH_LABELS.get(row['arch'], row['arch'])} | {row['size']} | " + " | ".join(
            _fmt(row["losses"].get(rate)) for rate in rates) + f" | {row['best']:g} |" for row in grid]
    lines += ["", "| claim (seed 000) | verdict | numbers |", "|---|---|---|"]
    lines += [f"| {v['claim']} | {v['verdict']} | {v['detail']} |" for v in results.get("verdicts", [])]
    return "\n".join(lines) + "\n"


def loss_vs_flops_figure(results: dict[str, Any]) -> Any:
    """Seed 000 Figure 3's axes for this ladder: held-out loss against training FLOPs, one line per design
    through its budgets (at each, the mean over seeds of its best size), every run as a marker (its size and
    seed in the hover; runs of the learning-rate grid left out); natural and generated held-out sets."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.figures import color_map

    lr = main_lr(results)
    runs = [run for run in results["runs"] if run.get("status") == "done" and (lr is None or run.get("lr", lr) == lr)]
    archs = [arch for arch in ALL_ARCHS if any(run["arch"] == arch for run in runs)]
    colors = color_map(ALL_ARCHS)  # the same colour for a design in every ladder figure
    figure = make_subplots(rows=1, cols=2, subplot_titles=("natural held-out stories", "generated held-out stories"))
    for col, metric in ((1, "natural_loss"), (2, "generated_loss")):
        best = losses_by(results, metric)
        for arch in archs:
            mine = [run for run in runs if run["arch"] == arch and _loss(run, metric) is not None]
            scales = sorted(scale for a, scale in best if a == arch)
            budgets = [float(next(r["budget_flops"] for r in mine if r["scale"] == s)) for s in scales]
            label = ARCH_LABELS.get(arch, arch)
            figure.add_trace(go.Scatter(
                x=budgets, y=[statistics.mean(best[(arch, s)]) for s in scales], mode="lines", name=label,
                legendgroup=arch, showlegend=col == 1, line=dict(color=colors[arch]), hoverinfo="skip"), row=1, col=col)
            figure.add_trace(go.Scatter(
                x=[r["training_flops"] for r in mine], y=[_loss(r, metric) for r in mine], mode="markers",
                name=label, legendgroup=arch, showlegend=col == 1 and not scales,  # runs cut short: no line
                marker=dict(color=colors[arch], size=[5 + 2 * r.get("size", r["scale"]) for r in mine], opacity=0.7),
                text=[f"{label}, size {r.get('size', r['scale'])} ({r['d_model']} x {r['n_layers']}), seed {r['seed']}<br>"
                      f"{r['tokens'] / 1e6:.2f}M tokens, {r['flops']['active_parameters'] / 1e6:.2f}M active params"
                      for r in mine],
                hovertemplate="%{text}<br>%{x:.3g} FLOPs, loss %{y:.3f}<extra></extra>"), row=1, col=col)
        figure.update_xaxes(type="log", title_text="training FLOPs", row=1, col=col)
        figure.update_yaxes(title_text="held-out loss (nats / token)", row=1, col=col)
    figure.update_layout(title="Iso-FLOP ladder: loss against training FLOPs (lines: each design's best size)",
                         template="plotly_white", legend_title_text="FFN (marker size: model size)")
    return figure


def isoflop_curves_figure(results: dict[str, Any], metric: str | None = None) -> Any:
    """Seed 000 Figure 3's own axes: per budget, held-out loss against active parameters, one curve per design
    through its sizes (mean over seeds, bars from the lowest to the highest seed); main learning rate only."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.figures import color_map

    metric = metric or default_metric(results)
    table = cells(results, metric)
    budgets = sorted({scale for _, scale, _ in table})
    flops = {run["scale"]: float(run["budget_flops"]) for run in results["runs"] if "budget_flops" in run}
    active = {(run["arch"], run.get("size", run["scale"])): run["flops"]["active_parameters"]
              for run in results["runs"] if "flops" in run}
    archs = [arch for arch in ALL_ARCHS if any(a == arch for a, _, _ in table)]
    colors = color_map(ALL_ARCHS)  # the same colour for a design in every ladder figure
    titles = [f"{flops[b]:.2g} training FLOPs" if b in flops else f"budget scale {b}" for b in budgets]
    figure = make_subplots(rows=1, cols=max(len(budgets), 1), subplot_titles=titles or ["no finished runs"], shared_yaxes=True)
    shown: set[str] = set()
    for col, budget in enumerate(budgets, start=1):
        for arch in archs:
            sizes = sorted(size for a, b, size in table if a == arch and b == budget)
            if not sizes:
                continue
            first = arch not in shown
            shown.add(arch)
            values = [table[(arch, budget, size)] for size in sizes]
            means = [statistics.mean(v) for v in values]
            label = ARCH_LABELS.get(arch, arch)
            figure.add_trace(go.Scatter(
                x=[active.get((arch, size), size) for size in sizes], y=means, mode="lines+markers", name=label,
                legendgroup=arch, showlegend=first, line=dict(color=colors[arch]),
                error_y=dict(type="data", symmetric=False, array=[max(v) - m for v, m in zip(values, means)],
                             arrayminus=[m - min(v) for v, m in zip(values, means)]),
                text=[f"{label}, size {size}, {len(v)} seed(s)" for size, v in zip(sizes, values)],
                hovertemplate="%{text}<br>%{x:.3g} active parameters, loss %{y:.3f}<extra></extra>"), row=1, col=col)
        figure.update_xaxes(type="log", title_text="active parameters", row=1, col=col)
    figure.update_yaxes(title_text=f"{metric.replace('_', ' ')} (nats / token)", row=1, col=1)
    figure.update_layout(title="Iso-FLOP curves: loss against model size at each budget (bars: seed range)",
                         template="plotly_white", legend_title_text="FFN")
    return figure
