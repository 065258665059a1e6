"""Collected circuits on disk: rows buffered until they fill a shard, each shard committed to a database
folder (circuitdb/store.py) with how far the corpus was read, and `Collection`, the folder seen as tables.

A collection is a circuit database: `collect` writes its shards as it runs, so a killed run leaves the
database of its committed shards, and a later run resumes after them (`SourceProgress` in the manifest says
where) or appends another corpus. Only the rows of one shard are held in memory.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from circuitlab.analysis.circuitdb.errors import CircuitDBError
from circuitlab.analysis.circuitdb.manifest import FORMAT_NAME, FORMAT_VERSION, read_manifest
from circuitlab.analysis.circuitdb.shards import StoredShards
from circuitlab.analysis.circuitdb.store import ShardAppender
from circuitlab.analysis.codeindex import CodeMatrix

METADATA_COLUMNS = (
    "circuit_id", "sequence_id", "position", "token_id", "token", "category", "context", "token_start",
    "token_end", "top_prediction_ids", "top_predictions",
)


@dataclass
class CollectionStats:
    n_sequences: int = 0
    n_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else float("nan")


class Collection:
    """The circuits `collect` wrote to `folder` (a circuit database): `metadata()`, `codes(layer)`, what made
    them, and how far each corpus was read. `CircuitDB.open(folder)` searches them."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        self.manifest = manifest
        self.table = StoredShards(self.folder, manifest, verify=False)
        self.layers = list(manifest.layers)
        self.code_sizes = {layer: manifest.layer_info[str(layer)].code_size for layer in self.layers}
        self.shard_rows = manifest.rows_per_shard
        self.shards = [f"shard-{shard:05d}" for shard in range(len(self.shard_rows))]
        self.model_config_hash = manifest.model_config_hash
        self.tokenizer_hash = manifest.tokenizer_hash
        self.model_config = manifest.model_config_ or {}
        self.layer_layouts = {layer: manifest.layer_info[str(layer)].layout for layer in self.layers}
        corpus = manifest.corpus
        self.stats = CollectionStats(corpus.get("n_sequences", 0), corpus.get("n_tokens", 0), corpus.get("collection_seconds", 0.0))
        self.sources = list(manifest.collection or [])

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "Collection":
        return cls(folder)

    @property
    def n_rows(self) -> int:
        return self.table.n_rows

    def metadata(self):
        """All metadata rows as one pandas DataFrame (circuit_id = row number)."""
        return self.table.whole_metadata()

    def codes(self, layer: int, out: str | os.PathLike | None = None, value_dtype: str | None = None) -> CodeMatrix:
        """The codes of one layer over every shard (copied shard by shard into memory maps under `out` when given)."""
        if layer not in self.code_sizes:
            raise KeyError(f"layer {layer} was not collected; collected layers: {self.layers}")
        if out is None:
            matrix = self.table.whole_layer(layer)
            return matrix if value_dtype is None else CodeMatrix(matrix.indices, matrix.values, matrix.size,
                                                                 canonical=True, value_dtype=value_dtype)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        size, nnz, stored_dtype = self.table.layer_info(layer)
        dtype = value_dtype or stored_dtype
        indices = np.lib.format.open_memmap(out / "indices.npy", mode="w+", dtype=np.int32, shape=(self.n_rows, nnz))
        values = np.lib.format.open_memmap(out / "values.npy", mode="w+", dtype=dtype, shape=(self.n_rows, nnz))
        for shard in range(self.table.n_shards):
            start, stop = self.table.rows_of(shard)
            matrix = self.table.matrix(layer, shard)
            indices[start:stop] = matrix.indices
            values[start:stop] = matrix.values
        indices.flush()
        values.flush()
        del indices, values
        return CodeMatrix(np.load(out / "indices.npy", mmap_mode="r"), np.load(out / "values.npy", mmap_mode="r"),
                          size, canonical=True)


class ShardBuffer:
    """Rows waiting for their shard; `commit` writes them as one shard with the collection's progress."""

    def __init__(self, appender: ShardAppender, identity: dict, sources: list[dict], stats: CollectionStats) -> None:
        self.appender = appender
        self.identity = identity  # model hashes, config, source, layers
        self.sources = sources  # every corpus collected into this database; the last one is being read
        self.stats = stats
        committed = appender.manifest
        self.layer_info: dict[str, dict] = {} if committed is None else {
            layer: dict(info.model_dump(), index=None) for layer, info in committed.layer_info.items()
        }
        self.columns: dict[str, list[np.ndarray]] = {}
        self.codes: dict[int, list[CodeMatrix]] = {}
        self.pending = 0
        self.started = time.perf_counter()

    @property
    def committed_rows(self) -> int:
        return self.appender.n_rows

    def add(self, columns: Mapping[str, np.ndarray], codes: Mapping[int, CodeMatrix], layouts: Mapping[int, dict]) -> None:
        for name, values in columns.items():
            self.columns.setdefault(name, []).append(values)
        for layer, matrix in codes.items():
            self.codes.setdefault(layer, []).append(matrix)
            self.layer_info.setdefault(str(layer), {
                "code_size": matrix.size, "nnz": matrix.nnz, "value_dtype": str(matrix.values.dtype),
                "layout": layouts[layer], "index": None,
            })
        self.pending += len(columns["token_id"])

    def fields(self) -> dict:
        elapsed = time.perf_counter() - self.started
        corpus = {"n_sequences": self.stats.n_sequences, "n_tokens": self.committed_rows + self.pending,
                  "collection_seconds": round(self.stats.seconds + elapsed, 3)}
        return dict(self.identity, format=FORMAT_NAME, format_version=FORMAT_VERSION, corpus=corpus,
                    layer_info=self.layer_info, collection=self.sources)

    def commit(self, progress: dict) -> None:
        """Write the buffered rows as a shard, recording `progress` (texts_done, position, texts_sha256) in the
        current source; with nothing buffered, record the progress only."""
        self.sources[-1].update(progress)
        if self.pending == 0:
            self.appender.update(dict(self.fields(), n_circuits=self.committed_rows))
            return
        table = _metadata_table(self.columns, self.committed_rows, self.pending)
        codes = {layer: CodeMatrix.concatenate(parts) for layer, parts in self.codes.items()}
        self.appender.append(table, codes, self.fields())
        self.columns, self.codes, self.pending = {}, {}, 0


