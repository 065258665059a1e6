"""Saving and loading a circuit database: the folder layout, its manifest, the save lock.

On disk a database is a folder:

    manifest.json              format name and version, model config hash, tokenizer hash, layers, counts,
                               index settings and measured recall, and the sha256 and size of every data
                               file; it names the data folder below and is the commit point of a save
    data-<stamp>/metadata.parquet        one row per token (circuit_id = row number)
    data-<stamp>/layer<l>.indices.npy    int32 [circuits, nnz], sorted per row
    data-<stamp>/layer<l>.values.npy     float32 or float16 [circuits, nnz]
    data-<stamp>/layer<l>.sketch.faiss   the approximate index of layer l, when built
    .save.lock                           the folder's lock (filelock): one saver at a time

A save writes a new data folder, then replaces manifest.json atomically, then deletes the old data folder:
a crash at any point leaves a manifest that names a complete data folder. Data folders no manifest names
(an interrupted save) are removed by the next save, or by a load when no save holds the lock.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from circuitlab.analysis.codeindex import ApproximateIndex, CodeMatrix, SketchSpec
from circuitlab.analysis.dberrors import CircuitDBError, CorruptDatabaseError
from circuitlab.atomic import atomic_write_text

CircuitDB = Any  # circuitlab.analysis.circuitdb.CircuitDB (which imports this module)

FORMAT_NAME = "circuitlab.circuitdb"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK = ".save.lock"
DATA_PREFIX = "data-"


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

    @classmethod
    def from_json(cls, raw: dict) -> "ManifestV1":
        # "model_config" is pydantic's own attribute name, so the field is stored under an alias.
        data = dict(raw)
        if "model_config" in data:
            data["model_config_"] = data.pop("model_config")
        return cls.model_validate(data)

    def to_json(self) -> dict:
        data = self.model_dump(mode="json")
        data["model_config"] = data.pop("model_config_")
        return data


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def _fsync_path(path: Path) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _save_array(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.lib.format.write_array(handle, np.ascontiguousarray(array), allow_pickle=False)


def _read_or_raise(path: Path, read):
    try:
        return read(path)
    except Exception as error:  # any parse failure of a checksummed file means the file is bad
        raise CorruptDatabaseError(f"{path} cannot be read ({type(error).__name__}: {error}); rebuild the database") from error


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
        return ManifestV1.from_json(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'manifest'}: {item['msg']}" for item in error.errors()
        )
        raise CorruptDatabaseError(
            f"{path} is not a valid {FORMAT_NAME} version {FORMAT_VERSION} manifest ({problems}); rebuild the database"
        ) from None


def remove_leftovers(folder: Path, keep: str | None, announce: bool = True) -> list[str]:
    """Delete data folders no manifest names and stale temporary manifests (an interrupted save)."""
    removed = []
    for path in folder.glob(f"{DATA_PREFIX}*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    for temporary in folder.glob(f".{MANIFEST}.*tmp"):
        temporary.unlink(missing_ok=True)
        removed.append(temporary.name)
    if removed and announce:
        warnings.warn(f"removed leftovers of an interrupted save in {folder}: {', '.join(sorted(removed))}")
    return removed


def _lock(folder: Path, timeout: float) -> FileLock:
    return FileLock(folder / LOCK, timeout=timeout)


def save_database(db: CircuitDB, folder: str | os.PathLike) -> Path:
    """Save atomically: a crash mid-save leaves the previous database in `folder` readable."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / MANIFEST).exists():
        strangers = [
            p.name for p in folder.iterdir()
            if not (p.name.startswith(DATA_PREFIX) or p.name == LOCK or p.name.startswith(f".{MANIFEST}."))
        ]
        if strangers:
            raise CircuitDBError(
                f"{folder} is not empty and holds no {MANIFEST} (found {', '.join(sorted(strangers)[:5])}): "
                "refusing to write a circuit database over other files; choose a new or empty folder"
            )
    try:
        lock = _lock(folder, timeout=0).acquire()
    except Timeout:
        raise CircuitDBError(f"{folder / LOCK} is held: another process is saving this database; wait for it to finish") from None
    with lock:
        previous = read_manifest(folder) if (folder / MANIFEST).exists() else None
        remove_leftovers(folder, keep=previous.data_dir if previous else None)
        data_name = f"{DATA_PREFIX}{_dt.datetime.now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
        data_dir = folder / data_name
        data_dir.mkdir()
        files = _write_data(db, data_dir)
        for name in files:
            _fsync_path(data_dir / name)
        _fsync_path(data_dir)
        manifest = dict(db.manifest, data_dir=data_name, files=files, saved=_dt.datetime.now().isoformat(timespec="seconds"))
        ManifestV1.from_json(manifest)  # a writer bug fails here, before anything is committed
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))  # the commit point
        _fsync_path(folder)
        remove_leftovers(folder, keep=data_name, announce=False)  # the superseded data folder
    return folder


