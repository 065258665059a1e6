"""The parity report's figures for the dashboard's Parity page: the tables of circuitlab.analysis.parity_report,
drawn (plotly), each target a dotted line; and the firing-frequency histograms of any sparse code, one panel a
layer, for the report and the sparse autoencoder comparison alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from circuitlab.analysis.parity_report import (
    TARGETS,
    ablation_table,
    beam_table,
    layer_ablation_table,
    layer_table,
    n_features,
    usage_table,
)

if TYPE_CHECKING:
    import plotly.graph_objects

PARITY_COLOUR, GELU_COLOUR, CERTIFIED_COLOUR, TARGET_COLOUR = "#3283FE", "#565656", "#1C8356", "#C4451C"
MEAN_COLOUR = "#FEAF16"


def layer_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Per layer: reconstruction error (of the write, and of its variation around the mean where the report has
    it), agreement and certified share, write / residual beside GELU's, and feature usage; dotted lines are the
    issue's targets."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows, usage = layer_table(report), usage_table(report)
    layers = [f"L{row['layer']}" for row in rows]
    figure = make_subplots(rows=1, cols=4, subplot_titles=[
        f"reconstruction error (target {TARGETS['reconstruction'].text})",
        f"encoder agreement (target {TARGETS['agreement'].text})",
        "write norm / residual norm", "feature usage"])
    figure.add_trace(go.Bar(x=layers, y=[row["reconstruction"] for row in rows], name="reconstruction",
                            marker_color=PARITY_COLOUR, showlegend=False), row=1, col=1)
    if all(row["reconstruction of the variation"] is not None for row in rows):  # reports since it was measured
        figure.add_trace(go.Bar(x=layers, y=[row["reconstruction of the variation"] for row in rows],
                                name="reconstruction of the write's variation", marker_color=MEAN_COLOUR), row=1, col=1)
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
        figure.add_trace(go.Bar(x=layers, y=[row["share of dictionary"] for row in usage], name="share of dictionary used",
                                marker_color=PARITY_COLOUR, opacity=0.5), row=1, col=4)
    figure.add_trace(go.Bar(x=layers, y=[row["top-100 share"] for row in usage], name="uses by the top-100 features",
                            marker_color=MEAN_COLOUR), row=1, col=4)
    if all(row["top feature share"] is not None for row in usage):
        figure.add_trace(go.Bar(x=layers, y=[row["top feature share"] for row in usage], name="tokens using the top feature",
                                marker_color=TARGET_COLOUR), row=1, col=4)
        figure.add_hline(y=TARGETS["top_feature_share"].threshold, line_dash="dot", line_color=TARGET_COLOUR, row=1, col=4)
    worst = max(row["reconstruction"] for row in rows)
    figure.update_yaxes(range=[0, 1.15 * max(worst, TARGETS["reconstruction"].threshold)], row=1, col=1)
    figure.update_yaxes(range=[0, 1.05], row=1, col=2)
    figure.update_yaxes(range=[0, 1.05], row=1, col=4)
    figure.update_layout(title=f"Parity bottleneck of {report['model']}, layer by layer", barmode="group",
                         width=1300, height=430, legend=dict(orientation="h", y=-0.18))
    return figure


def firing_figure(series: dict[str, list[dict[str, Any] | None]], title: str) -> plotly.graph_objects.Figure:
    """Firing-frequency histograms, one panel a layer: for each code in `series` ({name: per-layer histogram
    {edges, counts, dead} of circuitlab.analysis.code_usage, or None where not measured}), how many features
    fire on a share of tokens in each decade, drawn as a step on a log axis; the dead features (never firing)
    are counted in the panel's title."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.figures import distinct_colors

    n_layers = max(len(histograms) for histograms in series.values())
    titles = []
    for layer in range(n_layers):
        dead = [f"{name} {histograms[layer]['dead']:,}" for name, histograms in series.items()
                if layer < len(histograms) and histograms[layer] is not None]
        titles.append(f"layer {layer}" + (f": dead {', '.join(dead)}" if dead else ": not measured"))
    figure = make_subplots(rows=1, cols=n_layers, subplot_titles=titles, shared_yaxes=True)
    for (name, histograms), colour in zip(series.items(), distinct_colors(len(series) + 1)[1:]):
        for layer, histogram in enumerate(histograms):
            if histogram is None:
                continue
            counts = list(histogram["counts"])
            figure.add_trace(go.Scatter(x=list(histogram["edges"]), y=counts + counts[-1:], mode="lines",
                                        line=dict(shape="hv", color=colour), fill="tozeroy", name=name,
                                        legendgroup=name, showlegend=layer == 0, opacity=0.6),
                             row=1, col=layer + 1)
    figure.update_xaxes(type="log", title_text="share of tokens a feature fires on", exponentformat="power")
    figure.update_yaxes(title_text="features", row=1, col=1)
    figure.update_layout(title=title, width=max(500, 330 * n_layers), height=400, legend=dict(orientation="h", y=-0.25))
    return figure


