"""Neuron usage and co-activation (seed 000, appendix C.1, figure 8).

For each layer's codes (a neuron is *active* for a token when its index is in the token's code, whatever
its gate value):

- fraction used: the fraction of the layer's `size` neurons active for at least one token.
- activation frequency, counting each unique input token once: with occ(t) the occurrences of token id t
  and U the number of distinct token ids,

      f_j = (1 / U) * sum_t (1 / |occ(t)|) * #{o in occ(t) : j active at o}

  i.e. the probability that neuron j is active for a token drawn uniformly from the distinct input tokens
  (averaged over that token's occurrences). Frequent tokens ("the", ".") would otherwise dominate.
- Gini coefficient of f over all `size` neurons (unused ones included, as zeros):

      G = sum_i sum_j |f_i - f_j| / (2 n^2 mean(f))

  0 when every neuron is used equally, (n-1)/n when one neuron does all the work. Seed 000 reports 0.58.
- co-activation of the first `n_coactivation` (128) neurons: P[i, j] = P(j active | i active) over token
  occurrences (row i is NaN when i is never active). For sgatlin, neuron i = i1 * n + i2 of a channel
  (product keys, seed 000 eq. 1) shares a subkey with every neuron of its channel with the same i1 or the
  same i2; those pairs are marked, and the mean co-activation of shared-subkey pairs is compared with
  that of the other pairs (the appendix's observation: sharing a subkey raises co-activation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float, Int

from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.errors import UserError


def gini(values: Float[np.ndarray, " n"]) -> float:
    """Gini coefficient of non-negative values: sum_ij |x_i - x_j| / (2 n^2 mean); 0 for all-zero input."""
    values = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if values.size == 0:
        raise UserError("the Gini coefficient of an empty set is undefined")
    if values[0] < 0:
        raise UserError(f"the Gini coefficient needs non-negative values; the smallest is {values[0]}")
    total = values.sum()
    if total == 0:
        return 0.0
    n = values.size
    ranks = np.arange(1, n + 1)
    # Sorted form of the mean absolute difference: sum_ij |x_i - x_j| = 2 sum_i (2i - n - 1) x_(i).
    return float(np.sum((2 * ranks - n - 1) * values) / (n * total))


def active_pairs(codes: CodeMatrix) -> tuple[Int[np.ndarray, " A"], Int[np.ndarray, " A"]]:
    """(row, neuron) of every active neuron, each once per row (canonical rows list a merged index once)."""
    first = np.ones(codes.indices.shape, dtype=bool)
    first[:, 1:] = codes.indices[:, 1:] != codes.indices[:, :-1]
    rows = np.broadcast_to(np.arange(len(codes))[:, None], codes.indices.shape)
    return rows[first], codes.indices[first].astype(np.int64)


def activation_counts(codes: CodeMatrix) -> Int[np.ndarray, " size"]:
    """How many token occurrences activate each neuron."""
    _, neurons = active_pairs(codes)
    return np.bincount(neurons, minlength=codes.size)


def activation_frequency(
    codes: CodeMatrix, token_ids: Int[np.ndarray, " R"] | None, unique_tokens: bool = True
) -> Float[np.ndarray, " size"]:
    """f_j of the module docstring (unique_tokens=False: the plain fraction of occurrences)."""
    rows, neurons = active_pairs(codes)
    if unique_tokens:
        if token_ids is None:
            raise UserError("counting each unique token once needs the token id of every row")
        token_ids = np.asarray(token_ids)
        if token_ids.shape != (len(codes),):
            raise UserError(f"token_ids must have one id per code row ({len(codes)}), got shape {token_ids.shape}")
        _, token_index, occurrences = np.unique(token_ids, return_inverse=True, return_counts=True)
        row_weight = 1.0 / occurrences[token_index] / occurrences.size
    else:
        row_weight = np.full(len(codes), 1.0 / max(len(codes), 1))
    return np.bincount(neurons, weights=row_weight[rows], minlength=codes.size)


def weighted_usage(
    codes: CodeMatrix, token_ids: Int[np.ndarray, " R"], multiplicity: Float[np.ndarray, " R"]
) -> tuple[float, float]:
    """(Gini of the unique-token activation frequency, fraction of neurons used) of the rows taken
    `multiplicity` times each (0: left out): what `neuron_usage` gives for the rows repeated that often."""
    rows, neurons = active_pairs(codes)
    multiplicity = np.asarray(multiplicity, dtype=np.float64)
    _, token_index = np.unique(np.asarray(token_ids), return_inverse=True)
    occurrences = np.bincount(token_index, weights=multiplicity)
    n_types = int((occurrences > 0).sum())
    if n_types == 0:
        raise UserError("no rows are taken: usage of an empty sample is undefined")
    row_weight = np.where(multiplicity > 0, multiplicity / np.where(occurrences > 0, occurrences, 1.0)[token_index], 0.0)
    frequency = np.bincount(neurons, weights=row_weight[rows] / n_types, minlength=codes.size)
    used = np.bincount(neurons, weights=multiplicity[rows], minlength=codes.size) > 0
    return gini(frequency), float(used.mean())


def usage_bootstrap(
    codes_by_layer: dict[int, CodeMatrix], token_ids: Int[np.ndarray, " R"], sequence_ids: Int[np.ndarray, " R"],
    n_resamples: int = 200, seed: int = 0,
) -> dict[str, Float[np.ndarray, "B L"]]:
    """Each layer's Gini and fraction of neurons used over `n_resamples` resamples of whole sequences (stories,
    drawn with replacement; the same draw for every layer): {"gini": [B, L], "fraction_used": [B, L]}, layers
    in the order of `codes_by_layer`. Percentiles of a row's function of these give its 95% interval."""
    sequence_ids = np.asarray(sequence_ids)
    sequences, sequence_index = np.unique(sequence_ids, return_inverse=True)
    if sequences.size < 2:
        raise UserError(f"resampling sequences needs at least two of them, got {sequences.size}")
    draws = np.random.default_rng(seed).integers(0, sequences.size, size=(n_resamples, sequences.size))
    out = {"gini": np.empty((n_resamples, len(codes_by_layer))), "fraction_used": np.empty((n_resamples, len(codes_by_layer)))}
    for draw_number, draw in enumerate(draws):
        multiplicity = np.bincount(draw, minlength=sequences.size)[sequence_index]
        for column, codes in enumerate(codes_by_layer.values()):
            out["gini"][draw_number, column], out["fraction_used"][draw_number, column] = \
                weighted_usage(codes, token_ids, multiplicity)
    return out


