"""circuitlab: mechanistic interpretability for transformers that are interpretable by construction.

Every name below imports on first use, so `import circuitlab` (and `circuitlab --help`) stays fast:
configs and models pull in torch and TransformerLens when they are first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ModelConfig": "circuitlab.config",
    "ladder_config": "circuitlab.config",
    "scaling_ladder": "circuitlab.config",
    "register_design": "circuitlab.config",
    "FlopCount": "circuitlab.flops",
    "count_flops": "circuitlab.flops",
    "SparseCode": "circuitlab.codes",
    "CircuitTransformer": "circuitlab.architectures.transformer",
    "ContextLengthError": "circuitlab.architectures.transformer",
    "load_model": "circuitlab.architectures.transformer",
    "CheckpointError": "circuitlab.architectures.weights",
    "from_official_sgatlin": "circuitlab.architectures.interop",
    "CircuitDB": "circuitlab.analysis.circuitdb",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab' has no attribute {name!r}")


__all__ = sorted(_LAZY)
