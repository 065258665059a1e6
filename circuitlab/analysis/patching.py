"""Causal patching: the normalized indirect effect (NIE) of seed 000, section 4.3, on any hook.

For a clean prompt x_clean with answer y_clean and a counterfactual x_patch with answer y_patch,

    m(x)  = logit(y_clean | x) - logit(y_patch | x)            read at the prompt's final position
    NIE   = (m(x_clean | do(g = g_patch)) - m(x_clean)) / (m(x_patch) - m(x_clean))

where do(g = g_patch) overwrites the activation g of the clean run, at chosen layers and positions, with
the value it had in the patch run. The default g is each block's natural code, the hooks its FFN's last
stage declares (CodeLayer.code_hooks): sgatlin gate indices and gate values together (the circuit of seed
000), the parity bottleneck's code indices and coefficients, and otherwise the FFN unit activations
`mlp.hook_post` (NC-FFN operators, dense units). Any other hook with a
[batch, pos, ...] layout can be named instead (residual stream, per-head outputs, ...). NIE 0 means the
intervention changed nothing; NIE 1 means it moved the clean run all the way to the patch run's answer.

Positions pair up by role (noun -> noun, final -> final), so prompts of different lengths can be patched;
"all" needs equal lengths or an explicit alignment. Interventions are batched: each one is a copy of the
clean prompt in one batch row, patched only in its own row, so one forward pass evaluates many.

Shape letters: B batch (one row per intervention), T position, V vocabulary, M patched entries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuitlab.analysis.pairs import MIN_LOGIT_DIFFERENCE, PatchPair, as_patch_pair
from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas
    import plotly.graph_objects

POSITION_ROLES = ("noun", "final", "all")

# hooks whose axis 1 is not the token position cannot be patched by position
_NOT_POSITIONAL = ("hook_attn_scores", "hook_pattern")


# --- interventions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Patch:
    """Overwrite `hook` at the clean run's `positions` with the patch run's values at `source_positions`.

    `index` restricts the patch to one entry of the hook's third axis (a head of attn.hook_result, a channel
    of sgatlin gates, a unit of mlp.hook_post); None patches the whole slice.
    """

    hook: str
    positions: tuple[int, ...]
    source_positions: tuple[int, ...]
    index: int | None = None


Intervention = tuple[Patch, ...]


def natural_code_hooks(model: Any, layer: int) -> list[str]:
    """The hooks that carry layer `layer`'s circuit code, as the block's FFN declares them (the last stage
    of its write): do(g = g_patch) patches these together."""
    hooks = model.blocks[layer].ffn_code_layer.code_hooks()
    if not hooks:
        raise UserError(f"layer {layer} has no FFN code hook; name the hooks to patch with hooks=[...]")
    return hooks


def _check_hook(model: Any, name: str) -> None:
    if name not in model.hook_dict:
        stem = name.rsplit(".", 1)[-1]
        similar = sorted(h for h in model.hook_dict if h.endswith(stem))[:6]
        raise UserError(
            f"the model has no hook {name!r}"
            + (f"; hooks with that ending: {similar}" if similar else "; list them with `circuitlab summary`")
        )
    if name.endswith(_NOT_POSITIONAL):
        raise UserError(
            f"{name} is laid out [batch, head, query, key], not [batch, pos, ...]; patch attn.hook_z or "
            "attn.hook_result per head instead"
        )


def _layer_hooks(model: Any, hooks: str | Sequence[str] | Callable[[int], list[str]] | None, layer: int) -> list[str]:
    if hooks is None:
        names = natural_code_hooks(model, layer)
    elif callable(hooks):
        names = list(hooks(layer))
    else:
        templates = [hooks] if isinstance(hooks, str) else list(hooks)
        for template in templates:
            if "{layer}" not in template:
                raise UserError(
                    f"hook template {template!r} has no '{{layer}}' placeholder; write e.g. "
                    "'blocks.{layer}.hook_resid_pre' (patch a single hook with layers=[l])"
                )
        names = [template.format(layer=layer) for template in templates]
    for name in names:
        _check_hook(model, name)
    return names


def _hooks_label(model: Any, hooks: Any) -> str:
    if hooks is None:
        return "natural code: " + ", ".join(h.split(".", 2)[-1] for h in natural_code_hooks(model, 0))
    if callable(hooks):
        return getattr(hooks, "__name__", "custom")
    return ", ".join([hooks] if isinstance(hooks, str) else list(hooks))


# --- the batched engine ----------------------------------------------------------------------------------


def run_interventions(
    model: Any,
    pairs: Sequence[PatchPair],
    rows: Sequence[tuple[int, Intervention]],
    batch_size: int = 64,
    progress: bool = True,
) -> tuple[Float[Tensor, "rows"], Float[Tensor, "pairs"]]:
    """m(x_clean | do(...)) for each (pair index, intervention) row, and m(x_patch) for each pair.

    Each row is one copy of its pair's clean prompt, patched in its own batch row only; rows of equal prompt
    length share forward passes of up to `batch_size` rows. An empty intervention gives the unpatched
    m(x_clean). The patch prompts run once, caching only the hooks the interventions read."""
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    device = model.W_E.device
    needed = sorted({patch.hook for _, intervention in rows for patch in intervention})
    sources = _patch_activations(model, pairs, needed, batch_size)

    by_length: dict[int, list[int]] = {}
    for row, (pair_index, _) in enumerate(rows):
        by_length.setdefault(len(pairs[pair_index].clean_tokens), []).append(row)
    chunks = [group[start : start + batch_size] for group in by_length.values() for start in range(0, len(group), batch_size)]
    metric = torch.empty(len(rows), dtype=torch.float64)
    with torch.no_grad():
        for chunk in tqdm(chunks, desc="patching", disable=not progress or len(chunks) < 2, leave=False):
            tokens_BxT = torch.tensor([pairs[rows[r][0]].clean_tokens for r in chunk], dtype=torch.long, device=device)
            fwd_hooks = _batched_patch_hooks([rows[r] for r in chunk], sources)
            logits_BxTxV = model.run_with_hooks(tokens_BxT, fwd_hooks=fwd_hooks)
            metric[chunk] = _logit_difference(logits_BxTxV, [pairs[rows[r][0]] for r in chunk], patched_side=False)
    return metric, sources.metric


def _logit_difference(logits_BxTxV: Tensor, pairs: Sequence[PatchPair], patched_side: bool) -> Tensor:
    """m(x) = logit(y_clean) - logit(y_patch) at each row's final position (seed 000, section 4.3)."""
    rows = torch.arange(len(pairs), device=logits_BxTxV.device)
    final = torch.tensor([p.patch_final if patched_side else p.clean_final for p in pairs], device=logits_BxTxV.device)
    final_BxV = logits_BxTxV[rows, final].double()
    clean_ids = torch.tensor([p.clean_answer_id for p in pairs], device=logits_BxTxV.device)
    patch_ids = torch.tensor([p.patch_answer_id for p in pairs], device=logits_BxTxV.device)
    return (final_BxV[rows, clean_ids] - final_BxV[rows, patch_ids]).cpu()


