"""Circuit map: UMAP of the circuits of the most frequent tokens, per layer (seed 000, Figures 5 and 9),
and how often a circuit's neighbours share its word category."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app_support import load_artifact, need, penultimate, read_parquet, require_run
from circuitlab.analysis.embedding import embedding_figure

st.title("Circuit map")
st.markdown(
    "Each point is one token occurrence of the held-out corpus, placed by UMAP (cosine distance between "
    "circuits). Hover a point to read its context; the marked token is the one whose circuit it is."
)
run = require_run()
if need(run, "umap"):
    named = (re.fullmatch(r"umap_L(\d+)\.parquet", name) for name in run.entry("umap")["files"])
    layers = sorted(int(match.group(1)) for match in named if match)
    left, middle, right = st.columns([1, 1, 2])
    with left:
        # "all layers" side by side is seed 000's Figure 9; one layer is Figure 5
        choices = [*layers, "all layers"]
        default = penultimate(layers)
        layer = st.selectbox("Layer", choices, index=choices.index(default) if default in choices else 0,
                             format_func=lambda l: l if isinstance(l, str) else f"layer {l}")
    with middle:
        colour = st.radio("Colour by", ["category", "token"], horizontal=True)
    shown = layers if layer == "all layers" else [layer]
    frame = load_artifact(
        run, "umap", lambda: pd.concat([read_parquet(run.file(f"umap_L{l}.parquet")) for l in shown], ignore_index=True)
    )
    if frame is not None:
        tokens = frame["token"].value_counts().index.tolist()
        with right:
            picked = st.multiselect("Only these tokens", tokens, placeholder="all tokens")
        if picked:
            frame = frame[frame["token"].isin(picked)]
        if frame.empty:
            st.info("No points left: clear the token filter.")
        else:
            title = "Circuits of the most frequent tokens" + ("" if layer == "all layers" else f", layer {layer}")
            figure = embedding_figure(frame, color=colour, title=title)
            figure.update_layout(width=None)
            st.plotly_chart(figure)
            n_tokens = frame["token"].nunique()
            st.caption(f"{len(frame):,} circuits of {n_tokens} token{'s' if n_tokens != 1 else ''}")

st.header("Do neighbouring circuits share a meaning?")
scores = load_artifact(run, "semantic", lambda: read_parquet(run.file("semantic.parquet"))) if need(run, "semantic") else None
if scores is not None:
    figure = go.Figure()
    labels = [f"layer {l}" for l in scores["layer"]]
    figure.add_trace(go.Bar(x=labels, y=scores["score"], name="same category (all neighbours)"))
    figure.add_trace(go.Bar(x=labels, y=scores["score_other_tokens"], name="same category (other tokens only)"))
    figure.add_trace(go.Bar(x=labels, y=scores["baseline"], name="shuffled labels",
                            error_y=dict(type="data", array=scores["baseline_std"])))
    figure.update_layout(barmode="group", yaxis_title="fraction of the 10 nearest circuits", yaxis_range=[0, 1],
                         title="Category agreement of nearest circuits vs a shuffled-label baseline")
    st.plotly_chart(figure)
    st.dataframe(pd.DataFrame(scores), hide_index=True)
