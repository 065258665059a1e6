"""Figures of the legibility statistics (circuitlab.analysis.legibility): regimes by layer (seed 002, Figure 2)
and per-head selectivity (Figure 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuitlab.analysis.legibility import REGIMES, legibility_by_head, legibility_by_layer

if TYPE_CHECKING:
    import pandas
    import plotly.graph_objects


REGIME_COLOURS = {"SELECTIVE": "#2ca02c", "CONSTANT": "#7f7f7f", "FUZZY": "#ff7f0e"}


def regimes_by_layer_figure(stats: pandas.DataFrame) -> plotly.graph_objects.Figure:
    """Seed 002, Figure 2(a) / 3: the regime composition of combined value channels per layer, per surface
    (operator family: attention values, NC-FFN and / and-not)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    by_layer = legibility_by_layer(stats)
    by_layer = by_layer[by_layer["family"] == "operator"]  # the NC-FFN's quantifiers are read apart
    surfaces = list(dict.fromkeys(by_layer["surface"]))
    designs = stats.attrs.get("designs", {})
    figure = make_subplots(rows=1, cols=len(surfaces), subplot_titles=[designs.get(s, s) for s in surfaces], shared_yaxes=True)
    for column, surface in enumerate(surfaces, start=1):
        rows = by_layer[by_layer["surface"] == surface]
        for regime in REGIMES:
            figure.add_trace(
                go.Bar(x=[f"L{l}" for l in rows["layer"]], y=100 * rows[regime.lower()], name=regime,
                       marker_color=REGIME_COLOURS[regime], legendgroup=regime, showlegend=column == 1,
                       hovertemplate=f"{regime}: %{{y:.1f}}%<extra></extra>"),
                row=1, col=column,
            )
    figure.update_layout(barmode="stack", title="Value-channel regimes by layer (combined values)", yaxis_title="% of channels")
    return figure


def head_selectivity_heatmap(stats: pandas.DataFrame) -> plotly.graph_objects.Figure:
    """Seed 002, Figure 4 (left): SELECTIVE fraction of each bounded head's combined channels."""
    import plotly.graph_objects as go

    by_head = legibility_by_head(stats)
    grid = by_head.pivot(index="layer", columns="head", values="selective")
    figure = go.Figure(go.Heatmap(
        z=100 * grid.to_numpy(dtype=float), x=[f"H{h}" for h in grid.columns], y=[f"L{l}" for l in grid.index],
        colorscale="Greens", zmin=0, zmax=100, colorbar=dict(title="SELECTIVE %"),
        hovertemplate="%{y} %{x}: %{z:.0f}% selective<extra></extra>",
    ))
    figure.update_layout(title="Per-head attention legibility (SELECTIVE %)", xaxis_title="head", yaxis_title="layer")
    return figure
