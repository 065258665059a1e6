"""The legibility report: the pressure regimes of seed 002 measured on trained models, beside the seed's numbers.

`measure_model` reads one model on held-out natural text (data/natural's held-out split): perplexity, the
per-surface / per-layer / per-head statistics of circuitlab.analysis.legibility (regime shares, ON-fractions,
crispness, alive operand channels), the legible share of the logit attribution, and the pressures the model
was trained under (its metrics.json). `build_report` gathers several models and sets them beside seed 002's
numbers (SEED002, each with the table or figure it comes from); `report_markdown` and `report_figure` render
a report (a plain JSON-able dict), so the notebook and the dashboard draw from the JSON the script wrote.

Regimes are named as in seed 002: none, sparsity alone, crispness alone, both pressures.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from circuitlab.errors import UserError

if TYPE_CHECKING:
    import plotly.graph_objects

REPORT_VERSION = 1
TARGET_ALIVE = 0.5  # the target of the crispness-alone model: half the operand channels alive, each surface
REGIME_ORDER = ("none", "sparsity alone", "crispness alone", "both pressures")

# seed 002's numbers (percentages), each with where it is printed. Our models have an NC-FFN with 25% named
# operators (rho 0.75) and Boolean values on every head, so the rows are Table 5 at 25% and Table 1's
# Boolean head-100; section 5.4 (Figure 3) gives the end-to-end model's attention, crispness alone.
SEED002: dict[str, Any] = {
    "ffn": {
        "source": "seed 002, Table 5 (feed-forward operands A, B; 25% named operators)",
        "regimes": {
            "none": dict(atom_crisp=50, on_percent=0.9, selective=1, constant=58, row="none (plain)"),
            "sparsity alone": None,  # Table 5's sparsity row presses the operator output, not the operands
            "crispness alone": dict(atom_crisp=91, on_percent=32.7, selective=25, constant=70,
                                    row="crispness alone (on operands)"),
            "both pressures": dict(atom_crisp=95, on_percent=3.5, selective=13, constant=85,
                                   row="both pressures (on operands)"),
        },
        "not_in_seed": "Table 5 has no operand-targeted sparsity-alone row (its sparsity row presses the operator output)",
    },
    "attention": {
        "source": "seed 002, Table 1 (Boolean head-100, attention alone over a conventional FFN)",
        "regimes": {
            "none": None,
            "sparsity alone": dict(atom_crisp=32, on_percent=2.2, selective=60, constant=27, row="Boolean head-100, sparsity alone"),
            "crispness alone": dict(atom_crisp=53, on_percent=12.1, selective=56, constant=32, row="Boolean head-100, crispness alone"),
            "both pressures": dict(atom_crisp=63, on_percent=0.9, selective=54, constant=37, row="Boolean head-100, both pressures"),
        },
        "not_in_seed": "Table 1 has no unpressured row",
    },
    "end_to_end_attention": {
        "source": "seed 002, section 5.4 and Figure 3 (end-to-end model, attention surface)",
        "crispness alone": dict(selective=(30, 35), constant=(64, 69), atom_crisp=(63, 73), on_percent=12),
        "both pressures": dict(on_percent=0.3),
    },
    "depth": {
        "source": "seed 002, Figure 2(a) (attention SELECTIVE by layer) and Figure 3 (end-to-end)",
        "claim": "attention SELECTIVE rises with depth; the deep half reaches 70-95% (attention alone); end to "
                 "end, attention is selective only in the deep half",
        "deep_half_selective": (70, 95),
    },
    "legible_share": {
        "source": "seed 002, section 5.5 and Figure 5 (one prediction of the crispness-alone model)",
        "value": 75,
    },
}


# --- measuring one model ------------------------------------------------------------------------------------


def natural_held_out_windows(model: Any, seq_len: int = 256, max_windows: int | None = None,
                             natural_folder: str | os.PathLike | None = None) -> Tensor:
    """The held-out split of the natural stories (data/natural), tokenized and cut into [windows, seq_len]."""
    from circuitlab.analysis.legibility import held_out_windows
    from circuitlab.data.natural import load_natural_stories

    stories = load_natural_stories(natural_folder).held_out()
    if not stories:
        raise UserError(f"no held-out natural stories under {natural_folder or 'data/natural'}")
    windows = held_out_windows(model, [story.text for story in stories], seq_len=min(seq_len, model.cfg.n_ctx))
    return windows[:max_windows] if max_windows else windows


@torch.no_grad()
def perplexity(model: Any, windows: Tensor, batch_size: int = 8) -> dict[str, float]:
    """Mean next-token cross-entropy (nats/token) over the windows' predicted positions, and exp of it."""
    import torch.nn.functional as F

    device = model.W_E.device
    loss_sum, count = 0.0, 0
    for start in range(0, windows.shape[0], batch_size):
        batch = windows[start : start + batch_size].to(device)
        logits = model(batch[:, :-1]).float()
        loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"))
        count += batch[:, 1:].numel()
    if count == 0:
        raise UserError("perplexity needs windows of at least 2 tokens")
    return {"loss": loss_sum / count, "ppl": math.exp(loss_sum / count), "tokens": count}


