"""What a layer says about its own circuits: the one interface every residual writer implements.

Attention, every FFN design and the parity bottleneck subclass `CodeLayer` and answer, each for itself:
  code_hooks()       the hooks that carry its code (patching do(code = code_patch) patches them together)
  sparse_code(cache) its per-token code from a cache of those hooks, or None when it has none
  unit_writes(read)  the residual write of each of its units at one position (direct logit attribution)
  bounded_channels() its channels bounded in [0, 1] by construction (legibility metrics)
  layout()           what its code indices mean (stored with circuit databases); unit_kinds(), unit_name(i)
Analyses loop over `model.blocks` and ask these questions; none of them tests a layer's type or guesses a
hook name. A layer learns its hook names from TransformerLens (HookedRootModule.setup names every module),
so the answers hold wherever the layer sits. Adding an FFN design: one file under feedforward/ with a
`CodeLayer` subclass, its config class in circuitlab/config.py, and one line in feedforward.FEEDFORWARDS.

Letters: B batch, T position, D d_model, N units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from circuitlab.codes import SparseCode

# a cache read by hook name: a TransformerLens ActivationCache or a dict of hook name -> tensor
Cache = Any


@dataclass(frozen=True)
class ChannelGroup:
    """A hook's bounded channels: `take` maps the hook's tensor to [B, T, S, E] (attention) or [B, T, C]."""

    surface: str  # "attention" | "ffn"
    layer: int
    hook: str
    role: str
    operand: bool
    combined: bool
    head_slice: slice | None = None  # attention: the bounded heads
    channel_slice: slice | None = None  # attention: part of each head's channels (the and / and-not halves)

    @property
    def head_offset(self) -> int:
        return self.head_slice.start or 0 if self.head_slice is not None else 0

    @property
    def channel_offset(self) -> int:
        return self.channel_slice.start or 0 if self.channel_slice is not None else 0

    def take(self, activation: Tensor) -> Tensor:
        if self.head_slice is None:
            return activation
        values = activation[:, :, self.head_slice]
        return values[..., self.channel_slice] if self.channel_slice is not None else values


@dataclass
class UnitWrites:
    """The residual write of each unit of a layer at one position; the writes sum to the layer's write."""

    writes_NxD: Float[Tensor, "unit d_model"]
    ids: list[int]  # unit ids, as in the layer's sparse code
    kind: str  # the attribution table's row kind: "neuron" | "ffn_unit" | "parity_feature" | "attn_head"
    operations: list[str]  # what each unit computes ("gelu", "and", "neuron", "boolean", ...)
    labels: list[str]  # how each unit is named in tables and figures


class CodeLayer(nn.Module):
    """Base class of the layers that write into the residual stream. Defaults describe a layer with no
    code, no bounded channels and no unit decomposition; subclasses override what they have."""

    #: the name of this design ("mlp", "sgatlin", "parity", "attention", ...)
    kind: ClassVar[str] = "layer"
    #: True when the code is sparse by construction (sgatlin gates, parity features), so statistics of
    #: which units a token uses (neuron usage) mean something; False for a top-k view of dense activations
    sparse_by_construction: ClassVar[bool] = False
    #: False when the layer's forward cannot be captured in a CUDA graph; the trainer then compiles the model
    #: without CUDA graphs (training.compile.default_compile_mode)
    cuda_graphs: ClassVar[bool] = True
    #: set by the block that holds the layer (-1 for a layer built on its own)
    layer_index: int = -1

    def active_parameters_per_token(self) -> int:
        """Parameters one token's forward pass reads (all of them, unless the layer routes)."""
        return sum(param.numel() for param in self.parameters())

    def reset_own_parameters(self) -> None:
        """Initialise the parameters the model's generic initialisation leaves alone (NC-FFN's decays)."""

    def hook_name(self, hook_point: HookPoint) -> str:
        """The full name of one of this layer's hook points (e.g. 'blocks.1.mlp.hook_post')."""
        if getattr(hook_point, "name", None) is None:
            raise RuntimeError(
                f"{type(self).__name__}'s hooks have no names yet: they are named when the layer sits inside a "
                "CircuitTransformer (HookedRootModule.setup)"
            )
        return hook_point.name

    # --- its code -------------------------------------------------------------------------------------------

    def code_hooks(self) -> list[str]:
        """Hooks that carry the code: sparse_code reads them, patching's do(code) patches them together."""
        return []

    def sparse_code(self, cache: Cache) -> SparseCode | None:
        """The per-token code, from a cache holding `code_hooks()`; None for a layer without a code."""
        return None

    def layout(self) -> dict[str, Any]:
        """What the code's indices mean (stored beside a circuit database's codes)."""
        return {"kind": self.kind}

    # --- its units ------------------------------------------------------------------------------------------

    def unit_kinds(self) -> list[str]:
        """The operation of each unit, in unit id order."""
        return []

    def unit_name(self, unit: int) -> str:
        return f"unit {unit}"

    def unit_write_hooks(self) -> list[str]:
        """Hooks `unit_writes` reads."""
        return []

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites | None:
        """Each unit's residual write at one position; `read(hook)` gives a hook's tensor there (batch and
        position dropped, float64). None for a layer that is not a sum of units."""
        return None

    # --- its bounded channels -------------------------------------------------------------------------------

    def bounded_channels(self) -> list[ChannelGroup]:
        """Channels bounded in [0, 1] by construction, whose legibility can be measured."""
        return []

    def design_label(self) -> str:
        """The design in a few words, as result tables name it (seed 002 rows: 'boolean head-100')."""
        return self.kind


def code_hook_error(layer: CodeLayer, error: KeyError) -> KeyError:
    """The KeyError a layer raises when a cache lacks one of its code hooks."""
    return KeyError(
        f"the cache lacks {error} needed for layer {layer.layer_index}'s code; cache model.sparse_code_hooks()"
    )
