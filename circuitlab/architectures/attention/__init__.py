"""Causal self-attention (`layer.Attention`) and its value modes, one module each: standard, membership,
boolean (seed 002, section 3)."""

from circuitlab.architectures.attention.layer import Attention

__all__ = ["Attention"]