def _jsonable(value: Any) -> Any:
    import pandas as pd

    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):  # numpy and torch scalars
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(frame: Any) -> list[dict[str, Any]]:
    """JSON-able rows (NaN and pandas' NA become None)."""
    return [{key: _jsonable(value) for key, value in row.items()} for row in frame.to_dict("records")]


ON_RATE_BINS = (0.0, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99, 1.0)  # edges; the first and last bins are the constants


def on_rate_histogram(stats: Any) -> dict[str, Any]:
    """Operand channels per ON-fraction bin, per surface and family: {"edges": [...], "<surface> <family>":
    counts}. Bin i holds edges[i] <= on < edges[i + 1]; the first bin is [0, 1%) (dead), the last (99%, 100%]
    (stuck on), so the middle bins together are the alive channels."""
    import numpy as np

    edges = list(ON_RATE_BINS)
    out: dict[str, Any] = {"edges": edges}
    operands = stats[stats["operand"]]
    for (surface, family), rows in operands.groupby(["surface", "family"], sort=True):
        on = rows["on_fraction"].to_numpy(dtype=float)
        dead, stuck = int((on < edges[1]).sum()), int((on > edges[-2]).sum())
        alive = on[(on >= edges[1]) & (on <= edges[-2])]
        middle = np.histogram(alive, bins=edges[1:-1])[0].tolist()  # the last middle bin includes 99%
        out[f"{surface} {family}"] = [dead, *middle, stuck]
    return out


def _surface_alive(by_layer_rows: Sequence[dict[str, Any]], surface: str) -> float | None:
    """Alive share of the operator operands of one surface over all layers (weighted by channel count)."""
    rows = [r for r in by_layer_rows if r["surface"] == surface and r["family"] == "operator" and r["n_operands"]]
    n = sum(r["n_operands"] for r in rows)
    return sum(r["alive"] * r["n_operands"] for r in rows) / n if n else None


