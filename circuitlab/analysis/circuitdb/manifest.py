"""A circuit database's manifest (manifest.json) and the names of its files.

On disk a database is a folder:

    manifest.json                         format name and version, model config hash, tokenizer hash and
                                          source (the model id), layers, counts, rows per shard, index
                                          settings and measured recall, collection progress, and the sha256
                                          and size of every data file; it names the data folder below and
                                          is the commit point of every write
    data-<stamp>/metadata.parquet         shard 0: one row per token (circuit_id = row number)
    data-<stamp>/layer<l>.indices.npy     shard 0: int32 [rows, nnz], sorted per row
    data-<stamp>/layer<l>.values.npy      shard 0: float32 or float16 [rows, nnz]
    data-<stamp>/s00001.metadata.parquet  shard 1, and so on: s<shard>.<name> for every shard after the first
    data-<stamp>/layer<l>.sketch.faiss    the FAISS index of layer l over all shards, when built
    .save.lock                            the folder's lock (filelock): one writer at a time

A layer's codes are compressed sparse rows with a fixed row length: row r holds `nnz` (index, value) pairs,
so its entries start at r * nnz and the row pointer is not stored. Every array is a plain .npy file, read as a
memory map. A database written before shards existed is a one-shard database of this layout (no
`shard_rows`), so it is read as it is.

Shape letters: R rows of a shard, K non-zeros per code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from circuitlab.analysis.circuitdb.errors import CircuitDBError, CorruptDatabaseError

FORMAT_NAME = "circuitlab.circuitdb"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK = ".save.lock"
DATA_PREFIX = "data-"
METADATA_FILE = "metadata.parquet"


def shard_file(shard: int, name: str) -> str:
    """The file name of `name` (metadata.parquet, layer<l>.indices.npy, ...) in shard `shard`."""
    return name if shard == 0 else f"s{shard:05d}.{name}"


def code_file(shard: int, layer: int, part: str) -> str:
    return shard_file(shard, f"layer{layer}.{part}.npy")


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name


class FileRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str
    bytes: int


class LayerInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code_size: int
    nnz: int
    value_dtype: Literal["float32", "float16"]
    layout: dict[str, Any] = {}
    index: dict[str, Any] | None = None  # kind, params, sketch, build seconds, measured recall


class SourceProgress(BaseModel):
    """How far `circuitlab collect` got through one corpus: where a resumed run starts again."""

    model_config = ConfigDict(extra="forbid")
    description: str
    texts_done: int  # corpus items whose every token is in a committed shard
    position: int = 0  # tokens of item `texts_done` already committed (a shard may end inside a text)
    first_sequence_id: int  # the sequence id of the corpus's first item
    texts_sha256: str  # over the items read so far (`texts_done`, and the partial one): resume checks it
    complete: bool = False
    settings: dict[str, Any] = {}  # the collection's options (a resumed run must use the same)


class ManifestV1(BaseModel):
    """manifest.json of format circuitlab.circuitdb, version 1."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    format: Literal["circuitlab.circuitdb"]
    format_version: Literal[1]
    model_config_hash: str | None
    tokenizer_hash: str | None
    model_config_: dict[str, Any] | None = None
    model_source: str | None = None
    layers: list[int]
    n_circuits: int
    corpus: dict[str, Any] = {}
    layer_info: dict[str, LayerInfo]
    data_dir: str
    files: dict[str, FileRecord]
    saved: str | None = None
    shard_rows: list[int] | None = None  # rows of each shard; absent: one shard of n_circuits rows
    collection: list[SourceProgress] | None = None

    @field_validator("data_dir")
    @classmethod
    def _inside_the_folder(cls, name: str) -> str:
        # the manifest may only name files inside this folder's own data folder
        if not name.startswith(DATA_PREFIX) or not _plain_name(name):
            raise ValueError(f"data_dir {name!r} names a place outside the database folder")
        return name

    @field_validator("files")
    @classmethod
    def _plain_file_names(cls, files: dict) -> dict:
        outside = [name for name in files if not _plain_name(name)]
        if outside:
            raise ValueError(f"files {outside} lie outside the database folder")
        return files

    @property
    def rows_per_shard(self) -> list[int]:
        return list(self.shard_rows) if self.shard_rows is not None else [self.n_circuits]

    def check_shards(self, path: Path) -> None:
        """Every shard's files are listed and the shard rows add up (a writer bug or a hand-edited manifest)."""
        rows = self.rows_per_shard
        problem = None
        if sum(rows) != self.n_circuits or any(n < 0 for n in rows):
            problem = f"its shards hold {sum(rows)} rows, not n_circuits {self.n_circuits}"
        missing = [
            name for shard in range(len(rows)) for name in
            [shard_file(shard, METADATA_FILE)] + [code_file(shard, layer, part) for layer in self.layers for part in ("indices", "values")]
            if name not in self.files
        ]
        if missing:
            problem = f"it lists no record of {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
        unknown = [layer for layer in self.layers if str(layer) not in self.layer_info]
        if unknown:
            problem = f"it lists layer {unknown[0]} but has no layer_info for it"
        if problem:
            raise CorruptDatabaseError(f"{path} is inconsistent: {problem}; rebuild the database")

    @classmethod
    def from_json(cls, raw: dict) -> "ManifestV1":
        # "model_config" is pydantic's own attribute name, so the field is stored under an alias.
        data = dict(raw)
        if "model_config" in data:
            data["model_config_"] = data.pop("model_config")
        return cls.model_validate(data)

    def to_json(self) -> dict:
        data = self.model_dump(mode="json", exclude_none=False)
        data["model_config"] = data.pop("model_config_")
        for optional in ("shard_rows", "collection"):
            if data[optional] is None:
                del data[optional]  # a one-shard database keeps the layout of databases from before shards
        return data


