"""Legibility of bounded channels (seed 002, sections 4.1, 5.3 and 5.4).

A bounded channel is one coordinate of a value in [0, 1] that the model computes by construction:
  attention  membership values sigmoid(X W_v) of membership heads (atom and combined value at once);
             Boolean operands A, B (atoms) and the combined value [A*B ; A*(1-B)] of Boolean heads
  NC-FFN     operands A, B (atoms) and the operator outputs and / and-not (combined);
             quantifier memberships M_t (atoms) and the soft exists / proportion scans (combined)
Over held-out tokens each channel gets: mean, variance, crispness = fraction with min(v, 1 - v) < 0.1,
ON-fraction = fraction with v > 0.9, and a regime (seed 002, section 4.1):
  CONSTANT   variance < 0.003                       (crisp but context-free, or collapsed)
  SELECTIVE  variance >= 0.003 and crispness > 0.5  (a crisp, contextual detector: nameable)
  FUZZY      otherwise                              (varies, but not decisively)
As in the seed's Tables 1 and 5, atom-crispness and ON% are read on the operands, SELECTIVE / CONSTANT on
the combined values. An operand channel is ALIVE when its ON-fraction lies in [1%, 99%]: below, it is dead
(decisively on almost never); above, it is stuck on (on for almost every token), a constant either way.
Channels come in two families: "operator" (attention values and operands, NC-FFN operands A, B and their
and / and-not) and "quantifier" (NC-FFN memberships M_t and their exists / proportion scans); seed 002's
Table 5 measures the FFN's A and B only, so tables keep the families in separate rows. Channels are named by the tokens they fire on decisively (v > 0.9), ranked by
P(fire | token) among tokens seen at least `min_count` times, which corrects the naive most-active-token
readout for token frequency (it would otherwise collapse to "the").

Shape letters: N tokens (batch x pos flattened), B batch, T position, S special heads, E channels per head,
C channels of one hook, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuitlab.architectures.code_layer import ChannelGroup
from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas

CRISP_MARGIN = 0.1  # seed 002, section 4.1: within 0.1 of a rail
ON_THRESHOLD = 0.9
CONSTANT_VARIANCE = 0.003
SELECTIVE_CRISPNESS = 0.5
ALIVE_RANGE = (0.01, 0.99)  # ON-fraction of a living operand channel (bounds included)
REGIMES = ("SELECTIVE", "CONSTANT", "FUZZY")
QUANTIFIER_ROLES = ("quant_in", "exists", "proportion")
STAT_COLUMNS = (
    "surface", "family", "layer", "head", "channel", "role", "operand", "combined", "hook",
    "mean", "variance", "crispness", "on_fraction", "alive", "regime", "n_tokens",
)


class NoBoundedChannelsError(UserError):
    """The model has no bounded value channels, so legibility metrics do not apply."""


# --- the per-channel statistics ---------------------------------------------------------------------------


def classify_regime(
    variance: Tensor | Sequence[float] | float,
    crispness: Tensor | Sequence[float] | float,
    constant_variance: float = CONSTANT_VARIANCE,
    selective_crispness: float = SELECTIVE_CRISPNESS,
) -> list[str]:
    """CONSTANT / SELECTIVE / FUZZY per channel, with the thresholds of seed 002, section 4.1."""
    variance_C = torch.as_tensor(variance, dtype=torch.float64).reshape(-1)
    crispness_C = torch.as_tensor(crispness, dtype=torch.float64).reshape(-1)
    return [
        "CONSTANT" if v < constant_variance else ("SELECTIVE" if c > selective_crispness else "FUZZY")
        for v, c in zip(variance_C.tolist(), crispness_C.tolist())
    ]


def is_alive(on_fraction: Tensor | Sequence[float] | float) -> list[bool]:
    """Per channel: is its ON-fraction within ALIVE_RANGE (on for at least 1% and at most 99% of tokens)?"""
    on_C = torch.as_tensor(on_fraction, dtype=torch.float64).reshape(-1)
    low, high = ALIVE_RANGE
    return ((on_C >= low) & (on_C <= high)).tolist()


def channel_family(role: str) -> str:
    """"quantifier" for the NC-FFN's sequence quantifiers (memberships and scans), else "operator"."""
    return "quantifier" if role in QUANTIFIER_ROLES else "operator"


