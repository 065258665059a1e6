"""Naming bounded channels (seed 002, sections 5.3-5.4): each channel by the tokens it fires on decisively
(v > 0.9), ranked by P(fire | token) among tokens seen at least `min_count` times, which corrects the naive
most-active-token readout for token frequency (it would otherwise collapse to "the"); and each channel's
max-activating contexts. The statistics these rank come from circuitlab.analysis.legibility.

Shape letters: N tokens, B batch, T position, C channels of one hook, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor

from circuitlab.architectures.code_layer import ChannelGroup
from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas

from circuitlab.analysis.legibility import (
    ON_THRESHOLD,
    _bounded_activations,
    bounded_channel_groups,
)



def _channel_values(group: ChannelGroup, activation: Tensor, head: int | None, channel: int) -> Tensor:
    values = group.take(activation)
    if head is not None:
        values = values[:, :, head - group.head_offset, channel - group.channel_offset]
    else:
        values = values[:, :, channel]
    return values


def _group_of(model: Any, stats_row: Mapping[str, Any]) -> ChannelGroup:
    for group in bounded_channel_groups(model):
        if group.hook == stats_row["hook"] and group.role == stats_row["role"]:
            return group
    raise ValueError(f"the model has no bounded channel group {stats_row['hook']} / {stats_row['role']}")


def name_channels(
    model: Any,
    tokens: Tensor | Iterable[Tensor],
    channels: pandas.DataFrame,
    threshold: float = ON_THRESHOLD,
    min_count: int = 5,
    top: int = 6,
    batch_size: int = 8,
    progress: bool = True,
) -> pandas.DataFrame:
    """Name channels (rows of legibility_stats, e.g. its SELECTIVE rows) by the tokens they fire on.

    Only decisive firings count (v > threshold). Tokens are ranked by P(fire | token) among tokens seen at
    least `min_count` times (lift = P(token | fire) / P(token) = P(fire | token) / P(fire), the same order),
    so frequent tokens do not win by frequency. Adds columns fires (decisive firings), fire_rate,
    top_tokens (token strings), top_p_fire (their P(fire | token)) and label ("tok1 / tok2 / ...").
    """
    import pandas as pd

    rows = channels.reset_index(drop=True)
    if rows.empty:
        return rows.assign(fires=[], fire_rate=[], top_tokens=[], top_p_fire=[], label=[])
    groups = [_group_of(model, row) for row in rows.to_dict("records")]
    d_vocab = model.cfg.d_vocab
    count_V = torch.zeros(d_vocab, dtype=torch.float64)
    fires_VxR = torch.zeros(d_vocab, len(rows), dtype=torch.float64)
    heads = [None if pd.isna(h) else int(h) for h in rows["head"]]
    for batch_BxT, activations in _bounded_activations(model, tokens, {g.hook for g in groups}, batch_size, progress, "naming"):
        token_N = batch_BxT.reshape(-1).cpu()
        count_V += torch.bincount(token_N, minlength=d_vocab).double()
        fire_columns = [
            (_channel_values(group, activations[group.hook], head, int(channel)).reshape(-1) > threshold).double().cpu()
            for group, head, channel in zip(groups, heads, rows["channel"])
        ]
        fires_VxR.index_add_(0, token_N, torch.stack(fire_columns, dim=1))
    names, p_tops, labels = [], [], []
    for r in range(len(rows)):
        ranked = rank_firing_tokens(count_V, fires_VxR[:, r], min_count=min_count, top=top)
        names.append([_token_text(model, t) for t in ranked["token_id"]])
        p_tops.append([round(p, 3) for p in ranked["p_fire"]])
        labels.append(" / ".join(names[-1]) if names[-1] else "(never fires decisively)")
    fires_R = fires_VxR.sum(0)
    return rows.assign(
        fires=fires_R.long().tolist(), fire_rate=(fires_R / count_V.sum().clamp(min=1)).tolist(),
        top_tokens=names, top_p_fire=p_tops, label=labels,
    )


def rank_firing_tokens(
    count_V: Float[Tensor, "vocab"], fires_V: Float[Tensor, "vocab"], min_count: int = 5, top: int = 10
) -> pandas.DataFrame:
    """Tokens a channel fires on, frequency-corrected: ranked by P(fire | token) = fires / count among tokens
    seen at least `min_count` times (ties: more firings first). lift = P(token | fire) / P(token), which is
    P(fire | token) / P(fire). Columns token_id, p_fire, fires, count, lift."""
    import pandas as pd

    count_V = torch.as_tensor(count_V, dtype=torch.float64)
    fires_V = torch.as_tensor(fires_V, dtype=torch.float64)
    p_fire_V = fires_V / count_V.clamp(min=1)
    overall = float(fires_V.sum() / count_V.sum().clamp(min=1))
    candidates = ((count_V >= min_count) & (fires_V > 0)).nonzero().flatten().tolist()
    ranked = sorted(candidates, key=lambda t: (-float(p_fire_V[t]), -float(fires_V[t]), t))[:top]
    return pd.DataFrame(
        {
            "token_id": ranked, "p_fire": [float(p_fire_V[t]) for t in ranked],
            "fires": [int(fires_V[t]) for t in ranked], "count": [int(count_V[t]) for t in ranked],
            "lift": [float(p_fire_V[t]) / overall if overall > 0 else math.nan for t in ranked],
        },
        columns=["token_id", "p_fire", "fires", "count", "lift"],
    )


def _context_text(model: Any, ids: Sequence[int]) -> str:
    """Left context then the firing token in [brackets]; ids are space-separated when there is no tokenizer."""
    joiner = "" if getattr(model, "tokenizer", None) is not None else " "
    return joiner.join([_token_text(model, t) for t in ids[:-1]] + [f"[{_token_text(model, ids[-1])}]"])


def _token_text(model: Any, token_id: int) -> str:
    tokenizer = getattr(model, "tokenizer", None)
    return tokenizer.token_str(int(token_id)) if tokenizer is not None else f"#{int(token_id)}"


def max_activating_contexts(
    model: Any,
    tokens: Tensor | Iterable[Tensor],
    hook: str,
    channel: int,
    head: int | None = None,
    role: str | None = None,
    threshold: float = ON_THRESHOLD,
    min_count: int = 5,
    top: int = 10,
    window: int = 8,
    batch_size: int = 8,
    progress: bool = True,
) -> pandas.DataFrame:
    """Contexts where one channel fires decisively, one per firing token, frequency-corrected.

    Among the tokens the channel fires on (v > threshold), those seen at least `min_count` times are ranked
    by P(fire | token); for each, the firing occurrence with the largest value is shown with `window`
    tokens of left context, the firing token in [brackets]. Columns: token, p_fire, fires, count, lift,
    value, context.
    """
    import pandas as pd

    groups = [
        g for g in bounded_channel_groups(model)
        if g.hook == hook and (role is None or g.role == role)
        and (g.channel_slice is None or g.channel_slice.start <= channel < g.channel_slice.stop)
    ]
    if not groups:
        raise UserError(
            f"{hook} channel {channel}{f' ({role})' if role else ''} is not a bounded channel of this model; "
            "pick one from legibility_stats(model, tokens)"
        )
    group = groups[0]
    if group.head_slice is not None and head is None:
        raise UserError(f"{hook} is an attention hook: give the head as well")
    d_vocab = model.cfg.d_vocab
    count_V = torch.zeros(d_vocab, dtype=torch.float64)
    fires_V = torch.zeros(d_vocab, dtype=torch.float64)
    best: dict[int, tuple[float, list[int], int]] = {}
    for batch_BxT, activations in _bounded_activations(model, tokens, {hook}, batch_size, progress, "contexts"):
        values_BxT = _channel_values(group, activations[hook], head, channel).float().cpu()
        batch_BxT = batch_BxT.cpu()
        count_V += torch.bincount(batch_BxT.reshape(-1), minlength=d_vocab).double()
        firing = values_BxT > threshold
        fires_V.index_add_(0, batch_BxT[firing], torch.ones(int(firing.sum()), dtype=torch.float64))
        for b, t in firing.nonzero().tolist():
            token = int(batch_BxT[b, t])
            value = float(values_BxT[b, t])
            if token not in best or value > best[token][0]:
                best[token] = (value, batch_BxT[b, max(0, t - window) : t + 1].tolist(), t)
    rows = []
    for ranked in rank_firing_tokens(count_V, fires_V, min_count=min_count, top=top).to_dict("records"):
        value, context, _ = best[ranked["token_id"]]
        text = _context_text(model, context)
        rows.append({
            "token": _token_text(model, ranked["token_id"]), **{k: ranked[k] for k in ("p_fire", "fires", "count", "lift")},
            "value": value, "context": text,
        })
    return pd.DataFrame(rows, columns=["token", "p_fire", "fires", "count", "lift", "value", "context"])
