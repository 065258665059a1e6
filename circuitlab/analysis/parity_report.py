"""The parity report: the targets of the parity issue, and reading and tabulating the report.

`circuitlab report parity` measures a parity model on held-out natural text and writes the report (a plain
JSON-able dict); `targets` judges it against the issue's targets, for the script and for its readers.
`load_parity_report` reads and checks the JSON; `layer_table`, `usage_table`, `target_table`, `beam_table`,
`ablation_table` and `layer_ablation_table` shape it for the dashboard's Parity page (circuitlab.analysis.
parity_figures draws it), so the page shows the numbers of the file and nothing recomputed beyond the
verdicts, costs (a loss minus the plain loss) and exp(loss).

The report, as the script writes it (fields read here; others are kept but unread):
- `layers[]`: per layer `reconstruction` (||x - x_hat||^2 / ||x||^2 of the FFN write), `agreement` (share of
  the configured beam's top-k in the exhaustive top-k), `certified` (share of tokens certified exact; null for
  an exhaustive encoder), `by_beam` {beam: {agreement, certified}}, `write_over_residual` (mean ||mlp_out|| /
  ||resid_mid||), `distinct_features`, `top100_share`, `coherence`; and the usage diagnostics of
  circuitlab.analysis.code_usage: `features` (m), `effective_features`, `top_feature_share`,
  `over_10_percent`, `dead_share`, `firing_histogram` {edges, counts, dead}, `participation_ratio` (of the
  FFN writes before coding), `variance_share` (sum ||x - mean||^2 / sum ||x||^2 of those writes: the share
  that varies from token to token) and `centred_reconstruction` (the reconstruction error over sum
  ||x - mean||^2: the share of that variation the code misses); per held-out window `window_error`,
  `window_norm` and `window_spread` (sums of ||x - x_hat||^2, ||x||^2 and ||x - mean||^2, the mean of all
  tokens), which the claims file resamples;
- `parity` and `gelu`: `loss`, `loss_writes_zeroed` and `loss_writes_mean_ablated` (nats/token, every FFN
  write zeroed / replaced by its layer's mean write), `zeroed_by_layer` and `mean_ablated_by_layer` (the cost,
  loss minus plain loss, of ablating one layer's write), and for the GELU model its `write_over_residual` and
  `participation_ratio` and `variance_share` per layer; `ablation_share` and `mean_ablation_share` = the parity model's cost of
  ablating every write over the GELU model's; `loss_ratio` = parity loss / GELU loss; `perplexity_ratio` =
  exp(parity loss - GELU loss); `design` (the bottleneck config).
Reports written before the usage diagnostics lack the usage fields, the mean ablations and the ratios: their
targets read "not measured" and their tables hold None there.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from circuitlab.errors import UserError

@dataclass(frozen=True)
class Target:
    """One target of the parity issue: `measured <op> threshold`."""

    op: Literal["<", ">=", "<="]
    threshold: float
    what: str

    @property
    def text(self) -> str:
        return f"{self.op} {self.threshold}"

    def met(self, measured: float) -> bool:
        if self.op == "<":
            return measured < self.threshold
        if self.op == ">=":
            return measured >= self.threshold
        return measured <= self.threshold


TARGETS = {
    "reconstruction": Target("<", 0.05, "relative reconstruction error of the FFN write (worst layer)"),
    "agreement": Target(">=", 0.99, "encoder agreement with the exhaustive top-k at the configured beam (worst layer)"),
    "effective_features": Target(">=", 2000, "effective number of features, exp of the usage entropy (worst layer)"),
    "top_feature_share": Target("<=", 0.10, "share of tokens using the most used feature (worst layer)"),
    "dead_share": Target("<", 0.20, "share of features no held-out token uses (worst layer)"),
    "mean_ablation_share": Target(">=", 0.5, "loss cost of mean-ablating every bottleneck write / of mean-ablating "
                                             "every GELU FFN write"),
    "ablation_share": Target(">=", 0.5, "loss cost of zeroing every bottleneck write / of zeroing every GELU FFN write"),
    "loss_ratio": Target("<=", 1.05, "held-out loss / the GELU model's (within 5%)"),
    "perplexity_ratio": Target("<=", 1.05, "perplexity / the GELU model's (within 5%)"),
}
# per layer: the worst layer is the one the target is read at
WORST = {"reconstruction": max, "agreement": min, "effective_features": min, "top_feature_share": max, "dead_share": max}
NOT_MEASURED = "not measured"


def verdict(met: bool | None) -> str:
    return NOT_MEASURED if met is None else ("met" if met else "missed")


def judged(key: str, measured: float | None) -> str:
    """The verdict of target `key` on a measured value (None: not measured)."""
    return verdict(None if measured is None else TARGETS[key].met(measured))


def targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of the parity issue that the report measures: {key: {measured, target, met}}."""
    layers = report["layers"]
    measured = {key: worst(row[key] for row in layers) for key, worst in WORST.items()
                if all(row.get(key) is not None for row in layers)}
    for key in ("mean_ablation_share", "ablation_share", "loss_ratio", "perplexity_ratio"):
        if report.get(key) is not None:
            measured[key] = report[key]
    return {key: {"measured": value, "target": TARGETS[key].text, "met": TARGETS[key].met(value)}
            for key, value in measured.items()}


