"""Model configuration as typed models (pydantic): the skeleton's fields, and one section per design part
(`feedforward`, `attention`, `bottleneck`), each chosen by its discriminator field (`feedforward.type`,
`attention.value_mode`, `bottleneck.design`) from the designs of circuitlab.architectures.registry; unknown
keys refused. JSON round-trip. Presets by name (`ModelConfig.preset`, data in circuitlab.presets) and seed
000's scaling ladder (`scaling_ladder`, `ladder_config`).

Older files load through one converter (`_from_first_format`): the first on-disk format (circuitlab 0.1, before
typed configs) wrote every FFN field whatever the FFN type; the fields its type does not read are dropped. The
config hash is taken over that first layout, so hashes recorded in checkpoints, databases and run folders
before typed configs still match.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, Field, StrictBool, ValidationError, model_validator

import circuitlab.architectures.registry as registry
from circuitlab.architectures.design import ConfigPart, CountInt, Number, PositiveInt
from circuitlab.atomic import atomic_write_text
from circuitlab.errors import UserError, did_you_mean
from circuitlab.presets import PRESETS

POSITIONALS = ("rope", "learned")
NORMS = ("rmsnorm", "layernorm")


class ConfigError(UserError):
    """A configuration that cannot describe a model."""


def _union(table: dict[str, type[ConfigPart]], field: str) -> Any:
    """The discriminated union of a kind of section's designs, as pydantic validates it."""
    members = tuple(table.values())
    return Annotated[Union[members], Field(discriminator=field)] if len(members) > 1 else members[0]


# the sections' unions (rebuilt by register_design)
AttentionConfig = _union(registry.VALUE_MODES, "value_mode")
FeedForwardConfig = _union(registry.FEEDFORWARDS, "type")
BottleneckConfig = _union(registry.BOTTLENECKS, "design")


# --- the selectivity pressures --------------------------------------------------------------------------------


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

    def describe(self) -> str:
        """One line for a card: the regime, the lambdas and how they are normalised and scheduled."""
        if not self.active:
            return "none"
        lambdas = ", ".join(f"{name} {value:g}" for name, value in self.lambdas.items() if value)
        if self.normalization == "sum":
            form = "summed over operand channels and layers, averaged over tokens (seed 002's form)"
        else:
            form = "averaged over tokens, operand channels and layers (the calibrated form)"
        schedule = []
        if self.ramp_steps:
            schedule.append(f"ramped in over {self.ramp_steps} steps")
        if self.cap:
            schedule.append(f"capped at {self.cap:g} x the LM loss")
        return f"{self.regime}: {lambdas}; {form}" + (f"; {', '.join(schedule)}" if schedule else "")

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
    attention: AttentionConfig = Field(default_factory=lambda: registry.VALUE_MODES["standard"]())
    feedforward: FeedForwardConfig = Field(default_factory=lambda: registry.FEEDFORWARDS["mlp"]())
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
        self.attention.check(self)
        if self.bottleneck is not None:
            self.bottleneck.check(self.d_model)
        return self

    # --- derived ----------------------------------------------------------------------------------------

    @property
    def has_bounded_attention(self) -> bool:
        return self.attention.bounded

    @property
    def has_bounded_channels(self) -> bool:
        """Whether any layer has channels bounded in [0, 1] by construction (legibility applies)."""
        return self.attention.bounded or self.feedforward.bounded_channels

    def describe(self) -> list[str]:
        """The architecture, one line per part (cards, summaries, the dashboard)."""
        lines = [
            f"skeleton: {self.n_layers} layers, d_model {self.d_model}, {self.n_heads} heads of {self.d_head}, "
            f"context {self.n_ctx}, vocabulary {self.d_vocab}",
            f"{self.positional} positions{f' (base {self.rope_base:g})' if self.positional == 'rope' else ''}, "
            f"pre-{self.norm} (eps {self.norm_eps:g}), QK-norm {'on' if self.attention.qk_norm else 'off'}, "
            f"{'tied' if self.tied_embeddings else 'untied'} embeddings",
            f"attention: {self.attention.describe(self.n_heads)}",
            f"FFN: {self.feedforward.describe()}",
        ]
        if self.bottleneck is not None:
            lines.append(f"{self.bottleneck.design} bottleneck in every block: {self.bottleneck.describe(self.d_model)}")
        return lines

    def validate(self) -> None:  # type: ignore[override]
        """Configs validate on construction and are immutable; kept so callers may check explicitly."""
        type(self)(**self.to_dict())

    # --- serialisation ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for section in ("attention", "feedforward", "bottleneck"):
            if getattr(self, section) is not None:
                data[section] = getattr(self, section).serialized()
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
        for section in ("feedforward", "attention", "bottleneck"):  # fields added later, at their defaults
            part = getattr(self, section, None)
            for key, default in getattr(type(part), "LATER_DEFAULTS", {}).items():
                if isinstance(data.get(section), dict) and data[section].get(key) == default:
                    data[section].pop(key)
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
        if name not in PRESETS:
            guess = did_you_mean(name, PRESETS)
            raise ConfigError(f"unknown preset {name!r}{guess} (known presets: {', '.join(sorted(PRESETS))})")
        config = from_dict_copy(PRESETS[name])
        config["name"] = name
        config.update(overrides)
        return cls.from_dict(config)


# --- the first on-disk format -----------------------------------------------------------------------------------

# every field of the first format's FFN and attention sections, with its defaults
_FIRST_FEEDFORWARD = dict(type="mlp", d_ffw=1024, n_channels=8, k=8, d_key=128, rho=0.75, n_quantifiers=32, code_k=32)
_FIRST_ATTENTION = dict(value_mode="standard", n_special=0, qk_norm=True)


