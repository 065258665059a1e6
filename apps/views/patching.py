"""Patching: normalized indirect effect of patching circuits, by layer x position, on the fact pairs
(seed 000, Figure 7) and on a pair the user types."""

from __future__ import annotations

import streamlit as st

from app_support import guarded, load_artifact, model_of, need, read_parquet, require_run
from circuitlab.analysis.patching import excluded_report, nie_heatmap, nie_summary, no_counted_pairs
from circuitlab.demo.inputs import custom_patch_pair, run_custom_patch
from circuitlab.demo.readers import nie_from_parquet

st.title("Patching")
st.markdown(
    "For a clean prompt and a counterfactual one, m(x) = logit(clean answer) - logit(counterfactual answer) at "
    "the last token. Patching a layer's circuit code at some positions with its value from the counterfactual "
    "run moves m; the normalized indirect effect NIE = (m(clean | patched) - m(clean)) / (m(counterfactual) - "
    "m(clean)) is 0 when nothing changed and 1 when the answer moved all the way."
)
run = require_run()

own_pairs = bool(run.manifest.get("pairs"))  # `circuitlab demo --pairs FILE`
st.header("Your pairs file" if own_pairs else "Fact pairs")
table = load_artifact(run, "nie", lambda: nie_from_parquet(read_parquet(run.file("nie.parquet")))) if need(run, "nie") else None
if table is not None:
    undefined = no_counted_pairs(table)
    if undefined:
        st.warning(undefined.replace("(--min-difference)", "(`circuitlab patch --min-difference`)"))
    else:
        st.plotly_chart(nie_heatmap(table, title="NIE over your pairs" if own_pairs else "NIE over the fact pairs"))
    left_out = excluded_report(table)
    if left_out and not undefined:
        st.info(left_out)
    with st.expander("Mean NIE per cell"):
        st.dataframe(nie_summary(table).astype({"layer": str, "position": str}), hide_index=True)
    with st.expander("Pairs"):
        pairs = table.drop_duplicates("pair")[["pair", "pair_name", "m_clean", "m_patch"]]
        st.dataframe(pairs, hide_index=True)

st.header("Your own pair")
st.markdown(
    "Type two prompts and the answer each should get (single tokens). Prompts of equal token length are "
    "patched at every position; otherwise at the final position only."
)
with st.form("pair"):
    left, right = st.columns(2)
    clean = left.text_input("Clean prompt", "The turtle was", max_chars=2000)
    clean_answer = left.text_input("Clean answer", "slow", max_chars=100)
    patch = right.text_input("Counterfactual prompt", "The cheetah was", max_chars=2000)
    patch_answer = right.text_input("Counterfactual answer", "fast", max_chars=100)
    submitted = st.form_submit_button("Patch")
if submitted:
    model = model_of(run)
    pair, positions, message = guarded(
        lambda: custom_patch_pair(model, clean, patch, clean_answer, patch_answer), "Reading the pair"
    ) or (None, [], None)
    if message:
        st.warning(message)
    elif pair is not None:
        with st.spinner("patching ..."):
            result = guarded(lambda: run_custom_patch(model, pair, positions), "Patching")
        if result is not None:
            grid, note = result
            st.metric("m(clean)", f"{grid['m_clean'].iloc[0]:.3f}")
            st.metric("m(counterfactual)", f"{grid['m_patch'].iloc[0]:.3f}")
            if note:
                st.warning(note)
            if grid["nie"].notna().any():  # a small difference is shown with its warning; an equal one has no NIE
                st.plotly_chart(nie_heatmap(grid, title="NIE of your pair"))
                st.dataframe(grid.astype({"layer": str, "position": str})[["layer", "position", "m_patched", "nie"]], hide_index=True)
