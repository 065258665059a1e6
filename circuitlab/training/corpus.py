"""Training data for `circuitlab train`: documents -> tokenizer -> packed windows, cached in a data folder.

Every source gives three disjoint splits: training documents, validation documents (the loss a run
evaluates as it trains and chooses its checkpoint on) and held-out documents (the loss its card reports).

Sources (one per run):
    stories (default)   `n_stories` generated stories with the training seed; `n_validation` stories of the
                        validation seed and `n_held_out` of the held-out seed, so no evaluated story was trained on.
                        With `natural_dir`, the mixture: the natural stories' training split, repeated
                        `natural_upsample` times, joins the generated stories, and each evaluation split has two
                        sets, "natural" (the natural stories' validation or held-out split) and "generated"
    text / jsonl / hf   documents from circuitlab.data.loaders (text files split by `text_split`, see
                        load_text_files); a seeded `held_out_fraction` of the documents is held out and a
                        `validation_fraction` set aside for validation
    (streamed)          `streaming` reads an hf source document by document into token shards on disk
                        (circuitlab.training.streamed)

The tokenizer is loaded from `tokenizer_path`, or trained on the training documents (`vocab_size`). Token
streams are packed with circuitlab.data.pack_sequences into windows of seq_len + 1 tokens (each document
preceded by the separator), so a window gives seq_len inputs and seq_len next-token targets.

Everything lands in `data_dir` under a key made of the source, the tokenizer's hash and the window length:
    tokenizer-<key>.json           a tokenizer trained here
    windows-<key>.safetensors      int32 `train`, `validation` and `held_out` windows (never pickled)
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from pydantic import model_validator

from circuitlab.atomic import atomic_write, atomic_write_text
from circuitlab.errors import UserError
from circuitlab.settings import Settings


class DataSpec(Settings):
    """Where the documents come from and how they are split and tokenized (checked when built)."""

    source: str = "stories"  # stories | text | jsonl | hf
    paths: tuple[str, ...] = ()  # text/jsonl files, or the HF dataset name/path
    n_stories: int = 20000
    story_seed: int = 0  # circuitlab.data.TRAIN_SEED
    n_held_out: int = 500
    n_validation: int = 200
    text_field: str = "text"
    hf_split: str = "train"
    hf_limit: int | None = None
    held_out_fraction: float = 0.02
    validation_fraction: float = 0.02
    streaming: bool = False  # hf source only: tokenize into shards on disk (circuitlab.training.streamed)
    workers: int = 0  # processes tokenizing a streamed source (0: one per core, at most 8)
    shard_documents: int = 20000  # documents per shard group of a streamed source
    split_seed: int = 0
    vocab_size: int = 4096
    tokenizer_path: str | None = None
    text_split: str = "auto"  # circuitlab.data.loaders.SPLIT_MODES
    window_chars: int = 4000
    natural_dir: str | None = None  # a folder with prompts.jsonl and stories/ (data/natural)
    natural_upsample: int = 1

    @model_validator(mode="after")
    def _consistent(self) -> DataSpec:
        from circuitlab.data.loaders import SPLIT_MODES

        if self.source not in ("stories", "text", "jsonl", "hf"):
            raise ValueError(f"unknown data source {self.source!r}; expected stories, text, jsonl or hf")
        if self.text_split not in SPLIT_MODES:
            raise ValueError(f"--text-split {self.text_split!r}; expected one of {', '.join(SPLIT_MODES)}")
        if self.window_chars < 1:
            raise ValueError(f"--window-chars must be positive, got {self.window_chars}")
        if self.natural_dir is not None and self.source != "stories":
            raise ValueError("--natural mixes the natural stories into the generated ones; it cannot go with "
                             "--text, --jsonl or --hf-dataset (pass the story files to --text instead)")
        if self.natural_upsample < 1:
            raise ValueError(f"--natural-upsample must be a positive whole number of copies, got {self.natural_upsample}")
        if self.source == "stories":
            if self.n_stories < 0 or self.n_held_out <= 0 or (self.n_stories == 0 and self.natural_dir is None):
                raise ValueError(
                    f"--n-stories ({self.n_stories}) and --held-out-stories ({self.n_held_out}) must be positive"
                )
        else:
            if not self.paths:
                raise ValueError(f"data source {self.source!r} needs at least one path")
            if not 0.0 < self.held_out_fraction < 1.0:
                raise ValueError(f"--held-out-fraction must lie in (0, 1), got {self.held_out_fraction}")
            if not 0.0 < self.validation_fraction < 1.0 - self.held_out_fraction:
                raise ValueError(f"--validation-fraction must lie in (0, 1 - held-out fraction), got {self.validation_fraction}")
        if self.streaming and self.source != "hf":
            raise ValueError("--streaming reads a dataset document by document; it goes with --hf-dataset")
        if self.source == "stories" and self.n_validation <= 0:
            raise ValueError(f"--validation-stories must be positive, got {self.n_validation}")
        return self

    def held_out_description(self) -> str:
        """What the held-out loss is measured on, in a few words (the card's sentence)."""
        return self.describe().split("held out: ", 1)[1]

    def describe(self) -> str:
        if self.source == "stories" and self.natural_dir is not None:
            return (f"natural stories' training split x {self.natural_upsample} + {self.n_stories} generated stories "
                    f"(seed {self.story_seed}); validation: the natural validation split and {self.n_validation} "
                    f"stories of the validation seed; held out: the natural held-out split and {self.n_held_out} "
                    "stories of the held-out seed")
        if self.source == "stories":
            return (f"{self.n_stories} generated stories (seed {self.story_seed}); validation: {self.n_validation} "
                    f"stories of the validation seed; held out: {self.n_held_out} stories of the held-out seed")
        return (f"{self.source} {', '.join(self.paths)}{' (streamed)' if self.streaming else ''}; validation: "
                f"{self.validation_fraction:g} of the documents; held out: {self.held_out_fraction:g} of the documents")


@dataclass
class PreparedData:
    train_windows: Int[Tensor, "n W"]  # or circuitlab.training.streamed.ShardWindows, read from disk on demand
    held_out_windows: Int[Tensor, "n_held W"]
    tokenizer: Any
    manifest: dict[str, Any]
    # named held-out sets evaluated separately at the end ("natural", "generated"); empty for one-set sources
    held_out_sets: dict[str, Tensor] = field(default_factory=dict)
    validation_windows: Int[Tensor, "n_val W"] | None = None
    validation_sets: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class DocumentSets:
    """Training documents and the named validation and held-out sets (one set is named "held_out" /
    "validation" for sources without named sets)."""

    train: list[str]
    validation: dict[str, list[str]]
    held_out: dict[str, list[str]]


def content_key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def source_payload(spec: DataSpec) -> dict[str, Any]:
    payload = spec.model_dump(mode="json")
    payload.pop("tokenizer_path")
    if spec.source in ("text", "jsonl"):
        payload["paths"] = [_shown_path(Path(p)) for p in spec.paths]
    if spec.source != "stories":
        payload["files"] = [_file_signature(Path(p)) for p in spec.paths]
    if spec.natural_dir is not None:
        payload["natural_dir"] = _shown_path(Path(spec.natural_dir))
        payload["natural_files"] = _file_signature(Path(spec.natural_dir))
    return payload


def _shown_path(path: Path) -> str:
    """`path` relative to the working directory, else to the repository, else its name alone: manifests and
    metrics that record a source never carry the machine's own folders."""
    resolved = path.resolve()
    for base in (Path.cwd().resolve(), Path(__file__).resolve().parents[2]):
        if resolved.is_relative_to(base):
            return resolved.relative_to(base).as_posix() or "."
    return resolved.name


def _file_signature(path: Path) -> Any:
    """Name, size and modification time of a local source (a changed file makes a new cache entry)."""
    if path.is_file():
        stat = path.stat()
        return [_shown_path(path), stat.st_size, stat.st_mtime_ns]
    if path.is_dir():
        return [_shown_path(path), sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())]
    return _shown_path(path)