@dataclass
class _PatchSources:
    """Per pair: the patch run's activations at the needed hooks ([T_patch, ...] each) and m(x_patch)."""

    activations: list[dict[str, Tensor]]
    metric: Tensor


def _patch_activations(model: Any, pairs: Sequence[PatchPair], hooks: list[str], batch_size: int) -> _PatchSources:
    device = model.W_E.device
    activations: list[dict[str, Tensor]] = [{} for _ in pairs]
    metric = torch.empty(len(pairs), dtype=torch.float64)
    by_length: dict[int, list[int]] = {}
    for index, pair in enumerate(pairs):
        by_length.setdefault(len(pair.patch_tokens), []).append(index)
    wanted = set(hooks)
    with torch.no_grad():
        for group in by_length.values():
            for start in range(0, len(group), batch_size):
                chunk = group[start : start + batch_size]
                tokens_BxT = torch.tensor([pairs[i].patch_tokens for i in chunk], dtype=torch.long, device=device)
                logits_BxTxV, cache = model.run_with_cache(tokens_BxT, names_filter=lambda name: name in wanted)
                metric[chunk] = _logit_difference(logits_BxTxV, [pairs[i] for i in chunk], patched_side=True)
                for row, pair_index in enumerate(chunk):
                    activations[pair_index] = {name: cache[name][row] for name in hooks}
    return _PatchSources(activations, metric)


