"""What a database builds over its shards to search them: layer views, approximate indexes (read from the
folder when first used), device copies of the codes, and the recall measurement of an approximate index."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from circuitlab.analysis.circuitdb.errors import CircuitDBError
from circuitlab.analysis.codeindex import ApproximateIndex, CodeMatrix, SketchSpec, recall_at_k

CircuitDB = Any  # circuitlab.analysis.circuitdb.database.CircuitDB (which imports this module)


class CpuDevice:
    """The CPU as a search device, without importing torch (its import alone holds about 200 MB)."""

    type = "cpu"
    index = None

    def __str__(self) -> str:
        return "cpu"


class LayerRows:
    """One layer's rows over every shard, gathered on demand (what re-ranking and FAISS building read)."""

    def __init__(self, table, layer: int) -> None:
        self.table, self.layer = table, layer
        self.size, self.nnz, _ = table.layer_info(layer)

    def __len__(self) -> int:
        return self.table.n_rows

    def rows(self, row_ids) -> CodeMatrix:
        return self.table.rows(self.layer, row_ids)


GROUP_ROWS = 1 << 20  # rows one CPU exact index covers: consecutive shards are searched together up to this


def shard_groups(table, layer: int, shards: Sequence[int]) -> list[tuple[int, tuple[int, ...]]]:
    """Runs of consecutive usable shards of at most GROUP_ROWS rows (a larger shard alone), each with its first
    circuit id: the units CPU exact search indexes. Posting lists of 65,536-row shards searched one by one ran
    at a third of the rate of one list over 10^6 rows (each shard's walk starts without a cutoff)."""
    groups: list[list[int]] = []
    rows = 0
    for shard in shards:
        if table.matrix(layer, shard) is None:
            rows = GROUP_ROWS + 1  # a damaged shard ends the run
            continue
        count = table.rows_of(shard)[1] - table.rows_of(shard)[0]
        if not groups or shard != groups[-1][-1] + 1 or rows + count > GROUP_ROWS:
            groups.append([])
            rows = 0
        groups[-1].append(shard)
        rows += count
    return [(table.rows_of(group[0])[0], tuple(group)) for group in groups]


def group_index(db: CircuitDB, layer: int, shards: tuple[int, ...]):
    """(ExactIndex, CodeMatrix) of a run of shards from `shard_groups` (built on first use, kept)."""
    from circuitlab.analysis.codeindex import ExactIndex

    key = (layer, shards)
    if key not in db._exact:
        parts = [db.shard_table.matrix(layer, shard) for shard in shards]
        matrix = parts[0] if len(parts) == 1 else CodeMatrix.concatenate(parts)
        db._exact[key] = (ExactIndex(matrix), matrix)
    return db._exact[key]


class CodesView(Mapping):
    """{layer: CodeMatrix} over a shard table: the memory map of a one-shard database, else the shards
    concatenated in memory on first use (for analyses of small databases; search reads shard by shard)."""

    def __init__(self, table) -> None:
        self.table = table
        self._whole: dict[int, CodeMatrix] = {}

    def __getitem__(self, layer: int) -> CodeMatrix:
        if layer not in self.table.layers:
            raise KeyError(layer)
        if layer not in self._whole:
            self._whole[layer] = self.table.whole_layer(layer)
        return self._whole[layer]

    def __iter__(self) -> Iterator[int]:
        return iter(self.table.layers)

    def __len__(self) -> int:
        return len(self.table.layers)


class IndexTable(dict):
    """{layer: ApproximateIndex}; the indexes of a saved database are read from its files on first use."""

    @classmethod
    def stored(cls, table) -> "IndexTable":
        indexes = cls()
        for layer in table.layers:
            report = table.manifest.layer_info[str(layer)].index
            if report:
                dict.__setitem__(indexes, layer, (table, layer, report))  # read on first use
        return indexes

    def __getitem__(self, layer: int) -> ApproximateIndex:
        value = dict.__getitem__(self, layer)
        if isinstance(value, tuple):
            value = _read_index(*value)
            dict.__setitem__(self, layer, value)
        return value

    def get(self, layer, default=None):
        return self[layer] if layer in self else default

    def values(self):
        return [self[layer] for layer in self]

    def items(self):
        return [(layer, self[layer]) for layer in self]


def _read_index(table, layer: int, report: dict) -> ApproximateIndex:
    spec = SketchSpec(**report["sketch"])
    if report["kind"] == "postings":  # no file: each shard's posting lists come from its codes
        return ApproximateIndex(None, spec, "postings", report["params"])
    name = report.get("file", f"layer{layer}.sketch.faiss")
    path = table.data_dir / name
    record = table.manifest.files.get(name)
    from circuitlab.analysis.circuitdb.shards import corrupt, sha256_file

    if record is None or not path.exists():
        raise corrupt(path, "is missing: the database's approximate index is incomplete")
    if path.stat().st_size != record.bytes:
        raise corrupt(path, f"has {path.stat().st_size} bytes but the manifest records {record.bytes}: the file was "
                            "truncated or modified")
    if table.verify and sha256_file(path) != record.sha256:
        raise corrupt(path, f"fails its sha256 check against {table.folder / 'manifest.json'}: the file was modified "
                            "or corrupted")
    try:
        return ApproximateIndex.load(path, spec, report["kind"], report["params"])
    except Exception as error:  # any parse failure of a checksummed file means the file is bad
        raise corrupt(path, f"cannot be read ({type(error).__name__}: {error})") from error


