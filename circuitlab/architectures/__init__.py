"""The model zoo on one shared skeleton."""

from circuitlab.architectures.checkpoint import CheckpointError, load_model
from circuitlab.architectures.transformer import CircuitTransformer, ContextLengthError

__all__ = ["CheckpointError", "CircuitTransformer", "ContextLengthError", "load_model"]
