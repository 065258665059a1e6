"""The rows of a circuit database, shard by shard: codes as memory maps, metadata read by row groups.

Two tables give one interface. `MemoryShards` holds a database made in this process (one shard of in-memory
arrays). `StoredShards` reads a saved folder: opening it reads the manifest and looks at each file's size
(stat, no reading); a shard's arrays are mapped, checked (shape, dtype, unit ids in range) and, with
`verify`, hashed against the manifest the first time this process reads them. A damaged or missing file is a
`DamagedShardError` that names the file, its shard and the circuits it holds; with `skip_damaged` the shard is
set aside with a warning instead and every other shard stays usable.

Shape letters: R rows, K non-zeros per code.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from circuitlab.analysis.circuitdb.errors import CircuitDBError, CorruptDatabaseError, DamagedShardError
from circuitlab.analysis.circuitdb.manifest import METADATA_FILE, ManifestV1, code_file, shard_file
from circuitlab.analysis.codeindex import CodeMatrix

OPEN_PARQUET_FILES = 32  # metadata files kept open for row lookups


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


class ShardTable(ABC):
    """Rows [starts[s], starts[s + 1]) live in shard s. Subclasses give `matrix`, `metadata` and `alive`."""

    starts: np.ndarray
    layers: list[int]

    @property
    def n_rows(self) -> int:
        return int(self.starts[-1])

    @property
    def n_shards(self) -> int:
        return len(self.starts) - 1

    def shard_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, rows, side="right") - 1

    def rows_of(self, shard: int) -> tuple[int, int]:
        return int(self.starts[shard]), int(self.starts[shard + 1])

    @abstractmethod
    def layer_info(self, layer: int) -> tuple[int, int, str]:
        """(code size, non-zeros per code, value dtype) of a layer."""

    @abstractmethod
    def matrix(self, layer: int, shard: int) -> CodeMatrix | None:
        """A shard's codes (None when the shard is damaged and set aside)."""

    @abstractmethod
    def metadata(self, shard: int):
        """A shard's metadata table."""

    def alive(self, shard: int) -> bool:
        return True

    def rows(self, layer: int, row_ids) -> CodeMatrix:
        """The codes of some rows, in the order given, gathered shard by shard."""
        row_ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
        size, nnz, dtype = self.layer_info(layer)
        if row_ids.size and (row_ids.min() < 0 or row_ids.max() >= self.n_rows):
            raise CircuitDBError(f"circuit ids must lie in [0, {self.n_rows}); got {row_ids.min()}..{row_ids.max()}")
        indices = np.zeros((row_ids.size, nnz), dtype=np.int32)
        values = np.zeros((row_ids.size, nnz), dtype=dtype)
        shards = self.shard_of(row_ids)
        for shard in np.unique(shards):
            matrix = self._usable_matrix(layer, int(shard))
            where = np.flatnonzero(shards == shard)
            local = row_ids[where] - self.starts[shard]
            indices[where] = matrix.indices[local]
            values[where] = matrix.values[local]
        return CodeMatrix(indices, values, size, canonical=True)

    def metadata_rows(self, row_ids):
        """The metadata rows of some circuits, in the order given (a DataFrame with a fresh index)."""
        import pandas as pd

        row_ids = np.asarray(row_ids, dtype=np.int64).reshape(-1)
        shards = self.shard_of(row_ids)
        parts, order = [], []
        for shard in np.unique(shards):
            where = np.flatnonzero(shards == shard)
            parts.append(self._metadata_rows(int(shard), row_ids[where] - self.starts[shard]))
            order.append(where)
        if not parts:
            return self.metadata(0).iloc[:0].reset_index(drop=True) if self.n_shards else pd.DataFrame()
        frame = pd.concat(parts, ignore_index=True)
        return frame.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)

    def _metadata_rows(self, shard: int, local: np.ndarray):
        return self.metadata(shard).iloc[local]

    def _usable_matrix(self, layer: int, shard: int) -> CodeMatrix:
        matrix = self.matrix(layer, shard)
        if matrix is None:
            start, stop = self.rows_of(shard)
            raise CircuitDBError(f"circuits {start}..{stop - 1} lie in shard {shard}, which is damaged and set aside")
        return matrix

    def whole_metadata(self):
        """Every row's metadata as one DataFrame (circuit_id = row number)."""
        import pandas as pd

        damaged = [shard for shard in range(self.n_shards) if not self.alive(shard)]
        if damaged:
            raise CircuitDBError(
                f"shards {damaged} are damaged and set aside: the metadata of every circuit is not available; "
                "restore them or rebuild the database"
            )
        frames = [self.metadata(shard) for shard in range(self.n_shards)]
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)

    def whole_layer(self, layer: int) -> CodeMatrix:
        """One layer's codes as one matrix: the memory map of a one-shard database, else a copy in memory."""
        parts = [self._usable_matrix(layer, shard) for shard in range(self.n_shards)]
        return parts[0] if len(parts) == 1 else CodeMatrix.concatenate(parts)


