"""circuitlab: mechanistic interpretability for transformers that are interpretable by construction.

Heavy parts import lazily: `import circuitlab.kernels` needs only torch; the model names below pull in
TransformerLens on first use.
"""

from __future__ import annotations

from typing import Any

from circuitlab.config import ModelConfig
from circuitlab.presets import ladder_config, scaling_ladder
from circuitlab.flops import FlopCount, count_flops

__version__ = "0.1.0"

_LAZY = {
    "SparseCode": "circuitlab.codes",
    "CircuitTransformer": "circuitlab.architectures.transformer",
    "ContextLengthError": "circuitlab.architectures.transformer",
    "load_model": "circuitlab.architectures.checkpoint",
    "CheckpointError": "circuitlab.architectures.checkpoint",
    "from_official_sgatlin": "circuitlab.architectures.interop",
    "CircuitDB": "circuitlab.analysis.circuitdb",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab' has no attribute {name!r}")


__all__ = ["FlopCount", "ModelConfig", "count_flops", "ladder_config", "scaling_ladder", *_LAZY]
