"""Writing a circuit database folder (layout: circuitdb/manifest.py): whole saves, appended shards, the lock.

Every write ends by replacing manifest.json atomically, and nothing a manifest names is ever rewritten:

- A save writes a new data folder shard by shard, then replaces the manifest, then deletes the old data
  folder: a crash at any point leaves a manifest that names a complete data folder.
- `ShardAppender` (collection) writes each new shard's files into the current data folder, then replaces the
  manifest with one that also lists them: a crash leaves the database as of its last committed shard, and
  files no manifest names.

Leftovers (data folders and files no manifest names, temporary manifests) are removed by the next write, or
by an open when no writer holds the lock. One writer at a time holds the folder's lock (filelock).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from circuitlab.analysis.circuitdb.errors import CircuitDBError
from circuitlab.analysis.circuitdb.manifest import (
    DATA_PREFIX,
    LOCK,
    MANIFEST,
    METADATA_FILE,
    ManifestV1,
    code_file,
    read_manifest,
    shard_file,
)
from circuitlab.analysis.circuitdb.shards import sha256_file
from circuitlab.atomic import atomic_write_text

CircuitDB = Any  # circuitlab.analysis.circuitdb.database.CircuitDB (which imports this module)

SHARD_ROWS = 1 << 18  # rows per shard a save writes (128 MiB of codes per layer at 64 float32 non-zeros)
ROW_GROUP_ROWS = 8192  # metadata rows per Parquet row group: a lookup reads one group, not the shard


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


def new_data_name() -> str:
    return f"{DATA_PREFIX}{_dt.datetime.now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"


def remove_leftovers(folder: Path, keep: str | None, announce: bool = True, listed: set[str] | None = None) -> list[str]:
    """Delete data folders no manifest names, stale temporary manifests and (given the names the manifest
    lists) files in the kept data folder it does not list: the remains of an interrupted write."""
    removed = []
    for path in folder.glob(f"{DATA_PREFIX}*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    for temporary in folder.glob(f".{MANIFEST}.*tmp"):
        temporary.unlink(missing_ok=True)
        removed.append(temporary.name)
    if keep is not None and listed is not None and (folder / keep).is_dir():
        for path in (folder / keep).iterdir():
            if path.name not in listed:
                path.unlink(missing_ok=True)
                removed.append(f"{keep}/{path.name}")
    if removed and announce:
        warnings.warn(f"removed leftovers of an interrupted save in {folder}: {', '.join(sorted(removed))}")
    return removed


def lock(folder: Path, timeout: float = 0) -> FileLock:
    return FileLock(folder / LOCK, timeout=timeout)


def acquire(folder: Path) -> FileLock:
    """The folder's lock, taken (release it with `.release()`), or an error when another writer holds it."""
    held = lock(folder)
    try:
        held.acquire()
    except Timeout:
        raise CircuitDBError(f"{folder / LOCK} is held: another process is writing this database; wait for it to finish") from None
    return held


def clean_if_no_writer(folder: Path, manifest: ManifestV1) -> None:
    """Remove an interrupted write's leftovers, unless a live writer holds the lock (or the folder is read-only)."""
    try:
        with lock(folder):
            remove_leftovers(folder, keep=manifest.data_dir, listed=set(manifest.files))
    except (Timeout, OSError):
        pass


def commit(folder: Path, manifest: dict) -> None:
    """Validate, then replace manifest.json atomically: the commit point of every write."""
    ManifestV1.from_json(manifest)  # a writer bug fails here, before anything is committed
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    _fsync_path(folder)


