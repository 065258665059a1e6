"""Neurons: how many neurons are used, how unequally (Gini), and which co-activate (seed 000, Figure 8)."""

from __future__ import annotations

import streamlit as st

from app_support import layer_choice, load_artifact, need, penultimate, require_run
from circuitlab.analysis.usage import usage_figure, usage_summary_figure, usage_table
from circuitlab.demo.readers import load_usage_reports
from circuitlab.demo.runfolder import RunFolder

st.title("Neurons")
st.markdown(
    "Over the held-out corpus: the fraction of neurons active at least once, the Gini coefficient of how "
    "often each is active (each distinct input token counted once; seed 000 reports 0.58), and co-activation "
    "P(j active | i active) of the first neurons, with pairs that share a product-key subkey marked."
)


@st.cache_data(show_spinner=False, max_entries=8)
def _usage(run_path: str, file_times: tuple) -> dict:
    return load_usage_reports(RunFolder(run_path))


run = require_run()
if need(run, "usage"):
    file_times = tuple(run.file(name).stat().st_mtime for name in run.entry("usage")["files"])
    reports = load_artifact(run, "usage", lambda: _usage(str(run.path), file_times))
    if reports:
        st.dataframe(usage_table(reports), hide_index=True)
        st.plotly_chart(usage_summary_figure(reports))
        layers = sorted(reports)
        layer = layer_choice("Layer", layers, penultimate(layers))
        figure = usage_figure(reports[layer])
        figure.update_layout(width=None)
        st.plotly_chart(figure)