def describe(db: Any) -> dict:
    """A database's manifest entries but its files and shards: format, model, layers, counts, indexes."""
    table = db.shard_table
    layer_info = {}
    for layer in db.layers:
        size, nnz, value_dtype = table.layer_info(layer)
        layer_info[str(layer)] = {
            "code_size": size, "nnz": nnz, "value_dtype": value_dtype, "layout": db.layer_layouts.get(layer, {}),
            "index": db.index_reports.get(layer) if layer in db.indexes else None,
        }
    return {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model_config_hash": db.model_config_hash,
        "tokenizer_hash": db.tokenizer_hash, "model_config": db.model_config, "model_source": db.model_source,
        "layers": db.layers, "n_circuits": len(db), "corpus": db.corpus_stats, "layer_info": layer_info,
    }


def read_manifest(folder: Path) -> ManifestV1:
    """The validated manifest of a saved database, or an error that names what is wrong with it."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise FileNotFoundError(f"no circuit database at {folder}: the folder does not exist")
    if not path.exists():
        partial = sorted(p.name for p in folder.glob(f"{DATA_PREFIX}*"))
        hint = f" (it holds {', '.join(partial)}: a save that never finished)" if partial else ""
        raise CorruptDatabaseError(f"{path} not found: {folder} is not a saved circuit database{hint}")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptDatabaseError(f"{path} is not valid JSON ({error}); rebuild the database") from error
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise CorruptDatabaseError(f"{path} is not a circuit database manifest (format {found!r})")
    if raw.get("format_version") != FORMAT_VERSION:
        raise CircuitDBError(
            f"{path} has format version {raw.get('format_version')}, this circuitlab reads version "
            f"{FORMAT_VERSION}; rebuild the database with this version"
        )
    try:
        manifest = ManifestV1.from_json(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'manifest'}: {item['msg']}" for item in error.errors()
        )
        raise CorruptDatabaseError(
            f"{path} is not a valid {FORMAT_NAME} version {FORMAT_VERSION} manifest ({problems}); rebuild the database"
        ) from None
    manifest.check_shards(path)
    return manifest