class ChannelAccumulator:
    """Streaming mean / variance (Chan et al.'s pairwise merge, float64), crisp and ON counts per channel."""

    def __init__(self, n_channels: int):
        self.n = 0
        self.mean_C = torch.zeros(n_channels, dtype=torch.float64)
        self.m2_C = torch.zeros(n_channels, dtype=torch.float64)
        self.crisp_C = torch.zeros(n_channels, dtype=torch.float64)
        self.on_C = torch.zeros(n_channels, dtype=torch.float64)

    def update(self, values_NxC: Float[Tensor, "tokens channel"]) -> None:
        values = values_NxC.detach().to("cpu", torch.float64)
        n_batch = values.shape[0]
        if n_batch == 0:
            return
        batch_mean = values.mean(0)
        batch_m2 = ((values - batch_mean) ** 2).sum(0)
        total = self.n + n_batch
        delta = batch_mean - self.mean_C
        self.mean_C += delta * n_batch / total
        self.m2_C += batch_m2 + delta**2 * self.n * n_batch / total
        self.n = total
        self.crisp_C += (torch.minimum(values, 1 - values) < CRISP_MARGIN).sum(0)
        self.on_C += (values > ON_THRESHOLD).sum(0)

    def result(self) -> dict[str, Any]:
        if self.n == 0:
            raise UserError("no tokens were seen: give held-out text with at least one token")
        variance = self.m2_C / self.n
        crispness = self.crisp_C / self.n
        on_fraction = self.on_C / self.n
        return dict(
            mean=self.mean_C.tolist(), variance=variance.tolist(), crispness=crispness.tolist(),
            on_fraction=on_fraction.tolist(), alive=is_alive(on_fraction), regime=classify_regime(variance, crispness),
            n_tokens=self.n,
        )


def channel_statistics(values_NxC: Float[Tensor, "tokens channel"]) -> pandas.DataFrame:
    """mean, variance, crispness, on_fraction, alive and regime of each column of a [tokens, channels] array."""
    import pandas as pd

    values = torch.as_tensor(values_NxC)
    if values.dim() != 2:
        raise UserError(f"channel values must be [tokens, channels], got shape {tuple(values.shape)}")
    accumulator = ChannelAccumulator(values.shape[1])
    accumulator.update(values)
    result = accumulator.result()
    result["n_tokens"] = [result["n_tokens"]] * values.shape[1]
    return pd.DataFrame({"channel": range(values.shape[1]), **result})


# --- which channels a model has ---------------------------------------------------------------------------


def bounded_channel_groups(model: Any) -> list[ChannelGroup]:
    """Every bounded channel group of the model, as its layers declare them (CodeLayer.bounded_channels)."""
    groups = [group for block in model.blocks for layer in block.code_layers() for group in layer.bounded_channels()]
    if not groups:
        config = model.config
        attention = model.blocks[0].attn
        raise NoBoundedChannelsError(
            f"model {config.name or '(unnamed)'} has no bounded channels (attention values "
            f"{attention.value_mode} on {attention.n_special} heads, FFN {model.blocks[0].ffn_description()}): "
            "legibility is defined on values bounded in [0, 1] by construction (membership or boolean attention "
            "heads, NC-FFN operators); use direct_logit_attribution or the circuit database for this architecture"
        )
    return groups


def design_label(model: Any, surface: str) -> str:
    """The seed 002 table row a model's surface belongs to, e.g. 'boolean head-100', 'NC-FFN 50% operators',
    as the first layer with bounded channels on that surface names its design."""
    for block in model.blocks:
        for layer in block.code_layers():
            if any(group.surface == surface for group in layer.bounded_channels()):
                return layer.design_label()
    raise ValueError(f"the model has no bounded channels on the {surface!r} surface")


# --- running the model over held-out text ------------------------------------------------------------------


