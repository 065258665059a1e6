"""Legibility: regimes of bounded value channels per layer and per head (seed 002, Figures 2 and 4), and a
channel browser with each channel's max-activating contexts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_support import guarded, load_artifact, model_of, need, read_parquet, require_run
from circuitlab.analysis.channel_names import max_activating_contexts
from circuitlab.analysis.legibility import legibility_by_head
from circuitlab.analysis.legibility_figures import head_selectivity_heatmap, regimes_by_layer_figure
from circuitlab.demo.pipeline import corpus_windows

st.title("Legibility")
st.markdown(
    "Bounded channels take values in [0, 1] by construction (membership / Boolean attention values, NC-FFN "
    "operators). Over held-out tokens each is **SELECTIVE** (varies and is crisp: a nameable detector), "
    "**CONSTANT** (variance < 0.003) or **FUZZY** (seed 002, section 4.1)."
)
run = require_run()


@st.cache_resource(show_spinner="tokenizing the held-out corpus ...", max_entries=4)
def _windows(run_path: str, corpus_mtime: float, seq_len: int, _model) -> object:
    from circuitlab.data.stories import read_corpus

    return corpus_windows(_model, [story.text for story in read_corpus(f"{run_path}/corpus.jsonl")], seq_len)


@st.cache_data(show_spinner="finding max-activating contexts ...", max_entries=128)
def _contexts(run_path: str, hook: str, channel: int, head: int | None, role: str, corpus_mtime: float, seq_len: int, _model):
    tokens = _windows(run_path, corpus_mtime, seq_len, _model)
    return max_activating_contexts(_model, tokens, hook, channel, head=head, role=role, progress=False)


stats = (
    load_artifact(run, "legibility", lambda: read_parquet(run.file("legibility_channels.parquet")).copy())
    if need(run, "legibility") else None
)
if stats is not None:
    entry = run.entry("legibility")
    stats.attrs["designs"] = dict(entry.get("designs", {}))
    st.header("Summary (seed 002, Tables 1 and 5)")
    st.dataframe(read_parquet(run.file("legibility_summary.parquet")), hide_index=True)

    st.header("Regimes by layer")
    st.plotly_chart(regimes_by_layer_figure(stats))

    if (stats["surface"] == "attention").any():
        st.header("Per-head attention legibility")
        st.plotly_chart(head_selectivity_heatmap(stats))
        by_head = legibility_by_head(stats)
        labelled = stats[(stats["surface"] == "attention") & stats["combined"] & (stats["regime"] == "SELECTIVE")]
        top_label = (
            labelled.sort_values("variance", ascending=False).groupby(["layer", "head"])["label"].first().rename("most variable selective channel")
        )
        st.dataframe(by_head.merge(top_label, on=["layer", "head"], how="left"), hide_index=True)

    st.header("Channel browser")
    left, middle, right = st.columns(3)
    surfaces = sorted(stats["surface"].unique())
    surface = left.selectbox("Surface", surfaces)
    in_surface = stats[stats["surface"] == surface]
    layer = middle.selectbox("Layer", sorted(in_surface["layer"].unique()), format_func=lambda l: f"layer {l}")
    regime = right.selectbox("Regime", ["SELECTIVE", "FUZZY", "CONSTANT", "any"])
    rows = in_surface[(in_surface["layer"] == layer) & in_surface["combined"]]
    if regime != "any":
        rows = rows[rows["regime"] == regime]
    if rows.empty:
        st.info(f"No {regime if regime != 'any' else ''} combined channels in layer {layer} of this surface.")
    else:
        rows = rows.sort_values("variance", ascending=False).reset_index(drop=True)

        def describe(i: int) -> str:
            row = rows.iloc[i]
            head = "" if pd.isna(row["head"]) else f"H{int(row['head'])} "
            label = row["label"] if isinstance(row.get("label"), str) else ""
            return f"{head}{row['role']} #{int(row['channel'])}: {label}"

        index = st.selectbox("Channel", range(len(rows)), format_func=describe)
        chosen = rows.iloc[index]
        cells = st.columns(4)
        cells[0].metric("regime", chosen["regime"])
        cells[1].metric("variance", f"{chosen['variance']:.4f}")
        cells[2].metric("crispness", f"{chosen['crispness']:.1%}")
        cells[3].metric("ON fraction", f"{chosen['on_fraction']:.1%}")
        if st.button("Show max-activating contexts"):
            model = model_of(run)
            head = None if pd.isna(chosen["head"]) else int(chosen["head"])
            seq_len = int(entry["params"].get("seq_len", 256))
            contexts = guarded(
                lambda: _contexts(str(run.path), str(chosen["hook"]), int(chosen["channel"]), head, str(chosen["role"]),
                                  run.file("corpus.jsonl").stat().st_mtime, seq_len, model),
                "Finding contexts",
            )
            if contexts is not None and contexts.empty:
                st.info("This channel never fires decisively (value > 0.9) on tokens seen at least 5 times.")
            elif contexts is not None:
                st.dataframe(contexts, hide_index=True,
                             column_config={"context": st.column_config.TextColumn("context (firing token in [brackets])", width="large")})