def _batched_patch_hooks(chunk_rows: Sequence[tuple[int, Intervention]], sources: _PatchSources) -> list[tuple[str, Callable]]:
    """Forward hooks writing every row's patches into that batch row only: one per (hook, whole-slice or
    single-index) combination, each a single indexed assignment."""
    entries: dict[tuple[str, bool], dict[str, list]] = {}
    for batch_row, (pair_index, intervention) in enumerate(chunk_rows):
        for patch in intervention:
            source = sources.activations[pair_index][patch.hook][list(patch.source_positions)]
            entry = entries.setdefault((patch.hook, patch.index is not None), {"rows": [], "positions": [], "units": [], "values": []})
            entry["rows"] += [batch_row] * len(patch.positions)
            entry["positions"] += list(patch.positions)
            if patch.index is None:
                entry["values"].append(source)
            else:
                entry["units"] += [patch.index] * len(patch.positions)
                entry["values"].append(source[:, patch.index])
    return [
        (name, _slice_writer(entry["rows"], entry["positions"], entry["units"] if by_index else None, torch.cat(entry["values"])))
        for (name, by_index), entry in entries.items()
    ]


def _slice_writer(rows: list[int], positions: list[int], units: list[int] | None, values_MxRest: Tensor) -> Callable:
    def write(activation: Tensor, hook: Any) -> Tensor:
        patched = activation.clone()
        row_index = torch.tensor(rows, device=activation.device)
        position_index = torch.tensor(positions, device=activation.device)
        values = values_MxRest.to(activation.device, activation.dtype)
        if units is None:
            patched[row_index, position_index] = values
        else:
            patched[row_index, position_index, torch.tensor(units, device=activation.device)] = values
        return patched

    return write


# --- the NIE grid ----------------------------------------------------------------------------------------


def nie_grid(
    model: Any,
    pairs: Iterable[Any],
    layers: Sequence[int | str] | None = None,
    positions: Sequence[str | int] = POSITION_ROLES,
    hooks: str | Sequence[str] | Callable[[int], list[str]] | None = None,
    heads: Sequence[int] | str | None = None,
    batch_size: int = 64,
    progress: bool = True,
    min_difference: float = MIN_LOGIT_DIFFERENCE,
) -> pandas.DataFrame:
    """NIE of do(g = g_patch) for every pair x layer x position (x head), batched.

    pairs: text pairs in the documented format (circuitlab.analysis.pairs), fact pairs
        (circuitlab.data.facts.build_fact_pairs), PatchPairs, or mappings of token ids.
    layers: ints and/or "all" (every layer at once); default every layer and "all".
    positions: roles ("noun", "final", any role the pairs define), "all", or integer positions.
    hooks: None = each layer's natural code (natural_code_hooks); else hook name templates with a
        "{layer}" placeholder, patched together (e.g. "blocks.{layer}.hook_resid_pre"), or a function
        layer -> hook names.
    heads: patch one entry of the hooks' third axis at a time (a head of "blocks.{layer}.attn.hook_result",
        a channel of sgatlin gates): "each" or a list of indices; adds a `head` column.
    batch_size: interventions per forward pass (1 runs each alone).
    min_difference: pairs with |m(x_patch) - m(x_clean)| below this (nats) are marked `excluded` and left out
        of nie_summary's means (their NIE divides by a difference that is mostly noise).

    Returns a DataFrame with one row per pair and cell: pair, pair_name, layer (int or "all"), position,
    [head], hooks, m_clean, m_patch, m_patched, nie, excluded. NIE is NaN where m(x_patch) == m(x_clean).
    """
    import pandas as pd

    pair_list = [as_patch_pair(pair, index, model=model) for index, pair in enumerate(pairs)]
    if not pair_list:
        raise UserError("no pairs to patch: pass fact pairs (circuitlab.data.facts.build_fact_pairs) or PatchPairs")
    n_layers = model.cfg.n_layers
    layer_specs = list(range(n_layers)) + ["all"] if layers is None else list(layers)
    for spec in layer_specs:
        if spec != "all" and not (isinstance(spec, int) and 0 <= spec < n_layers):
            raise UserError(f"layers must be ints in [0, {n_layers}) or 'all', got {spec!r}")
    if not list(positions):
        raise UserError("positions is empty: give roles ('noun', 'final', 'all') or integer positions")
    hooks_of_layer = {layer: _layer_hooks(model, hooks, layer) for layer in range(n_layers)}
    head_list = _head_list(model, heads, hooks_of_layer)

    rows: list[tuple[int, Intervention]] = []
    cells: list[dict[str, Any]] = []
    for pair_index, pair in enumerate(pair_list):
        rows.append((pair_index, ()))  # the unpatched clean run, m(x_clean)
        for spec in layer_specs:
            layer_hooks = [h for layer in range(n_layers) for h in hooks_of_layer[layer]] if spec == "all" else hooks_of_layer[spec]
            for position in positions:
                aligned = pair.aligned_positions(position)
                clean_positions = tuple(c for c, _ in aligned)
                patch_positions = tuple(p for _, p in aligned)
                for head in head_list:
                    intervention = tuple(Patch(h, clean_positions, patch_positions, head) for h in layer_hooks)
                    rows.append((pair_index, intervention))
                    cell = {"pair": pair_index, "pair_name": pair.name or f"pair {pair_index}", "layer": spec, "position": position}
                    if heads is not None:
                        cell["head"] = head
                    cells.append(cell)

    metric, sources_metric = run_interventions(model, pair_list, rows, batch_size=batch_size, progress=progress)
    clean_metric = {pair_index: float(metric[r]) for r, (pair_index, intervention) in enumerate(rows) if not intervention}
    patched = [float(metric[r]) for r, (_, intervention) in enumerate(rows) if intervention]
    label = _hooks_label(model, hooks)
    for cell, m_patched in zip(cells, patched):
        m_clean, m_patch = clean_metric[cell["pair"]], float(sources_metric[cell["pair"]])
        denominator = m_patch - m_clean
        cell.update(
            hooks=label, m_clean=m_clean, m_patch=m_patch, m_patched=m_patched,
            nie=(m_patched - m_clean) / denominator if denominator != 0 else math.nan,
            excluded=bool(abs(denominator) < min_difference),
        )
    table = pd.DataFrame(cells)
    table["layer"] = table["layer"].astype(object)
    table["position"] = table["position"].astype(object)
    table.attrs["min_difference"] = float(min_difference)
    return table


