"""Circuit lookup: the nearest stored circuits of every token of a typed sentence (seed 000, Table 3 and
Figure 6)."""

from __future__ import annotations

import streamlit as st

from app_support import db_of, guarded, layer_choice, model_of, need, penultimate, require_run
from circuitlab.analysis.circuitdb import neighbour_heatmap
from circuitlab.demo.inputs import lookup_circuits

DEFAULT_TEXT = "Lily had a big dog named Max. Max had a red ball that he loved every day."

st.title("Circuit lookup")
st.markdown(
    "Type a sentence: every token's circuit (its sparse code at the chosen layer) is compared, by cosine "
    "distance, with the circuits stored from the held-out corpus. The heatmap shows each token's nearest "
    "stored circuits (seed 000, Figure 6); the table gives their contexts and the model's top predictions there "
    "(Table 3)."
)
run = require_run()
if need(run, "circuitdb"):
    model = model_of(run)
    db = db_of(run)
    st.caption(f"{len(db):,} stored circuits, layers {db.layers}")
    with st.form("lookup"):
        text = st.text_area("Sentence", DEFAULT_TEXT, max_chars=20_000, height=90)
        left, right = st.columns(2)
        with left:
            layer = layer_choice("Layer", db.layers, penultimate(db.layers))
        with right:
            k = st.slider("Neighbours per token", 1, 20, 5)
        st.form_submit_button("Look up")
    hits, message = guarded(lambda: lookup_circuits(db, model, text, layer, k), "The lookup") or (None, None)
    if message:
        st.warning(message)
    elif hits is not None:
        # which device answered: the CPU engines, or a GPU (its name) through the exact scan kernel
        st.caption(f"Served by {hits.attrs.get('served_by', 'cpu')}")
        st.plotly_chart(neighbour_heatmap(hits, title=f"Nearest stored circuits, layer {layer}"))
        shown = hits[["query_position", "query_token", "rank", "distance", "token", "context", "top_predictions", "category"]]
        st.subheader("Neighbours with their contexts and top predictions")
        st.dataframe(
            shown, hide_index=True,
            column_config={
                "query_position": st.column_config.NumberColumn("pos"),
                "query_token": "token",
                "distance": st.column_config.NumberColumn("distance", format="%.2e"),
                "token": "neighbour token",
                "context": st.column_config.TextColumn("neighbour input excerpt", width="large"),
                "top_predictions": "neighbour top predictions",
            },
        )
