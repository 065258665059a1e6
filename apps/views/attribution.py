"""Attribution: direct logit attribution of one prediction, by attention head and FFN block, and within
each FFN block by neuron / unit / feature (seed 002, Figure 5)."""

from __future__ import annotations

import streamlit as st

from app_support import guarded, load_artifact, model_of, need, read_parquet, require_run
from circuitlab.analysis.attribution import dla_layer_figure, dla_overview_figure
from circuitlab.demo.inputs import attribute_prompt
from circuitlab.demo.readers import dla_tables

st.title("Attribution")
st.markdown(
    "With the final norm's scale frozen, a logit is an exact sum of what the embedding, every attention head "
    "and every FFN block wrote into the residual stream; inside an FFN block, a sum over its neurons (sgatlin), "
    "units (dense, NC-FFN) or features (parity). Red pushes the token up, blue down."
)
run = require_run()


def show(table) -> None:
    attrs = table.attrs
    components = table[table["level"] == "component"]
    left, right = st.columns(2)
    left.metric(f"logit of {attrs['target']!r}", f"{attrs['logit']:.3f}")
    right.metric("sum of the parts", f"{components['value'].sum():.3f}")
    st.plotly_chart(dla_overview_figure(table))
    layers = sorted(int(l) for l in components.loc[components["kind"] == "ffn", "layer"].unique())
    if layers:
        layer = st.selectbox("Layer detail", layers, index=len(layers) - 1, format_func=lambda l: f"layer {l}",
                             key=f"layer-{attrs['target']}-{len(table)}")
        st.plotly_chart(dla_layer_figure(table, layer))
    top = table.reindex(table["value"].abs().sort_values(ascending=False).index).head(30)
    top = top.assign(promote_tokens=[" ".join(t) if isinstance(t, list) else "" for t in top["promote_tokens"]])
    st.dataframe(top[["component", "level", "kind", "value", "operation", "promote_tokens", "target_rank"]], hide_index=True)


st.header("Your prompt")
with st.form("dla"):
    prompt = st.text_input("Prompt", "The turtle was", max_chars=20_000)
    target = st.text_input("Target token (blank: the model's top prediction)", "", max_chars=100)
    submitted = st.form_submit_button("Attribute")
if submitted:
    model = model_of(run)
    table, message = guarded(lambda: attribute_prompt(model, prompt, target), "The attribution") or (None, None)
    if message:
        st.warning(message)
    elif table is not None:
        show(table)

st.header("Demo prompts")
tables = load_artifact(run, "dla", lambda: dla_tables(read_parquet(run.file("dla.parquet")))) if need(run, "dla") else None
if tables:
    chosen = st.selectbox("Prompt", list(tables), format_func=lambda p: f"{p} -> {tables[p].attrs['target']!r}")
    show(tables[chosen])