def _metadata_table(columns: dict[str, list[np.ndarray]], first_id: int, n_rows: int):
    import pyarrow as pa

    column = {key: np.concatenate(parts) for key, parts in columns.items()}

    def lists(values_NxP: np.ndarray, kind) -> "pa.ListArray":
        count, width = values_NxP.shape
        offsets = pa.array(np.arange(count + 1, dtype=np.int32) * width)
        return pa.ListArray.from_arrays(offsets, pa.array(values_NxP.reshape(-1), kind))

    return pa.table({
        "circuit_id": pa.array(np.arange(first_id, first_id + n_rows), pa.int64()),
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
    })


def texts_digest():
    """The running sha256 of a source's texts (`digest_text` adds one)."""
    return hashlib.sha256()


def digest_text(digest, text: str) -> None:
    """Add one corpus item to the running digest of a source (length first, so items cannot run together)."""
    data = text.encode("utf-8", "surrogatepass")
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)


def start_source(folder: Path, identity: dict, description: str, settings: dict, *, resume: bool, append: bool,
                 replace: bool) -> tuple[ShardAppender, list[dict], CollectionStats, dict | None]:
    """Open `folder` for collection: a new database (or, with `replace`, one that replaces the folder's when
    it is complete), the unfinished source of an existing one (resume), or a new source after its last
    (append). Returns the appender, the sources (the last one is collected now), the statistics so far, and
    where to resume (None: from the first text)."""
    appender = ShardAppender(folder, replace=replace)
    try:
        manifest = appender.manifest
        if manifest is None:
            sources = [_new_source(description, 0, settings)]
            return appender, sources, CollectionStats(), None
        if not (resume or append):
            raise CircuitDBError(
                f"{folder} already holds a circuit database ({manifest.n_circuits} circuits): pass resume=True "
                "(--resume) to finish an interrupted collection, append=True (--append) to add another corpus, "
                "or choose a new folder"
            )
        _check_same_model(folder, manifest, identity)
        sources = [source.model_dump() for source in manifest.collection or []]
        corpus = manifest.corpus
        stats = CollectionStats(corpus.get("n_sequences", 0), manifest.n_circuits, corpus.get("collection_seconds", 0.0))
        last = sources[-1] if sources else None
        if resume and last is not None and not last["complete"]:
            if last["settings"] != settings:
                raise CircuitDBError(
                    f"{folder} was being collected with {last['settings']}, not {settings}: resume with the same "
                    "options (or collect into a new folder)"
                )
            return appender, sources, stats, last
        if resume and not append:
            return appender, sources, stats, {"complete": True}
        first = (last["first_sequence_id"] + last["texts_done"] + (1 if last["position"] else 0)) if last else int(
            _sequence_count(manifest, folder))
        sources.append(_new_source(description, first, settings))
        return appender, sources, stats, None
    except BaseException:
        appender.close()
        raise


def _new_source(description: str, first_sequence_id: int, settings: dict) -> dict:
    return {"description": description, "texts_done": 0, "position": 0, "first_sequence_id": first_sequence_id,
            "texts_sha256": texts_digest().hexdigest(), "complete": False, "settings": settings}


def _sequence_count(manifest, folder: Path) -> int:
    """One past the largest sequence id of a database saved without collection records."""
    table = StoredShards(folder, manifest, verify=False)
    last = table.metadata(table.n_shards - 1)["sequence_id"]
    return int(last.max()) + 1 if len(last) else 0


def _check_same_model(folder: Path, manifest, identity: dict) -> None:
    theirs = (manifest.model_config_hash, manifest.tokenizer_hash, list(manifest.layers))
    ours = (identity["model_config_hash"], identity["tokenizer_hash"], list(identity["layers"]))
    if theirs != ours:
        raise CircuitDBError(
            f"{folder} holds circuits of another model, tokenizer or layers (config hash "
            f"{str(theirs[0])[:12]}, layers {theirs[2]}) than this collection (config hash {str(ours[0])[:12]}, "
            f"layers {ours[2]}): collect into a new folder"
        )


def identity_of(model: Any, tokenizer: Any, layers: list[int], model_source: str | None) -> dict:
    return {
        "model_config_hash": model.config.hash(),
        "tokenizer_hash": tokenizer.hash() if hasattr(tokenizer, "hash") else None,
        "model_config": model.config.to_dict(),
        "model_source": model_source,
        "layers": layers,
    }