def coactivation(codes: CodeMatrix, neurons: Int[np.ndarray, " m"]) -> Float[np.ndarray, "m m"]:
    """P[i, j] = P(neuron j active | neuron i active) over token occurrences; NaN rows for unused neurons."""
    from scipy import sparse

    neurons = np.asarray(neurons, dtype=np.int64)
    position = np.full(codes.size, -1, dtype=np.int64)
    position[neurons] = np.arange(neurons.size)
    rows, active = active_pairs(codes)
    keep = position[active] >= 0
    incidence = sparse.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.float64), (rows[keep], position[active[keep]])),
        shape=(len(codes), neurons.size),
    )
    together = (incidence.T @ incidence).toarray()
    alone = np.diag(together).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(alone[:, None] > 0, together / np.where(alone > 0, alone, 1.0)[:, None], np.nan)


def shared_subkey_mask(neurons: Int[np.ndarray, " m"], neurons_per_channel: int) -> Bool[np.ndarray, "m m"]:
    """True where two distinct sgatlin neurons (channel-offset ids c * N + i1 * n + i2) share a subkey."""
    keys_per_half = int(round(np.sqrt(neurons_per_channel)))
    if keys_per_half * keys_per_half != neurons_per_channel:
        raise UserError(f"sgatlin neurons per channel must be a perfect square, got {neurons_per_channel}")
    neurons = np.asarray(neurons, dtype=np.int64)
    channel, local = np.divmod(neurons, neurons_per_channel)
    first_key, second_key = np.divmod(local, keys_per_half)
    same_channel = channel[:, None] == channel[None, :]
    shares = (first_key[:, None] == first_key[None, :]) | (second_key[:, None] == second_key[None, :])
    return same_channel & shares & ~np.eye(neurons.size, dtype=bool)


