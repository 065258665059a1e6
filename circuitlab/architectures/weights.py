"""Model folders: config.json + model.safetensors (+ tokenizer.json), written atomically, read back with every
check; never unpickles.

model.safetensors records, in its header metadata, the sha256 of its tensors and the hashes of the config and
tokenizer it was saved with. Reading checks all three, so a damaged weights file, a config.json edited into
another architecture of the same shapes, or a tokenizer.json swapped for another of the same size is an error
that names the file rather than a model that quietly computes something else. Folders written before these
records existed (or by other tools) are checked against the hashes in a training run's metrics.json when
there is one. Pickles (torch.save files) are recognised by their bytes, whatever their name, and refused.

`save_model` writes a folder, `read_model_folder` reads one (config, tensors, tokenizer, checks); building
the model from what it read is `circuitlab.architectures.transformer.load_model`. This module needs no model
class, so the model can save itself through it.
"""

from __future__ import annotations


import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from circuitlab.atomic import atomic_write
from circuitlab.config import ConfigError, ModelConfig
from circuitlab.errors import UserError, did_you_mean
from circuitlab.resources import models_root

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


def is_pickle(path: str | os.PathLike) -> bool:
    """Whether a file holds pickled Python objects, judged by its bytes, whatever its name: a pickle of protocol
    2 or later (0x80, protocol byte), or a zip archive with a pickle inside (what torch.save writes)."""
    import zipfile

    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    if head == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as archive:
                return any(name.endswith((".pkl", ".pickle")) for name in archive.namelist())
        except (zipfile.BadZipFile, OSError):
            return False
    return False


def refuse_pickle(path: str | os.PathLike) -> None:
    """CheckpointError when `path` is a pickle (see is_pickle): unpickling can run arbitrary code."""
    if is_pickle(path):
        raise CheckpointError(
            f"{path} is a pickle (e.g. a torch.save checkpoint): circuitlab never unpickles files (they can run "
            "code). Convert the weights to safetensors with the code that made them."
        )


def is_plain_name(name: str) -> bool:
    """A name that stays one folder below where it is joined: no separators, not '.' or '..', not hidden."""
    return bool(name) and not name.startswith(".") and not any(sep in name for sep in ("/", "\\", os.sep, os.altsep or "/"))


def shipped_models() -> list[str]:
    """Names of the model folders under models_root()."""
    root = models_root()
    return sorted(p.name for p in root.glob("*") if (p / CONFIG_FILE).exists()) if root.is_dir() else []


def resolve_model_folder(name_or_path: str | os.PathLike) -> Path:
    """A model folder path as given, else a shipped model by plain name (names never reach outside models_root)."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.is_file():
        refuse_pickle(path)
        raise CheckpointError(f"{path} is a file; a model is a folder holding {CONFIG_FILE} and {WEIGHTS_FILE}")
    root = models_root()
    shipped = root / str(name_or_path)
    if is_plain_name(str(name_or_path)) and shipped.is_dir():
        return shipped
    known = shipped_models()
    guess = did_you_mean(str(name_or_path), known)
    if guess:
        raise CheckpointError(f"no model {str(name_or_path)!r}{guess} (shipped: {', '.join(known)})")
    where = (f"shipped: {', '.join(known)}" if known else
             f"no shipped models found in {root}; circuitlab downloads nothing, so point $CIRCUITLAB_MODELS at a "
             "folder of model folders, or install the circuitlab wheel, which carries them")
    raise CheckpointError(f"no model folder {str(name_or_path)!r}: not a directory, and not a shipped model ({where})")

@dataclass
class ModelFolder:
    """What `read_model_folder` found: the folder, its config, tensors and tokenizer (None when not asked for
    or absent), all checked against each other except the tensors' shapes, which need the model."""

    folder: Path
    config: ModelConfig
    tensors: dict[str, Tensor]
    tokenizer: Any
    weights_file: Path
    recorded_config_hash: str | None
    recorded_where: str


def read_model_folder(name_or_path: str | os.PathLike, load_tokenizer: bool = True) -> ModelFolder:
    """Read a model folder (or a shipped model by name): its config, its tensors (checked against the sha256
    they were saved with) and its tokenizer (checked against the config's vocabulary and its recorded hash)."""
    folder = resolve_model_folder(name_or_path)
    weights = folder / WEIGHTS_FILE
    if not weights.exists():
        pickles = sorted(p.name for p in folder.iterdir() if p.is_file() and is_pickle(p))
        if pickles:
            raise CheckpointError(
                f"{folder} holds {', '.join(pickles)} but no {WEIGHTS_FILE}: circuitlab never unpickles files"
                " (they can run code). Convert the weights to safetensors with the code that made them."
            )
        raise CheckpointError(f"{folder} has no {WEIGHTS_FILE}")
    if not (folder / CONFIG_FILE).exists():
        raise CheckpointError(f"{folder} has no {CONFIG_FILE}")
    try:
        config = ModelConfig.from_json(folder / CONFIG_FILE)
    except (ConfigError, TypeError, AttributeError, ValueError) as error:  # fields of the wrong JSON type included
        raise CheckpointError(f"{folder / CONFIG_FILE}: {error}") from error
    state, metadata = load_tensors(weights)
    recorded = _recorded_hashes(folder, metadata)

    tokenizer = None
    if load_tokenizer and (folder / TOKENIZER_FILE).exists():
        from circuitlab.data.tokenizer import CircuitTokenizer

        try:
            tokenizer = CircuitTokenizer.from_file(folder / TOKENIZER_FILE)
        except Exception as error:  # the tokenizers library raises its own exception types
            raise CheckpointError(f"{folder / TOKENIZER_FILE} cannot be read as a tokenizer ({error})") from error
        if tokenizer.vocab_size != config.d_vocab:
            raise CheckpointError(
                f"{folder / TOKENIZER_FILE}: tokenizer vocab {tokenizer.vocab_size} != model d_vocab {config.d_vocab}"
                " (was this checkpoint trained with another tokenizer?)"
            )
        if recorded["tokenizer"] is not None and tokenizer.hash() != recorded["tokenizer"]:
            raise CheckpointError(
                f"{folder / TOKENIZER_FILE}: tokenizer sha256 {tokenizer.hash()[:12]} != {recorded['tokenizer'][:12]} "
                f"recorded in {recorded['where']} (was this checkpoint trained with another tokenizer?); put back the "
                "tokenizer.json the model was saved with"
            )
    return ModelFolder(folder, config, state, tokenizer, weights, recorded["config"], recorded["where"])


def _recorded_hashes(folder: Path, metadata: Mapping[str, str]) -> dict[str, str | None]:
    """Config and tokenizer hashes the weights were saved with: from the weights' own metadata, else from a
    training run's metrics.json beside them (folders saved before the metadata existed)."""
    if CONFIG_SHA256 in metadata:
        return {"config": metadata[CONFIG_SHA256], "tokenizer": metadata.get(TOKENIZER_SHA256),
                "where": str(folder / WEIGHTS_FILE)}
    metrics_path = folder / METRICS_FILE
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    except (OSError, ValueError):
        metrics = {}  # metrics.json is a report, not part of the model; an unreadable one checks nothing
    if not isinstance(metrics, dict):
        metrics = {}
    hashes = {key: metrics.get(f"{key}_hash") for key in ("config", "tokenizer")}
    return {key: value if isinstance(value, str) else None for key, value in hashes.items()} | {"where": str(metrics_path)}
