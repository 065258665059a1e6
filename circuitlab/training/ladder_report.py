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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _loss(run: dict[str, Any], metric: str) -> float | None:
    value = run.get(metric)
    return None if value is None or not math.isfinite(value) else float(value)


def default_metric(results: dict[str, Any]) -> str:
    """natural_loss when the sweep had the natural held-out stories, else generated_loss."""
    return "natural_loss" if any(_loss(run, "natural_loss") is not None for run in results["runs"]) else "generated_loss"


def losses_by(results: dict[str, Any], metric: str | None = None) -> dict[tuple[str, int], list[float]]:
    """{(arch, scale): [loss of each seed that finished its whole FLOP budget]} (runs stopped by the time
    limit spent less than the budget: they are left out of iso-FLOP comparisons)."""
    metric = metric or default_metric(results)
    table: dict[tuple[str, int], list[float]] = {}
    for run in results["runs"]:
        value = _loss(run, metric)
        if run.get("status") == "done" and run.get("stopped") == "completed" and value is not None:
            table.setdefault((run["arch"], run["scale"]), []).append(value)
    return table


def seed_spread(results: dict[str, Any], metric: str | None = None) -> dict[str, float]:
    """Per design, the standard deviation of the loss over seeds at the smallest scale (designs with 2+ seeds)."""
    table = losses_by(results, metric)
    if not table:
        return {}
    smallest = min(scale for _, scale in table)
    return {arch: statistics.stdev(values) for (arch, scale), values in table.items()
            if scale == smallest and len(values) >= 2}


def _compare(results: dict[str, Any], claim: str, ours: str, others: list[str], expect_lower: bool,
             metric: str) -> Verdict:
    """Does `ours` reach a lower (expect_lower) or not-lower loss than the best of `others` at each scale?
    A gap smaller than twice the largest seed standard deviation at the smallest scale counts as a tie."""
    table = losses_by(results, metric)
    spread = seed_spread(results, metric)
    noise = 2 * max(spread.values()) if spread else 0.0
    scales = sorted({scale for arch, scale in table if arch == ours}
                    & {scale for arch, scale in table if arch in others})
    if not scales:
        return Verdict(claim, "not measured", f"no finished runs of {ours} and of {' / '.join(others)} at a common scale")
    gaps = []
    for scale in scales:
        mine = statistics.mean(table[(ours, scale)])
        best_arch = min((arch for arch in others if (arch, scale) in table),
                        key=lambda arch: statistics.mean(table[(arch, scale)]))
        gaps.append((scale, mine - statistics.mean(table[(best_arch, scale)]), best_arch))
    lower = [gap < -noise for _, gap, _ in gaps]
    higher = [gap > noise for _, gap, _ in gaps]
    detail = "; ".join(f"scale {s}: {ours} {'-' if g < 0 else '+'}{abs(g):.3f} nats vs {a}" for s, g, a in gaps)
    detail += f" ({metric.replace('_', ' ')}, iso-FLOP per scale; ties within {noise:.3f} nats = 2 x the largest seed sd)"
    if expect_lower:
        verdict = ("supported" if all(lower) else "contradicted" if all(higher) else
                   "within noise" if not any(lower) and not any(higher) else "mixed")
    else:  # the claim: `ours` does not beat the others (e.g. PEER's router does not help)
        verdict = ("supported" if not any(lower) else "contradicted" if all(lower) else "mixed")
    return Verdict(claim, verdict, detail)


def verdicts(results: dict[str, Any], metric: str | None = None) -> list[Verdict]:
    """Seed 000's comparative claims checked against the ladder's results (one Verdict each), on the natural
    held-out loss when the sweep had it (else the generated one)."""
    metric = metric or default_metric(results)
    found = {arch for arch, _ in losses_by(results, metric)}
    dense = [arch for arch in ("mlp", "swiglu") if arch in found]
    out = [_compare(results, "sgatlin reaches a lower loss than dense FFNs (GELU MLP, SwiGLU) at equal training FLOPs",
                    "sgatlin", dense or ["mlp", "swiglu"], True, metric)]
    peer = _compare(results, "PEER's router does not beat sgatlin's gating (here: the whole PEER layer vs sgatlin at "
                    "equal FLOPs, not seed 000's single router swap)", "peer", ["sgatlin"], False, metric)
    out.append(peer)
    claim = "adding a nonlinearity to sgatlin's neurons makes it worse (sgatlin vs sgatlin + GELU, same gates)"
    if "sgatlin-gelu" in found:
        out.append(_compare(results, claim, "sgatlin", ["sgatlin-gelu"], True, metric))
        return out
    nonlinear = Verdict(
        claim, "not measured",
        "the sweep ran no sgatlin + GELU ablation; the designs with nonlinear experts (PEER, MoE) also "
        "differ in routing, so they do not isolate the nonlinearity")
    if "peer" in found and "sgatlin" in found:
        indirect = _compare(results, "", "peer", ["sgatlin"], False, metric)
        nonlinear.detail += f"; indirect evidence, PEER (GELU experts) vs sgatlin (linear): {indirect.detail}"
    out.append(nonlinear)
    return out


