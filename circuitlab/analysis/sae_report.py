"""The sparse autoencoder comparison (`circuitlab report sae`, circuitlab.analysis.sae_compare): reading and
checking its JSON, and the table, markdown and figures the dashboard's Parity page and the docs show (the
numbers of the file, nothing recomputed).

The comparison, as the command writes it (fields read here):
- `layers[]`: per layer `sae` and `parity`, each with `reconstruction` (sum ||x - x_hat||^2 / sum ||x||^2),
  `loss_added` (nats/token the k-feature reconstruction of that layer's write adds), the usage figures of
  circuitlab.analysis.code_usage (`features`, `effective_features`, `top_feature_share`, `over_10_percent`,
  `dead_share`, `firing_histogram`), `probe` (word-category probe accuracy from the code) and `raw_probe`
  (from the write the code codes);
- `gelu`: `loss`, `loss_spliced` (every layer's write replaced by its autoencoder's reconstruction) and
  `loss_added`; `parity`: `loss`, `loss_uncoded` (every bottleneck skipped) and `loss_added`;
- `probe`: the token split and `majority` (the majority-class baseline's accuracy); `tokens`, `sae` (the
  autoencoders' folder, config and training).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from circuitlab.errors import UserError

if TYPE_CHECKING:
    import plotly.graph_objects

CODES = {"parity": "parity bottleneck", "sae": "top-k SAE"}
# the comparison's files under results/parity/, as `circuitlab report sae` writes them by default
COMPARISON_JSON, COMPARISON_MARKDOWN = "sae_comparison.json", "sae_comparison.md"


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Histogram(_Checked):
    edges: list[float]
    counts: list[StrictInt]
    dead: StrictInt


class _CodeFigures(_Checked):
    reconstruction: float
    loss_added: float
    features: StrictInt
    effective_features: float
    top_feature_share: float
    over_10_percent: StrictInt
    dead_share: float
    firing_histogram: _Histogram
    probe: float
    raw_probe: float


class _Layer(_Checked):
    layer: StrictInt
    sae: _CodeFigures
    parity: _CodeFigures


class _Losses(_Checked):
    model: str
    loss: float
    loss_added: float


class _Gelu(_Losses):
    loss_spliced: float


class _Parity(_Losses):
    loss_uncoded: float


class _Probe(_Checked):
    majority: float
    train_tokens: StrictInt
    test_tokens: StrictInt


class _Comparison(_Checked):
    kind: str
    tokens: StrictInt
    gelu: _Gelu
    parity: _Parity
    sae: dict[str, Any]
    probe: _Probe
    layers: list[_Layer]


def check_sae_comparison(report: Any, where: str = "the comparison") -> dict[str, Any]:
    """`report` when it has the shape `circuitlab report sae` writes; UserError naming what is wrong otherwise."""
    hint = "write it with `circuitlab report sae`"
    if not isinstance(report, dict):
        raise UserError(f"{where} is a JSON {type(report).__name__}, expected an object; {hint}")
    try:
        checked = _Comparison.model_validate(report)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'comparison'}: {item['msg']}"
                             for item in error.errors()[:5])
        raise UserError(f"{where} is not a sparse autoencoder comparison ({problems}); {hint}") from None
    if checked.kind != "sae_comparison":
        raise UserError(f"{where} is a {checked.kind!r} report, not a sparse autoencoder comparison; {hint}")
    numbers = [layer.layer for layer in checked.layers]
    if not numbers or numbers != list(range(len(numbers))):
        raise UserError(f"{where}: layers are numbered {numbers}, expected 0 to {len(numbers) - 1} in order; {hint}")
    for layer in checked.layers:
        for key in CODES:
            histogram = getattr(layer, key).firing_histogram
            if len(histogram.counts) != len(histogram.edges) - 1:
                raise UserError(f"{where}: layer {layer.layer}'s {key} firing_histogram has {len(histogram.counts)} "
                                f"counts for {len(histogram.edges)} edges (expected one fewer); {hint}")
    return report


def load_sae_comparison(path: str | os.PathLike) -> dict[str, Any]:
    """The comparison at `path`, checked (UserError when it is missing, not JSON, or of another shape)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist; write it with `circuitlab report sae` PARITY_MODEL --gelu GELU_MODEL "
                        f"--sae-dir FOLDER --json {path}")
    try:
        report = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not JSON ({error}); write it with `circuitlab report sae`") from None
    return check_sae_comparison(report, str(path))