def write_shard(data_dir: Path, shard: int, metadata, codes: Mapping[int, Any]) -> dict[str, dict]:
    """Write one shard's files (metadata: a pyarrow Table or pandas DataFrame; codes: {layer: CodeMatrix}) and
    return their records {name: {sha256, bytes}}, each file flushed to disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = metadata if isinstance(metadata, pa.Table) else pa.Table.from_pandas(metadata, preserve_index=False)
    names = [shard_file(shard, METADATA_FILE)]
    pq.write_table(table, data_dir / names[0], row_group_size=ROW_GROUP_ROWS)
    for layer, matrix in codes.items():
        for part in ("indices", "values"):
            name = code_file(shard, layer, part)
            _save_array(data_dir / name, getattr(matrix, part))
            names.append(name)
    records = {}
    for name in names:
        _fsync_path(data_dir / name)
        records[name] = {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size}
    return records


def _refuse_strangers(folder: Path) -> None:
    if (folder / MANIFEST).exists():
        return
    strangers = [
        p.name for p in folder.iterdir()
        if not (p.name.startswith(DATA_PREFIX) or p.name == LOCK or p.name.startswith(f".{MANIFEST}."))
    ]
    if strangers:
        raise CircuitDBError(
            f"{folder} is not empty and holds no {MANIFEST} (found {', '.join(sorted(strangers)[:5])}): "
            "refusing to write a circuit database over other files; choose a new or empty folder"
        )


def save_database(db: CircuitDB, folder: str | os.PathLike, shard_rows: int | None = None) -> Path:
    """Save atomically, `shard_rows` rows a shard (default: the database's own shards, or SHARD_ROWS for a
    database made in memory): a crash mid-save leaves the previous database in `folder` readable."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _refuse_strangers(folder)
    table = db.shard_table
    damaged = [shard for shard in range(table.n_shards) if not table.alive(shard)]
    if damaged:
        raise CircuitDBError(f"shards {damaged} of this database are damaged and set aside: saving it would drop "
                             "their circuits; restore them first")
    held = acquire(folder)
    try:
        previous = read_manifest(folder) if (folder / MANIFEST).exists() else None
        remove_leftovers(folder, keep=previous.data_dir if previous else None)
        data_name = new_data_name()
        data_dir = folder / data_name
        data_dir.mkdir()
        from tqdm.auto import tqdm

        bounds = _shard_bounds(table, shard_rows)
        files: dict[str, dict] = {}
        for shard, (start, stop) in enumerate(tqdm(bounds, desc="save shards", unit="shard", disable=len(bounds) < 8)):
            rows = np.arange(start, stop)
            same = table.n_shards == len(bounds) and (start, stop) == table.rows_of(shard)
            metadata = table.metadata(shard) if same else table.metadata_rows(rows)
            codes = {layer: table.matrix(layer, shard) if same else table.rows(layer, rows) for layer in db.layers}
            files.update(write_shard(data_dir, shard, metadata, codes))
        for layer in db.layers:
            if layer in db.indexes and db.indexes[layer].has_file:
                name = f"layer{layer}.sketch.faiss"
                db.index_reports.get(layer, {}).pop("file", None)
                db.indexes[layer].save(data_dir / name)
                _fsync_path(data_dir / name)
                files[name] = {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size}
        _fsync_path(data_dir)
        manifest = dict(db.manifest, data_dir=data_name, files=files,
                        saved=_dt.datetime.now().isoformat(timespec="seconds"))
        if len(bounds) != 1:
            manifest["shard_rows"] = [stop - start for start, stop in bounds]
        commit(folder, manifest)
        remove_leftovers(folder, keep=data_name, announce=False)  # the superseded data folder
    finally:
        held.release()
    return folder


def _shard_bounds(table, shard_rows: int | None) -> list[tuple[int, int]]:
    if shard_rows is None and table.n_shards > 1:
        return [table.rows_of(shard) for shard in range(table.n_shards)]
    step = max(1, shard_rows or SHARD_ROWS)
    bounds = [(start, min(start + step, table.n_rows)) for start in range(0, table.n_rows, step)]
    return bounds or [(0, 0)]


