"""Reading a run folder's artifacts back: tables in the shape the figures expect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

    from circuitlab.demo.runfolder import RunFolder


def nie_for_parquet(table: pandas.DataFrame) -> pandas.DataFrame:
    """Layers and positions mix ints and names ('all', 'noun'); Parquet needs one type per column: strings."""
    out = table.copy()
    for column in ("layer", "position"):
        out[column] = out[column].astype(str)
    return out


def nie_from_parquet(table: pandas.DataFrame) -> pandas.DataFrame:
    """Undo `nie_for_parquet`: numeric layers and positions back to ints (so layer 10 sorts after 9)."""
    out = table.copy()
    for column in ("layer", "position"):
        out[column] = [int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v for v in out[column]]
        out[column] = out[column].astype(object)
    return out


DLA_ATTRS = ("target", "target_id", "logit", "position")


def dla_tables(table: pandas.DataFrame) -> dict[str, pandas.DataFrame]:
    """dla.parquet split back into one attribution table per prompt, with the attrs the DLA figures read."""
    tables = {}
    for prompt, rows in table.groupby("prompt", sort=False):
        rows = rows.drop(columns=["prompt", *DLA_ATTRS]).reset_index(drop=True)
        # Parquet returns list cells as arrays; the figures' hover text expects lists
        rows["promote_tokens"] = [list(v) if v is not None and not isinstance(v, float) else None for v in rows["promote_tokens"]]
        first = table[table["prompt"] == prompt].iloc[0]
        rows.attrs.update(
            target=str(first["target"]), target_id=int(first["target_id"]), logit=float(first["logit"]),
            position=int(first["position"]), baseline_id=None, baseline=None,
        )
        tables[str(prompt)] = rows
    return tables


def load_usage_reports(run: RunFolder) -> dict:
    """The usage artifact as {layer: circuitlab.analysis.usage.UsageReport}."""
    import numpy as np

    from circuitlab.analysis.usage import UsageReport

    summary = json.loads(run.file("usage.json").read_text(encoding="utf-8"))
    reports = {}
    for row in summary["layers"]:
        layer = int(row["layer"])
        with np.load(run.file(f"usage_L{layer}.npz"), allow_pickle=False) as arrays:
            reports[layer] = UsageReport(
                layer=layer, size=int(row["neurons"]), n_tokens=int(row["tokens"]), n_unique_tokens=int(row["unique_tokens"]),
                fraction_used=float(row["fraction_used"]), gini=float(row["gini"]),
                counts=arrays["counts"], frequency=arrays["frequency"],
                coactivation_neurons=arrays["coactivation_neurons"], coactivation=arrays["coactivation"],
                shared_subkey=arrays["shared_subkey"] if "shared_subkey" in arrays.files else None,
                shared_subkey_coactivation=row.get("coactivation_shared_subkey"),
                other_pair_coactivation=row.get("coactivation_other_pairs"),
            )
    return reports


def read_train_log(path: Path) -> pandas.DataFrame:
    """train_log.jsonl as a DataFrame (malformed lines are skipped: a killed run may leave half a line)."""
    import pandas as pd

    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return pd.DataFrame(records)


def train_log_figure(log: pandas.DataFrame) -> Any:
    """Training loss (and running loss, held-out loss where evaluated) against step."""
    import plotly.graph_objects as go

    figure = go.Figure()
    x = log["step"] if "step" in log else log.index
    for column, name, mode in (("loss", "train loss", "lines"), ("running_loss", "running loss", "lines"),
                               ("eval_loss", "validation loss", "lines+markers")):
        if column in log:
            rows = log[column].notna()
            figure.add_trace(go.Scatter(x=x[rows], y=log.loc[rows, column], name=name, mode=mode))
    figure.update_layout(title="Training curve", xaxis_title="step", yaxis_title="cross-entropy (nats)", height=420)
    return figure




def validation_curves(models_root: Path, results_root: Path, names: list[str]) -> pandas.DataFrame:
    """The validation loss each shipped model logged as it trained, one row per evaluation: model, seed, step,
    tokens seen, loss. Every seed kept in results_root/<name>/seed<N>/train_log.jsonl (the record of the
    latest training of all seeds); without a kept seed 0, the shipped folder's log
    (models_root/<name>/train_log.jsonl)."""
    import pandas as pd

    frames = []
    for name in names:
        logs = {int(path.parent.name.removeprefix("seed")): path
                for path in (results_root / name).glob("seed*/train_log.jsonl")}
        logs.setdefault(0, models_root / name / "train_log.jsonl")
        for seed, path in sorted(logs.items()):
            if not path.is_file():
                continue
            log = read_train_log(path)
            if "eval_loss" not in log:
                continue
            rows = log[log["eval_loss"].notna()]
            frames.append(pd.DataFrame({"model": name, "seed": seed, "step": rows["step"].astype(int),
                                        "tokens": rows.get("tokens_seen", rows["step"]), "loss": rows["eval_loss"]}))
    if not frames:
        return pd.DataFrame(columns=["model", "seed", "step", "tokens", "loss"])
    return pd.concat(frames, ignore_index=True)


def validation_curves_figure(curves: pandas.DataFrame) -> Any:
    """The models' validation curves in one figure: loss against tokens seen, one colour per model, seed 0
    solid and the other seeds dotted."""
    import plotly.graph_objects as go

    from plotly.colors import qualitative

    names = sorted(str(name) for name in curves["model"].unique())
    colors = dict(zip(names, qualitative.D3 * (1 + len(names) // len(qualitative.D3))))
    figure = go.Figure()
    for (model, seed), rows in curves.groupby(["model", "seed"], sort=True):
        figure.add_trace(go.Scatter(
            x=rows["tokens"] / 1e6, y=rows["loss"], mode="lines+markers" if seed == 0 else "lines",
            name=f"{model}" + ("" if seed == 0 else f" (seed {seed})"), legendgroup=model, showlegend=seed == 0,
            line=dict(color=colors.get(str(model)), dash="solid" if seed == 0 else "dot", width=2 if seed == 0 else 1),
            marker=dict(size=5)))
    figure.update_layout(title="Validation loss while training (natural validation split + generated stories)",
                         xaxis_title="training tokens seen (millions)", yaxis_title="cross-entropy (nats/token)",
                         height=440, legend=dict(orientation="h", yanchor="bottom", y=-0.35))
    return figure
