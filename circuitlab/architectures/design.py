"""What a design is: the small base every design module builds on (config sections, costs, descriptions).

A design is one module that holds its config section, its layer and what the rest of circuitlab asks of it:
    feedforward/<name>.py   a `FeedForwardPart` subclass (the config section, discriminated by `type`) and
                            its `CodeLayer`
    attention/<mode>.py     a `ValueModePart` subclass (discriminated by `value_mode`): how the bounded heads
                            compute their values, and which channels are bounded
    bottleneck/<name>.py    a `BottleneckPart` subclass (discriminated by `design`) and its layer
Each section answers for itself: `build` (its layer), `cost` (weights and parameters per token, for FLOP
counts), `describe` (one line for cards, summaries and the dashboard) and, for FFNs, `ladder` (its size on
seed 000's scaling ladder). `circuitlab.architectures.registry` lists the designs; `circuitlab.config`
builds its unions from that list. Design modules import this module, never circuitlab.config.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt

if TYPE_CHECKING:
    from circuitlab.architectures.code_layer import CodeLayer

Number = Annotated[float, Field(strict=True)]  # a JSON number (an integer is fine), never a string
PositiveInt = Annotated[StrictInt, Field(gt=0)]
CountInt = Annotated[StrictInt, Field(ge=0)]


class ModelShape(Protocol):
    """The model config as a layer reads it (circuitlab.config.ModelConfig, which imports the design modules,
    so they name it by this protocol instead)."""

    d_vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    n_ctx: int
    positional: str
    rope_base: float
    norm_eps: float
    attention: Any
    feedforward: Any
    bottleneck: Any
    selectivity: Any


class ConfigPart(BaseModel):
    """A section of a model config: immutable, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def serialized(self) -> dict[str, Any]:
        """The section as config.json writes it (and its hash reads it)."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class LayerCost:
    """What one layer reads per token and holds (circuitlab.flops adds the skeleton around it)."""

    matmul_weights: int  # weights read by matrix products per token (2 FLOPs each)
    total_parameters: int  # every parameter of the layer
    other_parameters: int = 0  # parameters read per token outside matrix products (part of the total)


class FeedForwardPart(ConfigPart):
    """The config section of an FFN design; `type` names it (a Literal in each subclass)."""

    type: str
    d_ffw: PositiveInt
    #: the name result tables use (ladder rows, figures)
    label: ClassVar[str] = ""
    #: whether the layer has a gate branch (TransformerLens' cfg.gated_mlp, model.W_gate)
    gated: ClassVar[bool] = False
    #: whether the layer has channels bounded in [0, 1] by construction (legibility applies to it)
    bounded_channels: ClassVar[bool] = False

    @abstractmethod
    def build(self, config: ModelShape) -> CodeLayer:
        """The layer, for the model config `config`."""

    @abstractmethod
    def cost(self, d_model: int) -> LayerCost:
        """Weights read per token and parameters of one layer in a d_model-wide model."""

    @abstractmethod
    def describe(self) -> str:
        """The design in one line, e.g. 'sgatlin, 8 channels x 1024 neurons, k 8 per channel, d_key 128'."""

    def hidden_units(self) -> int:
        """Hidden units per layer, numbered as in its sparse codes (TransformerLens' d_mlp)."""
        return self.d_ffw

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any] | None:
        """The section's fields at `scale` of seed 000's scaling ladder (appendix B.2), or None where the
        design is not on the ladder."""
        return None


class ValueModePart(ConfigPart):
    """The config section of an attention value mode; `value_mode` names it. The first `n_special` heads
    compute bounded values, the rest stay standard."""

    value_mode: str
    n_special: CountInt = 0
    qk_norm: bool = True

    @property
    def bounded(self) -> bool:
        """Whether any head's values are bounded."""
        return self.n_special > 0

    def describe(self, n_heads: int) -> str:
        if not self.bounded:
            return "standard softmax heads"
        return f"{self.value_mode} values on {self.n_special} of {n_heads} heads"

    def check(self, config: ModelShape) -> None:
        """Checks that need the whole model config (raise ValueError)."""
        if not self.n_special <= config.n_heads:
            raise ValueError(f"attention.n_special={self.n_special} must lie in [0, n_heads={config.n_heads}]")


class BottleneckPart(ConfigPart):
    """The config section of a bottleneck stage on each block's FFN write; `design` names it."""

    design: str

    @abstractmethod
    def build(self, config: ModelShape) -> CodeLayer:
        """The bottleneck layer, for the model config `config`."""

    @abstractmethod
    def describe(self, d_model: int) -> str:
        """The bottleneck's settings in one line."""

    def check(self, d_model: int) -> None:
        """Checks that need the model's width (raise ValueError)."""