# --- reading ---------------------------------------------------------------------------------------------------


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _BeamFigures(_Checked):
    agreement: float
    certified: float


class _Histogram(_Checked):
    edges: list[float]
    counts: list[StrictInt]
    dead: StrictInt


class _Layer(_Checked):
    layer: StrictInt
    reconstruction: float
    agreement: float
    certified: float | None = None
    by_beam: dict[str, _BeamFigures] | None = None
    write_over_residual: float
    distinct_features: StrictInt
    top100_share: float
    coherence: float | None = None
    features: StrictInt | None = None
    effective_features: float | None = None
    top_feature_share: float | None = None
    over_10_percent: StrictInt | None = None
    dead_share: float | None = None
    firing_histogram: _Histogram | None = None
    participation_ratio: float | None = None
    centred_reconstruction: float | None = None  # reports before these figures lack them
    variance_share: float | None = None
    window_error: list[float] | None = None  # per held-out window: summed squared error of the write
    window_norm: list[float] | None = None  # and summed squared norm (reports before these kept totals only)
    window_spread: list[float] | None = None  # and sum ||x - mean||^2, the mean of all tokens (since 2026-12)


class _Losses(_Checked):
    loss: float
    loss_writes_zeroed: float
    loss_writes_mean_ablated: float | None = None
    zeroed_by_layer: list[float] | None = None
    mean_ablated_by_layer: list[float] | None = None
    window_losses: dict[str, list[float]] | None = None  # per held-out window: summed nats of each run


class _Gelu(_Losses):
    model: str
    write_over_residual: list[float]
    participation_ratio: list[float] | None = None
    variance_share: list[float] | None = None


class _Report(_Checked):
    model: str
    design: dict[str, Any]
    tokens: StrictInt
    parity: _Losses
    layers: list[_Layer]
    gelu: _Gelu | None = None
    ablation_share: float | None = None
    mean_ablation_share: float | None = None
    loss_ratio: float | None = None
    perplexity_ratio: float | None = None


def _per_layer_lengths(checked: _Report) -> dict[str, int]:
    """The length of every per-layer list of the report, by its name in the report."""
    lengths = {}
    for name, losses in (("parity", checked.parity), ("gelu", checked.gelu)):
        for field in ("zeroed_by_layer", "mean_ablated_by_layer"):
            values = None if losses is None else getattr(losses, field)
            if values is not None:
                lengths[f"{name}.{field}"] = len(values)
    if checked.gelu is not None:
        lengths["gelu.write_over_residual"] = len(checked.gelu.write_over_residual)
        if checked.gelu.participation_ratio is not None:
            lengths["gelu.participation_ratio"] = len(checked.gelu.participation_ratio)
        if checked.gelu.variance_share is not None:
            lengths["gelu.variance_share"] = len(checked.gelu.variance_share)
    return lengths


