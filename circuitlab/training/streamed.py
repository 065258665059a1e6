"""A streamed corpus: documents read one at a time, tokenized by worker processes into token shards on disk.

`circuitlab train --hf-dataset NAME_OR_PATH --streaming` never holds the corpus in memory. The documents come
from circuitlab.data.hf.iter_documents in their dataset order; document i goes to the held-out, validation or
training split by the sha256 of "doc/<i>" (the same split on every run, whatever the number of workers).
Groups of `shard_documents` documents are tokenized in parallel (`workers` processes, each with its own copy
of the tokenizer) and written as one shard per split:

    shards-<key>/train-00000.bin  validation-00000.bin  held_out-00000.bin  train-00001.bin ...
    shards-<key>/manifest.json    the groups written so far: documents, tokens and sha256 of each file

Each file is the split's documents of that group as one stream of token ids, every document preceded by the
end-of-text separator (as circuitlab.data.pack_sequences packs them), in uint16 (uint32 for vocabularies above
65,536). A group is written under temporary names and renamed into place, then the manifest is replaced
atomically, so a run that is killed resumes after its last complete group (the documents before it are read
again but not tokenized again). Training reads the shards memory-mapped (`ShardWindows`): windows of
seq_len + 1 consecutive tokens of one shard, fetched from disk per batch. The validation and held-out windows
are small and loaded whole.

Letters: W window length (seq_len + 1).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from circuitlab.atomic import atomic_write_text

SPLITS = ("train", "validation", "held_out")
TOKENIZER_DOCUMENTS = 100_000  # training documents a tokenizer is trained on when none is given
MANIFEST = "manifest.json"
FORMAT = "circuitlab-token-shards"


def split_of_document(index: int, held_out_fraction: float, validation_fraction: float) -> str:
    """The split of the document at `index` of the stream (a fixed function of the index)."""
    digest = hashlib.sha256(f"doc/{index}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    if position < held_out_fraction:
        return "held_out"
    return "validation" if position < held_out_fraction + validation_fraction else "train"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


# --- worker processes -------------------------------------------------------------------------------------

_WORKER_TOKENIZER: Any = None


def _start_worker(tokenizer_json: str) -> None:
    global _WORKER_TOKENIZER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the processes are the parallelism
    from circuitlab.data.tokenizer import CircuitTokenizer

    _WORKER_TOKENIZER = CircuitTokenizer.from_str(tokenizer_json)


def _encode(texts: list[str]) -> list[list[int]]:
    return _WORKER_TOKENIZER.encode_batch(texts)


class _Encoder:
    """encode(list of texts) -> token ids, in `workers` processes (0 or 1: in this process)."""

    def __init__(self, tokenizer: Any, workers: int):
        self.tokenizer, self.workers, self.pool = tokenizer, workers, None
        if workers > 1:
            import multiprocessing

            context = multiprocessing.get_context("spawn")  # no forked copy of a tokenizer's threads
            self.pool = context.Pool(workers, initializer=_start_worker, initargs=(tokenizer.to_str(),))

    def encode(self, texts: list[str], piece: int = 256) -> list[list[int]]:
        if self.pool is None:
            return self.tokenizer.encode_batch(texts)
        pieces = [texts[start:start + piece] for start in range(0, len(texts), piece)]
        return [ids for part in self.pool.map(_encode, pieces) for ids in part]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()


# --- writing ----------------------------------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path, key: str) -> dict[str, Any]:
    """The shard folder's manifest, or a new one when there is none or it belongs to other settings."""
    path = folder / MANIFEST
    if path.exists():
        try:
            manifest = json.loads(path.read_text())
            if manifest.get("format") == FORMAT and manifest.get("key") == key:
                return manifest
        except (OSError, json.JSONDecodeError):
            pass
    return {"format": FORMAT, "key": key, "groups": [], "documents": 0, "complete": False}