def _head_list(model: Any, heads: Sequence[int] | str | None, hooks_of_layer: dict[int, list[str]]) -> list[int | None]:
    if heads is None:
        return [None]
    tokens = torch.zeros(1, 1, dtype=torch.long, device=model.W_E.device)
    names = set(hooks_of_layer[0])
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    widths = {name: cache[name].shape[2] if cache[name].dim() > 2 else None for name in names}
    if any(width is None for width in widths.values()) or len(set(widths.values())) != 1:
        raise UserError(
            f"heads= patches one entry of the hooks' third axis, but the hooks have shapes "
            f"{ {n: tuple(cache[n].shape) for n in names} }; use per-head hooks such as 'blocks.{{layer}}.attn.hook_result'"
        )
    width = next(iter(widths.values()))
    if isinstance(heads, str):
        if heads != "each":
            raise UserError(f"heads must be 'each' or a list of indices, got {heads!r}")
        return list(range(width))
    head_list = [int(h) for h in heads]
    bad = [h for h in head_list if not 0 <= h < width]
    if bad:
        raise UserError(f"heads {bad} are outside [0, {width}) for hooks {sorted(names)}")
    return head_list


def positions_for(pairs: Sequence[PatchPair], wanted: Sequence[str] = POSITION_ROLES) -> tuple[list[str], str | None]:
    """The positions of `wanted` at which every pair can be patched, and a sentence saying which were left
    out and why (None when none were).

    A role is kept when every pair names it ("final" always); "all" when every pair's prompts are equally
    long or the pair gives an alignment. `circuitlab patch` (without --positions) and `circuitlab demo`
    choose their positions with it, so the two treat the same pairs file the same way.
    """
    kept, notes = [], []
    for position in wanted:
        if position == "all":
            unaligned = [pair for pair in pairs if not pair.patchable_at_all()]
            if not unaligned:
                kept.append(position)
                continue
            first = unaligned[0]
            notes.append(
                f"position 'all' left out: {len(unaligned)} of {len(pairs)} pairs have prompts of different token "
                f"lengths and no alignment (first: {first.name or 'a pair'}, {len(first.clean_tokens)} and "
                f"{len(first.patch_tokens)} tokens); give such a pair an \"alignment\" (a list of [clean position, "
                "patch position]) in the pairs file to patch it at every position"
            )
            continue
        missing = [pair for pair in pairs if position not in pair.roles]
        if missing:
            notes.append(f"position {position!r} left out: {len(missing)} of {len(pairs)} pairs do not name it")
        else:
            kept.append(position)
    if not kept:
        kept = ["final"]
    return kept, "; ".join(notes) or None


def no_counted_pairs(table: pandas.DataFrame) -> str | None:
    """Why no mean NIE can be given when every pair was left out (or none has a defined NIE), else None."""
    counted = table
    if "excluded" in table.columns:
        counted = table[~table["excluded"].astype(bool)]
    if counted["nie"].notna().any():
        return None
    n_pairs = table["pair"].nunique()
    threshold = table.attrs.get("min_difference", MIN_LOGIT_DIFFERENCE)
    return (
        f"no NIE to average: on all {n_pairs} pairs the model's logit differences m(x_patch) and m(x_clean) are "
        f"closer than {threshold:g} nats, so NIE would divide by noise. Choose pairs the model tells apart "
        "(answers it predicts more confidently), or lower the margin (--min-difference) knowing the values "
        "are noisier"
    )


