"""CircuitDB: a database of circuits with nearest-neighbour lookup (seed 000, sections 4.1-4.2).

"Given a new circuit, which circuits seen before look like it?" A database holds, per token of a reference
corpus and per chosen layer, the token's sparse code (its circuit), and once per token the token, its
sequence and position, its category label, a context excerpt and the model's top-5 next-token predictions.
Search compares codes by cosine distance (docs/analyses/circuit-lookup.md), exactly (equal to brute force,
on the CPU or, where there is one, a GPU) or approximately (candidates re-ranked exactly).

    db = CircuitDB.build(model, texts, layers=None)
    hits = db.search("Max had a red collar", layer=2, k=10)      # seed 000, table 3
    neighbour_heatmap(hits).show()                               # seed 000, figure 6
    db.save("runs/db"); db = CircuitDB.open("runs/db", model=model)

A saved database is a folder of shards (circuitdb/manifest.py); `open` reads only its manifest and maps a
shard when a search first needs it, so a database may be larger than memory. This module is the database
object; the folder format lives in `manifest`, `shards` and `store`, search in `search` and `device`, the
split over torchrun ranks in `ranks`, the semantic score in `circuitlab.analysis.semantic`, the hits table
and heatmap in `circuitlab.analysis.neighbour_figures`.

Shape letters: Q queries, k neighbours per query.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import circuitlab.analysis.circuitdb.search as search
import circuitlab.analysis.circuitdb.store as store
from circuitlab.analysis.circuitdb.errors import CircuitDBError, DatabaseMismatchError
from circuitlab.analysis.circuitdb.indexes import CodesView, IndexTable, build_indexes, measure_recall
from circuitlab.analysis.circuitdb.manifest import MANIFEST, describe, read_manifest
from circuitlab.analysis.circuitdb.shards import MemoryShards, ShardTable, StoredShards
from circuitlab.analysis.codeindex import ApproximateIndex, CodeMatrix, ExactIndex, SketchSpec

if TYPE_CHECKING:
    from circuitlab.codes import SparseCode


def _model_tokenizer_hash(tokenizer: Any) -> str | None:
    return tokenizer.hash() if tokenizer is not None and hasattr(tokenizer, "hash") else None


class CircuitDB:
    """Circuits of a reference corpus, searchable by cosine distance between sparse codes.

    Attributes: `metadata` (pandas DataFrame, one row per token, `circuit_id` = row number; read whole on first
    use, `metadata_rows` reads only some), `codes` ({layer: CodeMatrix}), `layers`, `manifest` (what `save`
    writes, without the file list), `shard_table` (where the rows live), `model` and `tokenizer` when
    attached (text queries need them), `last_search` (where the last search ran).
    """

    def __init__(self, metadata, codes: Mapping[int, CodeMatrix], **kwargs: Any) -> None:
        if not codes:
            raise CircuitDBError("a circuit database needs the codes of at least one layer")
        n_rows = {layer: len(matrix) for layer, matrix in codes.items()}
        if len(set(n_rows.values())) != 1 or next(iter(n_rows.values())) != len(metadata):
            raise CircuitDBError(
                f"every layer needs one code per metadata row: metadata has {len(metadata)} rows, codes {n_rows}"
            )
        table = MemoryShards({int(layer): matrix for layer, matrix in sorted(codes.items())}, metadata)
        self._setup(table, **kwargs)

    def _setup(
        self,
        table: ShardTable,
        *,
        model_config_hash: str | None = None,
        tokenizer_hash: str | None = None,
        model_config: dict | None = None,
        layer_layouts: Mapping[int, dict] | None = None,
        corpus_stats: dict | None = None,
        indexes: Mapping[int, ApproximateIndex] | None = None,
        index_reports: Mapping[int, dict] | None = None,
        model: Any = None,
        tokenizer: Any = None,
        model_source: str | None = None,
        collection: list | None = None,
    ) -> None:
        self.shard_table = table
        self.model_config_hash = model_config_hash
        self.tokenizer_hash = tokenizer_hash
        self.model_config = model_config or {}
        self.layer_layouts = {int(k): dict(v) for k, v in (layer_layouts or {}).items()}
        self.corpus_stats = dict(corpus_stats or {})
        self.indexes = indexes if isinstance(indexes, IndexTable) else IndexTable(indexes or {})
        self.index_reports: dict[int, dict] = {int(k): dict(v) for k, v in (index_reports or {}).items()}
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        self.model_source = model_source  # where the model came from (folder or shipped name), when known
        self.collection = collection
        self.codes = CodesView(table)
        self.ranks = None  # a `ranks.RankPlan` once `distribute` splits the shards over torchrun ranks
        self.last_search: search.Served | None = None
        self.last_search_counters: dict = {}
        self._metadata = None
        self._exact: dict[tuple[int, tuple[int, ...]], tuple[ExactIndex, CodeMatrix]] = {}  # CPU indexes of shard runs
        self._device: dict[tuple[int, str, tuple[int, ...]], Any] = {}
        self._faiss_devices: dict[tuple[int, str], Any] = {}
        self._workspace: tempfile.TemporaryDirectory | None = None
        self._fingerprint: str | None = None

    # --- construction ---------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        model: Any,
        texts: Iterable[Any],
        layers: Sequence[int] | None = None,
        *,
        tokenizer: Any = None,
        batch_size: int = 16,
        window: int | None = None,
        context_before: int = 6,
        context_after: int = 5,
        value_dtype: str = "float32",
        index: str | None = "auto",
        sketch: SketchSpec | None = None,
        workdir: str | os.PathLike | None = None,
        shard_rows: int = store.SHARD_ROWS,
        progress: bool = True,
    ) -> "CircuitDB":
        """Collect the circuits of `texts` (strings or labelled stories) at `layers` (None = every layer).

        The circuits stream into the shards of a database folder under `workdir` (default: a temporary folder
        removed with the database object); `save` copies them elsewhere.
        index: "auto" builds an approximate index per layer and measures its recall@10 against exact search:
        pruned posting lists of active units where numba is installed (kind "postings"), else FAISS sketches
        (flat below 20k circuits, IVF above); "postings", "flat", "ivf" or "hnsw" force a kind; None builds
        none (exact search only; `build_index` adds one later).
        """
        from circuitlab.analysis.collect import collect

        workspace = tempfile.TemporaryDirectory(prefix="circuitdb-") if workdir is None else None
        folder = Path(workspace.name if workspace is not None else workdir) / "db"
        collect(
            model, texts, layers, out_dir=folder, tokenizer=tokenizer, batch_size=batch_size, window=window,
            context_before=context_before, context_after=context_after, value_dtype=value_dtype,
            shard_rows=shard_rows, progress=progress,
        )
        db = cls.open(folder, verify=False)
        db._workspace = workspace
        db.model = model
        db.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if index is not None:
            if index == "auto":
                import importlib.util

                import circuitlab.analysis.postings as postings

                if not postings.available() and importlib.util.find_spec("faiss") is None:
                    warnings.warn("neither numba nor faiss is installed: building the database without approximate indexes")
                    return db
            db.build_index(kind=index, sketch=sketch, progress=progress)
        return db

    @classmethod
    def from_collection(cls, collection) -> "CircuitDB":
        """The database `circuitlab.analysis.collect.collect` wrote (its shards, read in place)."""
        return cls.open(collection.folder, verify=False)

    @classmethod
    def from_codes(
        cls,
        codes: Mapping[int, SparseCode | CodeMatrix],
        metadata=None,
        *,
        value_dtype: str = "float32",
        **kwargs: Any,
    ) -> "CircuitDB":
        """A database over codes from elsewhere ({layer: SparseCode or CodeMatrix}, rows in order).

        metadata: a DataFrame with one row per code (missing standard columns are filled with blanks).
        """
        import pandas as pd

        matrices = {
            int(layer): code if isinstance(code, CodeMatrix) else CodeMatrix.from_sparse_code(code, value_dtype)
            for layer, code in codes.items()
        }
        n_rows = len(next(iter(matrices.values())))
        metadata = pd.DataFrame(index=range(n_rows)) if metadata is None else metadata.reset_index(drop=True).copy()
        defaults = {
            "sequence_id": 0, "position": np.arange(n_rows), "token_id": -1, "token": "", "category": None,
            "context": "", "token_start": 0, "token_end": 0,
        }
        for column, default in defaults.items():
            if column not in metadata:
                metadata[column] = default
        if "top_predictions" not in metadata:
            metadata["top_predictions"] = [[] for _ in range(n_rows)]
        if "circuit_id" not in metadata:
            metadata.insert(0, "circuit_id", np.arange(n_rows, dtype=np.int64))
        return cls(metadata, matrices, **kwargs)

    @classmethod
    def open(
        cls,
        folder: str | os.PathLike,
        model: Any = None,
        tokenizer: Any = None,
        *,
        allow_mismatch: bool = False,
        verify: bool = True,
        skip_damaged: bool = False,
    ) -> "CircuitDB":
        """Open a saved database reading only its manifest (and each file's size); a shard is mapped, checked
        and (verify=True) hashed against the manifest when a search first reads it.

        A missing or damaged shard is a DamagedShardError naming the file, its shard and its circuits; with
        skip_damaged=True it is set aside with a warning and the other shards answer. With `model` (and/or
        `tokenizer`), refuses a database built with another model or tokenizer (DatabaseMismatchError) unless
        allow_mismatch=True; the model is attached for text queries.
        """
        return cls._opened(Path(folder), model, tokenizer, allow_mismatch, verify=verify, skip_damaged=skip_damaged)

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike,
        model: Any = None,
        tokenizer: Any = None,
        *,
        allow_mismatch: bool = False,
        verify: bool = True,
        mmap: bool = True,
    ) -> "CircuitDB":
        """`open`, then read every file now: each checked against the manifest's sha256 (verify=False skips
        that), parsed, and its arrays memory-mapped (mmap=False reads them into memory)."""
        db = cls._opened(Path(folder), model, tokenizer, allow_mismatch, verify=verify, mmap=mmap)
        db.shard_table.check_all()
        for layer in db.layers:
            if layer in db.indexes:
                db.indexes[layer]  # parsed now, so a damaged index file fails here
        return db

    @classmethod
    def _opened(cls, folder: Path, model, tokenizer, allow_mismatch: bool, **options: Any) -> "CircuitDB":
        manifest = read_manifest(folder)
        store.clean_if_no_writer(folder, manifest)
        table = StoredShards(folder, manifest, **options)
        db = cls.__new__(cls)
        db._setup(
            table,
            model_config_hash=manifest.model_config_hash,
            tokenizer_hash=manifest.tokenizer_hash,
            model_config=manifest.model_config_,
            layer_layouts={layer: manifest.layer_info[str(layer)].layout for layer in manifest.layers},
            corpus_stats=manifest.corpus,
            indexes=IndexTable.stored(table),
            index_reports={layer: manifest.layer_info[str(layer)].index for layer in manifest.layers
                           if manifest.layer_info[str(layer)].index},
            model_source=manifest.model_source,
            collection=[source.model_dump() for source in manifest.collection or []],
        )
        files = {name: record.model_dump() for name, record in manifest.files.items()}
        db._fingerprint = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if model is not None or tokenizer is not None:
            db.check_model(model, tokenizer, allow_mismatch=allow_mismatch, where=str(folder / MANIFEST))
            db.model, db.tokenizer = model, tokenizer
        return db

    # --- basic facts ----------------------------------------------------------------------------------

    @property
    def layers(self) -> list[int]:
        return list(self.shard_table.layers)

    def __len__(self) -> int:
        return self.shard_table.n_rows

    def __repr__(self) -> str:
        indexed = ", ".join(f"{layer}:{self.index_reports.get(layer, {}).get('kind', '?')}" for layer in self.indexes) or "none"
        return (f"CircuitDB({len(self)} circuits in {self.shard_table.n_shards} shard(s), layers {self.layers}, "
                f"approximate indexes {indexed})")

    @property
    def metadata(self):
        if self._metadata is None:
            self._metadata = self.shard_table.whole_metadata()
        return self._metadata

    def metadata_rows(self, circuit_ids):
        """The metadata of some circuits (in the order given), read from their shards only."""
        if self._metadata is not None:
            return self._metadata.iloc[np.asarray(circuit_ids, dtype=np.int64)].reset_index(drop=True)
        return self.shard_table.metadata_rows(circuit_ids)

    def require_layer(self, layer: int) -> int:
        """`layer` as an int, or a CircuitDBError naming the layers this database holds."""
        if layer is None:
            raise CircuitDBError(f"pass a layer: this database holds layers {self.layers}")
        layer = int(layer)
        if layer not in self.layers:
            raise CircuitDBError(f"layer {layer} is not in this database; it holds layers {self.layers}")
        return layer

    def code(self, layer: int, circuit_ids) -> SparseCode:
        """The stored codes of some circuits, as a SparseCode [len(circuit_ids), nnz] (usable as a query)."""
        return self.shard_table.rows(self.require_layer(layer), np.atleast_1d(circuit_ids)).to_sparse_code()

    def fingerprint(self) -> str:
        """A sha256 of the database's content (from the manifest's checksums for a saved database)."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            digest.update(np.ascontiguousarray(self.metadata["token_id"].to_numpy(dtype=np.int64)).tobytes())
            for layer, matrix in self.codes.items():
                digest.update(f"layer{layer}:{matrix.size}".encode())
                digest.update(np.ascontiguousarray(matrix.indices).tobytes())
                digest.update(np.ascontiguousarray(matrix.values).tobytes())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def attach(self, model: Any, tokenizer: Any = None, allow_mismatch: bool = False) -> None:
        """Use `model` (and its tokenizer) for text queries, after checking it is the one that built the database."""
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        self.check_model(model, tokenizer, allow_mismatch=allow_mismatch)
        self.model, self.tokenizer = model, tokenizer

    def check_model(self, model: Any, tokenizer: Any = None, *, allow_mismatch: bool = False, where: str = "this database") -> None:
        problems = []
        if model is not None and self.model_config_hash is not None:
            model_hash = model.config.hash()
            if model_hash != self.model_config_hash:
                problems.append(
                    f"model config hash {model_hash[:12]} != {self.model_config_hash[:12]} recorded in {where}"
                )
        tokenizer_hash = _model_tokenizer_hash(tokenizer)
        if tokenizer_hash is not None and self.tokenizer_hash is not None and tokenizer_hash != self.tokenizer_hash:
            problems.append(f"tokenizer hash {tokenizer_hash[:12]} != {self.tokenizer_hash[:12]} recorded in {where}")
        if problems:
            message = (
                f"{'; '.join(problems)}: the database was built with another model or tokenizer, so its circuits "
                "are not comparable with this model's. Rebuild it with this model, or pass allow_mismatch=True "
                "if you know the two agree"
            )
            if not allow_mismatch:
                raise DatabaseMismatchError(message)
            warnings.warn(message)

    # --- indexes --------------------------------------------------------------------------------------

    def exact_index(self, layer: int, shard: int = 0) -> ExactIndex:
        """The CPU exact index of the run of shards that holds `shard` (a database made in memory: the whole
        layer), built on first use and kept."""
        from circuitlab.analysis.circuitdb.indexes import group_index, shard_groups

        layer = self.require_layer(layer)
        for _, group in shard_groups(self.shard_table, layer, range(self.shard_table.n_shards)):
            if shard in group:
                return group_index(self, layer, group)[0]
        raise CircuitDBError(f"shard {shard} is damaged and set aside")

    def build_index(
        self,
        layers: Sequence[int] | None = None,
        *,
        kind: str = "auto",
        sketch: SketchSpec | None = None,
        measure_recall: bool = True,
        n_recall_queries: int = 200,
        progress: bool = True,
        **index_options: Any,
    ) -> dict[int, dict]:
        """Build the approximate index of each layer and measure its recall@10 against exact search.

        FAISS kinds train on a sample of rows and add the rows shard by shard, so the codes are never loaded
        whole; "postings" shares each shard's exact posting lists. Recall is measured on `n_recall_queries`
        stored circuits searching for their neighbours (themselves left out). Returns {layer: report} with
        kind, parameters, build seconds, recall@10 and queries/s.
        """
        layers = self.layers if layers is None else [self.require_layer(layer) for layer in layers]
        return build_indexes(self, layers, kind, sketch, measure_recall, n_recall_queries, progress, index_options)

    def measure_recall(self, layer: int, k: int = 10, n_queries: int = 200, n_candidates: int | None = None, seed: int = 0) -> dict:
        """recall@k of approximate against exact search, and queries/s of both, on stored circuits."""
        return measure_recall(self, self.require_layer(layer), k, n_queries, n_candidates, seed)

    # --- search ---------------------------------------------------------------------------------------

    def search_ids(
        self,
        queries: CodeMatrix,
        layer: int,
        k: int = 10,
        *,
        exact: bool = True,
        exclude: np.ndarray | None = None,
        n_candidates: int | None = None,
        device: str | None = "auto",
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw search: (circuit ids [Q, k], cosine distances [Q, k]); -1 / inf where fewer exist.

        device: where exact search runs ("auto": a GPU when there is one, else the CPU; "cpu", "cuda",
        "cuda:N"); both give brute force's answer. `last_search` says where it ran."""
        return search.search_ids(self, queries, self.require_layer(layer), k, exact, exclude, n_candidates, device)

    def search(
        self,
        query: str | SparseCode | CodeMatrix | Mapping[int, SparseCode],
        layer: int,
        k: int = 10,
        exact: bool = True,
        *,
        n_candidates: int | None = None,
        device: str | None = "auto",
    ):
        """The k nearest stored circuits of every query token, as a pandas DataFrame (seed 000, table 3).

        query: text (run through the attached model: every token becomes a query), a SparseCode of any
        leading shape (each row a query), a CodeMatrix, or `model.sparse_codes(cache)` ({layer: SparseCode}).
        exact: True = exact cosine search (equal to brute force); False = approximate candidates (posting lists
        or FAISS sketches) re-ranked exactly (`n_candidates` of them). device: as in `search_ids`; the table's
        `attrs["served_by"]` says where the search ran.

        Columns: query_position, query_token, rank (1..k), distance (cosine distance), circuit_id, token,
        context (the neighbour's excerpt with the token marked «like this»), top_predictions (" | "-joined),
        and category, sequence_id, position, token_start, token_end (the token's span in the plain excerpt
        `context_plain`), layer.
        """
        return search.search_table(self, query, self.require_layer(layer), k, exact, n_candidates, device)

    def neighbours(self, layer: int, circuit_ids, k: int = 10, *, within=None, exact: bool = True,
                   n_candidates: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest other circuits of stored circuits: (circuit ids [Q, k], distances [Q, k]).

        within: restrict the neighbours to these circuit ids (for example the circuits of a UMAP map); the
        search then runs on an index of that subset (exact, or FAISS sketches when exact=False).
        """
        return search.neighbours(self, self.require_layer(layer), circuit_ids, k, within, exact, n_candidates)

    def distribute(self, context) -> None:
        """Split the shards over the ranks of a torchrun job (a `circuitlab.distributed.DistributedContext`):
        from now on every search must be called on every rank with the same queries; each rank searches its
        shards on its own device and the answers are merged on all ranks (circuitdb/ranks.py)."""
        from circuitlab.analysis.circuitdb.ranks import RankPlan

        self.ranks = RankPlan.split(self.shard_table, context) if context.enabled else None

    # --- analyses that live elsewhere ----------------------------------------------------------------

    def semantic_score(self, layer: int, k: int = 10, **options: Any) -> dict:
        """`circuitlab.analysis.semantic.semantic_score` of this database."""
        from circuitlab.analysis.semantic import semantic_score

        return semantic_score(self, layer, k, **options)

    def semantic_scores(self, layers: Sequence[int] | None = None, **options: Any):
        """`circuitlab.analysis.semantic.semantic_scores` of this database (one row per layer)."""
        from circuitlab.analysis.semantic import semantic_scores

        return semantic_scores(self, layers, **options)

    # --- persistence ----------------------------------------------------------------------------------

    @property
    def manifest(self) -> dict:
        """What `save` writes into manifest.json, without the file list and shards (`manifest.describe`)."""
        return describe(self)

    def info(self) -> dict:
        """A summary: counts, layers, code shapes, shards, index kinds and measured recall."""
        return dict(self.manifest, shard_rows=[int(b - a) for a, b in zip(self.shard_table.starts[:-1], self.shard_table.starts[1:])])

    def save(self, folder: str | os.PathLike, shard_rows: int | None = None) -> Path:
        """Save atomically (a crash mid-save leaves the previous database in `folder` readable; see store.py),
        `shard_rows` rows a shard (default: this database's shards, or store.SHARD_ROWS for one made in
        memory). Saving a database opened from the same folder moves it onto the new files."""
        folder = Path(folder)
        same = isinstance(self.shard_table, StoredShards) and self.shard_table.folder.resolve() == folder.resolve()
        store.save_database(self, folder, shard_rows)
        if same:
            reopened = CircuitDB.open(folder, verify=False)
            self.shard_table, self.codes = reopened.shard_table, reopened.codes
            self.indexes, self._exact, self._device = reopened.indexes, {}, {}
            self._fingerprint = reopened._fingerprint
        return folder

    _layer = require_layer  # the name analyses used before
