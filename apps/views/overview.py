"""Overview: the model card, the training curve, parameters and active parameters per token, the run's artifacts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_support import display_path, guarded, model_of, require_run
from circuitlab.demo.pipeline import ARTIFACTS
from circuitlab.demo.readers import read_train_log, train_log_figure

st.title("Overview")
run = require_run()
st.caption(f"model `{run.model_spec}` · run folder `{display_path(run.path)}`" + (" · fast samples" if run.manifest.get("fast") else ""))

model = model_of(run, stop=False)
if model is not None:
    config = model.config
    counts = model.parameter_counts()
    total, active = counts["total"], model.active_parameters_per_token()
    left, middle, right = st.columns(3)
    left.metric("parameters", f"{total:,}")
    middle.metric("active parameters per token", f"{active:,}", help="embedding row, unembedding, attention, and for "
                  "sgatlin only the router and the C*k chosen neurons of each layer")
    right.metric("active fraction", f"{active / total:.1%}")
    st.markdown(
        f"**{config.name or run.model_spec}**: {config.n_layers} layers, d_model {config.d_model}, "
        f"{config.n_heads} heads x {config.d_head}, vocabulary {config.d_vocab}, context {config.n_ctx}; "
        f"FFN **{config.feedforward.describe()}**; attention: {config.attention.describe(config.n_heads)}"
        + (f"; {config.bottleneck.design} bottleneck" if config.bottleneck is not None else "")
    )
    parts = pd.DataFrame({"part": list(counts), "parameters": [f"{n:,}" for n in counts.values()]})
    st.dataframe(parts, hide_index=True)

st.header("Model card")
if run.file("card.md").is_file():
    st.markdown(run.file("card.md").read_text(encoding="utf-8", errors="replace"))
elif run.has("card") or run.entry("card"):
    st.info("The model folder has no card.md.")
else:
    st.warning("This run folder has no copy of the model card yet. Make it with:")
    st.code(run.demo_command(), language="bash")

st.header("Training curve")
log_path = run.file("train_log.jsonl")
if log_path.is_file():
    log = guarded(lambda: read_train_log(log_path), "Reading the training log")
    if log is not None and len(log) and any(c in log for c in ("loss", "eval_loss")):
        st.plotly_chart(train_log_figure(log))
    else:
        st.info("train_log.jsonl holds no loss values.")
else:
    st.info("The model folder has no train_log.jsonl (models imported or saved without training have none).")

st.header("The shipped models' validation curves")
from circuitlab.demo.readers import validation_curves, validation_curves_figure  # noqa: E402
from circuitlab.resources import models_root, results_root  # noqa: E402

_SHIPPED = ["sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories"]
curves = guarded(lambda: validation_curves(models_root(), results_root() / "models", _SHIPPED),
                 "Reading the shipped models' training logs")
if curves is not None and len(curves):
    st.caption("All four on one training mixture; seed 0 (shipped) solid, the other training seeds dotted. The "
               "weights kept are those at each curve's lowest point.")
    st.plotly_chart(validation_curves_figure(curves))
else:
    st.info("No shipped model's training log holds validation losses.")

st.header("Artifacts of this run")
rows = []
for key, (what, files) in ARTIFACTS.items():
    entry = run.entry(key) or {}
    status = "missing" if not entry else ("not applicable" if entry.get("skipped") else ("ready" if run.has(key) else "files missing"))
    rows.append({"artifact": key, "what": what, "status": status, "seconds": entry.get("seconds"),
                 "files": ", ".join(entry.get("files", [])) or files, "note": entry.get("skipped", "")})
st.dataframe(pd.DataFrame(rows), hide_index=True)
if any(row["status"] in ("missing", "files missing") for row in rows):
    st.markdown("Make the missing artifacts with:")
    st.code(run.demo_command(), language="bash")
