"""How the loop runs the model: torch.compile's mode (CUDA graphs where every layer can be captured) and the
step marks CUDA graphs need (bf16 autocast is circuitlab.distributed.autocast_for)."""

from __future__ import annotations

import torch
from torch import nn


def default_compile_mode(model: nn.Module, device: torch.device | str, distributed: bool = False) -> str:
    """"reduce-overhead" (CUDA graphs) on one CUDA device when every layer can be captured (CodeLayer.cuda_graphs),
    else torch's "default"."""
    capturable = all(getattr(module, "cuda_graphs", True) for module in model.modules())
    return "reduce-overhead" if torch.device(device).type == "cuda" and not distributed and capturable else "default"


def compile_model(model: nn.Module, compiled: bool, mode: str, device: torch.device) -> tuple[nn.Module, bool]:
    """(the module the loop calls: `model` compiled in `mode` when `compiled`, else `model`; whether its
    forwards replay CUDA graphs, whose outputs live in buffers the next replay overwrites)."""
    cuda_graphs = compiled and mode == "reduce-overhead" and device.type == "cuda"
    return (torch.compile(model, mode=mode) if compiled else model), cuda_graphs
