"""Every design circuitlab knows, by the name its config section carries.

    FEEDFORWARDS   feedforward.type      -> FeedForwardPart subclass (feedforward/<name>.py)
    VALUE_MODES    attention.value_mode  -> ValueModePart subclass   (attention/<mode>.py)
    BOTTLENECKS    bottleneck.design     -> BottleneckPart subclass  (bottleneck/<name>.py)

Adding a design: write its module (config section and layer, see circuitlab.architectures.design) and add it
to the tuple below, or register it at run time with `circuitlab.config.register_design(SectionClass)`.
"""

from __future__ import annotations

from circuitlab.architectures.attention.boolean import BooleanAttentionConfig
from circuitlab.architectures.attention.membership import MembershipAttentionConfig
from circuitlab.architectures.attention.standard import StandardAttentionConfig
from circuitlab.architectures.bottleneck.parity import ParityConfig
from circuitlab.architectures.bottleneck.parity_linear import LinearParityConfig
from circuitlab.architectures.design import BottleneckPart, ConfigPart, FeedForwardPart, ValueModePart
from circuitlab.architectures.feedforward.mlp import MLPConfig
from circuitlab.architectures.feedforward.moe import MoEConfig
from circuitlab.architectures.feedforward.ncffn import NCFFNConfig
from circuitlab.architectures.feedforward.peer import PEERConfig
from circuitlab.architectures.feedforward.sgatlin import SgatlinConfig
from circuitlab.architectures.feedforward.swiglu import SwiGLUConfig

DESIGNS: tuple[type[ConfigPart], ...] = (
    MLPConfig, SwiGLUConfig, SgatlinConfig, NCFFNConfig, PEERConfig, MoEConfig,
    StandardAttentionConfig, MembershipAttentionConfig, BooleanAttentionConfig,
    ParityConfig, LinearParityConfig,
)

FEEDFORWARDS: dict[str, type[FeedForwardPart]] = {}
VALUE_MODES: dict[str, type[ValueModePart]] = {}
BOTTLENECKS: dict[str, type[BottleneckPart]] = {}

# the discriminator field of each kind of section, and where its designs are listed
KINDS: dict[type[ConfigPart], tuple[str, dict]] = {
    FeedForwardPart: ("type", FEEDFORWARDS),
    ValueModePart: ("value_mode", VALUE_MODES),
    BottleneckPart: ("design", BOTTLENECKS),
}


def add_design(section: type[ConfigPart]) -> str:
    """List a design's config section under its name (the default of its discriminator field); returns the
    name. circuitlab.config.register_design also rebuilds the model config's unions."""
    for base, (field, table) in KINDS.items():
        if issubclass(section, base):
            name = section.model_fields[field].default
            if not isinstance(name, str) or not name:
                raise TypeError(f"{section.__name__}.{field} needs a Literal default naming the design")
            if name in table and table[name] is not section:
                raise ValueError(f"a design named {name!r} is already registered ({table[name].__name__})")
            table[name] = section
            return name
    raise TypeError(f"{section.__name__} is not a FeedForwardPart, ValueModePart or BottleneckPart")


def remove_design(section: type[ConfigPart]) -> None:
    """Take a design added by `add_design` off its list (the built-in designs stay)."""
    if section in DESIGNS:
        raise ValueError(f"{section.__name__} is a built-in design")
    for table in (FEEDFORWARDS, VALUE_MODES, BOTTLENECKS):
        for name in [name for name, listed in table.items() if listed is section]:
            del table[name]


for _section in DESIGNS:
    add_design(_section)