def held_out_windows(model: Any, texts: Iterable[str], seq_len: int = 256) -> Int[Tensor, "windows pos"]:
    """Tokenize texts (each followed by the end-of-text id) into one stream, cut into [windows, seq_len]."""
    tokenizer = model._require_tokenizer() if hasattr(model, "_require_tokenizer") else model.tokenizer
    if seq_len < 1 or seq_len > model.cfg.n_ctx:
        raise UserError(f"seq_len must lie in [1, n_ctx={model.cfg.n_ctx}], got {seq_len}")
    stream: list[int] = []
    separator = getattr(tokenizer, "eos_id", None)
    for text in texts:
        stream += tokenizer.encode(text)
        if separator is not None:
            stream.append(separator)
    n_windows = len(stream) // seq_len
    if n_windows == 0:
        raise UserError(f"the held-out text has {len(stream)} tokens, fewer than one window of seq_len={seq_len}")
    return torch.tensor(stream[: n_windows * seq_len], dtype=torch.long).view(n_windows, seq_len)


def _token_batches(tokens: Tensor | Iterable[Tensor], batch_size: int) -> Iterator[Tensor]:
    if isinstance(tokens, Tensor):
        if tokens.dim() != 2:
            raise UserError(f"held-out tokens must be [sequences, pos], got shape {tuple(tokens.shape)}")
        for start in range(0, tokens.shape[0], batch_size):
            yield tokens[start : start + batch_size]
    else:
        for batch in tokens:
            batch = torch.as_tensor(batch, dtype=torch.long)
            yield batch[None] if batch.dim() == 1 else batch


def _bounded_activations(
    model: Any, tokens: Tensor | Iterable[Tensor], hooks: set[str], batch_size: int, progress: bool, desc: str
) -> Iterator[tuple[Tensor, dict[str, Tensor]]]:
    from tqdm.auto import tqdm

    total = math.ceil(tokens.shape[0] / batch_size) if isinstance(tokens, Tensor) else None
    device = model.W_E.device
    with torch.no_grad():
        for batch_BxT in tqdm(_token_batches(tokens, batch_size), total=total, desc=desc, disable=not progress, leave=False):
            _, cache = model.run_with_cache(batch_BxT.to(device), names_filter=lambda name: name in hooks)
            yield batch_BxT, {name: cache[name] for name in hooks}


# --- statistics over a model --------------------------------------------------------------------------------


def legibility_stats(
    model: Any, tokens: Tensor | Iterable[Tensor], batch_size: int = 8, progress: bool = True
) -> pandas.DataFrame:
    """Per-channel legibility over held-out tokens ([sequences, pos] tensor, or an iterable of batches).

    One row per bounded channel with columns surface ('attention' | 'ffn'), family ('operator' |
    'quantifier', see the module docstring), layer, head (attention only),
    channel (within its head, or within its FFN hook), role (membership, operand_a, operand_b, and, andnot,
    quant_in, exists, proportion), operand / combined (which table columns it feeds), hook, mean, variance,
    crispness, on_fraction, alive (operand channels: ON-fraction in ALIVE_RANGE), regime, n_tokens. Raises
    NoBoundedChannelsError for models without any.
    """
    import pandas as pd

    groups = bounded_channel_groups(model)
    accumulators: dict[int, ChannelAccumulator] = {}
    shapes: dict[int, tuple[int, ...]] = {}
    for _, activations in _bounded_activations(model, tokens, {g.hook for g in groups}, batch_size, progress, "legibility"):
        for index, group in enumerate(groups):
            values = group.take(activations[group.hook])
            shapes[index] = tuple(values.shape[2:])
            flat_NxC = values.reshape(-1, math.prod(values.shape[2:]))
            accumulators.setdefault(index, ChannelAccumulator(flat_NxC.shape[1])).update(flat_NxC)
    if not accumulators:
        raise UserError("no held-out tokens were given")
    rows = []
    for index, group in enumerate(groups):
        result = accumulators[index].result()
        shape = shapes[index]
        per_head = shape[1] if len(shape) == 2 else None
        for flat in range(math.prod(shape)):
            rows.append({
                "surface": group.surface, "family": channel_family(group.role), "layer": group.layer,
                "head": flat // per_head + group.head_offset if per_head else None,
                "channel": flat % per_head + group.channel_offset if per_head else flat,
                "role": group.role, "operand": group.operand, "combined": group.combined, "hook": group.hook,
                "mean": result["mean"][flat], "variance": result["variance"][flat], "crispness": result["crispness"][flat],
                "on_fraction": result["on_fraction"][flat], "alive": result["alive"][flat],
                "regime": result["regime"][flat], "n_tokens": result["n_tokens"],
            })
    table = pd.DataFrame(rows, columns=list(STAT_COLUMNS))
    table["head"] = table["head"].astype("Int64")
    table.attrs["designs"] = {surface: design_label(model, surface) for surface in table["surface"].unique()}
    return table