# the parity section once also held the first parity design's two fields, null in the product design
_RETIRED_BOTTLENECK = {"bits_per_level": None, "beams": None}


def _first_format(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict in the layout the hash is taken over: every FFN and attention field present, the parity
    section with the retired fields."""
    data = dict(data)
    data["feedforward"] = {**_FIRST_FEEDFORWARD, **data["feedforward"]}
    data["attention"] = {**_FIRST_ATTENTION, **data["attention"]}
    if isinstance(data.get("bottleneck"), dict) and data["bottleneck"].get("design") == "product":
        data["bottleneck"] = {**_RETIRED_BOTTLENECK, **data["bottleneck"]}
    return data


def _from_first_format(data: dict[str, Any]) -> dict[str, Any]:
    """The one converter of older files: a first-format config (its FFN section lists all eight fields) with
    the fields its FFN type and attention mode do not read dropped, and a parity section without the retired
    fields when they are null, and a parity section without a `design` read as the product design (the only
    one when such files were written); any other dict is returned as it is."""
    bottleneck = data.get("bottleneck")
    if isinstance(bottleneck, dict) and "design" not in bottleneck:
        data["bottleneck"] = bottleneck = {"design": "product", **bottleneck}
    if isinstance(bottleneck, dict) and any(key in bottleneck and bottleneck[key] is None for key in _RETIRED_BOTTLENECK):
        data["bottleneck"] = {key: value for key, value in bottleneck.items()
                              if not (key in _RETIRED_BOTTLENECK and value is None)}
    feedforward, attention = data.get("feedforward"), data.get("attention")
    if not isinstance(feedforward, dict) or set(feedforward) != set(_FIRST_FEEDFORWARD):
        return data
    ffn_class = registry.FEEDFORWARDS.get(feedforward["type"])
    if ffn_class is not None:
        data["feedforward"] = {key: value for key, value in feedforward.items() if key in ffn_class.model_fields}
    if isinstance(attention, dict) and attention.get("value_mode") in registry.VALUE_MODES:
        fields = registry.VALUE_MODES[attention["value_mode"]].model_fields
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
    if len(loc) >= 2 and loc[0] in ("feedforward", "attention", "bottleneck") and loc[1] in {
            *registry.FEEDFORWARDS, *registry.VALUE_MODES, *registry.BOTTLENECKS}:
        loc.pop(1)
    where = "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc).lstrip(".")
    if kind == "union_tag_invalid":
        key = context["discriminator"].strip("'")
        table = {"type": registry.FEEDFORWARDS, "value_mode": registry.VALUE_MODES, "design": registry.BOTTLENECKS}[key]
        return head + f"{where}.{key} must be one of {tuple(table)}, got {context['tag']!r}"
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


# --- seed 000's scaling ladder (appendix B.2) -------------------------------------------------------------------


def ladder_designs() -> tuple[str, ...]:
    """The FFN designs with a size on the scaling ladder (their section's `ladder`)."""
    return tuple(name for name, section in registry.FEEDFORWARDS.items() if section.ladder(1, 128) is not None)


def scaling_ladder(scale: int, ffn_type: str) -> tuple[int, int, int]:
    """(d_model, n_layers, d_ffw) of seed 000, appendix B.2 (listing 2): d_model 128 s, 2 s layers, and the
    design's width (for sgatlin and peer, the number of neurons per channel)."""
    if not isinstance(scale, int) or scale < 1:
        raise ConfigError(f"scale must be a positive integer, got {scale!r}")
    d_model = 128 * scale
    section = registry.FEEDFORWARDS.get(ffn_type)
    fields = section.ladder(scale, d_model) if section is not None else None
    if fields is None:
        raise ConfigError(f"unknown feedforward type {ffn_type!r} (known: {', '.join(ladder_designs())})")
    return d_model, 2 * scale, fields["d_ffw"]


def ladder_config(scale: int, ffn_type: str, d_vocab: int = 50257, **overrides: Any) -> ModelConfig:
    """A ModelConfig on the scaling ladder (seed 000, appendix B.1.1: head size 64, context 2048; the FFN
    section as its design's `ladder` sizes it)."""
    if ffn_type not in ladder_designs():
        raise ConfigError(f"ladder configs exist for {', '.join(ladder_designs())}, not {ffn_type!r}")
    d_model, n_layers, _ = scaling_ladder(scale, ffn_type)
    feedforward = dict(type=ffn_type, **registry.FEEDFORWARDS[ffn_type].ladder(scale, d_model))
    config = dict(
        d_vocab=d_vocab, d_model=d_model, n_layers=n_layers, n_heads=d_model // 64, d_head=64, n_ctx=2048,
        feedforward=feedforward, name=f"ladder-{ffn_type}-{scale}",
    )
    config.update(overrides)
    return ModelConfig.from_dict(config)


# --- designs added at run time ------------------------------------------------------------------------------------


def register_design(section: type[ConfigPart]) -> str:
    """Add a design at run time (a config section subclassing FeedForwardPart, ValueModePart or BottleneckPart,
    with its layer in its `build`): model configs then accept it by name. Returns the name."""
    name = registry.add_design(section)
    _rebuild_unions()
    return name


def unregister_design(section: type[ConfigPart]) -> None:
    """Take back a design `register_design` added (configs no longer accept its name)."""
    registry.remove_design(section)
    _rebuild_unions()


def _rebuild_unions() -> None:
    fields = ModelConfig.model_fields
    fields["attention"].annotation = _union(registry.VALUE_MODES, "value_mode")
    fields["feedforward"].annotation = _union(registry.FEEDFORWARDS, "type")
    fields["bottleneck"].annotation = _union(registry.BOTTLENECKS, "design") | None
    ModelConfig.model_rebuild(force=True)


def from_dict_copy(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))
