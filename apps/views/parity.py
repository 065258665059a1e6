"""Parity bottleneck: the parity model's bottleneck on held-out text, each figure beside the parity issue's
target (reads the JSON that `circuitlab report parity` writes; no run folder needed)."""

from __future__ import annotations


import pandas as pd
import streamlit as st

from app_support import results_report, sidebar_run_picker
from circuitlab.analysis.parity_figures import ablation_figure, beam_figure, layer_figure
from circuitlab.analysis.parity_report import (
    TARGETS,
    ablation_table,
    beam_table,
    layer_table,
    load_parity_report,
    target_table,
)
from circuitlab.errors import UserError
from circuitlab.resources import results_root

DEFAULT_REPORT = results_root() / "parity" / "parity_report.json"
REPORT_KEY = "parity_report"
VERDICT_COLOURS = {"met": "green", "missed": "red"}
SHARE = st.column_config.NumberColumn(format="%.3f")

st.title("Parity bottleneck")
st.markdown(
    "Every FFN write of the parity model is a sum of exactly k features of a computed dictionary of 2^r "
    "directions (seed 003). Measured on the natural stories' held-out split: how well the k features "
    "**reconstruct** the write, whether the fast encoder **agrees** with the exhaustive top-k, how much the "
    "model **relies** on the bottleneck (every write zeroed, against the same ablation of a GELU model's FFN), "
    "and how the features are **used**. Targets are the parity issue's."
)
sidebar_run_picker()
report = results_report(
    "parity report", DEFAULT_REPORT, "CIRCUITLAB_PARITY_REPORT", REPORT_KEY, load_parity_report,
    "Write it (for the shipped models, or your own parity and GELU models) with:",
    "circuitlab report parity parity-stories --gelu gelu-stories --json {path}",
    (UserError, OSError),
)


def _verdict(text: str) -> str:
    colour = VERDICT_COLOURS.get(text)
    return f":{colour}[{text}]" if colour else text


design = report["design"]
st.caption(f"`{report['model']}` on {report['tokens']:,} held-out tokens; design {design.get('design', '?')}, "
           f"m = 2^{design.get('n_bits', '?')}, k = {design.get('k', '?')}, beam {design.get('beam', '?')}.")

st.header("Targets")
targets = target_table(report)
cells = st.columns(len(targets))
for cell, row in zip(cells, targets):
    measured = "—" if row["measured"] is None else f"{row['measured']:.3f}"
    cell.metric(row["target"].replace("_", " "), measured, help=row["what"])
    cell.markdown(f"target {row['target value']}: {_verdict(row['verdict'])}")
st.dataframe(pd.DataFrame(targets), hide_index=True, column_config={"measured": SHARE})

st.header("Layer by layer")
st.caption(f"Reconstruction: ||x - x_hat||^2 / ||x||^2 of the FFN write, target {TARGETS['reconstruction'].text} in "
           f"every layer. Agreement: share of the configured beam's top-k in the exhaustive top-k, target "
           f"{TARGETS['agreement'].text}; certified: share of tokens whose top-k is proven exact. Write / residual: "
           "mean ||FFN write|| / ||residual stream it joins||. Features used: distinct features over the held-out "
           "tokens; top-100 share: the uses that go to the 100 most used. Coherence: largest |cos| between two "
           "features of the dictionary.")
st.dataframe(pd.DataFrame(layer_table(report)), hide_index=True, column_config={
    name: SHARE for name in ("reconstruction", "agreement", "certified", "write / residual", "GELU write / residual",
                             "share of dictionary", "top-100 share", "coherence")})
st.plotly_chart(layer_figure(report))

beams = beam_table(report)
if beams:
    st.header("Encoder agreement by beam")
    st.plotly_chart(beam_figure(report))
    st.dataframe(pd.DataFrame(beams), hide_index=True, column_config={"agreement": SHARE, "certified": SHARE})

st.header("Every write zeroed")
ablation = ablation_table(report)
st.dataframe(pd.DataFrame(ablation), hide_index=True, column_config={
    name: st.column_config.NumberColumn(format="%.4f") for name in ("loss", "loss zeroed", "cost")} | {
    name: st.column_config.NumberColumn(format="%.2f") for name in ("perplexity", "perplexity zeroed")})
if report.get("gelu") is None:
    st.info("This report has no GELU model to compare with; write it with `--gelu models/gelu-stories` for the "
            "ablation share and the perplexity ratio.")
else:
    share, ratio = report.get("ablation_share"), report.get("perplexity_ratio")
    verdicts = {row["target"]: row["verdict"] for row in targets}
    st.markdown(
        f"Zeroing every bottleneck write costs the parity model "
        f"{'—' if share is None else f'{share:.3f}'} of what zeroing every FFN write costs the GELU model "
        f"(target {TARGETS['ablation_share'].text}: {_verdict(verdicts['ablation_share'])}); its perplexity is "
        f"{'—' if ratio is None else f'{ratio:.3f}'} x the GELU model's (target {TARGETS['perplexity_ratio'].text}, within 5%: "
        f"{_verdict(verdicts['perplexity_ratio'])}).")
st.plotly_chart(ablation_figure(report))
