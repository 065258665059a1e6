"""The parity report: the targets of the parity issue, and reading, tabulating and drawing the report.

`circuitlab report parity` measures a parity model on held-out natural text and writes the report (a plain
JSON-able dict); `targets` judges it against the issue's targets, for the script and for its readers.
`load_parity_report` reads and checks the JSON; `layer_table`, `target_table`, `beam_table`,
`ablation_table` and the figures shape it for the dashboard's Parity page, so the page shows the numbers of
the file and nothing recomputed beyond the verdicts and exp(loss).

The report, as the script writes it (fields read here; others are kept but unread):
- `layers[]`: per layer `reconstruction` (||x - x_hat||^2 / ||x||^2 of the FFN write), `agreement` (share of
  the configured beam's top-k in the exhaustive top-k), `certified` (share of tokens certified exact; null for
  the prefix design), `by_beam` {beam: {agreement, certified}}, `write_over_residual` (mean ||mlp_out|| /
  ||resid_mid||), `distinct_features`, `top100_share`, `coherence` (null for the prefix design);
- `parity` and `gelu`: `loss` and `loss_writes_zeroed` (nats/token, every FFN write zeroed), and for the GELU
  model its `write_over_residual` per layer; `ablation_share` = the parity model's cost of zeroing over the
  GELU model's; `perplexity_ratio` = exp(parity loss - GELU loss); `design` (the bottleneck config).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from circuitlab.errors import UserError

if TYPE_CHECKING:
    import plotly.graph_objects


@dataclass(frozen=True)
class Target:
    """One target of the parity issue: `measured <op> threshold`."""

    op: Literal["<", ">=", "<="]
    threshold: float
    what: str

    @property
    def text(self) -> str:
        return f"{self.op} {self.threshold}"

    def met(self, measured: float) -> bool:
        if self.op == "<":
            return measured < self.threshold
        if self.op == ">=":
            return measured >= self.threshold
        return measured <= self.threshold


TARGETS = {
    "reconstruction": Target("<", 0.05, "relative reconstruction error of the FFN write (worst layer)"),
    "agreement": Target(">=", 0.99, "encoder agreement with the exhaustive top-k at the configured beam (worst layer)"),
    "effective_features": Target(">=", 2000, "effective number of features, exp of the usage entropy (worst layer)"),
    "top_feature_share": Target("<=", 0.10, "share of tokens using the most used feature (worst layer)"),
    "dead_share": Target("<", 0.20, "share of features no held-out token uses (worst layer)"),
    "mean_ablation_share": Target(">=", 0.5, "loss cost of mean-ablating every bottleneck write / of mean-ablating "
                                             "every GELU FFN write"),
    "ablation_share": Target(">=", 0.5, "loss cost of zeroing every bottleneck write / of zeroing every GELU FFN write"),
    "loss_ratio": Target("<=", 1.05, "held-out loss / the GELU model's (within 5%)"),
    "perplexity_ratio": Target("<=", 1.05, "perplexity / the GELU model's (within 5%)"),
}
# per layer: the worst layer is the one the target is read at
WORST = {"reconstruction": max, "agreement": min, "effective_features": min, "top_feature_share": max, "dead_share": max}
NOT_MEASURED = "not measured"


def verdict(met: bool | None) -> str:
    return NOT_MEASURED if met is None else ("met" if met else "missed")


def targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of the parity issue that the report measures: {key: {measured, target, met}}."""
    layers = report["layers"]
    measured = {key: worst(row[key] for row in layers) for key, worst in WORST.items()
                if all(row.get(key) is not None for row in layers)}
    for key in ("mean_ablation_share", "ablation_share", "loss_ratio", "perplexity_ratio"):
        if report.get(key) is not None:
            measured[key] = report[key]
    return {key: {"measured": value, "target": TARGETS[key].text, "met": TARGETS[key].met(value)}
            for key, value in measured.items()}


# --- reading ---------------------------------------------------------------------------------------------------


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _BeamFigures(_Checked):
    agreement: float
    certified: float


class _Layer(_Checked):
    layer: StrictInt
    reconstruction: float
    agreement: float
    certified: float | None = None
    by_beam: dict[str, _BeamFigures] | None = None
    write_over_residual: float
    distinct_features: StrictInt
    top100_share: float
    coherence: float | None = None


class _Losses(_Checked):
    loss: float
    loss_writes_zeroed: float


class _Gelu(_Losses):
    model: str
    write_over_residual: list[float]


class _Report(_Checked):
    model: str
    design: dict[str, Any]
    tokens: StrictInt
    parity: _Losses
    layers: list[_Layer]
    gelu: _Gelu | None = None
    ablation_share: float | None = None
    perplexity_ratio: float | None = None


