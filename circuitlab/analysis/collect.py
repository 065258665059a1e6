"""Collect circuits: run a model over a corpus and record, per token and layer, its sparse code and context.

This is the collection step of seed 000, section 4 (figure 4): every token of every reference sequence
contributes one circuit per chosen layer, stored with the token, its sequence and position, the word's
category label when the corpus has one, a context excerpt with the token's character span in it, and the
model's top next-token predictions at that position. Rows stream into the shards of a circuit database
(circuitdb/collection.py): every `shard_rows` rows are written and committed with how far the corpus was
read, so memory holds one shard whatever the corpus size, a killed run leaves the database of its committed
shards, `resume=True` carries on after them, and `append=True` adds another corpus to a database.

Only the hooks that `model.sparse_codes` reads are cached (`model.sparse_code_hooks(layers)`), so
collection costs little more than a forward pass.

Shape letters: B batch, T position, K non-zeros per code, P top predictions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Int

from circuitlab.analysis.circuitdb.collection import (
    METADATA_COLUMNS,
    Collection,
    CollectionStats,
    ShardBuffer,
    digest_text,
    identity_of,
    start_source,
    texts_digest,
)
from circuitlab.analysis.circuitdb.errors import CircuitDBError
from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.errors import UserError

__all__ = ["METADATA_COLUMNS", "Collection", "CollectionStats", "collect", "layer_layout"]


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
    resume: bool = False,
    append: bool = False,
    replace: bool = False,
    description: str = "corpus",
    model_source: str | None = None,
    progress: bool = True,
) -> Collection:
    """Run `model` over `corpus` and stream every token's circuits into the shards of a database at `out_dir`.

    corpus: strings, or labelled stories (objects with `.text` and `.spans` of (start, end, label), as
        `circuitlab.data` makes them); a token's `category` is the label of the word it came from
        (`circuitlab.data.stories.token_labels`: "SPACE" for whitespace-only tokens), None for plain strings.
    layers: the layers to record (None = every layer).
    window: tokens per forward pass (default the model's context); longer texts are split into windows,
        each run without the previous window's context, positions counted from the start of the text.
    context_before / context_after: tokens of context around each token in its excerpt (taken from the
        whole text, not only the window).
    shard_rows: rows per shard; a shard is written and committed once this many rows wait (a shard may end
        inside a text).
    resume: `out_dir` holds an interrupted collection of this corpus: skip what its committed shards hold
        (the corpus is checked against the manifest's digest of the texts read) and carry on.
    append: add this corpus to the database at `out_dir` (same model and layers), sequence ids after its own.
    replace: write a new database over the one at `out_dir`, which stays whole until the new one is complete
        (no resume then: a killed run leaves the previous database).
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
    if batch_size < 1 or shard_rows < 1:
        raise UserError(f"batch_size and shard_rows must be at least 1, got {batch_size} and {shard_rows}")
    window = window or model.config.n_ctx
    if not 0 < window <= model.config.n_ctx:
        raise UserError(f"window must lie in (0, n_ctx={model.config.n_ctx}], got {window}")

    folder = Path(out_dir)
    settings = {"window": window, "context_before": context_before, "context_after": context_after,
                "n_predictions": n_predictions, "value_dtype": value_dtype}
    identity = identity_of(model, tokenizer, layers, model_source)
    appender, sources, stats, start = start_source(folder, identity, description, settings, resume=resume,
                                                   append=append, replace=replace)
    try:
        if start is None or not start.get("complete"):
            run = _Run(model, tokenizer, layers, window, context_before, context_after, n_predictions, value_dtype,
                       batch_size, shard_rows, ShardBuffer(appender, identity, sources, stats))
            run.over(corpus, start, progress)
        written = appender.manifest is not None
        appender.finish()
    finally:
        appender.close()
    if not written:
        raise UserError("the corpus gave no tokens: there are no circuits to collect")
    return Collection.open(folder)


class _Run:
    """One collection run: windows batched through the model, rows into the shard buffer, commits with the
    place in the corpus where the next run would start."""

    def __init__(self, model, tokenizer, layers, window, context_before, context_after, n_predictions, value_dtype,
                 batch_size, shard_rows, buffer: ShardBuffer) -> None:
        self.model, self.tokenizer, self.layers, self.window = model, tokenizer, layers, window
        self.context_before, self.context_after, self.n_predictions = context_before, context_after, n_predictions
        self.value_dtype, self.batch_size, self.shard_rows, self.buffer = value_dtype, batch_size, shard_rows, buffer
        self.hooks = model.sparse_code_hooks(layers)
        self.device = next(model.parameters()).device
        self.pad_id = int(getattr(tokenizer, "eos_id", 0) or 0)
        self.token_strings = _TokenStrings(tokenizer, model.config.d_vocab)
        self.layouts = {layer: layer_layout(model, layer) for layer in layers}
        self.documents: dict[int, _Document] = {}
        self.source = buffer.sources[-1]
        self.digest = texts_digest()
        self.resume_point = (0, 0)  # (text, token position) after the last window run

    def over(self, corpus: Iterable[Any], start: dict | None, progress: bool) -> None:
        """Collect `corpus`, skipping what a previous run committed (`start`: its texts_done, position and
        digest of the texts it read)."""
        from tqdm.auto import tqdm

        first_text, first_position = (start["texts_done"], start["position"]) if start else (0, 0)
        hashed_before = first_text + (1 if first_position else 0)  # texts the previous run's digest covers
        pending: list[_Window] = []
        total = len(corpus) if hasattr(corpus, "__len__") else getattr(corpus, "n_texts", None)
        n_items = 0
        for index, item in enumerate(tqdm(corpus, total=total, desc="collect circuits", unit="text", disable=not progress)):
            n_items = index + 1
            text, spans = _text_and_spans(item)
            digest_text(self.digest, text)
            if index + 1 == hashed_before:
                self._check_digest(start)
            if index < first_text:
                continue
            skip = first_position if index == first_text else 0
            token_ids, offsets = self.tokenizer.encode_with_offsets(text)
            if not token_ids:
                continue
            sequence = self.source["first_sequence_id"] + index
            self.documents[sequence] = _Document(
                text.replace("\n", " ").replace("\r", " "),
                np.asarray(offsets, dtype=np.int64).reshape(-1, 2),
                np.array(_token_categories(text, offsets, spans) + [None], dtype=object)[:-1],
            )
            if skip == 0:
                self.buffer.stats.n_sequences += 1
            for piece in _windows(sequence, list(token_ids), self.window):
                if piece.start < skip:
                    continue
                pending.append(piece)
                if len(pending) == self.batch_size:
                    self._run_batch(pending)
                    pending = []
                    if self.buffer.pending >= self.shard_rows:
                        self._commit()
                    _forget_finished(self.documents, sequence)
        if n_items < hashed_before:
            raise CircuitDBError(
                f"the corpus has {n_items} texts but the interrupted collection had read {hashed_before}: resume "
                "with the same corpus, or collect into a new folder"
            )
        if pending:
            self._run_batch(pending)
        self.resume_point = (max(n_items, first_text), 0)
        self.source["complete"] = True
        self._commit()

    def _check_digest(self, start: dict) -> None:
        if self.digest.hexdigest() != start["texts_sha256"]:
            raise CircuitDBError(
                f"the corpus differs from the one this database was being collected from (its first "
                f"{start['texts_done'] + (1 if start['position'] else 0)} texts do not match the manifest's digest): "
                "resume with the same corpus, or collect into a new folder"
            )

    def _commit(self) -> None:
        # commits come right after a batch of the text being read (or at the end), so the digest covers
        # exactly the texts up to the resume point
        text, position = self.resume_point
        self.buffer.commit({"texts_done": text, "position": position, "texts_sha256": self.digest.hexdigest()})

    def _run_batch(self, batch: list[_Window]) -> None:
        lengths = np.array([len(w.token_ids) for w in batch])
        width = int(lengths.max())
        tokens_np = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        valid_np = np.arange(width)[None, :] < lengths[:, None]
        tokens_np[valid_np] = np.concatenate([w.token_ids for w in batch])
        with torch.inference_mode():
            logits, cache = self.model.run_with_cache(torch.from_numpy(tokens_np).to(self.device), names_filter=self.hooks)
            codes = self.model.sparse_codes(cache, self.layers)
            top_ids = logits.topk(self.n_predictions, dim=-1).indices.to("cpu")
        valid = torch.from_numpy(valid_np)
        batch_codes = {
            layer: CodeMatrix(code.indices.to("cpu")[valid].numpy(), code.values.to("cpu").float()[valid].numpy(),
                              code.size, value_dtype=self.value_dtype)
            for layer, code in codes.items()
        }
        columns = _metadata_columns(batch, self.documents, tokens_np[valid_np], top_ids[valid].numpy(),
                                    self.token_strings, self.context_before, self.context_after)
        self.buffer.add(columns, batch_codes, self.layouts)
        last = batch[-1]
        end = last.start + len(last.token_ids)
        text = last.sequence_id - self.source["first_sequence_id"]
        n_total = len(self.documents[last.sequence_id].offsets_Tx2)
        self.resume_point = (text, end) if end < n_total else (text + 1, 0)


def _forget_finished(documents: dict[int, _Document], current: int) -> None:
    for document_id in [d for d in documents if d < current]:
        del documents[document_id]


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
