"""Training data for `circuitlab train`: documents -> tokenizer -> packed windows, cached in a data folder.

Sources (one per run):
    stories (default)   `n_stories` generated stories with the training seed; the held-out set is
                        `n_held_out` stories of the held-out generator seed, so no held-out story was trained on
    text / jsonl / hf   documents from circuitlab.data.loaders; a seeded `held_out_fraction` of the documents
                        is held out

The tokenizer is loaded from `tokenizer_path`, or trained on the training documents (`vocab_size`). Token
streams are packed with circuitlab.data.pack_sequences into windows of seq_len + 1 tokens (each document
preceded by the separator), so a window gives seq_len inputs and seq_len next-token targets.

Everything lands in `data_dir` under a key made of the source, the tokenizer's hash and the window length:
    tokenizer-<key>.json           a tokenizer trained here
    windows-<key>.safetensors      int32 `train` and `held_out` windows (never pickled)
    windows-<key>.json             what they were made from
A second run with the same settings (a resumed one, or another model on the same corpus) reads them back.
Writes are atomic, so concurrent runs sharing a data folder cannot read a half-written file.

Letters: n windows, W window length (seq_len + 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from circuitlab.atomic import atomic_write, atomic_write_text
from circuitlab.errors import UserError


@dataclass
class DataSpec:
    """Where the documents come from and how they are split and tokenized."""

    source: str = "stories"  # stories | text | jsonl | hf
    paths: list[str] = field(default_factory=list)  # text/jsonl files, or the HF dataset name/path
    n_stories: int = 20000
    story_seed: int = 0  # circuitlab.data.TRAIN_SEED
    n_held_out: int = 500
    text_field: str = "text"
    hf_split: str = "train"
    hf_limit: int | None = None
    held_out_fraction: float = 0.02
    split_seed: int = 0
    vocab_size: int = 4096
    tokenizer_path: str | None = None

    def validate(self) -> None:
        if self.source not in ("stories", "text", "jsonl", "hf"):
            raise UserError(f"unknown data source {self.source!r}; expected stories, text, jsonl or hf")
        if self.source == "stories":
            if self.n_stories <= 0 or self.n_held_out <= 0:
                raise UserError(
                    f"--n-stories ({self.n_stories}) and --held-out-stories ({self.n_held_out}) must be positive"
                )
        else:
            if not self.paths:
                raise UserError(f"data source {self.source!r} needs at least one path")
            if not 0.0 < self.held_out_fraction < 1.0:
                raise UserError(f"--held-out-fraction must lie in (0, 1), got {self.held_out_fraction}")

    def describe(self) -> str:
        if self.source == "stories":
            return (f"{self.n_stories} generated stories (seed {self.story_seed}); held out: {self.n_held_out} "
                    "stories of the held-out seed")
        return f"{self.source} {', '.join(self.paths)}; held out: {self.held_out_fraction:g} of the documents"


@dataclass
class PreparedData:
    train_windows: Int[Tensor, "n W"]
    held_out_windows: Int[Tensor, "n_held W"]
    tokenizer: Any
    manifest: dict[str, Any]


def _key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _source_payload(spec: DataSpec) -> dict[str, Any]:
    payload = asdict(spec)
    payload.pop("tokenizer_path")
    if spec.source != "stories":
        payload["files"] = [_file_signature(Path(p)) for p in spec.paths]
    return payload


def _file_signature(path: Path) -> Any:
    """Name, size and modification time of a local source (a changed file makes a new cache entry)."""
    if path.is_file():
        stat = path.stat()
        return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]
    if path.is_dir():
        return [str(path.resolve()), sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())]
    return str(path)


def load_split_documents(spec: DataSpec, show_progress: bool = True) -> tuple[list[str], list[str]]:
    """(training documents, held-out documents) of a data spec."""
    from circuitlab.data import HELD_OUT_SEED, iter_stories, load_hf_dataset, load_jsonl, load_text_files

    spec.validate()
    if spec.source == "stories":
        if spec.story_seed == HELD_OUT_SEED:
            raise UserError(f"story seed {HELD_OUT_SEED} is the held-out seed; train on another seed")
        train = [s.text for s in iter_stories(spec.n_stories, spec.story_seed, show_progress=show_progress)]
        held_out = [s.text for s in iter_stories(spec.n_held_out, HELD_OUT_SEED, show_progress=False)]
        return train, held_out
    if spec.source == "text":
        documents = load_text_files(spec.paths)
    elif spec.source == "jsonl":
        documents = [doc for path in spec.paths for doc in load_jsonl(path, spec.text_field)]
    else:
        documents = [
            doc for path in spec.paths
            for doc in load_hf_dataset(path, split=spec.hf_split, text_field=spec.text_field, limit=spec.hf_limit)
        ]
    order = list(range(len(documents)))
    random.Random(spec.split_seed).shuffle(order)
    n_held = max(1, int(round(spec.held_out_fraction * len(documents))))
    if n_held >= len(documents):
        raise UserError(
            f"the corpus has {len(documents)} documents: too few to hold out {spec.held_out_fraction:g} of them "
            "and still train; give more text"
        )
    held = set(order[:n_held])
    return [d for i, d in enumerate(documents) if i not in held], [documents[i] for i in sorted(held)]


def _pack(documents: list[str], tokenizer: Any, window: int, what: str, show_progress: bool) -> Tensor:
    from circuitlab.data import DataError, pack_sequences, tokenize_documents

    ids = tokenize_documents(documents, tokenizer, show_progress=show_progress)
    try:
        return pack_sequences(ids, window, tokenizer.eos_id).to(torch.int32)
    except DataError as error:
        raise UserError(f"{what} data: {error}") from None


def prepare_data(
    spec: DataSpec, seq_len: int, data_dir: str | os.PathLike, show_progress: bool = True
) -> PreparedData:
    """Load or build the tokenizer and the packed windows of `spec` (see the module docstring)."""
    from circuitlab.architectures.checkpoint import CheckpointError, load_tensors, save_tensors
    from circuitlab.data import CircuitTokenizer, train_tokenizer

    spec.validate()
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    source_key = _key(_source_payload(spec))
    documents: tuple[list[str], list[str]] | None = None

    if spec.tokenizer_path is not None:
        path = Path(spec.tokenizer_path)
        if not path.is_file():
            raise UserError(f"--tokenizer {path}: no such file (train one with `circuitlab tokenizer`)")
        try:
            tokenizer = CircuitTokenizer.from_file(path)
        except Exception as error:  # the tokenizers library raises its own exception types
            raise UserError(f"--tokenizer {path} cannot be read as a tokenizer.json ({error})") from None
    else:
        path = data_dir / f"tokenizer-{source_key}.json"
        tokenizer = None
        if path.exists():
            try:
                tokenizer = CircuitTokenizer.from_file(path)
            except ValueError:
                tokenizer = None  # a damaged cache file: train the tokenizer again below
        if tokenizer is None:
            documents = load_split_documents(spec, show_progress)
            tokenizer = train_tokenizer(documents[0], vocab_size=spec.vocab_size, show_progress=False)
            atomic_write(path, tokenizer.save)

    window = seq_len + 1
    windows_key = _key({"source": source_key, "tokenizer": tokenizer.hash(), "window": window})
    windows_path = data_dir / f"windows-{windows_key}.safetensors"
    manifest_path = data_dir / f"windows-{windows_key}.json"
    if windows_path.exists() and manifest_path.exists():
        try:
            stored = load_tensors(windows_path)[0]  # checks the sha256 recorded when the cache was written
            return PreparedData(stored["train"], stored["held_out"], tokenizer, json.loads(manifest_path.read_text()))
        except (CheckpointError, OSError, ValueError, KeyError):
            pass  # damaged cache: rebuild it below
    if documents is None:
        documents = load_split_documents(spec, show_progress)
    train_docs, held_docs = documents
    train_windows = _pack(train_docs, tokenizer, window, "training", show_progress)
    held_out_windows = _pack(held_docs, tokenizer, window, "held-out", show_progress=False)
    manifest = {
        "source": spec.describe(),
        "spec": _source_payload(spec),
        "tokenizer_hash": tokenizer.hash(),
        "vocab_size": tokenizer.vocab_size,
        "window": window,
        "train_documents": len(train_docs),
        "held_out_documents": len(held_docs),
        "train_windows": int(train_windows.shape[0]),
        "held_out_windows": int(held_out_windows.shape[0]),
        "train_tokens": int(train_windows.numel()),
        "held_out_tokens": int(held_out_windows.numel()),
    }
    save_tensors({"train": train_windows.contiguous(), "held_out": held_out_windows.contiguous()}, windows_path)
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    return PreparedData(train_windows, held_out_windows, tokenizer, manifest)


def unigram_entropy(windows: Int[Tensor, "n W"], vocab_size: int) -> float:
    """Entropy (nats) of the empirical unigram distribution of the windows' target tokens: the held-out loss
    of the best context-free predictor, even one told the held-out token frequencies."""
    counts = np.bincount(windows[:, 1:].reshape(-1).numpy().astype(np.int64), minlength=vocab_size).astype(np.float64)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())
