"""Parity bottleneck: the parity model's bottleneck on held-out text, each figure beside the parity issue's
target, its feature usage and ablations, and the bottleneck beside top-k sparse autoencoders of the same m and k
(reads the JSON that `circuitlab report parity` and `circuitlab report sae` write; no run folder needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from app_support import results_report, sidebar_run_picker
from circuitlab.analysis.parity_figures import (
    ablation_figure,
    beam_figure,
    layer_ablation_figure,
    layer_figure,
    report_firing_figure,
)
from circuitlab.analysis.parity_report import (
    TARGETS,
    ablation_table,
    beam_table,
    layer_ablation_table,
    layer_table,
    load_parity_report,
    target_table,
    usage_table,
)
from circuitlab.analysis.sae_report import (
    COMPARISON_JSON,
    comparison_figure,
    comparison_firing_figure,
    comparison_table,
    load_sae_comparison,
)
from circuitlab.errors import UserError
from circuitlab.resources import results_root

DEFAULT_REPORT = results_root() / "parity" / "parity_report.json"
DEFAULT_COMPARISON = results_root() / "parity" / COMPARISON_JSON
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
           f"every layer. Reconstruction of the variation: the same error over ||x - mean||^2, the part of the write "
           "that changes from token to token (never smaller; the mean write alone scores 1 on it); write variation "
           "share: sum ||x - mean||^2 / sum ||x||^2, beside the GELU model's. A write that is nearly the same at every "
           "token reconstructs well on the first whatever its code keeps. Agreement: share of the configured "
           "beam's top-k in the exhaustive top-k, target "
           f"{TARGETS['agreement'].text}; certified: share of tokens whose top-k is proven exact. Write / residual: "
           "mean ||FFN write|| / ||residual stream it joins||. Coherence: largest |cos| between two features of the "
           "dictionary.")
st.dataframe(pd.DataFrame(layer_table(report)), hide_index=True, column_config={
    name: SHARE for name in ("reconstruction", "reconstruction of the variation", "write variation share",
                             "GELU write variation share", "agreement", "certified", "write / residual",
                             "GELU write / residual", "coherence")})
st.plotly_chart(layer_figure(report))

st.header("Feature usage")
st.caption(f"Over the held-out tokens, per layer. Effective features: exp of the entropy of the share of uses each "
           f"feature gets, target {TARGETS['effective_features'].text}. Top feature share: share of tokens whose code "
           f"holds the most used feature, target {TARGETS['top_feature_share'].text}; features over 10%: how many are "
           f"used by more than a tenth of the tokens. Dead share: features no held-out token uses, target "
           f"{TARGETS['dead_share'].text}. Features used: distinct features; top-100 share: the uses that go to the 100 "
           "most used. Participation ratio: (sum of the writes' covariance eigenvalues)^2 / sum of their squares, "
           "the number of directions the writes spread over, beside the GELU model's. \"not measured\": a report "
           "written before these diagnostics.")
st.dataframe(pd.DataFrame(usage_table(report)), hide_index=True, column_config={
    name: SHARE for name in ("share of dictionary", "top feature share", "dead share", "top-100 share")} | {
    name: st.column_config.NumberColumn(format="%.1f") for name in ("effective features", "participation ratio",
                                                                     "GELU participation ratio")})
st.plotly_chart(report_firing_figure(report))

beams = beam_table(report)
if beams:
    st.header("Encoder agreement by beam")
    st.plotly_chart(beam_figure(report))
    st.dataframe(pd.DataFrame(beams), hide_index=True, column_config={"agreement": SHARE, "certified": SHARE})

st.header("Every write ablated")
st.caption("Zeroed: every FFN write (the parity model's: its bottleneck's reconstruction) replaced by 0. "
           "Mean-ablated: replaced by its layer's mean write over the held-out tokens. Cost: the loss added.")
ablation = ablation_table(report)
st.dataframe(pd.DataFrame(ablation), hide_index=True, column_config={
    name: st.column_config.NumberColumn(format="%.4f") for name in ("loss", "loss zeroed", "zeroing cost",
                                                                     "loss mean-ablated", "mean-ablation cost")} | {
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
    mean_share = report.get("mean_ablation_share")
    st.markdown(
        f"Mean-ablating every bottleneck write costs {'—' if mean_share is None else f'{mean_share:.3f}'} of what "
        f"mean-ablating every GELU FFN write costs (target {TARGETS['mean_ablation_share'].text}: "
        f"{_verdict(verdicts['mean_ablation_share'])}).")
st.plotly_chart(ablation_figure(report))
by_layer = layer_ablation_table(report)
if by_layer:
    st.subheader("One layer at a time")
    st.dataframe(pd.DataFrame(by_layer), hide_index=True, column_config={
        name: st.column_config.NumberColumn(format="%.4f") for name in by_layer[0] if name != "layer"})
    st.plotly_chart(layer_ablation_figure(report))
else:
    st.info("This report predates the per-layer and mean ablations (not measured); write it again with "
            "`circuitlab report parity` for them.")

st.header("Beside a sparse autoencoder")
st.markdown(
    "Top-k sparse autoencoders (Gao et al. 2024) of the same m and k, one per layer, trained on a GELU model's "
    "FFN writes, set beside the parity bottleneck on the same held-out tokens. **Reconstruction**: "
    "||x - x_hat||^2 / ||x||^2. **Loss added**: nats/token the k-feature code costs: the GELU model with that "
    "layer's write replaced by its autoencoder's reconstruction, minus the GELU model; the parity model minus the "
    "parity model with that layer's bottleneck skipped (\"all\": every layer at once). **Probe**: test accuracy "
    "of a logistic-regression probe from the code (or from the raw write it codes) to the word category of "
    "labelled generated stories, beside always answering the commonest category.")
comparison_path = Path(os.environ.get("CIRCUITLAB_SAE_COMPARISON") or DEFAULT_COMPARISON)
if not comparison_path.is_file():
    st.info(f"No sparse autoencoder comparison at `{comparison_path}` yet. Write it (on a GPU for the shipped "
            "models' full size: scripts/gpu_parity_sae.sh) with:")
    st.code(f"circuitlab report sae parity-stories --gelu gelu-stories --sae-dir runs/parity-sae --json {comparison_path}",
            language="bash")
else:
    try:
        comparison = load_sae_comparison(comparison_path)
    except (UserError, OSError) as error:
        st.error(f"`{comparison_path}` cannot be read as a sparse autoencoder comparison ({error}).")
    else:
        config = comparison["sae"].get("config", {})
        st.caption(f"`{comparison['parity']['model']}` beside autoencoders of m = {config.get('n_latents', '?'):,}, "
                   f"k = {config.get('k', '?')} on `{comparison['gelu']['model']}`, {comparison['tokens']:,} held-out "
                   f"tokens; probe on {comparison['probe']['test_tokens']:,} test tokens, majority class "
                   f"{comparison['probe']['majority']:.3f}.")
        table = comparison_table(comparison)
        st.dataframe(pd.DataFrame(table), hide_index=True, column_config={
            name: SHARE for name in ("reconstruction", "top feature share", "dead share", "probe accuracy",
                                     "raw-write probe accuracy", "majority baseline")} | {
            "loss added": st.column_config.NumberColumn(format="%.4f"),
            "effective features": st.column_config.NumberColumn(format="%.1f")})
        st.plotly_chart(comparison_figure(comparison))
        st.plotly_chart(comparison_firing_figure(comparison))