def measure_model(model_dir: str | os.PathLike, windows: Tensor | None = None, seq_len: int = 256,
                  max_windows: int | None = None, batch_size: int = 8, device: str = "cpu",
                  progress: bool = True) -> dict[str, Any]:
    """Everything the report says about one model folder (see the module docstring), as a JSON-able dict."""
    from circuitlab.analysis.attribution import legible_attribution_share
    from circuitlab.analysis.legibility import (
        legibility_by_head,
        legibility_by_layer,
        legibility_stats,
        legibility_summary,
    )
    from circuitlab.architectures.weights import resolve_model_folder
    from circuitlab.architectures.transformer import load_model

    folder = resolve_model_folder(model_dir)
    model = load_model(folder, device=device)
    model.eval()
    if windows is None:
        windows = natural_held_out_windows(model, seq_len=seq_len, max_windows=max_windows)
    quality = perplexity(model, windows, batch_size=batch_size)
    stats = legibility_stats(model, windows, batch_size=batch_size, progress=progress)
    by_layer = _records(legibility_by_layer(stats))
    has_heads = bool((stats["surface"] == "attention").any())
    metrics_path = folder / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    selectivity = model.config.selectivity
    ffn_alive, attention_alive = _surface_alive(by_layer, "ffn"), _surface_alive(by_layer, "attention")
    return {
        "name": folder.name,
        "preset": model.config.name,
        "regime": selectivity.regime,
        "selectivity": selectivity.model_dump(),
        "n_layers": model.config.n_layers,
        "held_out": {"source": "data/natural held-out split", "windows": int(windows.shape[0]),
                     "seq_len": int(windows.shape[1]), **quality},
        "summary": _records(legibility_summary(stats, folder.name)),
        "by_layer": by_layer,
        "by_head": _records(legibility_by_head(stats)) if has_heads else [],
        "on_rate_histogram": on_rate_histogram(stats),
        "attribution": legible_attribution_share(model, windows, batch_size=batch_size, progress=progress),
        "alive": {"ffn": ffn_alive, "attention": attention_alive},
        "meets_alive_target": (ffn_alive is not None and attention_alive is not None
                               and ffn_alive >= TARGET_ALIVE and attention_alive >= TARGET_ALIVE),
        "training": {key: metrics.get(key) for key in ("steps", "stopped", "tokens_seen", "held_out_loss", "train_seconds")},
        # models trained before pressures were logged: the rule their config states, no measured sizes
        "pressures": metrics.get("pressures") or {"rule": selectivity.describe()},
    }


# --- the comparison with seed 002 -----------------------------------------------------------------------------


def _summary_row(model: dict[str, Any], surface: str) -> dict[str, Any] | None:
    return next((r for r in model["summary"] if r["surface"] == surface and r.get("family", "operator") == "operator"), None)


def _depth_trend(model: dict[str, Any]) -> dict[str, Any] | None:
    """Attention SELECTIVE % of the deep half of the layers minus the shallow half (seed 002: positive)."""
    rows = sorted((r for r in model["by_layer"] if r["surface"] == "attention" and r["family"] == "operator"),
                  key=lambda r: r["layer"])
    if len(rows) < 2:
        return None
    half = len(rows) // 2
    shallow = 100 * sum(r["selective"] for r in rows[:half]) / half
    deep = 100 * sum(r["selective"] for r in rows[len(rows) - half:]) / half
    return {"shallow": shallow, "deep": deep, "by_layer": [100 * r["selective"] for r in rows]}


def comparison_rows(models: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, surface, measure): ours, seed 002's (or None, with the reason), and the source."""
    rows = []
    for model in models:
        regime = model["regime"]
        for surface in ("ffn", "attention"):
            ours = _summary_row(model, surface)
            if ours is None:
                continue
            reference = SEED002[surface]
            seed = reference["regimes"].get(regime)
            # Table 5 reads SELECTIVE / CONSTANT on the FFN operands; Table 1 on the attention's combined value
            read = {"atom_crisp": "atom_crisp", "on_percent": "on_percent",
                    "selective": "selective_operands" if surface == "ffn" else "selective",
                    "constant": "constant_operands" if surface == "ffn" else "constant"}
            for measure, column in read.items():
                rows.append({
                    "model": model["name"], "regime": regime, "surface": surface, "measure": measure,
                    "ours": ours[column], "seed": None if seed is None else seed[measure],
                    "source": reference["source"] + (f": {seed['row']}" if seed else f" ({reference['not_in_seed']})"),
                })
            rows.append({"model": model["name"], "regime": regime, "surface": surface, "measure": "alive",
                         "ours": ours["alive"], "seed": None, "source": "not reported by seed 002 (target >= 50%)"})
        e2e = SEED002["end_to_end_attention"].get(regime)
        ours = _summary_row(model, "attention")
        if e2e and ours is not None:
            for measure, value in e2e.items():
                rows.append({"model": model["name"], "regime": regime, "surface": "attention (end to end)",
                             "measure": measure, "ours": ours[measure],
                             "seed": list(value) if isinstance(value, tuple) else value,
                             "source": SEED002["end_to_end_attention"]["source"]})
        trend = _depth_trend(model)
        if trend is not None:
            rows.append({"model": model["name"], "regime": regime, "surface": "attention", "measure": "selective deep half - shallow half",
                         "ours": trend["deep"] - trend["shallow"], "seed": "> 0 (deep half 70-95%)",
                         "source": SEED002["depth"]["source"]})
        rows.append({"model": model["name"], "regime": regime, "surface": "logit attribution",
                     "measure": "legible share", "ours": 100 * model["attribution"]["share_mean"],
                     "seed": SEED002["legible_share"]["value"] if regime == "crispness alone" else None,
                     "source": SEED002["legible_share"]["source"]})
    return rows


