"""The model zoo on one shared skeleton; every layer declares its own circuits (CodeLayer)."""

from circuitlab.architectures.checkpoint import CheckpointError, load_model
from circuitlab.architectures.code_layer import ChannelGroup, CodeLayer, UnitWrites
from circuitlab.architectures.transformer import CircuitTransformer, ContextLengthError

__all__ = ["ChannelGroup", "CheckpointError", "CircuitTransformer", "CodeLayer", "ContextLengthError", "UnitWrites", "load_model"]
