"""Model configuration as typed models (pydantic): one config class per FFN design and per attention value
mode, chosen by a discriminator field (`feedforward.type`, `attention.value_mode`), unknown keys refused.
JSON round-trip. The presets and seed 000's scaling ladder live in circuitlab.presets.

The first on-disk format (circuitlab 0.1, before typed configs) wrote every FFN field whatever the FFN
type; it still loads: the fields its type does not read are dropped (`_from_first_format`). The config
hash is taken over that first layout, so hashes recorded in checkpoints, databases and run folders before
typed configs still match.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from circuitlab.atomic import atomic_write_text
from circuitlab.errors import UserError

VALUE_MODES = ("standard", "membership", "boolean")
FFN_TYPES = ("mlp", "swiglu", "sgatlin", "ncffn", "peer", "moe")
POSITIONALS = ("rope", "learned")
NORMS = ("rmsnorm", "layernorm")

Number = Annotated[float, Field(strict=True)]  # a JSON number (an integer is fine), never a string
PositiveInt = Annotated[StrictInt, Field(gt=0)]
CountInt = Annotated[StrictInt, Field(ge=0)]


class ConfigError(UserError):
    """A configuration that cannot describe a model."""


class ConfigPart(BaseModel):
    """A section of a model config: immutable, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- attention: one class per value mode (seed 002, section 3.5) ---------------------------------------------


class StandardAttentionConfig(ConfigPart):
    """Every head computes V = X W_v (no special heads: n_special is 0)."""

    value_mode: Literal["standard"] = "standard"
    n_special: Literal[0] = 0
    qk_norm: StrictBool = True


class MembershipAttentionConfig(ConfigPart):
    """The first `n_special` heads compute V = sigmoid(X W_v) (seed 002, eq. 1)."""

    value_mode: Literal["membership"] = "membership"
    n_special: CountInt = 0
    qk_norm: StrictBool = True


class BooleanAttentionConfig(ConfigPart):
    """The first `n_special` heads compute V = [A*B ; A*(1-B)] from two half-width operands (seed 002, eq. 2)."""

    value_mode: Literal["boolean"] = "boolean"
    n_special: CountInt = 0
    qk_norm: StrictBool = True


AttentionConfig = Annotated[
    Union[StandardAttentionConfig, MembershipAttentionConfig, BooleanAttentionConfig], Field(discriminator="value_mode")
]


# --- the FFN slot: one class per design -----------------------------------------------------------------------


class MLPConfig(ConfigPart):
    """GELU MLP of `d_ffw` hidden units; its sparse code keeps the `code_k` largest |activations|."""

    type: Literal["mlp"] = "mlp"
    d_ffw: PositiveInt = 1024
    code_k: PositiveInt = 32


class SwiGLUConfig(ConfigPart):
    """SwiGLU of `d_ffw` hidden units; its sparse code keeps the `code_k` largest |activations|."""

    type: Literal["swiglu"] = "swiglu"
    d_ffw: PositiveInt = 1024
    code_k: PositiveInt = 32


class SgatlinConfig(ConfigPart):
    """sgatlin (seed 000): `n_channels` channels of `d_ffw` neurons (a perfect square, for product keys),
    `k` gates per channel, router bottleneck `d_key`. Its code is the gates themselves."""

    type: Literal["sgatlin"] = "sgatlin"
    d_ffw: PositiveInt = 1024
    n_channels: PositiveInt = 8
    k: PositiveInt = 8
    d_key: PositiveInt = 128
    # seed 000's Table 1 ablation: a nonlinearity on each neuron, g * sigma(w_in . z) * w_out ("none": sgatlin)
    activation: Literal["none", "relu", "gelu", "silu"] = "none"

    @model_validator(mode="after")
    def _product_keys(self) -> SgatlinConfig:
        n_keys = math.isqrt(self.d_ffw)
        if n_keys * n_keys != self.d_ffw:
            raise ValueError(
                f"sgatlin d_ffw (neurons per channel) must be a perfect square for product keys, got {self.d_ffw}"
                f" (nearest: {n_keys * n_keys} or {(n_keys + 1) ** 2})"
            )
        if not self.k < n_keys:
            raise ValueError(f"sgatlin k={self.k} must satisfy 0 < k < sqrt(d_ffw)={n_keys} (k candidates per key half)")
        return self