class MemoryShards(ShardTable):
    """A database made in this process: its codes and metadata in memory, as one shard."""

    def __init__(self, codes: Mapping[int, CodeMatrix], metadata) -> None:
        self.codes = dict(codes)
        self.layers = list(self.codes)
        self.frame = metadata
        self.starts = np.array([0, len(metadata)], dtype=np.int64)

    def layer_info(self, layer: int) -> tuple[int, int, str]:
        matrix = self.codes[layer]
        return matrix.size, matrix.nnz, str(matrix.values.dtype)

    def matrix(self, layer: int, shard: int) -> CodeMatrix:
        return self.codes[layer]

    def metadata(self, shard: int):
        return self.frame


class StoredShards(ShardTable):
    """The shards of a saved database folder, read lazily (see the module docstring)."""

    def __init__(self, folder: Path, manifest: ManifestV1, *, verify: bool = True, skip_damaged: bool = False,
                 mmap: bool = True) -> None:
        self.folder = Path(folder)
        self.manifest = manifest
        self.data_dir = self.folder / manifest.data_dir
        self.layers = list(manifest.layers)
        self.verify = verify
        self.skip_damaged = skip_damaged
        self.mmap = mmap
        self.starts = np.concatenate([[0], np.cumsum(manifest.rows_per_shard)]).astype(np.int64)
        self.damaged: dict[int, str] = {}
        self._checked: set[str] = set()
        self._matrices: dict[tuple[int, int], CodeMatrix] = {}
        self._parquet: OrderedDict[int, object] = OrderedDict()
        for shard in range(self.n_shards):
            for name in self.shard_files(shard):
                self._stat(shard, name)

    # --- files -----------------------------------------------------------------------------------------

    def shard_files(self, shard: int) -> list[str]:
        names = [shard_file(shard, METADATA_FILE)]
        return names + [code_file(shard, layer, part) for layer in self.layers for part in ("indices", "values")]

    def _damage(self, shard: int, path: Path, problem: str) -> None:
        start, stop = self.rows_of(shard)
        others = self.n_shards - 1
        message = (
            f"{path} {problem}: shard {shard} (circuits {start}..{stop - 1}) of {self.folder} is damaged, the other "
            f"{others} shard{'s' if others != 1 else ''} are untouched; restore the file from a copy, rebuild the "
            "database, or open it with skip_damaged=True (--skip-damaged) to search the other shards"
        )
        if not self.skip_damaged:
            raise DamagedShardError(message, shard=shard, path=str(path), rows=(start, stop))
        if shard not in self.damaged:
            self.damaged[shard] = message
            warnings.warn(f"set aside: {message}", stacklevel=3)

    def _stat(self, shard: int, name: str) -> bool:
        path = self.data_dir / name
        record = self.manifest.files[name]
        if not path.exists():
            self._damage(shard, path, "is missing")
            return False
        size = path.stat().st_size
        if size != record.bytes:
            self._damage(shard, path, f"has {size} bytes but the manifest records {record.bytes} (truncated or modified)")
            return False
        return True

    def check_file(self, shard: int, name: str) -> bool:
        """Size and (with verify) sha256 of a shard file, once per process; False when set aside."""
        if shard in self.damaged:
            return False
        if name in self._checked:
            return True
        if not self._stat(shard, name):
            return False
        if self.verify and sha256_file(self.data_dir / name) != self.manifest.files[name].sha256:
            self._damage(shard, self.data_dir / name, f"fails its sha256 check against {self.folder / 'manifest.json'} "
                         "(modified or corrupted)")
            return False
        self._checked.add(name)
        return True

    def alive(self, shard: int) -> bool:
        return shard not in self.damaged

    # --- reading ---------------------------------------------------------------------------------------

    def layer_info(self, layer: int) -> tuple[int, int, str]:
        info = self.manifest.layer_info[str(layer)]
        return info.code_size, info.nnz, info.value_dtype

    def matrix(self, layer: int, shard: int) -> CodeMatrix | None:
        key = (layer, shard)
        if key in self._matrices:
            return self._matrices[key]
        size, nnz, value_dtype = self.layer_info(layer)
        rows = self.rows_of(shard)[1] - self.rows_of(shard)[0]
        arrays = []
        for part, kinds in (("indices", "iu"), ("values", "f")):
            name = code_file(shard, layer, part)
            if not self.check_file(shard, name):
                return None
            array = self._read_array(shard, name)
            if array is None:
                return None
            if array.ndim != 2 or array.shape != (rows, nnz) or array.dtype.kind not in kinds:
                self._damage(shard, self.data_dir / name, f"holds {array.dtype} {array.shape}, not the manifest's "
                             f"[{rows}, {nnz}] {part}")
                return None
            arrays.append(array)
        indices, values = arrays
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= size):
            self._damage(shard, self.data_dir / code_file(shard, layer, "indices"),
                         f"holds neuron ids outside [0, {size}) (the file is damaged)")
            return None
        if str(values.dtype) != value_dtype:
            values = values.astype(value_dtype)
        self._matrices[key] = CodeMatrix(indices, values, size, canonical=True)
        return self._matrices[key]

    def _read_array(self, shard: int, name: str) -> np.ndarray | None:
        try:
            return np.load(self.data_dir / name, mmap_mode="r" if self.mmap else None, allow_pickle=False)
        except Exception as error:  # any parse failure of a listed file means the file is bad
            self._damage(shard, self.data_dir / name, f"cannot be read ({type(error).__name__}: {error})")
            return None

    def _parquet_file(self, shard: int):
        import pyarrow.parquet as pq

        if shard in self._parquet:
            self._parquet.move_to_end(shard)
            return self._parquet[shard]
        name = shard_file(shard, METADATA_FILE)
        if not self.check_file(shard, name):
            return None
        try:
            handle = pq.ParquetFile(self.data_dir / name)
        except Exception as error:
            self._damage(shard, self.data_dir / name, f"cannot be read ({type(error).__name__}: {error})")
            return None
        self._parquet[shard] = handle
        while len(self._parquet) > OPEN_PARQUET_FILES:
            self._parquet.popitem(last=False)
        return handle

    def metadata(self, shard: int):
        handle = self._parquet_file(shard)
        frame = None if handle is None else self._to_pandas(shard, lambda: handle.read())
        if frame is None:
            raise CircuitDBError(f"shard {shard} is damaged and set aside: {self.damaged.get(shard, '')}")
        return frame

    def _metadata_rows(self, shard: int, local: np.ndarray):
        handle = self._parquet_file(shard)
        if handle is None:
            raise CircuitDBError(f"shard {shard} is damaged and set aside: {self.damaged.get(shard, '')}")
        group_starts = _row_group_starts(handle)
        groups = np.unique(np.searchsorted(group_starts, local, side="right") - 1)
        frame = self._to_pandas(shard, lambda: handle.read_row_groups([int(g) for g in groups]))
        offsets = np.concatenate([np.arange(group_starts[g], group_starts[g + 1]) for g in groups])
        return frame.iloc[np.searchsorted(offsets, local)]

    def _to_pandas(self, shard: int, read):
        try:
            frame = read().to_pandas()
        except Exception as error:
            name = shard_file(shard, METADATA_FILE)
            self._damage(shard, self.data_dir / name, f"cannot be read ({type(error).__name__}: {error})")
            return None
        return frame

    def check_all(self) -> None:
        """Read every file of every shard now: sizes, sha256 (with verify), array shapes and ranges, metadata."""
        for shard in range(self.n_shards):
            for name in self.shard_files(shard):
                self.check_file(shard, name)
            for layer in self.layers:
                self.matrix(layer, shard)
            if self.alive(shard):
                frame = self.metadata(shard)
                rows = self.rows_of(shard)[1] - self.rows_of(shard)[0]
                if len(frame) != rows:
                    self._damage(shard, self.data_dir / shard_file(shard, METADATA_FILE),
                                 f"has {len(frame)} rows, not the manifest's {rows}")


@functools.lru_cache(maxsize=256)
def _group_starts_of(sizes: tuple[int, ...]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _row_group_starts(handle) -> np.ndarray:
    metadata = handle.metadata
    return _group_starts_of(tuple(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)))


def corrupt(path: Path, problem: str) -> CorruptDatabaseError:
    """The error of a database file outside the shards (a FAISS index)."""
    return CorruptDatabaseError(f"{path} {problem}; rebuild the database")