def check_parity_report(report: Any, where: str = "the report") -> dict[str, Any]:
    """`report` when it has the shape `circuitlab report parity` writes (the fields of older reports optional);
    UserError naming what is wrong otherwise."""
    if not isinstance(report, dict):
        raise UserError(f"{where} is a JSON {type(report).__name__}, expected an object written by `circuitlab report parity`")
    try:
        checked = _Report.model_validate(report)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'report'}: {item['msg']}"
                             for item in error.errors()[:5])
        raise UserError(f"{where} is not a parity report ({problems}); write it with `circuitlab report parity`") from None
    if not checked.layers:
        raise UserError(f"{where} has no layers; write it with `circuitlab report parity`")
    numbers = [layer.layer for layer in checked.layers]
    if numbers != list(range(len(numbers))):
        raise UserError(f"{where}: layers are numbered {numbers}, expected 0 to {len(numbers) - 1} in order "
                        "(`circuitlab report parity` writes one row per block)")
    for name, length in _per_layer_lengths(checked).items():
        if length != len(checked.layers):
            raise UserError(f"{where}: {name} has {length} layers, the parity model {len(checked.layers)} "
                            "(were the two models of different depth?)")
    windows = {f"layers.{layer.layer}.{field}": len(values) for layer in checked.layers
               for field in ("window_error", "window_norm", "window_spread") if (values := getattr(layer, field)) is not None}
    for name, losses in (("parity", checked.parity), ("gelu", checked.gelu)):
        windows.update({f"{name}.window_losses.{key}": len(values)
                        for key, values in ((losses.window_losses or {}) if losses is not None else {}).items()})
    if len(set(windows.values())) > 1:
        raise UserError(f"{where}: the per-window lists differ in length ("
                        + ", ".join(f"{name} {length}" for name, length in windows.items())
                        + "); every one has a value for each held-out window")
    for layer in checked.layers:
        histogram = layer.firing_histogram
        if histogram is not None and len(histogram.counts) != len(histogram.edges) - 1:
            raise UserError(f"{where}: layer {layer.layer}'s firing_histogram has {len(histogram.counts)} counts for "
                            f"{len(histogram.edges)} edges, expected one count between each two edges")
    return report


def load_parity_report(path: str | os.PathLike) -> dict[str, Any]:
    """The report at `path`, checked (UserError when it is missing, not JSON, or of another shape)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist; write it with `circuitlab report parity` MODEL --gelu GELU_MODEL --json {path}")
    try:
        report = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not JSON ({error}); write it with `circuitlab report parity`") from None
    return check_parity_report(report, str(path))


# --- tables ----------------------------------------------------------------------------------------------------


def n_features(report: dict[str, Any]) -> int | None:
    """m = 2^r, the dictionary size, from the design (None when the design does not say)."""
    n_bits = report.get("design", {}).get("n_bits")
    return 2**n_bits if isinstance(n_bits, int) else None


def _with_target(row: dict[str, Any], key: str, label: str, measured: float | None) -> None:
    row[label] = measured
    row[f"{label} target"] = TARGETS[key].text
    row[f"{label} verdict"] = judged(key, measured)


def layer_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per bottleneck layer: reconstruction and agreement, each beside its target with met / missed;
    the reconstruction of the writes' variation and that variation's share of the writes (beside the GELU
    model's); certified share, write norms and coherence."""
    gelu_ratios = (report.get("gelu") or {}).get("write_over_residual")
    gelu_shares = (report.get("gelu") or {}).get("variance_share")
    rows = []
    for layer in report["layers"]:
        row: dict[str, Any] = {"layer": layer["layer"]}
        _with_target(row, "reconstruction", "reconstruction", layer["reconstruction"])
        _with_target(row, "agreement", "agreement", layer["agreement"])
        row.update({
            "reconstruction of the variation": layer.get("centred_reconstruction"),
            "write variation share": layer.get("variance_share"),
            "GELU write variation share": None if gelu_shares is None else gelu_shares[layer["layer"]],
            "certified": layer.get("certified"),
            "write / residual": layer["write_over_residual"],
            "GELU write / residual": None if gelu_ratios is None else gelu_ratios[layer["layer"]],
            "coherence": layer.get("coherence"),
        })
        rows.append(row)
    return rows