@dataclass
class UsageReport:
    """Usage statistics of one layer (see the module docstring for the definitions)."""

    layer: int
    size: int
    n_tokens: int
    n_unique_tokens: int
    fraction_used: float
    gini: float
    counts: Int[np.ndarray, " size"]
    frequency: Float[np.ndarray, " size"]
    coactivation_neurons: Int[np.ndarray, " m"]
    coactivation: Float[np.ndarray, "m m"]
    shared_subkey: Bool[np.ndarray, "m m"] | None
    shared_subkey_coactivation: float | None
    other_pair_coactivation: float | None

    def summary(self) -> dict:
        return {
            "layer": self.layer,
            "neurons": self.size,
            "tokens": self.n_tokens,
            "unique_tokens": self.n_unique_tokens,
            "fraction_used": self.fraction_used,
            "gini": self.gini,
            "coactivation_shared_subkey": self.shared_subkey_coactivation,
            "coactivation_other_pairs": self.other_pair_coactivation,
        }


def neuron_usage(
    codes: CodeMatrix,
    token_ids: Int[np.ndarray, " R"],
    *,
    layer: int = 0,
    layout: dict | None = None,
    n_coactivation: int = 128,
    n_summary: int = 1024,
) -> UsageReport:
    """Usage statistics of one layer's codes; a channelled product-key `layout` (one with "neurons_per_channel",
    as a circuit database records sgatlin's) enables the shared-subkey marking.

    The shared-subkey and other-pair means are taken over the first `n_summary` neurons (one whole channel
    of the shipped sgatlin models), off the diagonal, over neurons that are ever active.
    """
    token_ids = np.asarray(token_ids)
    counts = activation_counts(codes)
    frequency = activation_frequency(codes, token_ids, unique_tokens=True)
    shown = np.arange(min(n_coactivation, codes.size))
    probabilities = coactivation(codes, shown)
    shared = shared_mean = other_mean = None
    if layout and "neurons_per_channel" in layout:
        per_channel = int(layout["neurons_per_channel"])
        shared = shared_subkey_mask(shown, per_channel)
        summary_neurons = np.arange(min(n_summary, codes.size))
        summary_probabilities = coactivation(codes, summary_neurons)
        summary_shared = shared_subkey_mask(summary_neurons, per_channel)
        off_diagonal = ~np.eye(summary_neurons.size, dtype=bool) & np.isfinite(summary_probabilities)
        if (summary_shared & off_diagonal).any():
            shared_mean = float(summary_probabilities[summary_shared & off_diagonal].mean())
        if (~summary_shared & off_diagonal).any():
            other_mean = float(summary_probabilities[~summary_shared & off_diagonal].mean())
    return UsageReport(
        layer=layer,
        size=codes.size,
        n_tokens=len(codes),
        n_unique_tokens=int(np.unique(token_ids).size),
        fraction_used=float((counts > 0).mean()),
        gini=gini(frequency),
        counts=counts,
        frequency=frequency,
        coactivation_neurons=shown,
        coactivation=probabilities,
        shared_subkey=shared,
        shared_subkey_coactivation=shared_mean,
        other_pair_coactivation=other_mean,
    )


def database_usage(db, layers: Sequence[int] | None = None, **options) -> dict[int, UsageReport]:
    """`neuron_usage` of every (or the given) layer of a circuit database."""
    token_ids = db.metadata["token_id"].to_numpy()
    return {
        layer: neuron_usage(db.codes[layer], token_ids, layer=layer, layout=db.layer_layouts.get(layer), **options)
        for layer in (db.layers if layers is None else layers)
    }


def usage_table(reports: dict[int, UsageReport]):
    """One row per layer: neurons, tokens, fraction used, Gini, shared-subkey vs other co-activation."""
    import pandas as pd

    return pd.DataFrame([report.summary() for report in reports.values()])