def build_report(models: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(models, key=lambda m: (REGIME_ORDER.index(m["regime"]) if m["regime"] in REGIME_ORDER else 9, m["name"]))
    return {"version": REPORT_VERSION, "seed002": SEED002, "target_alive": TARGET_ALIVE, "models": list(ordered),
            "comparison": comparison_rows(ordered)}


def load_report(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist; write it with `circuitlab report legibility` MODEL_DIR... --json {path}")
    report = json.loads(path.read_text())
    if report.get("version") != REPORT_VERSION:
        raise UserError(f"{path} is a report of version {report.get('version')}, expected {REPORT_VERSION}; rerun the report")
    return report


# --- rendering -------------------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return "-".join(_fmt(v, digits) for v in value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def regime_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline table: one row per model and surface family (percentages, ppl, legible share)."""
    rows = []
    for model in report["models"]:
        for row in model["summary"]:
            rows.append({
                "model": model["name"], "regime": model["regime"], "design": row["design"],
                "atom_crisp": row["atom_crisp"], "on_percent": row["on_percent"], "alive": row["alive"],
                "dead": row["dead"], "stuck_on": row["stuck_on"], "selective": row["selective"],
                "constant": row["constant"], "selective_operands": row["selective_operands"],
                "constant_operands": row["constant_operands"], "ppl": model["held_out"]["ppl"],
                "legible_share": 100 * model["attribution"]["share_mean"],
            })
    return rows


def _markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], digits: int = 1) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row.get(c), digits) for c in columns) + " |" for row in rows]
    return lines


def _bin_label(edges: Sequence[float], i: int) -> str:
    low, high = 100 * edges[i], 100 * edges[i + 1]
    if i == 0:
        return f"< {high:g}%"
    if i == len(edges) - 2:
        return f"> {low:g}%"
    return f"{low:g}-{high:g}%"