def load_document_sets(spec: DataSpec, show_progress: bool = True) -> DocumentSets:
    """The training documents and the named validation and held-out sets of `spec`."""
    from circuitlab.data import HELD_OUT_SEED, VALIDATION_SEED, iter_stories, load_hf_dataset, load_jsonl, load_text_files

    if spec.source == "stories":
        if spec.story_seed in (HELD_OUT_SEED, VALIDATION_SEED):
            raise UserError(f"story seed {spec.story_seed} is an evaluation seed; train on another seed")
        train = [s.text for s in iter_stories(spec.n_stories, spec.story_seed, show_progress=show_progress)]
        validation = [s.text for s in iter_stories(spec.n_validation, VALIDATION_SEED)]
        held_out = [s.text for s in iter_stories(spec.n_held_out, HELD_OUT_SEED)]
        if spec.natural_dir is None:
            return DocumentSets(train, {"validation": validation}, {"held_out": held_out})
        from circuitlab.data.natural import load_natural_stories

        natural = load_natural_stories(spec.natural_dir)
        splits = {name: [story.text for story in natural.split(name)] for name in ("train", "validation", "held_out")}
        if not all(splits.values()):
            raise UserError(f"{spec.natural_dir}: {len(natural.stories)} natural stories are too few to split "
                             f"({', '.join(f'{len(texts)} {name}' for name, texts in splits.items())})")
        train = train + splits["train"] * spec.natural_upsample
        random.Random(spec.split_seed).shuffle(train)  # copies of a story land far apart in the packed stream
        return DocumentSets(train, {"natural": splits["validation"], "generated": validation},
                            {"natural": splits["held_out"], "generated": held_out})
    if spec.source == "text":
        documents = load_text_files(spec.paths, split_documents=spec.text_split, window_chars=spec.window_chars)
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
    n_validation = max(1, int(round(spec.validation_fraction * len(documents))))
    if n_held + n_validation >= len(documents):
        hint = " or a smaller --window-chars" if spec.source == "text" else ""
        raise UserError(
            f"the corpus has {len(documents)} documents: too few to hold out {spec.held_out_fraction:g} and "
            f"{spec.validation_fraction:g} of them for validation and still train; give more text{hint}"
        )
    held, validation = set(order[:n_held]), set(order[n_held:n_held + n_validation])
    return DocumentSets(
        [d for i, d in enumerate(documents) if i not in held and i not in validation],
        {"validation": [documents[i] for i in sorted(validation)]},
        {"held_out": [documents[i] for i in sorted(held)]},
    )


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
    from circuitlab.architectures.weights import CheckpointError, load_tensors, save_tensors
    from circuitlab.data import train_tokenizer

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if spec.streaming:
        return prepare_streamed(spec, seq_len, data_dir, show_progress)
    source_key = content_key(source_payload(spec))
    documents: DocumentSets | None = None
    tokenizer, path = read_tokenizer(spec, data_dir / f"tokenizer-{source_key}.json")
    if tokenizer is None:
        documents = load_document_sets(spec, show_progress)
        tokenizer = train_tokenizer(documents.train, vocab_size=spec.vocab_size, show_progress=False)
        atomic_write(path, tokenizer.save)

    window = seq_len + 1
    windows_key = content_key({"source": source_key, "tokenizer": tokenizer.hash(), "window": window})
    windows_path = data_dir / f"windows-{windows_key}.safetensors"
    manifest_path = data_dir / f"windows-{windows_key}.json"
    if windows_path.exists() and manifest_path.exists():
        try:
            stored = load_tensors(windows_path)[0]  # checks the sha256 recorded when the cache was written
            named = {split: {name.split("/", 1)[1]: windows for name, windows in stored.items() if name.startswith(f"{split}/")}
                     for split in ("held_out", "validation")}
            return PreparedData(stored["train"], stored["held_out"], tokenizer, json.loads(manifest_path.read_text()),
                                named["held_out"], stored["validation"], named["validation"])
        except (CheckpointError, OSError, ValueError, KeyError):
            pass  # damaged cache: rebuild it below
    if documents is None:
        documents = load_document_sets(spec, show_progress)
    train_windows = _pack(documents.train, tokenizer, window, "training", show_progress)
    tensors = {"train": train_windows}
    counts: dict[str, Any] = {}
    for split, sets in (("validation", documents.validation), ("held_out", documents.held_out)):
        docs = [doc for texts in sets.values() for doc in texts]
        tensors[split] = _pack(docs, tokenizer, window, split.replace("_", "-"), show_progress=False)
        counts[f"{split}_documents"] = len(docs)
        counts[f"{split}_windows"] = int(tensors[split].shape[0])
        counts[f"{split}_tokens"] = int(tensors[split].numel())
        if len(sets) > 1:
            for name, texts in sets.items():
                tensors[f"{split}/{name}"] = _pack(texts, tokenizer, window, f"{name} {split}", show_progress=False)
            counts[f"{split}_sets"] = {name: {"documents": len(sets[name]), "windows": int(tensors[f"{split}/{name}"].shape[0]),
                                              "tokens": int(tensors[f"{split}/{name}"].numel())} for name in sets}
        else:
            counts[f"{split}_sets"] = {}
    manifest = {
        "source": spec.describe(),
        "spec": source_payload(spec),
        "tokenizer_hash": tokenizer.hash(),
        "vocab_size": tokenizer.vocab_size,
        "window": window,
        "train_documents": len(documents.train),
        "train_windows": int(train_windows.shape[0]),
        "train_tokens": int(train_windows.numel()),
        **counts,
    }
    save_tensors({name: tensor.contiguous() for name, tensor in tensors.items()}, windows_path)
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    named = {split: {name.split("/", 1)[1]: windows for name, windows in tensors.items() if name.startswith(f"{split}/")}
             for split in ("held_out", "validation")}
    return PreparedData(train_windows, tensors["held_out"], tokenizer, manifest, named["held_out"],
                        tensors["validation"], named["validation"])


