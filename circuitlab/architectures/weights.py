"""Checkpoint files: safetensors that record the sha256 of their tensors (and of the config and tokenizer a
model was saved with), written atomically; a model folder's file names. Never unpickles.

Loading a model folder (which needs the model class) is in circuitlab.architectures.checkpoint; this module
needs no model, so the model can save itself through it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from circuitlab.atomic import atomic_write
from circuitlab.errors import UserError

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"
METRICS_FILE = "metrics.json"  # written by `circuitlab train` beside the model
# keys of the safetensors header metadata (string values)
TENSORS_SHA256, CONFIG_SHA256, TOKENIZER_SHA256 = "circuitlab.sha256", "circuitlab.config_sha256", "circuitlab.tokenizer_sha256"


class CheckpointError(UserError):
    """A model folder that cannot be loaded as asked."""


def tensors_sha256(tensors: Mapping[str, Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order: equal digests, equal tensors."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def save_tensors(tensors: Mapping[str, Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> Path:
    """Write a safetensors file atomically, recording the tensors' sha256 in its metadata (see load_tensors)."""
    path = Path(path)
    tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}
    header = {"format": "pt", **(metadata or {}), TENSORS_SHA256: tensors_sha256(tensors)}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=header))
    return path


def load_tensors(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors and header metadata of a safetensors file; CheckpointError naming the file if it is truncated,
    not safetensors, or its tensors differ from the sha256 recorded when it was saved."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({error}); is it truncated?") from error
    recorded = metadata.get(TENSORS_SHA256)
    if recorded is not None and tensors_sha256(tensors) != recorded:
        raise CheckpointError(
            f"{path}: the tensors differ from the sha256 recorded when the file was saved (the file is damaged or "
            "was modified); copy or download it again"
        )
    return tensors, metadata


def save_model(model: Any, folder: str | os.PathLike, dtype: torch.dtype | None = None) -> Path:
    """Write config.json, model.safetensors (optionally cast, e.g. bf16) and tokenizer.json, each atomically;
    the weights file records the hashes of its tensors, the config and the tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: (t.detach().to(dtype) if dtype is not None and t.is_floating_point() else t.detach()).contiguous().cpu()
        for name, t in model.state_dict().items()
    }
    records = {CONFIG_SHA256: model.config.hash()}
    if model.tokenizer is not None:
        records[TOKENIZER_SHA256] = model.tokenizer.hash()
    save_tensors(tensors, folder / WEIGHTS_FILE, records)
    atomic_write(folder / CONFIG_FILE, lambda tmp: Path(tmp).write_text(model.config.to_json() + "\n"))
    if model.tokenizer is not None:
        atomic_write(folder / TOKENIZER_FILE, lambda tmp: model.tokenizer.save(tmp))
    return folder