def _write_data(db: CircuitDB, data_dir: Path) -> dict[str, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = ["metadata.parquet"]
    pq.write_table(pa.Table.from_pandas(db.metadata, preserve_index=False), data_dir / "metadata.parquet")
    for layer, matrix in db.codes.items():
        for part in ("indices", "values"):
            name = f"layer{layer}.{part}.npy"
            _save_array(data_dir / name, getattr(matrix, part))
            names.append(name)
        if layer in db.indexes and db.indexes[layer].has_file:
            name = f"layer{layer}.sketch.faiss"
            db.indexes[layer].save(data_dir / name)
            names.append(name)
    return {name: {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size} for name in names}


def _clean_if_no_save_runs(folder: Path, keep: str) -> None:
    """Remove an interrupted save's leftovers, unless a live save holds the lock (or the folder is read-only)."""
    try:
        with _lock(folder, timeout=0):
            remove_leftovers(folder, keep=keep)
    except (Timeout, OSError):
        pass


def load_database(
    cls: type[CircuitDB],
    folder: str | os.PathLike,
    *,
    verify: bool = True,
    mmap: bool = True,
) -> CircuitDB:
    """A saved database, every file checked against the manifest's size and (verify=True) sha256."""
    import pandas as pd

    folder = Path(folder)
    manifest = read_manifest(folder)
    data_dir = folder / manifest.data_dir
    _clean_if_no_save_runs(folder, keep=manifest.data_dir)
    for name, record in manifest.files.items():
        path = data_dir / name
        if not path.exists():
            raise CorruptDatabaseError(f"{path} is missing: the database in {folder} is incomplete; rebuild it")
        size = path.stat().st_size
        if size != record.bytes:
            raise CorruptDatabaseError(
                f"{path} has {size} bytes but the manifest records {record.bytes}: the file was truncated "
                "or modified; rebuild the database"
            )
        if verify and sha256_file(path) != record.sha256:
            raise CorruptDatabaseError(
                f"{path} fails its sha256 check against {folder / MANIFEST}: the file was modified or "
                "corrupted; rebuild the database"
            )
    metadata = _read_or_raise(data_dir / "metadata.parquet", lambda p: pd.read_parquet(p))
    codes, indexes, reports, layouts = {}, {}, {}, {}
    for layer in manifest.layers:
        info = manifest.layer_info.get(str(layer))
        if info is None:
            raise CorruptDatabaseError(f"{folder / MANIFEST} lists layer {layer} but has no layer_info for it; rebuild the database")
        read_array = lambda p: np.load(p, mmap_mode="r" if mmap else None)  # noqa: E731
        indices = _read_or_raise(data_dir / f"layer{layer}.indices.npy", read_array)
        values = _read_or_raise(data_dir / f"layer{layer}.values.npy", read_array)
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= info.code_size):
            raise CorruptDatabaseError(
                f"{data_dir / f'layer{layer}.indices.npy'} holds neuron ids outside [0, {info.code_size}): "
                "the file is damaged; rebuild the database"
            )
        codes[layer] = CodeMatrix(indices, values, info.code_size, canonical=True)
        layouts[layer] = info.layout
        if info.index:
            report = info.index
            if report["kind"] == "postings":  # no file: rebuilt from the codes
                indexes[layer] = ApproximateIndex.load(
                    None, SketchSpec(**report["sketch"]), report["kind"], report["params"], codes[layer]
                )
            else:
                indexes[layer] = _read_or_raise(
                    data_dir / f"layer{layer}.sketch.faiss",
                    lambda p: ApproximateIndex.load(p, SketchSpec(**report["sketch"]), report["kind"], report["params"]),
                )
            reports[layer] = report
    db = cls(
        metadata,
        codes,
        model_config_hash=manifest.model_config_hash,
        tokenizer_hash=manifest.tokenizer_hash,
        model_config=manifest.model_config_,
        layer_layouts=layouts,
        corpus_stats=manifest.corpus,
        indexes=indexes,
        index_reports=reports,
        model_source=manifest.model_source,
    )
    files = {name: record.model_dump() for name, record in manifest.files.items()}
    db._fingerprint = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return db