def write_shards(
    documents: Iterable[str],
    tokenizer: Any,
    folder: str | os.PathLike,
    *,
    key: str,
    held_out_fraction: float,
    validation_fraction: float,
    shard_documents: int = 20000,
    workers: int = 0,
    show_progress: bool = True,
    description: str = "",
) -> dict[str, Any]:
    """Tokenize `documents` into the shard folder (resuming after its last complete group); the manifest."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(folder, key)
    manifest.update(source=description, vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eos_id,
                    dtype=token_dtype(tokenizer.vocab_size).name)
    if manifest["complete"]:
        return manifest
    for stale in folder.glob("*.tmp"):
        stale.unlink()
    done = int(manifest["documents"])
    stream = itertools.islice(iter(documents), done, None)  # documents of complete groups are not tokenized again
    workers = workers or min(8, os.cpu_count() or 1)
    encoder = _Encoder(tokenizer, workers)
    from tqdm.auto import tqdm

    bar = tqdm(desc="tokenizing", unit="doc", initial=done, disable=not show_progress, dynamic_ncols=True)
    try:
        while True:
            group = list(itertools.islice(stream, shard_documents))
            if not group:
                break
            _write_group(folder, manifest, group, done, encoder, tokenizer, held_out_fraction, validation_fraction)
            done += len(group)
            bar.update(len(group))
    finally:
        encoder.close()
        bar.close()
    manifest["complete"] = True
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def _write_group(folder: Path, manifest: dict, group: list[str], first: int, encoder: _Encoder, tokenizer: Any,
                 held_out_fraction: float, validation_fraction: float) -> None:
    number = len(manifest["groups"])
    dtype = token_dtype(tokenizer.vocab_size)
    ids = encoder.encode(group)
    entry: dict[str, Any] = {"first_document": first, "documents": len(group), "files": {}}
    for split in SPLITS:
        chosen = [tokens for index, tokens in enumerate(ids, start=first)
                  if split_of_document(index, held_out_fraction, validation_fraction) == split]
        stream = np.fromiter(itertools.chain.from_iterable([tokenizer.eos_id, *tokens] for tokens in chosen),
                             dtype=dtype, count=sum(len(tokens) + 1 for tokens in chosen))
        name = f"{split}-{number:05d}.bin"
        temporary = folder / f"{name}.tmp"
        stream.tofile(temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, folder / name)
        entry["files"][split] = {"name": name, "documents": len(chosen), "tokens": int(stream.size),
                                 "sha256": _sha256_file(folder / name)}
    manifest["groups"].append(entry)
    manifest["documents"] = first + len(group)
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")


# --- reading ----------------------------------------------------------------------------------------------


class ShardWindows:
    """The windows of W tokens of a split's shards, memory-mapped: rows are read from disk when indexed.

    Behaves like the [n, W] window tensor the trainer indexes (`shape`, `dim()`, `numel()`, indexing by a
    tensor of row numbers); each shard contributes its whole windows (its last partial window is dropped)."""

    def __init__(self, folder: str | os.PathLike, manifest: dict[str, Any], split: str, window: int):
        self.folder, self.window, self.split = Path(folder), window, split
        dtype = np.dtype(manifest["dtype"])
        self.maps = []
        for group in manifest["groups"]:
            part = group["files"][split]
            n_windows = part["tokens"] // window
            if n_windows:
                tokens = np.memmap(self.folder / part["name"], dtype=dtype, mode="r", shape=(part["tokens"],))
                self.maps.append(tokens[: n_windows * window].reshape(n_windows, window))
        self.starts = np.cumsum([0] + [m.shape[0] for m in self.maps])
        self._fingerprint = hashlib.sha256(json.dumps(
            [window, [group["files"][split]["sha256"] for group in manifest["groups"]]]).encode()).hexdigest()

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.starts[-1]), self.window)

    def dim(self) -> int:
        return 2

    def numel(self) -> int:
        return self.shape[0] * self.window

    def fingerprint(self) -> str:
        """What identifies the data (the shards' recorded sha256 and the window), without reading it."""
        return self._fingerprint

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> Tensor:
        rows = np.asarray(rows.cpu() if isinstance(rows, Tensor) else rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"window index out of range [0, {self.shape[0]})")
        shard = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((rows.size, self.window), dtype=np.int32)
        for number in np.unique(shard):
            picked = shard == number
            out[picked] = self.maps[number][rows[picked] - self.starts[number]]
        return torch.from_numpy(out)

    def load(self) -> Tensor:
        """All windows in memory, as int32 (for the small validation and held-out splits)."""
        if not self.maps:
            return torch.zeros((0, self.window), dtype=torch.int32)
        return torch.from_numpy(np.concatenate([np.asarray(m, dtype=np.int32) for m in self.maps]))


def iter_training_documents(documents: Iterator[str], held_out_fraction: float, validation_fraction: float,
                            limit: int) -> list[str]:
    """The first `limit` training-split documents of a stream (what a tokenizer is trained on)."""
    chosen = (text for index, text in enumerate(documents)
              if split_of_document(index, held_out_fraction, validation_fraction) == "train")
    return list(itertools.islice(chosen, limit))
