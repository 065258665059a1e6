"""Collect circuits: run a model over a corpus and record, per token and layer, its sparse code and context.

This is the collection step of seed 000, section 4 (figure 4): every token of every reference sequence
contributes one circuit per chosen layer, stored with the token, its sequence and position, the word's
category label when the corpus has one, a context excerpt with the token's character span in it, and the
model's top next-token predictions at that position. Rows stream to disk in shards (metadata as Parquet,
codes as .npy), so memory stays bounded by one shard whatever the corpus size.

Only the hooks that `model.sparse_codes` reads are cached (`model.sparse_code_hooks(layers)`), so
collection costs little more than a forward pass.

Shape letters: B batch, T position, K non-zeros per code, P top predictions.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Int

from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.atomic import atomic_write_text
from circuitlab.errors import UserError

SHARD_MANIFEST = "collection.json"
METADATA_COLUMNS = (
    "circuit_id",
    "sequence_id",
    "position",
    "token_id",
    "token",
    "category",
    "context",
    "token_start",
    "token_end",
    "top_prediction_ids",
    "top_predictions",
)


@dataclass
class CollectionStats:
    n_sequences: int = 0
    n_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else float("nan")


@dataclass
class Collection:
    """Collected circuits on disk: shards of metadata and per-layer codes, plus what made them.

    Read it with `metadata()` and `codes(layer)`, or turn it into a `CircuitDB` with `CircuitDB.from_collection`.
    """

    folder: Path
    layers: list[int]
    code_sizes: dict[int, int]
    shards: list[str]
    shard_rows: list[int]
    model_config_hash: str
    tokenizer_hash: str | None
    model_config: dict
    layer_layouts: dict[int, dict]
    stats: CollectionStats = field(default_factory=CollectionStats)

    @property
    def n_rows(self) -> int:
        return sum(self.shard_rows)

    def metadata(self):
        """All metadata rows as one pandas DataFrame (circuit_id = row number)."""
        import pandas as pd

        frames = [pd.read_parquet(self.folder / f"{shard}.parquet") for shard in self.shards]
        if not frames:
            return empty_metadata()
        return pd.concat(frames, ignore_index=True)

    def codes(self, layer: int, out: str | os.PathLike | None = None, value_dtype: str = "float32") -> CodeMatrix:
        """The codes of one layer, concatenated over shards (into memory maps under `out` when given)."""
        if layer not in self.code_sizes:
            raise KeyError(f"layer {layer} was not collected; collected layers: {self.layers}")
        parts = [
            (self.folder / f"{shard}.layer{layer}.indices.npy", self.folder / f"{shard}.layer{layer}.values.npy")
            for shard in self.shards
        ]
        if not parts:
            return CodeMatrix(np.zeros((0, 1), np.int32), np.zeros((0, 1), np.float32), self.code_sizes[layer])
        first_indices = np.load(parts[0][0], mmap_mode="r")
        nnz = first_indices.shape[1]
        if out is None:
            indices = np.concatenate([np.load(i) for i, _ in parts])
            values = np.concatenate([np.load(v).astype(value_dtype) for _, v in parts])
            return CodeMatrix(indices, values, self.code_sizes[layer], canonical=True)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        indices = np.lib.format.open_memmap(out / "indices.npy", mode="w+", dtype=np.int32, shape=(self.n_rows, nnz))
        values = np.lib.format.open_memmap(out / "values.npy", mode="w+", dtype=value_dtype, shape=(self.n_rows, nnz))
        start = 0
        for indices_path, values_path in parts:
            block = np.load(indices_path)
            indices[start : start + len(block)] = block
            values[start : start + len(block)] = np.load(values_path)
            start += len(block)
        indices.flush()
        values.flush()
        del indices, values
        return CodeMatrix(
            np.load(out / "indices.npy", mmap_mode="r"),
            np.load(out / "values.npy", mmap_mode="r"),
            self.code_sizes[layer],
            canonical=True,
        )

    def save_manifest(self) -> None:
        record = {
            "layers": self.layers,
            "code_sizes": {str(k): v for k, v in self.code_sizes.items()},
            "shards": self.shards,
            "shard_rows": self.shard_rows,
            "model_config_hash": self.model_config_hash,
            "tokenizer_hash": self.tokenizer_hash,
            "model_config": self.model_config,
            "layer_layouts": {str(k): v for k, v in self.layer_layouts.items()},
            "stats": {"n_sequences": self.stats.n_sequences, "n_tokens": self.stats.n_tokens, "seconds": self.stats.seconds},
        }
        atomic_write_text(self.folder / SHARD_MANIFEST, json.dumps(record, indent=1))

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "Collection":
        folder = Path(folder)
        path = folder / SHARD_MANIFEST
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: {folder} is not a circuit collection (run collect() first)")
        record = json.loads(path.read_text())
        return cls(
            folder=folder,
            layers=list(record["layers"]),
            code_sizes={int(k): int(v) for k, v in record["code_sizes"].items()},
            shards=list(record["shards"]),
            shard_rows=list(record["shard_rows"]),
            model_config_hash=record["model_config_hash"],
            tokenizer_hash=record["tokenizer_hash"],
            model_config=record["model_config"],
            layer_layouts={int(k): v for k, v in record["layer_layouts"].items()},
            stats=CollectionStats(**record["stats"]),
        )


def empty_metadata():
    import pandas as pd

    return pd.DataFrame({name: pd.Series(dtype=object) for name in METADATA_COLUMNS})


def layer_layout(model: Any, layer: int) -> dict:
    """What a layer's code indices mean, for usage statistics (sgatlin subkeys) and display: the layout the
    layer that writes the code declares."""
    return model.blocks[layer].ffn_code_layer.layout()


def _text_and_spans(item: Any) -> tuple[str, list | None]:
    if isinstance(item, str):
        return item, None
    text = getattr(item, "text", None)
    if not isinstance(text, str):
        raise TypeError(
            f"corpus items must be strings or labelled stories with .text and .spans; got {type(item).__name__}"
        )
    return text, getattr(item, "spans", None)


def _token_categories(text: str, offsets: Sequence[tuple[int, int]], spans: list | None) -> list[str | None]:
    if spans is None:
        return [None] * len(offsets)
    from circuitlab.data.stories import token_labels

    return list(token_labels(offsets, spans, text))


@dataclass
class _Window:
    sequence_id: int
    start: int
    token_ids: list[int]


@dataclass
class _Document:
    clean_text: str  # newlines as spaces (same length), so an excerpt prints on one line and spans stay valid
    offsets_Tx2: np.ndarray  # int64 character (start, end) of each token
    categories_T: np.ndarray  # object: the word's label per token, or None


class _TokenStrings:
    """Readable token strings by id, looked up once per id and then gathered with numpy."""

    def __init__(self, tokenizer: Any, size: int) -> None:
        self.tokenizer = tokenizer
        self.strings = np.empty(size, dtype=object)
        self.known = np.zeros(size, dtype=bool)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        needed = np.unique(ids)
        for token_id in needed[~self.known[needed]].tolist():
            self.strings[token_id] = self.tokenizer.token_str(token_id)
        self.known[needed] = True
        return self.strings[ids]


class _ShardWriter:
    def __init__(self, folder: Path, layers: list[int], value_dtype: str) -> None:
        self.folder = folder
        self.layers = layers
        self.value_dtype = value_dtype
        self.shards: list[str] = []
        self.shard_rows: list[int] = []
        self.n_written = 0
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, list[np.ndarray]] = {name: [] for name in METADATA_COLUMNS if name != "circuit_id"}
        self.codes: dict[int, list[CodeMatrix]] = {layer: [] for layer in self.layers}
        self.pending = 0

    def add(self, columns: dict[str, np.ndarray], codes: dict[int, CodeMatrix]) -> None:
        for name, values in columns.items():
            self.columns[name].append(values)
        for layer, matrix in codes.items():
            self.codes[layer].append(matrix)
        self.pending += len(columns["token_id"])

    def flush(self) -> None:
        if self.pending == 0:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = f"shard-{len(self.shards):05d}"
        column = {key: np.concatenate(parts) for key, parts in self.columns.items()}

        def lists(values_NxP: np.ndarray, kind) -> "pa.ListArray":
            n_rows, width = values_NxP.shape
            offsets = pa.array(np.arange(n_rows + 1, dtype=np.int32) * width)
            return pa.ListArray.from_arrays(offsets, pa.array(values_NxP.reshape(-1), kind))

        table = pa.table(
            {
                "circuit_id": pa.array(np.arange(self.n_written, self.n_written + self.pending), pa.int64()),
                "sequence_id": pa.array(column["sequence_id"], pa.int64()),
                "position": pa.array(column["position"], pa.int32()),
                "token_id": pa.array(column["token_id"], pa.int32()),
                "token": pa.array(column["token"], pa.string()),
                "category": pa.array(column["category"], pa.string()),
                "context": pa.array(column["context"], pa.string()),
                "token_start": pa.array(column["token_start"], pa.int32()),
                "token_end": pa.array(column["token_end"], pa.int32()),
                "top_prediction_ids": lists(column["top_prediction_ids"], pa.int32()),
                "top_predictions": lists(column["top_predictions"], pa.string()),
            }
        )
        pq.write_table(table, self.folder / f"{name}.parquet")
        for layer in self.layers:
            matrix = CodeMatrix.concatenate(self.codes[layer])
            np.save(self.folder / f"{name}.layer{layer}.indices.npy", matrix.indices)
            np.save(self.folder / f"{name}.layer{layer}.values.npy", matrix.values.astype(self.value_dtype))
        self.shards.append(name)
        self.shard_rows.append(self.pending)
        self.n_written += self.pending
        self._reset()


def _windows(document_id: int, token_ids: list[int], window: int) -> Iterator[_Window]:
    for start in range(0, len(token_ids), window):
        yield _Window(document_id, start, token_ids[start : start + window])


def collect(
    model: Any,
    corpus: Iterable[Any],
    layers: Sequence[int] | None = None,
    *,
    out_dir: str | os.PathLike,
    tokenizer: Any = None,
    batch_size: int = 16,
    window: int | None = None,
    context_before: int = 6,
    context_after: int = 5,
    n_predictions: int = 5,
    shard_rows: int = 65536,
    value_dtype: str = "float32",
    progress: bool = True,
) -> Collection:
    """Run `model` over `corpus` and stream every token's circuits to shards under `out_dir`.

    corpus: strings, or labelled stories (objects with `.text` and `.spans` of (start, end, label), as
        `circuitlab.data` makes them); a token's `category` is the label of the word it came from
        (`circuitlab.data.stories.token_labels`: "SPACE" for whitespace-only tokens), None for plain strings.
    layers: the layers to record (None = every layer).
    window: tokens per forward pass (default the model's context); longer texts are split into windows,
        each run without the previous window's context, positions counted from the start of the text.
    context_before / context_after: tokens of context around each token in its excerpt (taken from the
        whole text, not only the window).
    The model runs where its parameters are (CPU or GPU), in inference mode.
    """
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise UserError("collecting circuits needs a tokenizer: pass tokenizer=..., or use a model that carries one")
    if hasattr(tokenizer, "check_model_vocab"):
        tokenizer.check_model_vocab(model.config.d_vocab)
    n_layers = model.config.n_layers
    layers = list(range(n_layers)) if layers is None else sorted({int(layer) for layer in layers})
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise UserError(f"layers {bad} do not exist: the model has layers 0..{n_layers - 1}")
    if batch_size < 1:
        raise UserError(f"batch_size must be at least 1, got {batch_size}")
    window = window or model.config.n_ctx
    if not 0 < window <= model.config.n_ctx:
        raise UserError(f"window must lie in (0, n_ctx={model.config.n_ctx}], got {window}")

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    hooks = model.sparse_code_hooks(layers)
    device = next(model.parameters()).device
    pad_id = int(getattr(tokenizer, "eos_id", 0) or 0)
    token_strings = _TokenStrings(tokenizer, model.config.d_vocab)

    writer = _ShardWriter(folder, layers, value_dtype)
    code_sizes: dict[int, int] = {}
    documents: dict[int, _Document] = {}
    pending: list[_Window] = []
    stats = CollectionStats()
    started = time.perf_counter()

    def run_batch(batch: list[_Window]) -> None:
        lengths = np.array([len(w.token_ids) for w in batch])
        width = int(lengths.max())
        tokens_np = np.full((len(batch), width), pad_id, dtype=np.int64)
        valid_np = np.arange(width)[None, :] < lengths[:, None]
        tokens_np[valid_np] = np.concatenate([w.token_ids for w in batch])
        with torch.inference_mode():
            logits, cache = model.run_with_cache(torch.from_numpy(tokens_np).to(device), names_filter=hooks)
            codes = model.sparse_codes(cache, layers)
            top_ids = logits.topk(n_predictions, dim=-1).indices.to("cpu")
        valid = torch.from_numpy(valid_np)
        batch_codes = {}
        for layer, code in codes.items():
            code_sizes[layer] = code.size
            batch_codes[layer] = CodeMatrix(
                code.indices.to("cpu")[valid].numpy(), code.values.to("cpu").float()[valid].numpy(), code.size,
                value_dtype=value_dtype,
            )
        columns = _metadata_columns(
            batch, documents, tokens_np[valid_np], top_ids[valid].numpy(), token_strings, context_before, context_after
        )
        writer.add(columns, batch_codes)
        stats.n_tokens += int(lengths.sum())

    from tqdm.auto import tqdm

    total = len(corpus) if hasattr(corpus, "__len__") else None
    for document_id, item in enumerate(tqdm(corpus, total=total, desc="collect circuits", unit="text", disable=not progress)):
        text, spans = _text_and_spans(item)
        token_ids, offsets = tokenizer.encode_with_offsets(text)
        if not token_ids:
            continue
        documents[document_id] = _Document(
            text.replace("\n", " ").replace("\r", " "),
            np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
            np.array(_token_categories(text, offsets, spans) + [None], dtype=object)[:-1],
        )
        stats.n_sequences += 1
        for piece in _windows(document_id, list(token_ids), window):
            pending.append(piece)
            if len(pending) == batch_size:
                run_batch(pending)
                pending = []
                if writer.pending >= shard_rows:
                    writer.flush()
                _forget_finished(documents, document_id)
    if pending:
        run_batch(pending)
    writer.flush()
    stats.seconds = time.perf_counter() - started

    if not code_sizes:
        code_sizes = _code_sizes_without_data(model, layers)
    collection = Collection(
        folder=folder,
        layers=layers,
        code_sizes=code_sizes,
        shards=writer.shards,
        shard_rows=writer.shard_rows,
        model_config_hash=model.config.hash(),
        tokenizer_hash=tokenizer.hash() if hasattr(tokenizer, "hash") else None,
        model_config=model.config.to_dict(),
        layer_layouts={layer: layer_layout(model, layer) for layer in layers},
        stats=stats,
    )
    collection.save_manifest()
    return collection


def _forget_finished(documents: dict[int, _Document], current: int) -> None:
    for document_id in [d for d in documents if d < current]:
        del documents[document_id]


def _code_sizes_without_data(model: Any, layers: list[int]) -> dict[int, int]:
    tokens = torch.zeros((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens, names_filter=model.sparse_code_hooks(layers))
        return {layer: code.size for layer, code in model.sparse_codes(cache, layers).items()}


def _metadata_columns(
    batch: list[_Window],
    documents: dict[int, _Document],
    token_ids_N: Int[np.ndarray, " n"],
    top_ids_NxP: Int[np.ndarray, "n n_predictions"],
    token_strings: _TokenStrings,
    context_before: int,
    context_after: int,
) -> dict[str, np.ndarray]:
    """The metadata of a batch's tokens (N of them, windows in order), as numpy columns: positions, excerpt
    bounds and spans by array arithmetic per window; strings gathered from a per-id table; the excerpts cut
    by one comprehension of slices per window."""
    sequence_ids, positions, categories, contexts, token_starts, token_ends = [], [], [], [], [], []
    for piece in batch:
        document = documents[piece.sequence_id]
        n_tokens = len(document.offsets_Tx2)
        position_T = np.arange(piece.start, piece.start + len(piece.token_ids))
        excerpt_start_T = document.offsets_Tx2[np.maximum(position_T - context_before, 0), 0]
        excerpt_end_T = document.offsets_Tx2[np.minimum(position_T + context_after, n_tokens - 1), 1]
        text = document.clean_text
        contexts.append([text[a:b] for a, b in zip(excerpt_start_T.tolist(), excerpt_end_T.tolist())])
        sequence_ids.append(np.full(len(position_T), piece.sequence_id, dtype=np.int64))
        positions.append(position_T)
        categories.append(document.categories_T[position_T])
        token_starts.append(document.offsets_Tx2[position_T, 0] - excerpt_start_T)
        token_ends.append(document.offsets_Tx2[position_T, 1] - excerpt_start_T)
    context_N = np.empty(len(token_ids_N), dtype=object)
    context_N[:] = [excerpt for window in contexts for excerpt in window]
    return {
        "sequence_id": np.concatenate(sequence_ids),
        "position": np.concatenate(positions),
        "token_id": token_ids_N,
        "token": token_strings(token_ids_N),
        "category": np.concatenate(categories),
        "context": context_N,
        "token_start": np.concatenate(token_starts),
        "token_end": np.concatenate(token_ends),
        "top_prediction_ids": top_ids_NxP,
        "top_predictions": token_strings(top_ids_NxP),
    }