def usage_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per layer: whether the code uses its dictionary (circuitlab.analysis.code_usage), the three
    usage targets beside their figures (None and "not measured" in a report without the diagnostics), and the
    participation ratio of the writes beside the GELU model's."""
    gelu_ratios = (report.get("gelu") or {}).get("participation_ratio")
    m = n_features(report)
    rows = []
    for layer in report["layers"]:
        row: dict[str, Any] = {"layer": layer["layer"], "features used": layer["distinct_features"],
                               "share of dictionary": None if m is None else layer["distinct_features"] / m}
        _with_target(row, "effective_features", "effective features", layer.get("effective_features"))
        _with_target(row, "top_feature_share", "top feature share", layer.get("top_feature_share"))
        row["features over 10%"] = layer.get("over_10_percent")
        _with_target(row, "dead_share", "dead share", layer.get("dead_share"))
        row["top-100 share"] = layer["top100_share"]
        row["participation ratio"] = layer.get("participation_ratio")
        row["GELU participation ratio"] = None if gelu_ratios is None else gelu_ratios[layer["layer"]]
        rows.append(row)
    return rows


def target_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the issue: measured (None when the report lacks it), target, verdict."""
    judged_targets = targets(report)
    return [{"target": key, "what": target.what, "measured": judged_targets.get(key, {}).get("measured"),
             "target value": target.text, "verdict": verdict(judged_targets.get(key, {}).get("met"))}
            for key, target in TARGETS.items()]


def beam_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Encoder agreement and certified share per layer and beam (rows only for layers measured by beam)."""
    configured = report.get("design", {}).get("beam")
    return [{"layer": row["layer"], "beam": int(beam), "agreement": figures["agreement"],
             "certified": figures["certified"], "configured": int(beam) == configured}
            for row in report["layers"]
            for beam, figures in sorted((row.get("by_beam") or {}).items(), key=lambda item: int(item[0]))]


def _cost(losses: dict[str, Any], key: str) -> float | None:
    return None if losses.get(key) is None else losses[key] - losses["loss"]


def ablation_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Loss and perplexity of each model, plain, with every FFN write zeroed and with every write replaced by
    its layer's mean (the parity model's writes are its bottleneck's), and the cost of each ablation."""
    models = [("parity", report["model"], report["parity"], "every bottleneck write")]
    if report.get("gelu") is not None:
        models.append(("GELU", report["gelu"]["model"], report["gelu"], "every FFN write"))
    return [{"model": name, "folder": folder, "ablated": ablated, "loss": losses["loss"],
             "loss zeroed": losses["loss_writes_zeroed"], "zeroing cost": _cost(losses, "loss_writes_zeroed"),
             "loss mean-ablated": losses.get("loss_writes_mean_ablated"),
             "mean-ablation cost": _cost(losses, "loss_writes_mean_ablated"),
             "perplexity": math.exp(losses["loss"]), "perplexity zeroed": math.exp(losses["loss_writes_zeroed"])}
            for name, folder, losses, ablated in models]


def _share(parity: float | None, gelu: float | None) -> float | None:
    return None if parity is None or not gelu else parity / gelu


def layer_ablation_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer, then all layers at once: the loss cost (nats/token) of zeroing the write and of replacing it
    by its layer's mean, in the parity model and the GELU model, and the parity model's share of each; empty
    for a report written without the per-layer ablations."""
    parity, gelu = report["parity"], report.get("gelu") or {}
    if parity.get("zeroed_by_layer") is None or parity.get("mean_ablated_by_layer") is None:
        return []
    rows = []
    zeroed, mean_ablated = ("zeroed_by_layer", "loss_writes_zeroed"), ("mean_ablated_by_layer", "loss_writes_mean_ablated")
    columns = (("parity zeroed", parity, *zeroed), ("parity mean-ablated", parity, *mean_ablated),
               ("GELU zeroed", gelu, *zeroed), ("GELU mean-ablated", gelu, *mean_ablated))
    for layer in range(len(report["layers"])):
        row: dict[str, Any] = {"layer": str(layer)}
        for label, losses, by_layer, _ in columns:
            row[label] = None if losses.get(by_layer) is None else losses[by_layer][layer]
        rows.append(row)
    rows.append({"layer": "all", **{label: _cost(losses, every) if losses else None for label, losses, _, every in columns}})
    for row in rows:
        row["zeroed share"] = _share(row["parity zeroed"], row["GELU zeroed"])
        row["mean-ablated share"] = _share(row["parity mean-ablated"], row["GELU mean-ablated"])
    return rows