def report_firing_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """The parity report's firing-frequency histograms (layers without the diagnostics read not measured)."""
    return firing_figure({"parity": [layer.get("firing_histogram") for layer in report["layers"]]},
                         f"How often each of the m features fires on held-out tokens ({report['model']})")


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
    """Held-out loss of each model, plain, with every FFN write zeroed and (where measured) with every write
    replaced by its layer's mean."""
    import plotly.graph_objects as go

    rows = ablation_table(report)
    models = [row["model"] for row in rows]
    bars = [go.Bar(x=models, y=[row["loss"] for row in rows], name="loss", marker_color=PARITY_COLOUR,
                   texttemplate="%{y:.3f}"),
            go.Bar(x=models, y=[row["loss zeroed"] for row in rows], name="every write zeroed",
                   marker_color=TARGET_COLOUR, texttemplate="%{y:.3f}")]
    if all(row["loss mean-ablated"] is not None for row in rows):
        bars.append(go.Bar(x=models, y=[row["loss mean-ablated"] for row in rows], name="every write mean-ablated",
                           marker_color=MEAN_COLOUR, texttemplate="%{y:.3f}"))
    figure = go.Figure(bars)
    share = report.get("ablation_share")
    title = "Held-out loss, and with every FFN write ablated"
    if share is not None:
        title += f": the zeroing cost is {share:.3f} of GELU's"
    figure.update_layout(title=title, barmode="group", yaxis_title="nats / token", width=800, height=420)
    return figure


def layer_ablation_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """The loss cost of zeroing and of mean-ablating each layer's write (and all at once), parity beside GELU."""
    import plotly.graph_objects as go

    rows = layer_ablation_table(report)
    layers = [row["layer"] if row["layer"] == "all" else f"L{row['layer']}" for row in rows]
    styles = {"parity zeroed": (PARITY_COLOUR, ""), "parity mean-ablated": (PARITY_COLOUR, "/"),
              "GELU zeroed": (GELU_COLOUR, ""), "GELU mean-ablated": (GELU_COLOUR, "/")}
    figure = go.Figure([go.Bar(x=layers, y=[row[name] for row in rows], name=name, marker_color=colour,
                               marker_pattern_shape=pattern)
                        for name, (colour, pattern) in styles.items() if any(row[name] is not None for row in rows)])
    share = report.get("mean_ablation_share")
    title = "Loss cost of ablating the FFN write, one layer at a time and all at once"
    if share is not None:
        title += f" (mean ablation: the parity cost is {share:.3f} of GELU's, target {TARGETS['mean_ablation_share'].text})"
    figure.update_layout(title=title, barmode="group", xaxis=dict(type="category"), yaxis_title="nats / token",
                         width=900, height=420)
    return figure
