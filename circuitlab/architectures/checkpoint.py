"""Checkpoints as folders: config.json + model.safetensors (+ tokenizer.json). Never unpickles.

model.safetensors records, in its header metadata, the sha256 of its tensors and the hashes of the config and
tokenizer it was saved with. Loading checks all three, so a damaged weights file, a config.json edited into
another architecture of the same shapes, or a tokenizer.json swapped for another of the same size is an error
that names the file rather than a model that quietly computes something else. Folders written before these
records existed (or by other tools) are checked against the hashes in a training run's metrics.json when
there is one. The files themselves (safetensors with their records, save_model) are in weights.py, which
needs no model class; this module builds the CircuitTransformer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from circuitlab.architectures.transformer import CircuitTransformer
from circuitlab.architectures.weights import (  # noqa: F401  (re-exported: the names checkpoints have always had)
    CONFIG_FILE,
    CONFIG_SHA256,
    METRICS_FILE,
    PICKLE_SUFFIXES,
    TENSORS_SHA256,
    TOKENIZER_FILE,
    TOKENIZER_SHA256,
    WEIGHTS_FILE,
    CheckpointError,
    load_tensors,
    save_model,
    save_tensors,
    tensors_sha256,
)
from circuitlab.config import ConfigError, ModelConfig


def models_root() -> Path:
    """Where shipped models live: $CIRCUITLAB_MODELS, else the installed package's models (the wheel carries
    them as package data in circuitlab/models/), else the source tree's models/ folder."""
    if "CIRCUITLAB_MODELS" in os.environ:
        return Path(os.environ["CIRCUITLAB_MODELS"])
    installed = Path(__file__).resolve().parents[1] / "models"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "models"


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
    known = sorted(p.name for p in root.glob("*") if (p / CONFIG_FILE).exists()) if root.is_dir() else []
    where = (f"shipped: {', '.join(known)}" if known else
             f"no shipped models found in {root}; circuitlab downloads nothing, so point $CIRCUITLAB_MODELS at a "
             "folder of model folders, or install the circuitlab wheel, which carries them")
    raise CheckpointError(f"no model folder {str(name_or_path)!r}: not a directory, and not a shipped model ({where})")


def load_model(
    name_or_path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    load_tokenizer: bool = True,
) -> CircuitTransformer:
    """Load a model folder (or a shipped model by name) into a CircuitTransformer."""
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

    model = CircuitTransformer(config, tokenizer=tokenizer)
    expected = model.state_dict()
    for name, tensor in expected.items():
        if name not in state:
            raise CheckpointError(f"{weights}: missing tensor {name!r} (expected shape {tuple(tensor.shape)})")
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{weights}: tensor {name!r} has shape {tuple(state[name].shape)} but {CONFIG_FILE} implies "
                f"{tuple(tensor.shape)}"
            )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise CheckpointError(f"{weights}: tensors {unexpected[:5]} are not part of the configured model")
    if recorded["config"] is not None and config.hash() != recorded["config"]:
        raise CheckpointError(
            f"{folder / CONFIG_FILE}: config hash {config.hash()[:12]} != {recorded['config'][:12]} recorded in "
            f"{recorded['where']}: the weights were saved with another architecture of the same shapes; put back the "
            "config.json the model was saved with"
        )
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{weights}: tensor {name!r} holds NaN or infinite values (corrupted?)")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})
    # loaded models are for analysis: evaluation mode (TransformerLens' tools insist on it); train() to train
    return model.to(device=device, dtype=dtype).eval()


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
