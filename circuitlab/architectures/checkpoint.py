"""Checkpoints as folders: config.json + model.safetensors (+ tokenizer.json). Never unpickles."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from circuitlab.config import ConfigError, ModelConfig

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"


class CheckpointError(ValueError):
    """A model folder that cannot be loaded as asked."""


def models_root() -> Path:
    """Where shipped models live: $CIRCUITLAB_MODELS, else the repository's models/ folder."""
    return Path(os.environ.get("CIRCUITLAB_MODELS", Path(__file__).resolve().parents[2] / "models"))


def resolve_model_folder(name_or_path: str | os.PathLike) -> Path:
    path = Path(name_or_path)
    if path.is_dir():
        return path
    shipped = models_root() / str(name_or_path)
    if shipped.is_dir():
        return shipped
    known = sorted(p.name for p in models_root().glob("*") if (p / CONFIG_FILE).exists()) if models_root().is_dir() else []
    raise CheckpointError(
        f"no model folder {str(name_or_path)!r}: not a directory, and not a shipped model"
        + (f" (shipped: {', '.join(known)})" if known else "")
    )


def _atomic_write(path: Path, write: Any) -> None:
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_model(model: Any, folder: str | os.PathLike, dtype: torch.dtype | None = None) -> Path:
    """Write config.json, model.safetensors (optionally cast, e.g. bf16) and tokenizer.json, each atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: (t.detach().to(dtype) if dtype is not None and t.is_floating_point() else t.detach()).contiguous().cpu()
        for name, t in model.state_dict().items()
    }
    _atomic_write(folder / WEIGHTS_FILE, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    _atomic_write(folder / CONFIG_FILE, lambda tmp: Path(tmp).write_text(model.config.to_json() + "\n"))
    if model.tokenizer is not None:
        _atomic_write(folder / TOKENIZER_FILE, lambda tmp: model.tokenizer.save(tmp))
    return folder


def load_model(
    name_or_path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    load_tokenizer: bool = True,
) -> Any:
    """Load a model folder (or a shipped model by name) into a CircuitTransformer."""
    from circuitlab.architectures.transformer import CircuitTransformer

    folder = resolve_model_folder(name_or_path)
    weights = folder / WEIGHTS_FILE
    if not weights.exists():
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
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
    except (ConfigError, TypeError) as error:
        raise CheckpointError(f"{folder / CONFIG_FILE}: {error}") from error
    try:
        state = load_file(weights)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({error}); is it truncated?") from error

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
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{weights}: tensor {name!r} holds NaN or infinite values (corrupted?)")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})
    # loaded models are for analysis: evaluation mode (TransformerLens' tools insist on it); train() to train
    return model.to(device=device, dtype=dtype).eval()