def read_tokenizer(spec: DataSpec, cached: Path) -> tuple[Any, Path]:
    """(the tokenizer of --tokenizer, or the one cached at `cached`, or None when it must be trained; the path
    a trained one is saved to)."""
    from circuitlab.data import CircuitTokenizer

    if spec.tokenizer_path is not None:
        path = Path(spec.tokenizer_path)
        if not path.is_file():
            raise UserError(f"--tokenizer {path}: no such file (train one with `circuitlab tokenizer`)")
        try:
            return CircuitTokenizer.from_file(path), path
        except Exception as error:  # the tokenizers library raises its own exception types
            raise UserError(f"--tokenizer {path} cannot be read as a tokenizer.json ({error})") from None
    if cached.exists():
        try:
            return CircuitTokenizer.from_file(cached), cached
        except ValueError:
            pass  # a damaged cache file: trained again
    return None, cached


def prepare_streamed(spec: DataSpec, seq_len: int, data_dir: Path, show_progress: bool = True) -> PreparedData:
    """PreparedData of a streamed hf source (circuitlab.training.streamed): tokenizer, shards, windows."""
    from circuitlab.data import train_tokenizer
    from circuitlab.data.hf import iter_documents
    from circuitlab.training.streamed import (
        SPLITS, TOKENIZER_DOCUMENTS, ShardWindows, iter_training_documents, write_shards,
    )

    if len(spec.paths) != 1:
        raise UserError("--streaming reads one dataset; give one --hf-dataset")
    payload = source_payload(spec)
    for name in ("workers", "shard_documents"):  # how the shards are made, not what they hold
        payload.pop(name, None)
    source_key = content_key(payload)

    def documents() -> Iterator[str]:  # the stream, from its start
        return iter_documents(spec.paths[0], split=spec.hf_split, text_field=spec.text_field, limit=spec.hf_limit)

    tokenizer, path = read_tokenizer(spec, data_dir / f"tokenizer-{source_key}.json")
    if tokenizer is None:
        texts = iter_training_documents(documents(), spec.held_out_fraction, spec.validation_fraction, TOKENIZER_DOCUMENTS)
        if not texts:
            raise UserError(f"{spec.paths[0]}: no training documents to train a tokenizer on")
        tokenizer = train_tokenizer(texts, vocab_size=spec.vocab_size, show_progress=False)
        from circuitlab.atomic import atomic_write

        atomic_write(path, tokenizer.save)
    key = content_key({"source": source_key, "tokenizer": tokenizer.hash()})
    folder = data_dir / f"shards-{key}"
    manifest = write_shards(
        documents(), tokenizer, folder, key=key, held_out_fraction=spec.held_out_fraction,
        validation_fraction=spec.validation_fraction, shard_documents=spec.shard_documents, workers=spec.workers,
        show_progress=show_progress, description=spec.describe(),
    )
    window = seq_len + 1
    train = ShardWindows(folder, manifest, "train", window)
    validation = ShardWindows(folder, manifest, "validation", window).load()
    held_out = ShardWindows(folder, manifest, "held_out", window).load()
    for name, windows in (("training", train), ("validation", validation), ("held-out", held_out)):
        if windows.shape[0] == 0:
            raise UserError(f"the streamed corpus gives no {name} windows of {window} tokens; give more documents "
                            "or a larger --held-out-fraction / --validation-fraction")
    counts = {split: sum(group["files"][split]["documents"] for group in manifest["groups"]) for split in SPLITS}
    summary = {
        "source": spec.describe(),
        "spec": payload,
        "tokenizer_hash": tokenizer.hash(),
        "vocab_size": tokenizer.vocab_size,
        "window": window,
        "shards": folder.name,
        "train_documents": counts["train"],
        "train_windows": train.shape[0],
        "train_tokens": train.numel(),
        **{f"{split}_{what}": value for split, windows in (("validation", validation), ("held_out", held_out))
           for what, value in (("documents", counts[split]), ("windows", int(windows.shape[0])),
                               ("tokens", int(windows.numel())))},
        "validation_sets": {},
        "held_out_sets": {},
    }
    return PreparedData(train, held_out, tokenizer, summary, {}, validation, {})


def unigram_entropy(windows: Int[Tensor, "n W"], vocab_size: int) -> float:
    """Entropy (nats) of the empirical unigram distribution of the windows' target tokens: the held-out loss
    of the best context-free predictor, even one told the held-out token frequencies."""
    counts = np.bincount(windows[:, 1:].reshape(-1).numpy().astype(np.int64), minlength=vocab_size).astype(np.float64)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())


def evaluate_sets(trainer: Any, sets: dict[str, Tensor], vocab_size: int) -> dict[str, dict[str, float]]:
    """Loss (nats/token), perplexity, unigram entropy and token count of each named set of windows, with the
    trainer's own evaluation (so every rank of a distributed run must call it)."""
    import math

    results = {}
    default = trainer.eval_windows
    try:
        for name, windows in sets.items():
            trainer.eval_windows = windows
            loss = trainer.evaluate()
            results[name] = {"loss": loss, "ppl": math.exp(loss), "unigram_entropy": unigram_entropy(windows, vocab_size),
                             "tokens": int(windows[:, 1:].numel())}
    finally:
        trainer.eval_windows = default
    return results