class NCFFNConfig(ConfigPart):
    """NC-FFN (seed 002's companion; circuitlab's layout): `d_ffw` hidden units, a GELU fraction `rho`, and
    `n_quantifiers` sequence quantifiers (half existential, half proportion); the rest are operator pairs.
    Its sparse code keeps the `code_k` most active operator outputs."""

    type: Literal["ncffn"] = "ncffn"
    d_ffw: PositiveInt = 1024
    rho: Number = 0.75
    n_quantifiers: CountInt = 32
    code_k: PositiveInt = 32
    # operand pre-activations minus a running per-channel centre (circuitlab.architectures.feedforward.ncffn)
    centre_operands: bool = False

    @model_validator(mode="after")
    def _partition(self) -> NCFFNConfig:
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"ncffn rho (GELU fraction) must lie in [0, 1], got {self.rho}")
        if self.n_quantifiers % 2:
            raise ValueError(
                f"ncffn n_quantifiers must be even (half existential, half proportion), got {self.n_quantifiers}"
            )
        return self  # quantifiers beyond the non-GELU units are clipped by ncffn_partition


class PEERConfig(ConfigPart):
    """PEER (the fine-grained MoE baseline of seed 000): `d_ffw` single-neuron experts (a perfect square, for
    product keys) shared by `n_channels` retrieval heads; each head has its own query projection to `d_key`
    (split in two halves for the product keys), retrieves `k` experts, softmaxes their scores and applies
    `activation` to each expert's input. Its code is the softmax gates of the retrieved experts."""

    type: Literal["peer"] = "peer"
    d_ffw: PositiveInt = 1024
    n_channels: PositiveInt = 8
    k: PositiveInt = 8
    d_key: PositiveInt = 128
    activation: Literal["gelu", "relu", "silu"] = "gelu"

    @model_validator(mode="after")
    def _product_keys(self) -> PEERConfig:
        n_keys = math.isqrt(self.d_ffw)
        if n_keys * n_keys != self.d_ffw:
            raise ValueError(
                f"peer d_ffw (experts) must be a perfect square for product keys, got {self.d_ffw}"
                f" (nearest: {n_keys * n_keys} or {(n_keys + 1) ** 2})"
            )
        if not self.k < n_keys:
            raise ValueError(f"peer k={self.k} must satisfy 0 < k < sqrt(d_ffw)={n_keys} (k candidates per key half)")
        if self.d_key % 2:
            raise ValueError(f"peer d_key={self.d_key} must be even (the query splits into two product-key halves)")
        return self


class MoEConfig(ConfigPart):
    """Coarse top-k mixture of experts (GPT-OSS style, seed 000's MoE baseline): `n_experts` SwiGLU experts of
    `d_ffw` hidden units each, a linear router, the `k` highest-scoring experts per token weighted by the
    softmax of their router logits. Its sparse code keeps the `code_k` largest |weighted activations| among
    the chosen experts' hidden units (ids e * d_ffw + f)."""

    type: Literal["moe"] = "moe"
    d_ffw: PositiveInt = 256
    n_experts: PositiveInt = 16
    k: PositiveInt = 2
    code_k: PositiveInt = 32

    @model_validator(mode="after")
    def _routing(self) -> MoEConfig:
        if not self.k <= self.n_experts:
            raise ValueError(f"moe k={self.k} must satisfy 0 < k <= n_experts={self.n_experts}")
        return self


FeedForwardConfig = Annotated[
    Union[MLPConfig, SwiGLUConfig, SgatlinConfig, NCFFNConfig, PEERConfig, MoEConfig], Field(discriminator="type")
]