def build_indexes(db: CircuitDB, layers: Sequence[int], kind: str, sketch: SketchSpec | None, measure: bool,
                  n_recall_queries: int, progress: bool, index_options: dict) -> dict[int, dict]:
    """`CircuitDB.build_index`: FAISS kinds train on a sample and add the rows in chunks read from the shards;
    "postings" builds each shard's posting lists, which exact search shares."""
    import circuitlab.analysis.postings as postings

    reports = {}
    for layer in layers:
        started = time.perf_counter()
        chosen = kind
        if chosen == "auto":
            chosen = "postings" if postings.available() else "flat" if len(db) < 20_000 else "ivf"
        if chosen == "postings":
            if not postings.available():
                raise ImportError("the 'postings' index needs numba: pip install 'circuitlab[search]'")
            for _, group in shard_groups(db.shard_table, layer, range(db.shard_table.n_shards)):
                group_index(db, layer, group)
            params = {"terms": int(index_options.get("terms", 24)), "candidates": int(index_options.get("candidates", 256))}
            index = ApproximateIndex(None, sketch or SketchSpec(), "postings", params)
        else:
            index = ApproximateIndex.build(LayerRows(db.shard_table, layer), sketch, chosen, progress=progress,
                                           **index_options)
        db.indexes[layer] = index
        db._faiss_devices = {key: value for key, value in db._faiss_devices.items() if key[0] != layer}
        report = {
            "kind": index.kind, "params": index.params, "sketch": index.spec.to_dict(),
            "build_seconds": round(time.perf_counter() - started, 3),
        }
        if measure and len(db) > 1:
            report.update(measure_recall(db, layer, 10, n_recall_queries, None, 0))
        db.index_reports[layer] = report
        reports[layer] = report
    return reports


def measure_recall(db: CircuitDB, layer: int, k: int, n_queries: int, n_candidates: int | None, seed: int) -> dict:
    """recall@k of approximate against exact search, and queries/s of both, on stored circuits."""
    rng = np.random.default_rng(seed)
    query_ids = np.sort(rng.choice(len(db), min(n_queries, len(db)), replace=False))
    queries = db.shard_table.rows(layer, query_ids)
    db.search_ids(queries.rows([0]), layer, 1)  # builds the exact engine (posting lists, device copy) untimed
    started = time.perf_counter()
    _, exact_distances = db.search_ids(queries, layer, k, exact=True, exclude=query_ids)
    exact_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _, approximate_distances = db.search_ids(queries, layer, k, exact=False, exclude=query_ids, n_candidates=n_candidates)
    approximate_seconds = time.perf_counter() - started
    return {
        f"recall_at_{k}": round(recall_at_k(exact_distances, approximate_distances), 5),
        "recall_queries": int(query_ids.size),
        "exact_queries_per_second": round(query_ids.size / max(exact_seconds, 1e-9), 1),
        "approximate_queries_per_second": round(query_ids.size / max(approximate_seconds, 1e-9), 1),
    }


def device_codes(db: CircuitDB, layer: int, device, shards: Sequence[int] | None = None):
    """A layer's codes (of `shards`, default every usable one) resident on `device` for the scan kernel
    (copied on first use, kept)."""
    from circuitlab.analysis.circuitdb.device import DeviceCodes

    table = db.shard_table
    shards = [s for s in (range(table.n_shards) if shards is None else shards) if table.matrix(layer, s) is not None]
    if not shards:
        raise CircuitDBError("every shard of this database is damaged and set aside: nothing to search")
    key = (layer, str(device), tuple(shards))
    if key not in db._device:
        parts = [(table.rows_of(shard)[0], table.matrix(layer, shard)) for shard in shards]
        db._device[key] = DeviceCodes.from_matrices(parts, device)
    return db._device[key]


def faiss_on(db: CircuitDB, layer: int, device):
    """The layer's FAISS index where it searches, and that device: a copy on `device` when faiss-gpu is
    installed (flat and IVF indexes), else the index on the CPU."""
    from circuitlab.analysis.codeindex.approximate import faiss_gpu_available

    index = db.indexes[layer]
    if device.type != "cuda" or not faiss_gpu_available() or index.kind not in ("flat", "ivf"):
        return index, CpuDevice()
    key = (layer, str(device))
    if key not in db._faiss_devices:
        db._faiss_devices[key] = index.to_gpu(device.index or 0)
    return db._faiss_devices[key], device