def check_parity_report(report: Any, where: str = "the report") -> dict[str, Any]:
    """`report` when it has the shape `circuitlab report parity` writes; UserError naming what is wrong otherwise."""
    if not isinstance(report, dict):
        raise UserError(f"{where} is a JSON {type(report).__name__}, expected an object written by `circuitlab report parity`")
    try:
        checked = _Report.model_validate(report)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'report'}: {item['msg']}"
                             for item in error.errors()[:5])
        raise UserError(f"{where} is not a parity report ({problems}); write it with `circuitlab report parity`") from None
    if not checked.layers:
        raise UserError(f"{where} has no layers; write it with `circuitlab report parity`")
    numbers = [layer.layer for layer in checked.layers]
    if numbers != list(range(len(numbers))):
        raise UserError(f"{where}: layers are numbered {numbers}, expected 0 to {len(numbers) - 1} in order "
                        "(`circuitlab report parity` writes one row per block)")
    if checked.gelu is not None and len(checked.gelu.write_over_residual) != len(checked.layers):
        raise UserError(f"{where}: gelu.write_over_residual has {len(checked.gelu.write_over_residual)} layers, "
                        f"the parity model {len(checked.layers)} (were the two models of different depth?)")
    return report


def load_parity_report(path: str | os.PathLike) -> dict[str, Any]:
    """The report at `path`, checked (UserError when it is missing, not JSON, or of another shape)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist; write it with `circuitlab report parity` MODEL --gelu GELU_MODEL --json {path}")
    try:
        report = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not JSON ({error}); write it with `circuitlab report parity`") from None
    return check_parity_report(report, str(path))


# --- tables ----------------------------------------------------------------------------------------------------


def n_features(report: dict[str, Any]) -> int | None:
    """m = 2^r, the dictionary size, from the design (None when the design does not say)."""
    n_bits = report.get("design", {}).get("n_bits")
    return 2**n_bits if isinstance(n_bits, int) else None


def layer_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per bottleneck layer: the report's figures, each target beside its figure with met / missed."""
    gelu_ratios = (report.get("gelu") or {}).get("write_over_residual")
    m = n_features(report)
    rows = []
    for row in report["layers"]:
        rows.append({
            "layer": row["layer"],
            "reconstruction": row["reconstruction"],
            "reconstruction target": TARGETS["reconstruction"].text,
            "reconstruction verdict": verdict(TARGETS["reconstruction"].met(row["reconstruction"])),
            "agreement": row["agreement"],
            "agreement target": TARGETS["agreement"].text,
            "agreement verdict": verdict(TARGETS["agreement"].met(row["agreement"])),
            "certified": row.get("certified"),
            "write / residual": row["write_over_residual"],
            "GELU write / residual": None if gelu_ratios is None else gelu_ratios[row["layer"]],
            "features used": row["distinct_features"],
            "share of dictionary": None if m is None else row["distinct_features"] / m,
            "top-100 share": row["top100_share"],
            "coherence": row.get("coherence"),
        })
    return rows


def target_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The four targets of the issue: measured (None when the report lacks it), target, verdict."""
    judged = targets(report)
    return [{"target": key, "what": target.what, "measured": judged.get(key, {}).get("measured"),
             "target value": target.text, "verdict": verdict(judged.get(key, {}).get("met"))}
            for key, target in TARGETS.items()]


def beam_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Encoder agreement and certified share per layer and beam (rows only for layers measured by beam)."""
    configured = report.get("design", {}).get("beam")
    return [{"layer": row["layer"], "beam": int(beam), "agreement": figures["agreement"],
             "certified": figures["certified"], "configured": int(beam) == configured}
            for row in report["layers"]
            for beam, figures in sorted((row.get("by_beam") or {}).items(), key=lambda item: int(item[0]))]