# --- the parity bottleneck and the selectivity pressures ------------------------------------------------------


class BottleneckConfig(ConfigPart):
    """The deep parity bottleneck (DESIGN section 5) on each block's FFN write: m = 2**n_bits features in
    d_model dimensions, k active per token.

    design "product" (the default; architectures/feedforward/parity.py): d_model is read as a `grid` of
    rows x cols (None: the most nearly square one); the low `col_bits` index bits (None: half of n_bits,
    rounded up) pick a column pattern, the others a row pattern. The encoder keeps the `beam` column patterns
    with the largest score bound, scores their features exactly and keeps the top k; coefficients are least
    squares on the support (`ridge` added to the Gram matrix), refined by `pursuit_rounds - 1` swap rounds.
    Training adds `lambda_recon` times the relative reconstruction error of the FFN write to the loss.

    design "prefix": the first shipped design (architectures/feedforward/parity_prefix.py), kept so models
    trained with it still load: levels of `bits_per_level` index bits, `beams[l]` prefixes kept at level l,
    coefficients a_i = <x, phi_i>. A config without a `design` field that names `beams` is of this design.
    """

    design: Literal["product", "prefix"] = "product"
    n_bits: PositiveInt = 16
    k: PositiveInt = 32
    code_seed: StrictInt = 0
    grid: tuple[PositiveInt, PositiveInt] | None = None
    col_bits: PositiveInt | None = None
    beam: PositiveInt = 64
    pursuit_rounds: PositiveInt = 2
    ridge: Annotated[Number, Field(ge=0)] = 1e-3
    lambda_recon: Annotated[Number, Field(ge=0)] = 1.0
    bits_per_level: PositiveInt | None = None
    beams: tuple[PositiveInt, ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _first_design(cls, data: Any) -> Any:
        """Configs written before the product design name no design but list the prefix search's beams; they
        were trained without a reconstruction term (the prefix design's defaults as they were)."""
        if isinstance(data, dict) and "design" not in data and ("beams" in data or "bits_per_level" in data):
            data = {"lambda_recon": 0.0, "bits_per_level": 4, "beams": [16, 64], **data, "design": "prefix"}
        return data


def product_layout(bottleneck: BottleneckConfig, d_model: int) -> tuple[int, int, int, int]:
    """(grid rows, grid cols, row bits, col bits) of a product-design bottleneck in d_model dimensions."""
    if bottleneck.grid is not None:
        rows, cols = bottleneck.grid
    else:
        rows = max(divisor for divisor in range(1, math.isqrt(d_model) + 1) if d_model % divisor == 0)
        cols = d_model // rows
    col_bits = bottleneck.col_bits if bottleneck.col_bits is not None else (bottleneck.n_bits + 1) // 2
    return rows, cols, bottleneck.n_bits - col_bits, col_bits


class SelectivityConfig(ConfigPart):
    """Selectivity pressures on bounded operands (seed 002, section 3.6), added to the LM loss.

    The attention surface is the membership values or Boolean operands A, B; the FFN surface is the NC-FFN
    operands A, B. Each term is lambda * (sum |v| or sum v (1 - v)), with the sum normalised by
    `normalization`:
      sum   over the operand channels, averaged over tokens, summed over layers (seed 002's form; its
            defaults are sparsity 1e-3, crispness 3e-3). The term grows with width and depth: the 4-layer
            legible-stories model of this form paid 1.41 nats/token of crispness at step 1, more than its
            final LM loss, and its operands collapsed onto the rails.
      mean  averaged over tokens, operand channels and layers, so a term lies in [0, lambda] (sparsity) or
            [0, lambda / 4] (crispness) nats/token whatever the model's width and depth. This is the
            calibrated form (see circuitlab.training.pressure for the lambda rule).
    `ramp_steps` raises the pressures linearly from 0 over the first steps of training, and `cap` (> 0)
    bounds the pressure added to the loss by cap x the batch's LM loss (both applied by the trainer).
    """

    attn_sparsity: Annotated[Number, Field(ge=0)] = 0.0
    attn_crispness: Annotated[Number, Field(ge=0)] = 0.0
    ffn_sparsity: Annotated[Number, Field(ge=0)] = 0.0
    ffn_crispness: Annotated[Number, Field(ge=0)] = 0.0
    normalization: Literal["sum", "mean"] = "sum"
    ramp_steps: CountInt = 0
    cap: Annotated[Number, Field(ge=0)] = 0.0

    # the first layout had only the four lambdas; these defaults are left out of the config hash
    SCHEDULE_DEFAULTS: ClassVar[dict[str, Any]] = {"normalization": "sum", "ramp_steps": 0, "cap": 0.0}

    @property
    def lambdas(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness")}

    @property
    def active(self) -> bool:
        return any(value != 0 for value in self.lambdas.values())

    @property
    def regime(self) -> str:
        """seed 002's name for the pressures on: none, sparsity alone, crispness alone, both pressures."""
        lambdas = self.lambdas
        sparsity = lambdas["attn_sparsity"] > 0 or lambdas["ffn_sparsity"] > 0
        crispness = lambdas["attn_crispness"] > 0 or lambdas["ffn_crispness"] > 0
        return {(False, False): "none", (True, False): "sparsity alone", (False, True): "crispness alone",
                (True, True): "both pressures"}[(sparsity, crispness)]


# --- the model --------------------------------------------------------------------------------------------------


class ModelConfig(ConfigPart):
    d_vocab: PositiveInt = 4096
    d_model: PositiveInt = 256
    n_layers: PositiveInt = 4
    n_heads: PositiveInt = 4
    d_head: PositiveInt = 64
    n_ctx: PositiveInt = 512
    positional: Literal["rope", "learned"] = "rope"
    rope_base: Number = 10000.0
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norm_eps: Number = 1e-6
    tied_embeddings: StrictBool = True
    init_std: Number = 0.02
    attention: AttentionConfig = Field(default_factory=StandardAttentionConfig)
    feedforward: FeedForwardConfig = Field(default_factory=MLPConfig)
    bottleneck: BottleneckConfig | None = None
    selectivity: SelectivityConfig = Field(default_factory=SelectivityConfig)
    name: str = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise ConfigError(_explain(error, data)) from None

    @model_validator(mode="before")
    @classmethod
    def _defaults_and_first_format(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        # the discriminators default as the first format's dataclasses did
        if isinstance(data.get("feedforward"), dict) and "type" not in data["feedforward"]:
            data["feedforward"] = {"type": "mlp", **data["feedforward"]}
        if isinstance(data.get("attention"), dict) and "value_mode" not in data["attention"]:
            data["attention"] = {"value_mode": "standard", **data["attention"]}
        return _from_first_format(data)

    @model_validator(mode="after")
    def _fits_the_skeleton(self) -> ModelConfig:
        """Checks that need more than one section (each section checks itself)."""
        if self.positional == "rope" and self.d_head % 2:
            raise ValueError(f"RoPE needs an even d_head, got {self.d_head}")
        attention = self.attention
        if not attention.n_special <= self.n_heads:
            raise ValueError(f"attention.n_special={attention.n_special} must lie in [0, n_heads={self.n_heads}]")
        if attention.value_mode == "boolean" and self.d_head % 2:
            raise ValueError(
                f"boolean heads split the value into two half-width operands: d_head={self.d_head} must be even"
            )
        if self.bottleneck is not None:
            _check_bottleneck(self.bottleneck, self.d_model)
        return self

    # --- derived ----------------------------------------------------------------------------------------

    @property
    def has_bounded_attention(self) -> bool:
        return self.attention.value_mode != "standard" and self.attention.n_special > 0

    def validate(self) -> None:  # type: ignore[override]
        """Configs validate on construction and are immutable; kept so callers may check explicitly."""
        type(self)(**self.to_dict())

    # --- serialisation ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data["feedforward"]["type"] == "sgatlin" and data["feedforward"].get("activation") == "none":
            del data["feedforward"]["activation"]  # plain sgatlin is written (and hashed) as before the ablation field
        if data["feedforward"]["type"] == "ncffn" and not data["feedforward"].get("centre_operands"):
            del data["feedforward"]["centre_operands"]  # likewise NC-FFN before operand centring
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"a model config is a JSON object, got {type(data).__name__}")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            atomic_write_text(path, text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> ModelConfig:
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            path = Path(text_or_path)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise ConfigError(f"cannot read model config {path}: {error}") from error
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"model config is not valid JSON ({error})") from error
        return cls.from_dict(data)

    def hash(self) -> str:
        """Stable sha256 of the architecture (the name is left out: renaming keeps the hash), taken over the
        first format's layout so hashes recorded before typed configs still match."""
        data = _first_format(self.to_dict())
        data.pop("name", None)
        selectivity = data["selectivity"]
        for key, default in SelectivityConfig.SCHEDULE_DEFAULTS.items():
            if selectivity.get(key) == default:
                selectivity.pop(key)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again; parts may be given as configs or dicts)."""
        data = self.to_dict()
        for key, value in changes.items():
            data[key] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        return type(self).from_dict(data)

    # --- presets ----------------------------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        from circuitlab.presets import PRESETS

        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
        config = from_dict_copy(PRESETS[name])
        config["name"] = name
        config.update(overrides)
        return cls.from_dict(config)


def bottleneck_description(config: ModelConfig) -> str:
    """The parity bottleneck's settings in one line (cards, summaries)."""
    bn = config.bottleneck
    head = f"m = 2^{bn.n_bits} = {2 ** bn.n_bits} features, k {bn.k}, code seed {bn.code_seed}"
    if bn.design == "prefix":
        return f"{head}, prefix design: {bn.bits_per_level} index bits per level, beams {list(bn.beams)}, a_i = <x, phi_i>"
    rows, cols, row_bits, col_bits = product_layout(bn, config.d_model)
    return (
        f"{head}, product design: grid {rows} x {cols}, {col_bits} column + {row_bits} row index bits, beam {bn.beam} "
        f"column patterns, least-squares coefficients (ridge {bn.ridge:g}) with {bn.pursuit_rounds - 1} pursuit "
        f"round(s), reconstruction term lambda {bn.lambda_recon:g}"
    )


def _check_bottleneck(bottleneck: BottleneckConfig, d_model: int) -> None:
    if bottleneck.k > 2**bottleneck.n_bits:
        raise ValueError(f"bottleneck k={bottleneck.k} must lie in (0, m={2**bottleneck.n_bits}]")
    if bottleneck.n_bits > 30:
        raise ValueError(f"bottleneck n_bits={bottleneck.n_bits} is larger than supported (30)")
    if bottleneck.design == "prefix":
        _check_prefix_bottleneck(bottleneck, d_model)
        return
    stray = [key for key in ("bits_per_level", "beams") if getattr(bottleneck, key) is not None]
    if stray:
        raise ValueError(f"bottleneck {stray} belong to design 'prefix'; the product design takes beam and grid")
    rows, cols, row_bits, col_bits = product_layout(bottleneck, d_model)
    if rows * cols != d_model:
        raise ValueError(f"bottleneck grid {rows} x {cols} must hold d_model={d_model} coordinates")
    if not 1 <= col_bits < bottleneck.n_bits:
        raise ValueError(
            f"bottleneck col_bits={col_bits} must leave row bits: 1 <= col_bits < n_bits={bottleneck.n_bits}"
        )
    if col_bits > cols or row_bits > rows:
        raise ValueError(
            f"bottleneck: {col_bits} column bits and {row_bits} row bits need a grid of at least {row_bits} rows x "
            f"{col_bits} cols (full-rank codes, so distinct features differ), got {rows} x {cols}"
        )
    if bottleneck.beam > 2**col_bits:
        raise ValueError(f"bottleneck beam={bottleneck.beam} must lie in (0, 2^col_bits = {2**col_bits}]")
    needed = bottleneck.k * (2 if bottleneck.pursuit_rounds > 1 else 1)
    if needed > bottleneck.beam * 2**row_bits:
        raise ValueError(
            f"bottleneck: the beam scores {bottleneck.beam * 2**row_bits} features per token, fewer than the "
            f"{needed} that k={bottleneck.k}{' and pursuit' if needed > bottleneck.k else ''} need"
        )


def _check_prefix_bottleneck(bottleneck: BottleneckConfig, d_model: int) -> None:
    bits, per_level, beams = bottleneck.n_bits, bottleneck.bits_per_level, bottleneck.beams
    if per_level is None or beams is None:
        raise ValueError("bottleneck design 'prefix' needs bits_per_level and beams")
    low_bits = int(math.log2(d_model))
    if 2**low_bits != d_model:
        raise ValueError(
            f"the parity bottleneck reads d_model coordinates as parents: d_model={d_model} must be a power of 2"
        )
    if bits <= low_bits:
        raise ValueError(f"bottleneck n_bits={bits} must exceed log2(d_model)={low_bits}")
    if (bits - low_bits) % per_level:
        raise ValueError(
            f"bottleneck: the {bits - low_bits} high index bits must split into levels of bits_per_level={per_level}"
        )
    n_levels = (bits - low_bits) // per_level
    if len(beams) != n_levels:
        raise ValueError(f"bottleneck needs one beam width per level ({n_levels}), got beams={list(beams)}")
    if bits > d_model:
        raise ValueError("bottleneck n_bits must not exceed d_model (M has full column rank)")
    widest = d_model
    for level, beam in enumerate(beams):
        if beam > widest:
            raise ValueError(f"bottleneck beams[{level}]={beam} must lie in (0, {widest}]")
        widest = beam * 2**per_level
    if bottleneck.k > d_model + sum(beam * 2**per_level for beam in beams):
        raise ValueError(f"bottleneck k={bottleneck.k} exceeds the number of features the search scores")


# --- the first on-disk format -----------------------------------------------------------------------------------

# every field of the first format's FFN and attention sections, with its defaults
_FIRST_FEEDFORWARD = dict(type="mlp", d_ffw=1024, n_channels=8, k=8, d_key=128, rho=0.75, n_quantifiers=32, code_k=32)
_FIRST_ATTENTION = dict(value_mode="standard", n_special=0, qk_norm=True)
_FIRST_BOTTLENECK = ("n_bits", "k", "bits_per_level", "beams", "code_seed")
_FEEDFORWARD_CLASSES = {
    "mlp": MLPConfig, "swiglu": SwiGLUConfig, "sgatlin": SgatlinConfig, "ncffn": NCFFNConfig, "peer": PEERConfig,
    "moe": MoEConfig,
}
_ATTENTION_CLASSES = {
    "standard": StandardAttentionConfig, "membership": MembershipAttentionConfig, "boolean": BooleanAttentionConfig,
}


def _first_format(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict in the first format's layout (every FFN and attention field present)."""
    data = dict(data)
    data["feedforward"] = {**_FIRST_FEEDFORWARD, **data["feedforward"]}
    data["attention"] = {**_FIRST_ATTENTION, **data["attention"]}
    bottleneck = data.get("bottleneck")
    if isinstance(bottleneck, dict) and bottleneck.get("design") == "prefix":
        # the prefix design's fields as they were, so its models keep their hashes
        data["bottleneck"] = {key: bottleneck[key] for key in _FIRST_BOTTLENECK}
    return data


def _from_first_format(data: dict[str, Any]) -> dict[str, Any]:
    """A first-format config (its FFN section lists all eight fields) with the fields its FFN type and
    attention mode do not read dropped; any other dict is returned as it is."""
    feedforward, attention = data.get("feedforward"), data.get("attention")
    if not isinstance(feedforward, dict) or set(feedforward) != set(_FIRST_FEEDFORWARD):
        return data
    ffn_class = _FEEDFORWARD_CLASSES.get(feedforward["type"])
    if ffn_class is not None:
        data["feedforward"] = {key: value for key, value in feedforward.items() if key in ffn_class.model_fields}
    if isinstance(attention, dict) and attention.get("value_mode") in _ATTENTION_CLASSES:
        fields = _ATTENTION_CLASSES[attention["value_mode"]].model_fields
        data["attention"] = {key: value for key, value in attention.items() if key in fields}
    return data


# --- errors a person can act on -----------------------------------------------------------------------------------


def _explain(error: ValidationError, data: dict[str, Any]) -> str:
    """The first problem of a failed validation, as one sentence naming the field."""
    name = data.get("name") if isinstance(data.get("name"), str) else ""
    head = f"invalid model config{f' {name!r}' if name else ''}: "
    unknown = [str(e["loc"][0]) for e in error.errors() if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if unknown:
        return (
            f"unknown model config keys {sorted(unknown)}; expected a subset of {sorted(ModelConfig.model_fields)}"
        )
    problem = error.errors()[0]
    kind, context, value = problem["type"], problem.get("ctx") or {}, problem.get("input")
    # drop the union tag pydantic puts after a discriminated section ('feedforward', 'sgatlin', 'd_ffw')
    loc = [str(part) for part in problem["loc"]]
    if len(loc) >= 2 and loc[0] in ("feedforward", "attention") and loc[1] in {*FFN_TYPES, *VALUE_MODES}:
        loc.pop(1)
    where = "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc).lstrip(".")
    if kind == "union_tag_invalid":
        key = context["discriminator"].strip("'")
        choices = FFN_TYPES if key == "type" else VALUE_MODES
        return head + f"{where}.{key} must be one of {choices}, got {context['tag']!r}"
    if kind == "extra_forbidden":
        section, key = ".".join(loc[:-1]), loc[-1]
        return head + f"{section} has no field {key!r} (a config of the first format lists every FFN field; " \
            "a current one only those of its type)"
    if kind == "greater_than" and context.get("gt") == 0:
        return head + f"{where} must be a positive integer, got {value!r}"
    if kind == "literal_error":
        return head + f"{where} must be one of {context.get('expected')}, got {value!r}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return head + f"{where} must be an integer, got {value!r}"
    if kind == "model_attributes_type" or kind == "model_type":
        return head + f"{where} must be an object with its section's fields, got {type(value).__name__}"
    message = str(problem["msg"]).removeprefix("Value error, ")
    return head + (f"{where}: {message}" if where else message) + ("" if kind == "value_error" else f" (got {value!r})")


# --- partitions ----------------------------------------------------------------------------------------------------


def ncffn_partition(ffn: NCFFNConfig) -> tuple[int, int, int]:
    """(GELU units, operator pairs, quantifier units) of an NC-FFN hidden layer of width d_ffw.

    Layout of the hidden units: [GELU | operand A of each pair | operand B of each pair | quantifiers].
    The non-GELU remainder after the quantifiers must be even; a leftover odd unit goes to GELU.
    """
    n_gelu = int(round(ffn.rho * ffn.d_ffw))
    n_quant = min(ffn.n_quantifiers, max(ffn.d_ffw - n_gelu, 0))
    n_quant -= n_quant % 2
    remainder = ffn.d_ffw - n_gelu - n_quant
    n_gelu += remainder % 2
    return n_gelu, (ffn.d_ffw - n_gelu - n_quant) // 2, n_quant


def from_dict_copy(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))


# names that moved to circuitlab.presets, still importable from here
_MOVED_TO_PRESETS = ("PRESETS", "LADDER_FFN_TYPES", "LADDER_ABLATIONS", "scaling_ladder", "ladder_config",
                     "calibrated_selectivity", "CALIBRATED_CRISPNESS", "CALIBRATED_RAMP_STEPS", "CALIBRATED_CAP")


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_PRESETS:
        from circuitlab import presets

        return getattr(presets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