def report_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Legibility of the pressure regimes (seed 002)",
        "",
        "Measured on the held-out split of the natural stories (data/natural) by `circuitlab report legibility`. "
        "Percentages. atom_crisp, on_percent, alive, dead and stuck_on are read on the operands (alive: ON-fraction "
        "in [1%, 99%]; dead: below; stuck_on: above); selective / constant on the combined values, *_operands on "
        "the operands; legible_share is the mean over positions of the legible share of the logit attribution.",
        "",
        *_markdown_table(regime_table(report), ["model", "regime", "design", "atom_crisp", "on_percent", "alive", "dead",
                                                "stuck_on", "selective", "constant", "selective_operands",
                                                "constant_operands", "ppl", "legible_share"]),
        "",
        f"Target (crispness alone): at least {100 * report['target_alive']:.0f}% of the operand channels alive on "
        "each surface.",
        "",
    ]
    for model in report["models"]:
        alive = model["alive"]
        lines.append(f"- {model['name']} ({model['regime']}): FFN operands alive {_fmt(None if alive['ffn'] is None else 100 * alive['ffn'])}%, "
                     f"attention operands alive {_fmt(None if alive['attention'] is None else 100 * alive['attention'])}%"
                     f" — target {'met' if model['meets_alive_target'] else 'not met'}")
    histogram_rows = []
    for model in report["models"]:
        histogram = model.get("on_rate_histogram") or {}
        edges = histogram.get("edges")
        for key, counts in histogram.items():
            if key != "edges":
                histogram_rows.append({"model": model["name"], "operands": key,
                                       **{_bin_label(edges, i): count for i, count in enumerate(counts)}})
    if histogram_rows:
        edges = report["models"][0]["on_rate_histogram"]["edges"]
        lines += ["", "Operand channels by ON fraction (first column dead, last stuck on, the others alive):", "",
                  *_markdown_table(histogram_rows, ["model", "operands", *(_bin_label(edges, i) for i in range(len(edges) - 1))]), ""]
    lines += ["", "## Beside seed 002", "",
              *_markdown_table(report["comparison"], ["model", "regime", "surface", "measure", "ours", "seed", "source"]), ""]
    for model in report["models"]:
        lines += [f"## {model['name']} by layer", ""]
        layer_rows = [dict(r, **{k: None if r[k] is None else 100 * r[k] for k in
                                 ("atom_crisp", "on_fraction", "alive", "dead", "stuck_on", "selective", "constant")})
                      for r in model["by_layer"]]
        lines += _markdown_table(layer_rows, ["surface", "family", "layer", "n_operands", "atom_crisp", "on_fraction",
                                              "alive", "dead", "stuck_on", "selective", "constant"])
        pressures = model.get("pressures") or {}
        if pressures.get("first"):
            first, final = pressures["first"], pressures["final"]
            lines += ["", f"Pressures ({pressures['rule']}): step 1 {first['total']:.4f} nats/token vs LM loss "
                      f"{first['lm_loss']:.4f}; last 10% of steps {final['total']:.4f} vs {final['lm_loss']:.4f}."]
        lines.append("")
    return "\n".join(lines)


REGIME_COLOURS = {"none": "#565656", "sparsity alone": "#3283FE", "crispness alone": "#1C8356", "both pressures": "#C4451C"}


def report_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Per layer, for each model: alive operand share (FFN, attention) and attention SELECTIVE share."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.figures import distinct_colors

    panels = [("ffn", "alive", "FFN operands alive (ON 1-99%)"),
              ("attention", "alive", "attention operands alive (ON 1-99%)"),
              ("attention", "selective", "attention SELECTIVE (combined values)")]
    figure = make_subplots(rows=1, cols=len(panels), subplot_titles=[title for _, _, title in panels], shared_yaxes=True)
    spare = iter(distinct_colors(len(report["models"]) + 4)[4:])
    for model in report["models"]:
        colour = REGIME_COLOURS.get(model["regime"]) if sum(m["regime"] == model["regime"] for m in report["models"]) == 1 else None
        colour = colour or next(spare)
        for column, (surface, measure, _) in enumerate(panels, start=1):
            rows = sorted((r for r in model["by_layer"] if r["surface"] == surface and r["family"] == "operator"),
                          key=lambda r: r["layer"])
            if not rows:
                continue
            figure.add_trace(go.Scatter(
                x=[r["layer"] for r in rows], y=[100 * r[measure] for r in rows], mode="lines+markers",
                name=f"{model['name']} ({model['regime']})", legendgroup=model["name"], showlegend=column == 1,
                line=dict(color=colour),
            ), row=1, col=column)
    figure.add_hline(y=100 * report["target_alive"], line_dash="dot", line_color="#7f7f7f", row=1, col=1)
    figure.add_hline(y=100 * report["target_alive"], line_dash="dot", line_color="#7f7f7f", row=1, col=2)
    figure.update_yaxes(range=[0, 100], title_text="% of channels", row=1, col=1)
    figure.update_xaxes(title_text="layer")
    figure.update_layout(title="Pressure regimes of seed 002: living operands and selective attention by layer",
                         width=1300, height=480, legend=dict(orientation="h", y=-0.25))
    return figure


def measure_models(model_dirs: Iterable[str | os.PathLike], **options: Any) -> dict[str, Any]:
    from tqdm.auto import tqdm

    dirs = list(model_dirs)
    return build_report([measure_model(d, **options) for d in tqdm(dirs, desc="models", disable=not options.get("progress", True))])
