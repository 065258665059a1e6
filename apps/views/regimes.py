"""Pressure regimes: the legible models of seed 002's four regimes side by side, with the seed's numbers
(reads the JSON that `circuitlab report legibility` writes; no run folder needed)."""

from __future__ import annotations


import pandas as pd
import streamlit as st

from app_support import results_report, sidebar_run_picker
from circuitlab.analysis.legibility_report import (
    load_report,
    regime_table,
    report_figure,
)
from circuitlab.errors import UserError
from circuitlab.resources import results_root

DEFAULT_REPORT = results_root() / "legible-sweep" / "legibility_regimes.json"
REPORT_KEY = "regimes_report"

st.title("Pressure regimes")
st.markdown(
    "The legible model trained under each selectivity regime of seed 002 (none, sparsity alone, crispness "
    "alone, both pressures), measured on the natural stories' held-out split. An operand channel is **alive** "
    "when it is decisively on (> 0.9) for between 1% and 99% of tokens; **dead** below, **stuck on** above."
)
sidebar_run_picker()
report = results_report(
    "legibility report", DEFAULT_REPORT, "CIRCUITLAB_REGIMES_REPORT", REPORT_KEY, load_report,
    "Train a model under each regime, then write it with:",
    "for regime in none sparse both; do\n"
    "  circuitlab train --preset legible-stories-$regime --natural --out runs/legible-$regime\n"
    "done\n"
    "circuitlab train --preset legible-stories --natural --out runs/legible-crisp\n"
    "circuitlab report legibility runs/legible-* --json {path}",
    (UserError, OSError, ValueError, KeyError),  # unreadable, outdated, or not a report
)

st.header("Regimes side by side")
st.dataframe(pd.DataFrame(regime_table(report)).round(2), hide_index=True)
cells = st.columns(max(1, len(report["models"])))
for cell, model in zip(cells, report["models"]):
    alive = model["alive"]
    cell.metric(f"{model['name']} ({model['regime']})",
                "target met" if model["meets_alive_target"] else "target not met",
                help="at least half the FFN and half the attention operand channels alive")
    cell.caption(" · ".join(f"{surface} alive {100 * value:.0f}%" for surface, value in alive.items() if value is not None))

st.plotly_chart(report_figure(report))

st.header("Beside seed 002")
st.caption("Each row names the table or figure of seed 002 it is compared with; — where the seed has no such number.")
comparison = pd.DataFrame(report["comparison"])
comparison["seed"] = comparison["seed"].map(lambda v: "—" if v is None else (f"{v[0]}-{v[1]}" if isinstance(v, list) else str(v)))
st.dataframe(comparison.round(2), hide_index=True, column_config={"source": st.column_config.TextColumn(width="large")})

st.header("One model, layer by layer and head by head")
names = [model["name"] for model in report["models"]]
chosen = report["models"][names.index(st.selectbox("Model", names))]
st.dataframe(pd.DataFrame(chosen["by_layer"]).round(4), hide_index=True)
if chosen["by_head"]:
    st.dataframe(pd.DataFrame(chosen["by_head"]).round(4), hide_index=True)
pressures = chosen.get("pressures") or {}
if pressures.get("first"):
    st.markdown(f"**Pressures** ({pressures['rule']}): step 1 {pressures['first']['total']:.4f} nats/token beside an LM "
                f"loss of {pressures['first']['lm_loss']:.4f}; last 10% of steps {pressures['final']['total']:.4f} "
                f"beside {pressures['final']['lm_loss']:.4f}.")
else:
    st.markdown(f"**Pressures**: {pressures.get('rule', 'not recorded (no metrics.json beside the model)')}")