def usage_figure(report: UsageReport):
    """Seed 000, figure 8 for one layer: co-activation of the first neurons (shared-subkey pairs marked),
    how often each neuron is active, and the Lorenz curve of the unique-token activation frequency."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    # the co-activation matrix on the left over both rows, the two curves stacked on the right, the colour bar
    # under the matrix: no label meets another at any width the dashboard gives it
    figure = make_subplots(
        rows=2,
        cols=2,
        specs=[[{"rowspan": 2}, {}], [None, {}]],
        column_widths=[0.5, 0.5],
        horizontal_spacing=0.12,
        vertical_spacing=0.2,
        subplot_titles=(
            f"co-activation P(j | i), first {report.coactivation_neurons.size} neurons",
            f"activations per neuron ({report.fraction_used:.1%} used at least once)",
            f"activation frequency, Gini {report.gini:.2f}",
        ),
    )
    shown = report.coactivation_neurons
    matrix = report.coactivation.copy()
    np.fill_diagonal(matrix, np.nan)
    figure.add_trace(
        go.Heatmap(
            z=matrix, x=shown, y=shown, colorscale="Magma",
            colorbar={"title": {"text": "P(j|i)", "side": "top"}, "orientation": "h", "x": 0.22, "xanchor": "center",
                      "y": -0.12, "yanchor": "top", "len": 0.4, "thickness": 12},
            hovertemplate="i %{y}, j %{x}: %{z:.3f}<extra></extra>",
        ),
        row=1, col=1,
    )
    if report.shared_subkey is not None:
        rows, cols = np.nonzero(report.shared_subkey)
        figure.add_trace(
            go.Scattergl(
                x=shown[cols], y=shown[rows], mode="markers", name="shares a subkey",
                marker={"symbol": "square-open", "size": 3, "color": "rgba(80,200,255,0.6)"},
                hoverinfo="skip",
            ),
            row=1, col=1,
        )
    figure.update_yaxes(autorange="reversed", title_text="neuron i", row=1, col=1)
    figure.update_xaxes(title_text="neuron j", row=1, col=1)
    order = np.argsort(report.counts)[::-1]
    figure.add_trace(
        go.Scattergl(x=np.arange(report.size), y=report.counts[order], mode="lines", name="activations", showlegend=False),
        row=1, col=2,
    )
    figure.update_xaxes(title_text="neuron (sorted by activations)", row=1, col=2)
    figure.update_yaxes(title_text="token occurrences", type="log", row=1, col=2)
    sorted_frequency = np.sort(report.frequency)
    total = sorted_frequency.sum()
    lorenz = np.concatenate([[0.0], np.cumsum(sorted_frequency) / total]) if total > 0 else np.zeros(report.size + 1)
    share = np.linspace(0, 1, report.size + 1)
    figure.add_trace(go.Scattergl(x=share, y=lorenz, mode="lines", name="Lorenz curve"), row=2, col=2)
    figure.add_trace(
        go.Scattergl(x=[0, 1], y=[0, 1], mode="lines", name="equal use", line={"dash": "dot", "color": "grey"}),
        row=2, col=2,
    )
    figure.update_xaxes(title_text="fraction of neurons", row=2, col=2)
    figure.update_yaxes(title_text="fraction of activations", row=2, col=2)
    figure.update_layout(
        title=f"Neuron usage, layer {report.layer} ({report.n_tokens} tokens, {report.n_unique_tokens} unique)",
        width=1100, height=820, margin={"b": 140},
        legend={"orientation": "h", "x": 1.0, "xanchor": "right", "y": -0.12, "yanchor": "top"},
    )
    return figure


def usage_summary_figure(reports: dict[int, UsageReport]):
    """Fraction of neurons used and Gini per layer, side by side."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    layers = [f"layer {layer}" for layer in reports]
    figure = make_subplots(rows=1, cols=2, subplot_titles=("fraction of neurons used", "Gini of activation frequency"))
    figure.add_trace(go.Bar(x=layers, y=[r.fraction_used for r in reports.values()], showlegend=False), row=1, col=1)
    figure.add_trace(go.Bar(x=layers, y=[r.gini for r in reports.values()], showlegend=False), row=1, col=2)
    figure.update_yaxes(range=[0, 1])
    figure.update_layout(width=900, height=400, title="Neuron usage per layer")
    return figure