class ShardAppender:
    """Append shards to a database folder (collection writes through this). Holds the folder's lock until
    `close`.

    Into a new folder, or onto an existing database, every shard is committed as it is written, so a killed
    run leaves the database of its committed shards. With `replace`, the shards go to a new data folder and
    `finish` commits them all at once, replacing the database the folder held: until then, and after a kill,
    the folder holds the previous database. `manifest` is the manifest of the shards written so far (None
    before the first)."""

    def __init__(self, folder: str | os.PathLike, replace: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        _refuse_strangers(self.folder)
        self._lock = acquire(self.folder)
        try:
            committed = read_manifest(self.folder) if (self.folder / MANIFEST).exists() else None
            keep = committed.data_dir if committed else None
            remove_leftovers(self.folder, keep=keep, listed=set(committed.files) if committed else None)
        except BaseException:
            self._lock.release()
            raise
        self.each = not (replace and committed is not None)  # commit every shard
        self.manifest = committed if self.each else None
        self.data_name = keep if self.each and keep else new_data_name()
        (self.folder / self.data_name).mkdir(exist_ok=True)
        self.finished = False

    @property
    def n_shards(self) -> int:
        return 0 if self.manifest is None else len(self.manifest.rows_per_shard)

    @property
    def n_rows(self) -> int:
        return 0 if self.manifest is None else self.manifest.n_circuits

    def append(self, metadata, codes: Mapping[int, Any], fields: dict) -> None:
        """Write one shard and record it in the manifest (committed now, unless replacing); `fields` are the
        manifest's other entries (model, layers, layer_info, corpus, collection progress), as
        `CircuitDB.manifest` spells them."""
        shard = self.n_shards
        records = write_shard(self.folder / self.data_name, shard, metadata, codes)
        previous = self.manifest.to_json() if self.manifest else {"files": {}}
        rows = len(metadata)
        files = {name: record for name, record in previous["files"].items() if not name.endswith(".faiss")}
        files.update(records)
        shard_rows = list(previous.get("shard_rows") or [previous["n_circuits"]]) if self.manifest else []
        manifest = dict(fields, data_dir=self.data_name, files=files, shard_rows=shard_rows + [rows],
                        n_circuits=sum(shard_rows) + rows, saved=_dt.datetime.now().isoformat(timespec="seconds"))
        for info in manifest["layer_info"].values():
            info["index"] = None  # an approximate index built before this shard does not hold it
        _fsync_path(self.folder / self.data_name)
        self._record(manifest)

    def update(self, fields: dict) -> None:
        """Record a manifest whose entries `fields` change (collection progress), with the same files."""
        if self.manifest is not None:
            self._record(dict(self.manifest.to_json(), **fields))

    def _record(self, manifest: dict) -> None:
        if self.each:
            commit(self.folder, manifest)
        self.manifest = ManifestV1.from_json(manifest)

    def finish(self) -> None:
        """Commit what was written (replacing the previous database, with `replace`)."""
        if not self.each and self.manifest is not None:
            commit(self.folder, self.manifest.to_json())
            remove_leftovers(self.folder, keep=self.data_name, announce=False)  # the superseded data folder
        self.finished = True

    def close(self) -> None:
        if self.manifest is None or not (self.each or self.finished):
            shutil.rmtree(self.folder / self.data_name, ignore_errors=True)
        self._lock.release()


def save_indexes(db: CircuitDB, folder: str | os.PathLike) -> None:
    """Write the FAISS indexes `db` holds into its saved folder and commit their reports (after a collection
    built the database in place). A file name already in use gets a fresh suffix: committed files are never
    rewritten."""
    folder = Path(folder)
    held = acquire(folder)
    try:
        manifest = read_manifest(folder).to_json()
        data_dir = folder / manifest["data_dir"]
        for layer in db.layers:
            if layer not in db.indexes or layer not in db.index_reports:
                continue
            index, report = db.indexes[layer], dict(db.index_reports[layer])
            if index.has_file:
                name = f"layer{layer}.sketch.faiss"
                if name in manifest["files"] or (data_dir / name).exists():
                    name = f"layer{layer}.sketch.{secrets.token_hex(4)}.faiss"
                index.save(data_dir / name)
                _fsync_path(data_dir / name)
                manifest["files"][name] = {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size}
                report["file"] = name
            manifest["layer_info"][str(layer)]["index"] = report
        commit(folder, manifest)
    finally:
        held.release()