def excluded_pairs(table: pandas.DataFrame) -> pandas.DataFrame:
    """The pairs nie_grid left out of the means: pair, pair_name, m_clean, m_patch and their difference."""
    if "excluded" not in table.columns:
        return table.iloc[0:0][["pair"]]
    rows = table[table["excluded"].astype(bool)].drop_duplicates("pair")
    out = rows[["pair", "pair_name", "m_clean", "m_patch"]].reset_index(drop=True)
    out["difference"] = out["m_patch"] - out["m_clean"]
    return out


def excluded_report(table: pandas.DataFrame) -> str | None:
    """One line naming the pairs left out of the means, or None when every pair counted."""
    left_out = excluded_pairs(table)
    if left_out.empty:
        return None
    threshold = table.attrs.get("min_difference", MIN_LOGIT_DIFFERENCE)
    shown = ", ".join(f"{row.pair_name} ({row.difference:+.3f})" for row in left_out.head(8).itertuples())
    more = f" and {len(left_out) - 8} more" if len(left_out) > 8 else ""
    return (f"left out of the means: {len(left_out)} of {table['pair'].nunique()} pairs whose m(x_patch) - m(x_clean) "
            f"is below {threshold:g} nats in size: {shown}{more}")


def nie_summary(table: pandas.DataFrame) -> pandas.DataFrame:
    """Mean NIE over pairs per cell, with its standard error and the number of pairs (NaN NIEs and pairs
    marked `excluded` by nie_grid, whose m(x) differences are below its threshold, left out)."""
    keys = ["layer", "position"] + (["head"] if "head" in table.columns else [])
    if "excluded" in table.columns:
        table = table[~table["excluded"].astype(bool)]
    grouped = table.dropna(subset=["nie"]).groupby(keys, sort=False)["nie"]
    summary = grouped.agg(nie="mean", sem="sem", n_pairs="count").reset_index()
    return summary


def nie_heatmap(table: pandas.DataFrame, title: str = "Normalized indirect effect") -> plotly.graph_objects.Figure:
    """Figure 7 of seed 000: mean NIE over pairs, layers (rows, 'all' on top) x positions (columns)."""
    import plotly.graph_objects as go

    import numpy as np

    summary = nie_summary(table)
    if "head" in summary.columns:
        summary = summary.groupby(["layer", "position"], sort=False)["nie"].mean().reset_index()
    # the grid's shape comes from every cell, so pairs left out of the means leave blanks, not a smaller grid
    layer_order = sorted({l for l in table["layer"] if l != "all"}) + (["all"] if "all" in set(table["layer"]) else [])
    position_order = list(dict.fromkeys(table["position"]))
    values = np.full((len(layer_order), len(position_order)), np.nan)
    if not summary.empty:
        grid = summary.pivot_table(index="layer", columns="position", values="nie", aggfunc="mean")
        values = grid.reindex(index=layer_order, columns=position_order).to_numpy(dtype=float)
    n_pairs = table["pair"].nunique()
    n_left_out = len(excluded_pairs(table))
    counted = f"{n_pairs - n_left_out} of {n_pairs} pairs" if n_left_out else f"{n_pairs} pair{'s' if n_pairs != 1 else ''}"
    figure = go.Figure(
        go.Heatmap(
            z=values, x=[str(p) for p in position_order], y=[f"layer {l}" if l != "all" else "all layers" for l in layer_order],
            colorscale="RdBu", zmid=0, colorbar=dict(title="NIE"),
            text=[[f"{v:.2f}" if not math.isnan(v) else "" for v in row] for row in values], texttemplate="%{text}",
            hovertemplate="%{y}, position %{x}: NIE %{z:.3f}<extra></extra>",
        )
    )
    # positions are labels ("0", "1", ..., "all"): typed as categories, or plotly reads the numbers as a number
    # line, drops "all" and shifts the cells off their ticks
    figure.update_layout(
        title=dict(text=f"{title} ({counted})<br><sup>hooks: {table['hooks'].iloc[0]}</sup>"),
        xaxis=dict(title="patched position", type="category"), yaxis=dict(title="patched layer", type="category"),
        margin=dict(t=90),
    )
    return figure
