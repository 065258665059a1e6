"""Model configuration: one dataclass with nested parts, JSON round-trip, validation, presets, and the
scaling ladder of seed 000 (appendix B.2)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError

VALUE_MODES = ("standard", "membership", "boolean")
FFN_TYPES = ("mlp", "swiglu", "sgatlin", "ncffn")
POSITIONALS = ("rope", "learned")
NORMS = ("rmsnorm", "layernorm")


class ConfigError(UserError):
    """A configuration that cannot describe a model."""


@dataclass
class AttentionConfig:
    """Causal self-attention. The first `n_special` heads use `value_mode` (seed 002, section 3.5)."""

    value_mode: str = "standard"
    n_special: int = 0
    qk_norm: bool = True


@dataclass
class FeedForwardConfig:
    """The FFN slot of every block.

    mlp / swiglu: `d_ffw` hidden units. sgatlin: `d_ffw` neurons per channel (a perfect square),
    `n_channels`, `k` gates per channel, `d_key` router bottleneck. ncffn: `d_ffw` hidden units, a GELU
    fraction `rho`, `n_quantifiers` sequence-quantifier units (half existential, half proportion).
    `code_k`: non-zeros kept in the sparse codes of dense and NC-FFN layers.
    """

    type: str = "mlp"
    d_ffw: int = 1024
    n_channels: int = 8
    k: int = 8
    d_key: int = 128
    rho: float = 0.75
    n_quantifiers: int = 32
    code_k: int = 32


@dataclass
class BottleneckConfig:
    """The deep parity bottleneck (DESIGN section 5) on each block's FFN write.

    m = 2**n_bits features in d_model dimensions; the low log2(d_model) index bits name a parent
    coordinate, the other bits are split in levels of `bits_per_level`; `beams[l]` prefixes survive level l.
    """

    n_bits: int = 16
    k: int = 32
    bits_per_level: int = 4
    beams: tuple[int, ...] = (16, 64)
    code_seed: int = 0


@dataclass
class SelectivityConfig:
    """Selectivity pressures on bounded operands (seed 002, section 3.6), added to the LM loss.

    Each term is lambda * sum over channels, averaged over tokens, summed over heads/layers. The attention
    surface is the membership values or Boolean operands A, B; the FFN surface is the NC-FFN operands A, B.
    Seed defaults: sparsity 1e-3, crispness 3e-3.
    """

    attn_sparsity: float = 0.0
    attn_crispness: float = 0.0
    ffn_sparsity: float = 0.0
    ffn_crispness: float = 0.0

    @property
    def active(self) -> bool:
        return any(v != 0 for v in dataclasses.astuple(self))


@dataclass
class ModelConfig:
    d_vocab: int = 4096
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_head: int = 64
    n_ctx: int = 512
    positional: str = "rope"
    rope_base: float = 10000.0
    norm: str = "rmsnorm"
    norm_eps: float = 1e-6
    tied_embeddings: bool = True
    init_std: float = 0.02
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    feedforward: FeedForwardConfig = field(default_factory=FeedForwardConfig)
    bottleneck: BottleneckConfig | None = None
    selectivity: SelectivityConfig = field(default_factory=SelectivityConfig)
    name: str = ""

    def __post_init__(self) -> None:
        parts = [("attention", AttentionConfig), ("feedforward", FeedForwardConfig), ("selectivity", SelectivityConfig)]
        if self.bottleneck is not None:
            parts.append(("bottleneck", BottleneckConfig))
        for attr, cls in parts:
            value = getattr(self, attr)
            if isinstance(value, dict):
                try:
                    setattr(self, attr, cls(**value))
                except TypeError as error:
                    raise ConfigError(f"invalid model config: {attr}: {error}") from None
            elif not isinstance(value, cls):
                raise ConfigError(
                    f"invalid model config: {attr} must be an object with the fields of {cls.__name__}, "
                    f"got {type(value).__name__}"
                )
        if self.bottleneck is not None:
            if not isinstance(self.bottleneck.beams, (list, tuple)):
                raise ConfigError(f"invalid model config: bottleneck.beams must be a list, got {self.bottleneck.beams!r}")
            self.bottleneck.beams = tuple(self.bottleneck.beams)
        self._check_integers()
        self.validate()

    def _check_integers(self) -> None:
        """Sizes must be JSON integers (a 2.5 or a true would only fail later, deep inside the model)."""
        fields = [(self, key) for key in ("d_vocab", "d_model", "n_layers", "n_heads", "d_head", "n_ctx")]
        fields += [(self.attention, "n_special")]
        fields += [(self.feedforward, key) for key in ("d_ffw", "n_channels", "k", "d_key", "n_quantifiers", "code_k")]
        if self.bottleneck is not None:
            fields += [(self.bottleneck, key) for key in ("n_bits", "k", "bits_per_level", "code_seed")]
            fields += [(self.bottleneck, f"beams[{i}]") for i in range(len(self.bottleneck.beams))]
        for owner, key in fields:
            value = owner.beams[int(key[6:-1])] if key.startswith("beams[") else getattr(owner, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"invalid model config: {key} must be an integer, got {value!r}")

    # --- validation -------------------------------------------------------------------------------------

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(f"invalid model config{f' {self.name!r}' if self.name else ''}: {message}")

        for key in ("d_vocab", "d_model", "n_layers", "n_heads", "d_head", "n_ctx"):
            need(int(getattr(self, key)) > 0, f"{key} must be a positive integer, got {getattr(self, key)}")
        need(self.positional in POSITIONALS, f"positional must be one of {POSITIONALS}, got {self.positional!r}")
        need(self.norm in NORMS, f"norm must be one of {NORMS}, got {self.norm!r}")
        need(self.positional != "rope" or self.d_head % 2 == 0, f"RoPE needs an even d_head, got {self.d_head}")

        attn = self.attention
        need(attn.value_mode in VALUE_MODES, f"attention.value_mode must be one of {VALUE_MODES}, got {attn.value_mode!r}")
        need(
            0 <= attn.n_special <= self.n_heads,
            f"attention.n_special={attn.n_special} must lie in [0, n_heads={self.n_heads}]",
        )
        need(
            attn.value_mode != "boolean" or self.d_head % 2 == 0,
            f"boolean heads split the value into two half-width operands: d_head={self.d_head} must be even",
        )

        ffn = self.feedforward
        need(ffn.type in FFN_TYPES, f"feedforward.type must be one of {FFN_TYPES}, got {ffn.type!r}")
        need(ffn.d_ffw > 0, f"feedforward.d_ffw must be positive, got {ffn.d_ffw}")
        need(ffn.code_k > 0, f"feedforward.code_k must be positive, got {ffn.code_k}")
        if ffn.type == "sgatlin":
            n_keys = math.isqrt(ffn.d_ffw)
            need(
                n_keys * n_keys == ffn.d_ffw,
                f"sgatlin d_ffw (neurons per channel) must be a perfect square for product keys, got {ffn.d_ffw}"
                f" (nearest: {n_keys * n_keys} or {(n_keys + 1) ** 2})",
            )
            need(
                0 < ffn.k < n_keys,
                f"sgatlin k={ffn.k} must satisfy 0 < k < sqrt(d_ffw)={n_keys} (k candidates per key half)",
            )
            need(ffn.n_channels > 0 and ffn.d_key > 0, "sgatlin n_channels and d_key must be positive")
        if ffn.type == "ncffn":
            need(0.0 <= ffn.rho <= 1.0, f"ncffn rho (GELU fraction) must lie in [0, 1], got {ffn.rho}")
            n_gelu, n_pairs, n_quant = ncffn_partition(ffn)
            need(
                ffn.n_quantifiers >= 0 and ffn.n_quantifiers % 2 == 0,
                f"ncffn n_quantifiers must be even (half existential, half proportion), got {ffn.n_quantifiers}",
            )
            need(
                ffn.d_ffw - n_gelu >= n_quant,
                f"ncffn: {ffn.d_ffw - n_gelu} non-GELU units cannot hold n_quantifiers={ffn.n_quantifiers}",
            )

        if self.bottleneck is not None:
            bn = self.bottleneck
            low_bits = int(math.log2(self.d_model))
            need(
                2**low_bits == self.d_model,
                f"the parity bottleneck reads d_model coordinates as parents: d_model={self.d_model} must be a power of 2",
            )
            need(bn.n_bits > low_bits, f"bottleneck n_bits={bn.n_bits} must exceed log2(d_model)={low_bits}")
            need(bn.bits_per_level > 0, "bottleneck bits_per_level must be positive")
            need(
                (bn.n_bits - low_bits) % bn.bits_per_level == 0,
                f"bottleneck: the {bn.n_bits - low_bits} high index bits must split into levels of "
                f"bits_per_level={bn.bits_per_level}",
            )
            n_levels = (bn.n_bits - low_bits) // bn.bits_per_level
            need(
                len(bn.beams) == n_levels,
                f"bottleneck needs one beam width per level ({n_levels}), got beams={bn.beams}",
            )
            need(0 < bn.k <= 2**bn.n_bits, f"bottleneck k={bn.k} must lie in (0, m={2**bn.n_bits}]")
            need(bn.n_bits <= 30, f"bottleneck n_bits={bn.n_bits} is larger than supported (30)")
            need(bn.n_bits <= self.d_model, "bottleneck n_bits must not exceed d_model (M has full column rank)")
            widest = self.d_model
            for level, beam in enumerate(bn.beams):
                need(0 < beam <= widest, f"bottleneck beams[{level}]={beam} must lie in (0, {widest}]")
                widest = beam * 2**bn.bits_per_level
            need(bn.k <= self.d_model + sum(b * 2**bn.bits_per_level for b in bn.beams),
                 f"bottleneck k={bn.k} exceeds the number of features the search scores")

        for key, value in dataclasses.asdict(self.selectivity).items():
            need(value >= 0, f"selectivity.{key} must be >= 0, got {value}")

    # --- derived ----------------------------------------------------------------------------------------

    @property
    def has_bounded_attention(self) -> bool:
        return self.attention.value_mode != "standard" and self.attention.n_special > 0

    # --- serialisation ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.bottleneck is not None:
            data["bottleneck"]["beams"] = list(self.bottleneck.beams)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n")
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
        if not isinstance(data, dict):
            raise ConfigError(f"a model config is a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)

    def hash(self) -> str:
        """Stable sha256 of the architecture (the name is left out: renaming keeps the hash)."""
        data = self.to_dict()
        data.pop("name", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # --- presets ----------------------------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
        config = from_dict_copy(PRESETS[name])
        config["name"] = name
        config.update(overrides)
        return cls.from_dict(config)


def ncffn_partition(ffn: FeedForwardConfig) -> tuple[int, int, int]:
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


def scaling_ladder(scale: int, ffn_type: str) -> tuple[int, int, int]:
    """(d_model, n_layers, d_ffw) of seed 000, appendix B.2 (listing 2). For sgatlin and peer, d_ffw is
    the number of neurons per channel."""
    if not isinstance(scale, int) or scale < 1:
        raise ConfigError(f"scale must be a positive integer, got {scale!r}")
    d_model = 128 * scale
    n_layers = 2 * scale
    if ffn_type in ("swiglu", "mlp"):
        d_ffw = int(8 / 3 * d_model / 256) * 256
    elif ffn_type == "moe":
        d_ffw = d_model
    elif ffn_type == "peer":
        d_ffw = (32 + 24 * scale) ** 2
    elif ffn_type == "sgatlin":
        d_ffw = (16 + 12 * scale) ** 2
    else:
        raise ConfigError(f"unknown feedforward type {ffn_type!r} (known: mlp, swiglu, moe, peer, sgatlin)")
    return d_model, n_layers, d_ffw


def ladder_config(scale: int, ffn_type: str, d_vocab: int = 50257, **overrides: Any) -> ModelConfig:
    """A ModelConfig on the scaling ladder (head size 64, 16 sgatlin channels, k 8, d_key 128 as in seed 000)."""
    if ffn_type not in ("mlp", "swiglu", "sgatlin"):
        raise ConfigError(f"ladder configs exist for mlp, swiglu and sgatlin, not {ffn_type!r}")
    d_model, n_layers, d_ffw = scaling_ladder(scale, ffn_type)
    config = dict(
        d_vocab=d_vocab, d_model=d_model, n_layers=n_layers, n_heads=d_model // 64, d_head=64, n_ctx=2048,
        feedforward=dict(type=ffn_type, d_ffw=d_ffw, n_channels=16, k=8, d_key=128),
        name=f"ladder-{ffn_type}-{scale}",
    )
    config.update(overrides)
    return ModelConfig.from_dict(config)


_STORIES = dict(d_vocab=4096, d_model=256, n_layers=4, n_heads=4, d_head=64, n_ctx=512)
_TINY = dict(d_vocab=512, d_model=64, n_layers=2, n_heads=2, d_head=32, n_ctx=128)
_CRISP = dict(attn_crispness=3e-3, ffn_crispness=3e-3)

PRESETS: dict[str, dict[str, Any]] = {
    # seed 000's TinyStories model (appendix B.1.2): 4 layers, d 256, 4 heads of 64, N 1024 x 8 channels, k 8.
    "seed000-tinystories": dict(
        _STORIES, d_vocab=8192, n_ctx=1024,
        feedforward=dict(type="sgatlin", d_ffw=1024, n_channels=8, k=8, d_key=128),
    ),
    # seed 002's end-to-end model (section 3.7/3.8): 12 x 768, learned positions, Boolean attention on every
    # head, NC-FFN with rho 0.75, crispness alone on both surfaces.
    "seed002-e2e": dict(
        d_vocab=50257, d_model=768, n_layers=12, n_heads=12, d_head=64, n_ctx=1024, positional="learned",
        norm="layernorm", attention=dict(value_mode="boolean", n_special=12, qk_norm=False),
        feedforward=dict(type="ncffn", d_ffw=3072, rho=0.75, n_quantifiers=64), selectivity=_CRISP,
    ),
    # the four shipped story models (models/): one skeleton, four FFN designs.
    "sgatlin-stories": dict(_STORIES, feedforward=dict(type="sgatlin", d_ffw=1024, n_channels=8, k=8, d_key=128)),
    "gelu-stories": dict(_STORIES, feedforward=dict(type="mlp", d_ffw=1024)),
    "legible-stories": dict(
        _STORIES, attention=dict(value_mode="boolean", n_special=4),
        feedforward=dict(type="ncffn", d_ffw=1024, rho=0.75, n_quantifiers=32), selectivity=_CRISP,
    ),
    "parity-stories": dict(
        _STORIES, feedforward=dict(type="mlp", d_ffw=1024),
        bottleneck=dict(n_bits=16, k=32, bits_per_level=4, beams=[16, 64]),
    ),
    # tiny versions for tests and CPU experiments.
    "tiny-sgatlin": dict(_TINY, feedforward=dict(type="sgatlin", d_ffw=64, n_channels=2, k=4, d_key=16)),
    "tiny-gelu": dict(_TINY, feedforward=dict(type="mlp", d_ffw=128)),
    "tiny-swiglu": dict(_TINY, feedforward=dict(type="swiglu", d_ffw=128)),
    "tiny-membership": dict(_TINY, attention=dict(value_mode="membership", n_special=1),
                            feedforward=dict(type="mlp", d_ffw=128),
                            selectivity=dict(attn_sparsity=1e-3, attn_crispness=3e-3)),
    "tiny-legible": dict(
        _TINY, attention=dict(value_mode="boolean", n_special=2),
        feedforward=dict(type="ncffn", d_ffw=128, rho=0.5, n_quantifiers=16, code_k=16), selectivity=_CRISP,
    ),
    "tiny-parity": dict(
        _TINY, feedforward=dict(type="mlp", d_ffw=128),
        bottleneck=dict(n_bits=10, k=8, bits_per_level=2, beams=[8, 16]),
    ),
}