def ablation_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Loss and perplexity of each model, plain and with every FFN write zeroed (the parity model's writes are
    its bottleneck's), and the cost of zeroing."""
    models = [("parity", report["model"], report["parity"], "every bottleneck write")]
    if report.get("gelu") is not None:
        models.append(("GELU", report["gelu"]["model"], report["gelu"], "every FFN write"))
    return [{"model": name, "folder": folder, "zeroed": zeroed, "loss": losses["loss"],
             "loss zeroed": losses["loss_writes_zeroed"], "cost": losses["loss_writes_zeroed"] - losses["loss"],
             "perplexity": math.exp(losses["loss"]), "perplexity zeroed": math.exp(losses["loss_writes_zeroed"])}
            for name, folder, losses, zeroed in models]


# --- figures ---------------------------------------------------------------------------------------------------

PARITY_COLOUR, GELU_COLOUR, CERTIFIED_COLOUR, TARGET_COLOUR = "#3283FE", "#565656", "#1C8356", "#C4451C"


def layer_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Per layer: reconstruction error, agreement and certified share, write / residual beside GELU's, and
    feature usage; dotted lines are the issue's targets."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = layer_table(report)
    layers = [f"L{row['layer']}" for row in rows]
    figure = make_subplots(rows=1, cols=4, subplot_titles=[
        f"reconstruction error (target {TARGETS['reconstruction'].text})",
        f"encoder agreement (target {TARGETS['agreement'].text})",
        "write norm / residual norm", "feature usage"])
    figure.add_trace(go.Bar(x=layers, y=[row["reconstruction"] for row in rows], name="reconstruction",
                            marker_color=PARITY_COLOUR, showlegend=False), row=1, col=1)
    figure.add_hline(y=TARGETS["reconstruction"].threshold, line_dash="dot", line_color=TARGET_COLOUR, row=1, col=1)
    figure.add_trace(go.Bar(x=layers, y=[row["agreement"] for row in rows], name="agreement",
                            marker_color=PARITY_COLOUR), row=1, col=2)
    if any(row["certified"] is not None for row in rows):
        figure.add_trace(go.Bar(x=layers, y=[row["certified"] for row in rows], name="certified exact",
                                marker_color=CERTIFIED_COLOUR), row=1, col=2)
    figure.add_hline(y=TARGETS["agreement"].threshold, line_dash="dot", line_color=TARGET_COLOUR, row=1, col=2)
    figure.add_trace(go.Bar(x=layers, y=[row["write / residual"] for row in rows], name="parity write",
                            marker_color=PARITY_COLOUR), row=1, col=3)
    if report.get("gelu") is not None:
        figure.add_trace(go.Bar(x=layers, y=[row["GELU write / residual"] for row in rows], name="GELU FFN write",
                                marker_color=GELU_COLOUR), row=1, col=3)
    if n_features(report) is not None:
        figure.add_trace(go.Bar(x=layers, y=[row["share of dictionary"] for row in rows], name="share of dictionary used",
                                marker_color=PARITY_COLOUR, opacity=0.5), row=1, col=4)
    figure.add_trace(go.Bar(x=layers, y=[row["top-100 share"] for row in rows], name="uses by the top-100 features",
                            marker_color="#FEAF16"), row=1, col=4)
    worst = max(row["reconstruction"] for row in rows)
    figure.update_yaxes(range=[0, 1.15 * max(worst, TARGETS["reconstruction"].threshold)], row=1, col=1)
    figure.update_yaxes(range=[0, 1.05], row=1, col=2)
    figure.update_yaxes(range=[0, 1.05], row=1, col=4)
    figure.update_layout(title=f"Parity bottleneck of {report['model']}, layer by layer", barmode="group",
                         width=1300, height=430, legend=dict(orientation="h", y=-0.18))
    return figure


def beam_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Agreement with the exhaustive top-k (solid) and certified share (dashed) against the beam, per layer."""
    import plotly.graph_objects as go

    from circuitlab.figures import distinct_colors

    rows = beam_table(report)
    layers = sorted({row["layer"] for row in rows})
    figure = go.Figure()
    for layer, colour in zip(layers, distinct_colors(len(layers))):
        mine = [row for row in rows if row["layer"] == layer]
        for measure, dash in (("agreement", "solid"), ("certified", "dash")):
            figure.add_trace(go.Scatter(x=[row["beam"] for row in mine], y=[row[measure] for row in mine],
                                        mode="lines+markers", name=f"L{layer} {measure}", legendgroup=f"L{layer}",
                                        line=dict(color=colour, dash=dash)))
    figure.add_hline(y=TARGETS["agreement"].threshold, line_dash="dot", line_color=TARGET_COLOUR,
                     annotation_text=f"agreement target {TARGETS['agreement'].text}")
    beam = report.get("design", {}).get("beam")
    ticks = sorted({row["beam"] for row in rows})
    figure.update_xaxes(type="log", title_text="beam", tickvals=ticks,
                        ticktext=[f"{tick} (configured)" if tick == beam else str(tick) for tick in ticks])
    figure.update_yaxes(range=[0, 1.05], title_text="share")
    figure.update_layout(title="Encoder against the exhaustive top-k, by beam", width=900, height=420)
    return figure


def ablation_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Held-out loss of each model, plain and with every FFN write zeroed."""
    import plotly.graph_objects as go

    rows = ablation_table(report)
    figure = go.Figure([
        go.Bar(x=[row["model"] for row in rows], y=[row["loss"] for row in rows], name="loss", marker_color=PARITY_COLOUR,
               texttemplate="%{y:.3f}"),
        go.Bar(x=[row["model"] for row in rows], y=[row["loss zeroed"] for row in rows], name="every write zeroed",
               marker_color=TARGET_COLOUR, texttemplate="%{y:.3f}"),
    ])
    share = report.get("ablation_share")
    title = "Held-out loss, and with every FFN write zeroed"
    if share is not None:
        title += f": the parity cost is {share:.3f} of GELU's (target {TARGETS['ablation_share'].text})"
    figure.update_layout(title=title, barmode="group", yaxis_title="nats / token", width=800, height=420)
    return figure
