"""Direct logit attribution (DLA): the logit of one token, written as an exact sum of the model's parts.

With the final norm's scale s frozen from the run, the unembedding is linear in the residual stream, and
the residual stream at a position is a sum of writes: embedding (+ learned position), every attention head
(attn.hook_result) and every FFN block (hook_mlp_out, the whole FFN write, parity bottleneck included).
So, for a direction u = W_U[:, target] (minus W_U[:, baseline] for a logit difference),

    RMSNorm:    logit = sum_parts (part * s * w) . u
    LayerNorm:  logit = sum_parts (center(part) * s * w) . u  +  b . u      (centering is linear; the
                bias b is its own part, "final norm bias")

Inside an FFN block the write is again a sum of units, as the layer that writes last declares them
(CodeLayer.unit_writes): sgatlin neurons g * (w_in . z) * w_out per chosen
(channel, neuron) (seed 000, eq. 2), dense and NC-FFN hidden units post_f * W_out[f] (labelled gelu / swiglu
/ and / andnot / exists / proportion), parity features a_i * phi_i. Rows carry a `level`: the 'component'
rows sum to the logit; the 'unit' rows of a layer sum to that layer's FFN row (never add both levels).

A part's promote signature is the set of tokens its write pushes up most, read through the same frozen
norm and unembedding, with the target's rank among all tokens (seed 002, section 5.5 and Figure 5).

Shape letters: T position, D d_model, V vocabulary, H heads, F FFN units, C channels, K gates or features.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas
    import plotly.graph_objects

OPAQUE_UNITS = frozenset({"gelu", "swiglu", "neuron", "feature"})  # unit operations that carry no name
DLA_COLUMNS = (
    "component", "level", "layer", "kind", "value", "head", "unit", "operation", "promote_tokens", "target_rank",
)


def resolve_token(model: Any, token: int | str | None, what: str) -> int | None:
    """A token id from an id or a single-token string (with the tokenizer's own spacing, e.g. ' worst')."""
    if token is None:
        return None
    if isinstance(token, str):
        if not token:
            raise UserError(f"{what} is empty; give a single token (mind the leading space) or its id")
        ids = model.to_tokens(token)[0]
        if ids.numel() != 1:
            raise UserError(
                f"{what} {token!r} is {ids.numel()} tokens; give a single token (mind the leading space) or its id"
            )
        return int(ids[0])
    token_id = int(token)
    if not 0 <= token_id < model.cfg.d_vocab:
        raise UserError(f"{what} id {token_id} is outside the vocabulary [0, {model.cfg.d_vocab})")
    return token_id


def prompt_tokens(model: Any, prompt: str | list[int] | Tensor) -> Int[Tensor, "pos"]:
    """The token ids of a prompt given as text (needs the model's tokenizer) or as ids."""
    if isinstance(prompt, str):
        if not prompt:  # to_tokens refuses empty text; say it as bad input
            raise UserError("the prompt is empty: give at least one token")
        tokens = model.to_tokens(prompt)[0]
    else:
        tokens = torch.as_tensor(prompt, dtype=torch.long).flatten()
    if tokens.numel() == 0:
        raise UserError("the prompt is empty: give at least one token")
    return tokens.to(model.W_E.device)


def token_label(model: Any, token_id: int) -> str:
    tokenizer = getattr(model, "tokenizer", None)
    return tokenizer.token_str(int(token_id)) if tokenizer is not None else f"#{int(token_id)}"


@dataclass
class FrozenReadout:
    """The final norm with its scale frozen at one position, composed with the unembedding: a linear map
    from residual writes to logits, plus the LayerNorm bias' constant contribution."""

    scale: float
    weight_D: Tensor
    bias_D: Tensor | None
    W_U_DxV: Tensor
    centred: bool

    def normalize(self, writes_NxD: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_model"]:
        if self.centred:
            writes_NxD = writes_NxD - writes_NxD.mean(-1, keepdim=True)
        return writes_NxD * self.scale * self.weight_D

    def logits(self, writes_NxD: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_vocab"]:
        return self.normalize(writes_NxD) @ self.W_U_DxV

    def direction(self, target: int, baseline: int | None) -> Float[Tensor, "d_model"]:
        """d with part . d = the part's contribution to logit(target) (- logit(baseline))."""
        unembed_D = self.W_U_DxV[:, target] - (self.W_U_DxV[:, baseline] if baseline is not None else 0)
        read_D = self.scale * self.weight_D * unembed_D
        # (center(x) * s * w) . u = x . center(s * w * u): centering is a symmetric projection
        return read_D - read_D.mean() if self.centred else read_D

    def bias_value(self, target: int, baseline: int | None) -> float:
        if self.bias_D is None:
            return 0.0
        unembed_D = self.W_U_DxV[:, target] - (self.W_U_DxV[:, baseline] if baseline is not None else 0)
        return float(self.bias_D @ unembed_D)


def _needed_hooks(model: Any) -> list[str]:
    names = ["hook_embed", "hook_pos_embed", "ln_final.hook_scale"]  # hook_pos_embed fires for learned positions only
    for layer, block in enumerate(model.blocks):
        names += [f"blocks.{layer}.hook_mlp_out", *block.attn.unit_write_hooks(), *block.ffn_code_layer.unit_write_hooks()]
    return names


@torch.no_grad()
def direct_logit_attribution(
    model: Any,
    prompt: str | list[int] | Tensor,
    target: int | str | None = None,
    position: int = -1,
    baseline_token: int | str | None = None,
    units: bool = True,
    n_promote: int = 10,
    promote_units_per_layer: int = 10,
    promote_units: Iterable[tuple[int, int]] = (),
    promote_named: bool = True,
) -> pandas.DataFrame:
    """Decompose the logit of `target` at `position` (or logit(target) - logit(baseline_token)).

    target None = the model's top prediction at that position. Returns a DataFrame with columns
    component, level ('component' | 'unit'), layer (-1 for the embedding, n_layers for the final norm's
    bias), kind ('embedding' | 'positional' | 'attn_head' | 'ffn' | 'norm_bias' | 'neuron' | 'ffn_unit' |
    'parity_feature'), value, head, unit (sgatlin: channel * N + neuron, like the sparse codes),
    operation (head value mode, or unit operation), promote_tokens (top `n_promote` tokens the write pushes up;
    for every component row, the `promote_units_per_layer` largest |value| units of each layer, every named
    unit (an operation other than the opaque gelu / swiglu / neuron / feature) when `promote_named`, and the
    (layer, unit) pairs of `promote_units`), and target_rank (1 = the target is what the write promotes
    most). The 'component' rows sum to the logit.
    df.attrs holds target_id, target, baseline_id, position, logit (the model's own value) and tokens.
    """
    import pandas as pd

    tokens_T = prompt_tokens(model, prompt)
    n_pos = tokens_T.numel()
    if not -n_pos <= position < n_pos:
        raise UserError(f"position {position} is outside the prompt of {n_pos} tokens")
    position = position % n_pos
    names = set(_needed_hooks(model))
    with torch.no_grad():
        logits_TxV, cache = model.run_with_cache(tokens_T[None], names_filter=lambda name: name in names)
    logits_V = logits_TxV[0, position].double()
    target_id = int(logits_V.argmax()) if target is None else resolve_token(model, target, "target")
    baseline_id = resolve_token(model, baseline_token, "baseline_token")
    if baseline_id is not None and baseline_id == target_id:
        raise UserError(f"baseline_token equals the target ({token_label(model, target_id)!r}); the difference is 0")
    model_value = float(logits_V[target_id] - (logits_V[baseline_id] if baseline_id is not None else 0))

    def at(name: str) -> Tensor:
        return cache[name][0, position].double()

    ln_final = model.ln_final
    readout = FrozenReadout(
        scale=1.0 / float(cache["ln_final.hook_scale"][0, position].reshape(())),  # the hook holds the rms
        weight_D=ln_final.w.detach().double(),
        bias_D=ln_final.b.detach().double() if getattr(ln_final, "b", None) is not None else None,
        W_U_DxV=model.W_U.detach().double(),
        centred=getattr(ln_final, "b", None) is not None,
    )
    direction_D = readout.direction(target_id, baseline_id)
    n_layers = model.cfg.n_layers
    requested = {(int(layer), int(unit)) for layer, unit in promote_units}
    for layer, unit in sorted(requested):
        if not 0 <= layer < n_layers:
            raise UserError(f"promote_units: layer {layer} does not exist (the model has {n_layers} layers)")

    rows: list[dict[str, Any]] = []
    writes: list[Tensor] = []  # the residual write of each row that gets a promote signature

    def add(write_D: Tensor | None, **row: Any) -> None:
        row.setdefault("level", "component")
        row["_write"] = len(writes) if write_D is not None else None
        if write_D is not None:
            writes.append(write_D)
        rows.append(row)

    embed_D = at("hook_embed")
    add(embed_D, component="embedding", layer=-1, kind="embedding", value=float(embed_D @ direction_D))
    if "hook_pos_embed" in cache:
        # the positional table enters unbatched, [T, D]
        pos_D = cache["hook_pos_embed"][position].double() if cache["hook_pos_embed"].dim() == 2 else at("hook_pos_embed")
        add(pos_D, component="positional embedding", layer=-1, kind="positional", value=float(pos_D @ direction_D))

    for layer, block in enumerate(model.blocks):
        heads = block.attn.unit_writes(at)
        for head, write_D in zip(heads.ids, heads.writes_NxD):
            add(write_D, component=heads.labels[head], layer=layer, kind=heads.kind, head=head,
                value=float(write_D @ direction_D), operation=heads.operations[head])
        ffn_write_D = at(f"blocks.{layer}.hook_mlp_out")
        ffn_label = block.ffn_description()
        add(ffn_write_D, component=f"L{layer} FFN" + (" (parity code)" if block.bottleneck is not None else ""),
            layer=layer, kind="ffn", value=float(ffn_write_D @ direction_D), operation=ffn_label)
        unit_rows = block.ffn_code_layer.unit_writes(at) if units else None
        if unit_rows is not None:
            contributions = unit_rows.writes_NxD @ direction_D
            keep_promote = set(contributions.abs().argsort(descending=True)[:promote_units_per_layer].tolist())
            if promote_named:
                keep_promote |= {i for i, operation in enumerate(unit_rows.operations) if operation not in OPAQUE_UNITS}
            unit_index = {int(unit): i for i, unit in enumerate(unit_rows.ids)}
            for wanted_layer, unit in requested:
                if wanted_layer == layer:
                    if unit not in unit_index:
                        raise UserError(f"promote_units: layer {layer} has no unit {unit} (ids run to {max(unit_index)})")
                    keep_promote.add(unit_index[unit])
            for i in range(contributions.numel()):
                add(unit_rows.writes_NxD[i] if i in keep_promote else None, level="unit",
                    component=f"L{layer} {unit_rows.labels[i]}", layer=layer, kind=unit_rows.kind,
                    unit=int(unit_rows.ids[i]), operation=unit_rows.operations[i], value=float(contributions[i]))

    if readout.bias_D is not None:
        add(None, component="final norm bias", layer=n_layers, kind="norm_bias", value=readout.bias_value(target_id, baseline_id))

    if writes:
        promote_NxV = readout.logits(torch.stack(writes))
        top_NxP = promote_NxV.topk(min(n_promote, promote_NxV.shape[-1]), dim=-1).indices.tolist()
        ranks_N = 1 + (promote_NxV > promote_NxV[:, target_id : target_id + 1]).sum(-1)
    for row in rows:
        index = row.pop("_write")
        row["promote_tokens"] = [token_label(model, t) for t in top_NxP[index]] if index is not None else None
        row["target_rank"] = int(ranks_N[index]) if index is not None else None

    table = pd.DataFrame(rows).reindex(columns=list(DLA_COLUMNS))
    for column in ("head", "unit", "target_rank"):
        table[column] = table[column].astype("Int64")
    table.attrs.update(
        target_id=target_id, target=token_label(model, target_id), baseline_id=baseline_id,
        baseline=token_label(model, baseline_id) if baseline_id is not None else None, position=position,
        logit=model_value, tokens=tokens_T.tolist(),
    )
    return table


# --- how much of the attribution is legible, over many predictions ----------------------------------------


ATTRIBUTION_PARTS = ("bounded_heads", "standard_heads", "named_units", "opaque_units", "embedding")


@torch.no_grad()
def legible_attribution_share(
    model: Any, tokens: Tensor | Iterable[Tensor], batch_size: int = 8, progress: bool = True
) -> dict[str, Any]:
    """The legible share of the direct logit attribution (seed 002, section 5.5 and Figure 5), over every
    position of held-out token windows ([sequences, pos] or an iterable of batches).

    At each position the model's top prediction is decomposed as direct_logit_attribution does (final norm
    frozen): embedding (+ learned positions), each attention head, each FFN unit. Legible parts are bounded
    heads (a value mode other than standard) and named FFN units (an operation other than gelu / swiglu /
    neuron / feature); the share is legible |contribution| / total |contribution| (magnitudes: signed parts
    cancel). Returns share_mean (mean over positions of the per-position share), share_pooled (summed
    magnitudes over all positions), parts_mean (mean per-position share of each of ATTRIBUTION_PARTS),
    attention_weaker_mean (the share of positions whose largest |head| contribution is below the largest signed
    FFN unit contribution: seed 002's "attention contributes less than the largest FFN units", Figure 5) and
    n_positions. FFN units must be hidden units written through W_out (MLP, SwiGLU, NC-FFN); other FFN
    layers count as one opaque part each (and as one unit, their whole write, for attention_weaker_mean).
    """
    from tqdm.auto import tqdm

    from circuitlab.analysis.legibility import _token_batches

    head_bounded = [torch.tensor([op != "standard" for op in block.attn.unit_kinds()]) for block in model.blocks]
    unit_named = []
    for block in model.blocks:
        layer = block.ffn_code_layer
        hidden = block.bottleneck is None and hasattr(layer, "hook_post") and hasattr(layer, "W_out")
        unit_named.append(torch.tensor([op not in OPAQUE_UNITS for op in layer.unit_kinds()]) if hidden else None)
    names = {"hook_embed", "hook_pos_embed", "ln_final.hook_scale"}
    for index, block in enumerate(model.blocks):
        names.add(f"blocks.{index}.attn.hook_result")
        names.add(block.ffn_code_layer.hook_name(block.ffn_code_layer.hook_post) if unit_named[index] is not None
                  else f"blocks.{index}.hook_mlp_out")
    ln_final = model.ln_final
    centred = getattr(ln_final, "b", None) is not None
    weight_D = ln_final.w.detach().double().cpu()  # the sums below run on the CPU, whatever the model's device
    W_U_DxV = model.W_U.detach().double().cpu()
    share_sum, weaker_sum, n_positions = 0.0, 0, 0
    part_sums = {part: 0.0 for part in ATTRIBUTION_PARTS}
    pooled = {part: 0.0 for part in ATTRIBUTION_PARTS}
    total = math.ceil(tokens.shape[0] / batch_size) if isinstance(tokens, Tensor) else None
    device = model.W_E.device
    for batch_BxT in tqdm(_token_batches(tokens, batch_size), total=total, desc="attribution", disable=not progress, leave=False):
        logits_BxTxV, cache = model.run_with_cache(batch_BxT.to(device), names_filter=lambda name: name in names)
        n = batch_BxT.numel()
        target_N = logits_BxTxV.reshape(n, -1).argmax(-1).cpu()
        scale_N = 1.0 / cache["ln_final.hook_scale"].reshape(n).double().cpu()  # the hook holds the rms
        read_NxD = scale_N[:, None] * weight_D * W_U_DxV[:, target_N].T
        if centred:  # (center(x) * s * w) . u = x . center(s * w * u)
            read_NxD = read_NxD - read_NxD.mean(-1, keepdim=True)

        def part(name: str) -> Tensor:
            return cache[name].double().cpu()

        magnitude = {key: torch.zeros(n, dtype=torch.float64) for key in ATTRIBUTION_PARTS}
        embedding_NxD = part("hook_embed").reshape(n, -1)
        if "hook_pos_embed" in cache:
            embedding_NxD = embedding_NxD + part("hook_pos_embed").expand(batch_BxT.shape + (embedding_NxD.shape[-1],)).reshape(n, -1)
        magnitude["embedding"] += (embedding_NxD * read_NxD).sum(-1).abs()
        max_head_N = torch.full((n,), -math.inf, dtype=torch.float64)
        max_unit_N = torch.full((n,), -math.inf, dtype=torch.float64)
        for index, block in enumerate(model.blocks):
            result_NxHxD = part(f"blocks.{index}.attn.hook_result").reshape(n, len(head_bounded[index]), -1)
            heads_NxH = torch.einsum("nhd,nd->nh", result_NxHxD, read_NxD).abs()
            magnitude["bounded_heads"] += heads_NxH[:, head_bounded[index]].sum(-1)
            magnitude["standard_heads"] += heads_NxH[:, ~head_bounded[index]].sum(-1)
            max_head_N = torch.maximum(max_head_N, heads_NxH.max(-1).values)
            layer = block.ffn_code_layer
            if unit_named[index] is None:
                write_NxD = part(f"blocks.{index}.hook_mlp_out").reshape(n, -1)
                signed_N = (write_NxD * read_NxD).sum(-1)
                magnitude["opaque_units"] += signed_N.abs()
                max_unit_N = torch.maximum(max_unit_N, signed_N)
                continue
            post_NxF = part(layer.hook_name(layer.hook_post)).reshape(n, -1)
            signed_NxF = post_NxF * (read_NxD @ layer.W_out.detach().double().cpu().T)
            max_unit_N = torch.maximum(max_unit_N, signed_NxF.max(-1).values)
            units_NxF = signed_NxF.abs()
            magnitude["named_units"] += units_NxF[:, unit_named[index]].sum(-1)
            magnitude["opaque_units"] += units_NxF[:, ~unit_named[index]].sum(-1)
        total_N = sum(magnitude.values()).clamp_min(1e-30)
        share_sum += float(((magnitude["bounded_heads"] + magnitude["named_units"]) / total_N).sum())
        weaker_sum += int((max_head_N < max_unit_N).sum())
        for key in ATTRIBUTION_PARTS:
            part_sums[key] += float((magnitude[key] / total_N).sum())
            pooled[key] += float(magnitude[key].sum())
        n_positions += n
    if n_positions == 0:
        raise UserError("no held-out tokens were given")
    pooled_total = sum(pooled.values()) or 1.0
    return {
        "share_mean": share_sum / n_positions,
        "share_pooled": (pooled["bounded_heads"] + pooled["named_units"]) / pooled_total,
        "parts_mean": {key: value / n_positions for key, value in part_sums.items()},
        "attention_weaker_mean": weaker_sum / n_positions,
        "n_positions": n_positions,
    }


# --- figures -----------------------------------------------------------------------------------------------


def _hover(row: Any) -> str:
    text = f"{row.component}: {row.value:+.4f}"
    if isinstance(row.operation, str):
        text += f"<br>operation: {row.operation}"
    if isinstance(row.promote_tokens, list):
        text += f"<br>promotes: {', '.join(row.promote_tokens)}<br>target rank: {row.target_rank}"
    return text


def dla_overview_figure(table: pandas.DataFrame) -> plotly.graph_objects.Figure:
    """Seed 002, Figure 5 (left): every head and FFN block of every layer, red positive, blue negative."""
    import numpy as np
    import plotly.graph_objects as go

    components = table[table["level"] == "component"]
    layers = sorted(int(l) for l in components.loc[components["kind"].isin(["attn_head", "ffn"]), "layer"].unique())
    heads = sorted(int(h) for h in components["head"].dropna().unique())
    columns = [f"H{h}" for h in heads] + ["FFN"]
    values = np.full((len(layers), len(columns)), np.nan)
    hover = [["" for _ in columns] for _ in layers]
    for row in components.itertuples():
        if row.kind not in ("attn_head", "ffn"):
            continue
        i, j = layers.index(int(row.layer)), (len(columns) - 1 if row.kind == "ffn" else heads.index(int(row.head)))
        values[i, j] = row.value
        hover[i][j] = _hover(row)
    bound = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    figure = go.Figure(go.Heatmap(
        z=values, x=columns, y=[f"L{l}" for l in layers], colorscale="RdBu_r", zmin=-bound, zmax=bound,
        text=hover, hovertemplate="%{text}<extra></extra>", colorbar=dict(title="logit"),
    ))
    rest = components[~components["kind"].isin(["attn_head", "ffn"])]
    extra = "; ".join(f"{r.component} {r.value:+.3f}" for r in rest.itertuples())
    attrs = table.attrs
    what = f"logit({attrs.get('target')!r})" + (f" - logit({attrs.get('baseline')!r})" if attrs.get("baseline_id") is not None else "")
    figure.update_layout(
        title=f"Direct logit attribution of {what} = {attrs.get('logit', float('nan')):.3f}" + (f" ({extra})" if extra else ""),
        xaxis_title="head / FFN block", yaxis_title="layer", yaxis=dict(autorange="reversed"),
    )
    return figure


def dla_layer_figure(table: pandas.DataFrame, layer: int, top: int = 20) -> plotly.graph_objects.Figure:
    """One layer: its heads, its FFN block and the FFN's `top` largest units by |value|, with promote
    signatures on hover."""
    import plotly.graph_objects as go

    in_layer = table[table["layer"] == layer]
    if in_layer.empty:
        raise UserError(f"layer {layer} is not in this attribution (layers {sorted(table['layer'].unique())})")
    components = in_layer[in_layer["level"] == "component"]
    unit_rows = in_layer[in_layer["level"] == "unit"]
    unit_rows = unit_rows.loc[unit_rows["value"].abs().sort_values(ascending=False).index[:top]]
    shown = list(components.itertuples()) + list(unit_rows.itertuples())
    figure = go.Figure(go.Bar(
        x=[row.component for row in shown], y=[row.value for row in shown],
        marker_color=["#d62728" if row.value >= 0 else "#1f77b4" for row in shown],
        marker_pattern_shape=["" if row.level == "component" else "/" for row in shown],
        hovertext=[_hover(row) for row in shown], hoverinfo="text",
    ))
    figure.update_layout(
        title=f"Layer {layer}: heads and FFN block (solid), largest FFN units (hatched; they sum to the FFN bar)",
        yaxis_title=f"contribution to logit({table.attrs.get('target')!r})", xaxis_tickangle=-45,
    )
    return figure


def dla_figures(table: pandas.DataFrame, top: int = 20) -> dict[int, plotly.graph_objects.Figure]:
    """A figure per layer (dla_layer_figure)."""
    layers = sorted(int(l) for l in table.loc[table["kind"].isin(["attn_head", "ffn"]), "layer"].unique())
    return {layer: dla_layer_figure(table, layer, top=top) for layer in layers}
