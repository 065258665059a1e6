"""The designs of the block's FFN slot, and the parity bottleneck stage.

Each design is one file with one `CodeLayer` subclass (see architectures/code_layer.py) and a config class
in circuitlab/config.py; `FEEDFORWARDS` maps the config's `feedforward.type` to the layer class.
"""

from __future__ import annotations

from circuitlab.architectures.code_layer import CodeLayer
from circuitlab.architectures.feedforward.dense import MLP, SwiGLU
from circuitlab.architectures.feedforward.moe import MoE
from circuitlab.architectures.feedforward.ncffn import NCFFN
from circuitlab.architectures.feedforward.parity import ParityBottleneck, make_bottleneck
from circuitlab.architectures.feedforward.peer import PEER
from circuitlab.architectures.feedforward.sgatlin import Sgatlin
from circuitlab.config import ModelConfig

FEEDFORWARDS: dict[str, type[CodeLayer]] = {
    "mlp": MLP, "swiglu": SwiGLU, "sgatlin": Sgatlin, "ncffn": NCFFN, "peer": PEER, "moe": MoE,
}


def make_feedforward(config: ModelConfig) -> CodeLayer:
    """The FFN layer `config.feedforward.type` names."""
    return FEEDFORWARDS[config.feedforward.type](config)


__all__ = [
    "FEEDFORWARDS", "MLP", "MoE", "NCFFN", "PEER", "ParityBottleneck", "Sgatlin", "SwiGLU", "make_bottleneck",
    "make_feedforward",
]