# --- outputs -------------------------------------------------------------------------------------------------


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    atomic_write_text(out / RESULTS_FILE, json.dumps(results, indent=1) + "\n")
    atomic_write_text(out / TABLE_FILE, markdown_table(results))
    try:
        from circuitlab.figures import write_figure

        write_figure(loss_vs_flops_figure(results), out / FIGURE_FILE)
    except ModuleNotFoundError as error:  # plotly is optional for the sweep itself
        print(f"ladder: no figure ({error})", file=sys.stderr)


def markdown_table(results: dict[str, Any]) -> str:
    lines = [
        "| design | scale | d_model x layers | FFN width | parameters | active / token | train FLOPs / token | "
        "budget | tokens | seed | natural loss | generated loss | stopped |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in sorted(results["runs"], key=lambda r: (r["scale"], r["arch"], r["seed"])):
        flops = run["flops"]
        lines.append(
            f"| {ARCH_LABELS.get(run['arch'], run['arch'])} | {run['scale']} | {run['d_model']} x {run['n_layers']} | "
            f"{run['d_ffw']:,} | {flops['total_parameters'] / 1e6:.1f}M | {flops['active_parameters'] / 1e6:.2f}M | "
            f"{flops['training_per_token'] / 1e6:.1f}M | {run['budget_flops']:.2g} | "
            f"{run.get('tokens', 0) / 1e6:.2f}M | {run['seed']} | {_fmt(run.get('natural_loss'))} | "
            f"{_fmt(run.get('generated_loss'))} | {run.get('stopped', run['status'])} |"
        )
    spread = seed_spread(results)
    if spread:
        lines += ["", f"Seed standard deviation of the {default_metric(results).replace('_', ' ')} at the smallest scale: " + ", ".join(
            f"{ARCH_LABELS.get(arch, arch)} {value:.3f}" for arch, value in sorted(spread.items())) + "."]
    lines += ["", "| claim (seed 000) | verdict | numbers |", "|---|---|---|"]
    lines += [f"| {v['claim']} | {v['verdict']} | {v['detail']} |" for v in results.get("verdicts", [])]
    return "\n".join(lines) + "\n"


def loss_vs_flops_figure(results: dict[str, Any]) -> Any:
    """Seed 000 Figure 3's axes for this ladder: held-out loss against training FLOPs, one line per design
    through its scales (mean over seeds), every seed's run as a marker; natural and generated held-out sets."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.figures import color_map

    runs = [run for run in results["runs"] if run.get("status") == "done"]
    archs = [arch for arch in ALL_ARCHS if any(run["arch"] == arch for run in runs)]
    colors = color_map(archs)
    figure = make_subplots(rows=1, cols=2, subplot_titles=("natural held-out stories", "generated held-out stories"))
    for col, metric in ((1, "natural_loss"), (2, "generated_loss")):
        for arch in archs:
            mine = [run for run in runs if run["arch"] == arch and _loss(run, metric) is not None]
            scales = sorted({run["scale"] for run in mine})
            mean_x = [statistics.mean(r["training_flops"] for r in mine if r["scale"] == s) for s in scales]
            mean_y = [statistics.mean(_loss(r, metric) for r in mine if r["scale"] == s) for s in scales]
            label = ARCH_LABELS.get(arch, arch)
            figure.add_trace(go.Scatter(
                x=mean_x, y=mean_y, mode="lines", name=label, legendgroup=arch, showlegend=col == 1,
                line=dict(color=colors[arch]), hoverinfo="skip"), row=1, col=col)
            figure.add_trace(go.Scatter(
                x=[r["training_flops"] for r in mine], y=[_loss(r, metric) for r in mine], mode="markers",
                name=label, legendgroup=arch, showlegend=False, marker=dict(color=colors[arch], size=8),
                text=[f"{label}, scale {r['scale']} ({r['d_model']} x {r['n_layers']}), seed {r['seed']}<br>"
                      f"{r['tokens'] / 1e6:.2f}M tokens, {r['flops']['active_parameters'] / 1e6:.2f}M active params"
                      for r in mine],
                hovertemplate="%{text}<br>%{x:.3g} FLOPs, loss %{y:.3f}<extra></extra>"), row=1, col=col)
        figure.update_xaxes(type="log", title_text="training FLOPs", row=1, col=col)
        figure.update_yaxes(title_text="held-out loss (nats / token)", row=1, col=col)
    figure.update_layout(title="Iso-FLOP ladder: loss vs training FLOPs per FFN design (one budget per scale)",
                         template="plotly_white", legend_title_text="FFN")
    return figure