def comparison_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per layer and code (parity bottleneck, then the autoencoder), and one per code for every layer at
    once (its loss added; the per-layer columns empty)."""
    majority = report["probe"]["majority"]
    rows = []
    for layer in report["layers"]:
        for key, name in CODES.items():
            figures = layer[key]
            rows.append({"layer": str(layer["layer"]), "code": name, "reconstruction": figures["reconstruction"],
                         "loss added": figures["loss_added"], "effective features": figures["effective_features"],
                         "top feature share": figures["top_feature_share"],
                         "features over 10%": figures["over_10_percent"], "dead share": figures["dead_share"],
                         "probe accuracy": figures["probe"], "raw-write probe accuracy": figures["raw_probe"],
                         "majority baseline": majority})
    everything = {"parity": report["parity"]["loss_added"], "sae": report["gelu"]["loss_added"]}
    blank = dict.fromkeys(("reconstruction", "effective features", "top feature share", "features over 10%",
                           "dead share", "probe accuracy", "raw-write probe accuracy", "majority baseline"))
    rows += [{"layer": "all", "code": name, **blank, "loss added": everything[key]} for key, name in CODES.items()]
    return rows


def _cell(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def comparison_markdown(report: dict[str, Any]) -> str:
    """The comparison as the command prints it and results/parity/sae_comparison.md holds."""
    config, probe = report["sae"].get("config", {}), report["probe"]
    gelu, parity = report["gelu"], report["parity"]
    lines = [
        f"parity bottleneck of {parity['model']} beside top-k sparse autoencoders (m {config.get('n_latents', '?'):,}, "
        f"k {config.get('k', '?')}) on the FFN writes of {gelu['model']}, on {report['tokens']:,} held-out natural tokens",
        "| layer | code | recon | loss added | effective features | top feature share | features > 10% | dead share | "
        "probe | raw-write probe |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison_table(report):
        lines.append(
            f"| {row['layer']} | {row['code']} | {_cell(row['reconstruction'], '.4f')} | {row['loss added']:+.4f} | "
            f"{_cell(row['effective features'], ',.1f')} | {_cell(row['top feature share'], '.3f')} | "
            f"{_cell(row['features over 10%'], ',')} | {_cell(row['dead share'], '.3f')} | "
            f"{_cell(row['probe accuracy'], '.3f')} | {_cell(row['raw-write probe accuracy'], '.3f')} |")
    lines += [
        f"GELU loss {gelu['loss']:.4f}; every write replaced by its autoencoder's reconstruction {gelu['loss_spliced']:.4f} "
        f"({gelu['loss_added']:+.4f})",
        f"parity loss {parity['loss']:.4f}; every bottleneck skipped (writes uncoded) {parity['loss_uncoded']:.4f} "
        f"(coding adds {parity['loss_added']:+.4f})",
        f"word-category probe: {probe['train_tokens']:,} training and {probe['test_tokens']:,} test tokens of the held-out "
        f"generated stories; majority class {probe['majority']:.3f}",
    ]
    return "\n".join(lines)


def comparison_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """Per layer, parity bottleneck beside autoencoder: reconstruction error, loss added, effective features,
    and probe accuracy from the code (solid) and the raw write (hatched) above the majority baseline (dotted)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from circuitlab.analysis.parity_figures import GELU_COLOUR, PARITY_COLOUR, TARGET_COLOUR

    layers = [f"L{layer['layer']}" for layer in report["layers"]]
    colours = {"parity": PARITY_COLOUR, "sae": GELU_COLOUR}
    figure = make_subplots(rows=1, cols=4, subplot_titles=["reconstruction error", "loss added (nats/token)",
                                                            "effective features", "word-category probe accuracy"])
    for key, name in CODES.items():
        for col, field in ((1, "reconstruction"), (2, "loss_added"), (3, "effective_features")):
            figure.add_trace(go.Bar(x=layers, y=[layer[key][field] for layer in report["layers"]], name=name,
                                    legendgroup=name, showlegend=col == 1, marker_color=colours[key]), row=1, col=col)
        figure.add_trace(go.Bar(x=layers, y=[layer[key]["probe"] for layer in report["layers"]], name=f"{name}: code",
                                marker_color=colours[key]), row=1, col=4)
        figure.add_trace(go.Bar(x=layers, y=[layer[key]["raw_probe"] for layer in report["layers"]],
                                name=f"{name}: raw write", marker_color=colours[key], marker_pattern_shape="/"),
                         row=1, col=4)
    figure.add_hline(y=report["probe"]["majority"], line_dash="dot", line_color=TARGET_COLOUR, row=1, col=4)
    figure.update_yaxes(range=[0, 1.05], row=1, col=4)
    figure.update_layout(title="Parity bottleneck and top-k sparse autoencoder, layer by layer", barmode="group",
                         width=1300, height=430, legend=dict(orientation="h", y=-0.18))
    return figure


def comparison_firing_figure(report: dict[str, Any]) -> plotly.graph_objects.Figure:
    """The two codes' firing-frequency histograms, one panel a layer."""
    from circuitlab.analysis.parity_figures import firing_figure

    return firing_figure({name: [layer[key]["firing_histogram"] for layer in report["layers"]]
                          for key, name in CODES.items()},
                         "How often each feature fires on held-out tokens: parity bottleneck and autoencoder")