def _regime_fractions(rows: pandas.DataFrame) -> dict[str, float]:
    n = len(rows)
    return {regime.lower(): (float((rows["regime"] == regime).mean()) if n else math.nan) for regime in REGIMES}


def _aggregate(stats: pandas.DataFrame, keys: list[str]) -> pandas.DataFrame:
    import pandas as pd

    out = []
    for key, rows in stats.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        operands, combined = rows[rows["operand"]], rows[rows["combined"]]
        record = dict(zip(keys, key))
        on_O = operands["on_fraction"]
        record.update(
            n_channels=len(combined),
            n_operands=len(operands),
            atom_crisp=float(operands["crispness"].mean()) if len(operands) else math.nan,
            on_fraction=float(on_O.mean()) if len(operands) else math.nan,
            alive=float(operands["alive"].mean()) if len(operands) else math.nan,
            dead=float((on_O < ALIVE_RANGE[0]).mean()) if len(operands) else math.nan,
            stuck_on=float((on_O > ALIVE_RANGE[1]).mean()) if len(operands) else math.nan,
            **_regime_fractions(combined),
            **{f"{name}_operands": value for name, value in _regime_fractions(operands).items()},
        )
        out.append(record)
    return pd.DataFrame(out)


def _with_family(stats: pandas.DataFrame) -> pandas.DataFrame:
    """Statistics tables written before the family column existed get it from the role."""
    return stats if "family" in stats.columns else stats.assign(family=stats["role"].map(channel_family))


def legibility_by_layer(stats: pandas.DataFrame) -> pandas.DataFrame:
    """Per surface, family and layer: n_channels (combined), n_operands, atom_crisp and on_fraction (mean over
    operand channels = the pooled fraction of operand values), alive / dead / stuck_on (fractions of the
    operand channels whose ON-fraction lies in ALIVE_RANGE, below it, above it), selective / constant / fuzzy
    fractions of the combined channels, and the same three over the operand channels (selective_operands, ...)."""
    return _aggregate(_with_family(stats), ["surface", "family", "layer"])


def legibility_by_head(stats: pandas.DataFrame) -> pandas.DataFrame:
    """legibility_by_layer, resolved per attention head (seed 002, Figure 4)."""
    attention = stats[stats["surface"] == "attention"]
    if attention.empty:
        raise NoBoundedChannelsError("no bounded attention heads in these statistics (FFN channels only)")
    return _aggregate(attention, ["layer", "head"])


def legibility_summary(stats: pandas.DataFrame, model_name: str = "") -> pandas.DataFrame:
    """One row per surface and family, the columns of seed 002's Tables 1 and 5 (percentages): design,
    atom_crisp, on_percent, alive, dead, stuck_on (operands), selective, constant, fuzzy (combined values),
    selective_operands, constant_operands (the regime read on the operands, Table 5's reading for the FFN).
    The NC-FFN's quantifiers get their own row (design 'NC-FFN quantifiers'): Table 5 measures A and B only."""
    summary = _aggregate(_with_family(stats), ["surface", "family"])
    designs = stats.attrs.get("designs", {})
    summary.insert(0, "design", [
        "NC-FFN quantifiers" if family == "quantifier" else designs.get(surface, surface)
        for surface, family in zip(summary["surface"], summary["family"])
    ])
    if model_name:
        summary.insert(0, "model", model_name)
    percent = ["atom_crisp", "on_fraction", "alive", "dead", "stuck_on", "selective", "constant", "fuzzy",
               "selective_operands", "constant_operands", "fuzzy_operands"]
    summary[percent] = summary[percent] * 100
    return summary.rename(columns={"on_fraction": "on_percent"}).round(2)


def legibility_table(stats_by_model: Mapping[str, pandas.DataFrame]) -> pandas.DataFrame:
    """legibility_summary of several models stacked, one row per model and surface (a Table 1 / 5)."""
    import pandas as pd

    return pd.concat([legibility_summary(stats, name) for name, stats in stats_by_model.items()], ignore_index=True)
