"""CircuitDB: a database of circuits with nearest-neighbour lookup (seed 000, sections 4.1-4.2).

"Given a new circuit, which circuits seen before look like it?" A database holds, per token of a reference
corpus and per chosen layer, the token's sparse code (its circuit), and once per token the token, its
sequence and position, its category label, a context excerpt and the model's top-5 next-token predictions.
Search compares codes by cosine distance (docs/analyses/circuit-lookup.md), exactly (blocked sparse products, equal to
brute force) or approximately (FAISS over compact sketches, re-ranked exactly; see
`circuitlab.analysis.codeindex`).

    db = CircuitDB.build(model, texts, layers=None)
    hits = db.search("Max had a red collar", layer=2, k=10)      # seed 000, table 3
    neighbour_heatmap(hits).show()                               # seed 000, figure 6
    db.save("runs/db"); db = CircuitDB.load("runs/db", model=model)

This module is the store and its search. Saving and loading live in `circuitlab.analysis.dbstore`, the
semantic score in `circuitlab.analysis.semantic`, the hits table and heatmap in
`circuitlab.analysis.neighbour_figures`.

Shape letters: Q queries, k neighbours per query.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import circuitlab.analysis.dbstore as dbstore
from circuitlab.analysis.codeindex import (
    ApproximateIndex,
    CodeMatrix,
    ExactIndex,
    SketchSpec,
    exact_search,
    recall_at_k,
)
from circuitlab.analysis.dberrors import CircuitDBError, CorruptDatabaseError, DatabaseMismatchError
from circuitlab.analysis.dbstore import FORMAT_NAME, FORMAT_VERSION, LOCK, MANIFEST, sha256_file
from circuitlab.analysis.neighbour_figures import TOKEN_MARKS, format_hits, mark_token, neighbour_heatmap
from circuitlab.codes import SparseCode
from circuitlab.errors import UserError

__all__ = [
    "CircuitDB", "CircuitDBError", "CorruptDatabaseError", "DatabaseMismatchError", "FORMAT_NAME",
    "FORMAT_VERSION", "LOCK", "MANIFEST", "TOKEN_MARKS", "format_hits", "mark_token", "neighbour_heatmap",
    "sha256_file",
]


def _model_tokenizer_hash(tokenizer: Any) -> str | None:
    return tokenizer.hash() if tokenizer is not None and hasattr(tokenizer, "hash") else None


class CircuitDB:
    """Circuits of a reference corpus, searchable by cosine distance between sparse codes.

    Attributes: `metadata` (pandas DataFrame, one row per token, `circuit_id` = row number), `codes`
    ({layer: CodeMatrix}), `layers`, `manifest` (what `save` writes, without the file list), `model` and
    `tokenizer` when attached (text queries need them).
    """

    def __init__(
        self,
        metadata,
        codes: Mapping[int, CodeMatrix],
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
    ) -> None:
        if not codes:
            raise CircuitDBError("a circuit database needs the codes of at least one layer")
        n_rows = {layer: len(matrix) for layer, matrix in codes.items()}
        if len(set(n_rows.values())) != 1 or next(iter(n_rows.values())) != len(metadata):
            raise CircuitDBError(
                f"every layer needs one code per metadata row: metadata has {len(metadata)} rows, codes {n_rows}"
            )
        self.metadata = metadata
        self.codes = {int(layer): matrix for layer, matrix in sorted(codes.items())}
        self.model_config_hash = model_config_hash
        self.tokenizer_hash = tokenizer_hash
        self.model_config = model_config or {}
        self.layer_layouts = {int(k): dict(v) for k, v in (layer_layouts or {}).items()}
        self.corpus_stats = dict(corpus_stats or {})
        self.indexes: dict[int, ApproximateIndex] = dict(indexes or {})
        self.index_reports: dict[int, dict] = {int(k): dict(v) for k, v in (index_reports or {}).items()}
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        self.model_source = model_source  # where the model came from (folder or shipped name), when known
        self._exact: dict[int, ExactIndex] = {}
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
        progress: bool = True,
    ) -> "CircuitDB":
        """Collect the circuits of `texts` (strings or labelled stories) at `layers` (None = every layer).

        index: "auto" builds an approximate index per layer and measures its recall@10 against exact search:
        FAISS sketches when faiss is installed (flat below 20k circuits, IVF above), else pruned posting
        lists of active units (kind "postings", needs numba); "postings", "flat", "ivf" or "hnsw" force a
        kind; None builds none (exact search only; `build_index` adds one later).
        workdir: where shards and consolidated arrays go while the database lives (default: a temporary
        folder removed with the database object); `save` copies what it needs.
        """
        from circuitlab.analysis.collect import collect

        if workdir is None:
            workspace = tempfile.TemporaryDirectory(prefix="circuitdb-")
            folder = Path(workspace.name)
        else:
            workspace = None
            folder = Path(workdir)
        collection = collect(
            model, texts, layers, out_dir=folder / "shards", tokenizer=tokenizer, batch_size=batch_size,
            window=window, context_before=context_before, context_after=context_after,
            value_dtype=value_dtype, progress=progress,
        )
        db = cls.from_collection(collection, workdir=folder / "arrays", value_dtype=value_dtype)
        shutil.rmtree(folder / "shards", ignore_errors=True)
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
    def from_collection(
        cls, collection, workdir: str | os.PathLike | None = None, value_dtype: str = "float32"
    ) -> "CircuitDB":
        """A database over the shards of a `circuitlab.analysis.collect.Collection`."""
        codes = {
            layer: collection.codes(layer, out=None if workdir is None else Path(workdir) / f"layer{layer}", value_dtype=value_dtype)
            for layer in collection.layers
        }
        stats = collection.stats
        return cls(
            collection.metadata(),
            codes,
            model_config_hash=collection.model_config_hash,
            tokenizer_hash=collection.tokenizer_hash,
            model_config=collection.model_config,
            layer_layouts=collection.layer_layouts,
            corpus_stats={
                "n_sequences": stats.n_sequences,
                "n_tokens": stats.n_tokens,
                "collection_seconds": round(stats.seconds, 3),
            },
        )

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

    # --- basic facts ----------------------------------------------------------------------------------

    @property
    def layers(self) -> list[int]:
        return list(self.codes)

    def __len__(self) -> int:
        return len(self.metadata)

    def __repr__(self) -> str:
        indexed = ", ".join(f"{layer}:{self.indexes[layer].kind}" for layer in self.indexes) or "none"
        return f"CircuitDB({len(self)} circuits, layers {self.layers}, approximate indexes {indexed})"

    def require_layer(self, layer: int) -> int:
        """`layer` as an int, or a CircuitDBError naming the layers this database holds."""
        if layer is None:
            raise CircuitDBError(f"pass a layer: this database holds layers {self.layers}")
        layer = int(layer)
        if layer not in self.codes:
            raise CircuitDBError(f"layer {layer} is not in this database; it holds layers {self.layers}")
        return layer

    def code(self, layer: int, circuit_ids) -> SparseCode:
        """The stored codes of some circuits, as a SparseCode [len(circuit_ids), nnz] (usable as a query)."""
        return self.codes[self.require_layer(layer)].rows(np.atleast_1d(circuit_ids)).to_sparse_code()

    def fingerprint(self) -> str:
        """A sha256 of the database's content (from the manifest's checksums for a loaded database)."""
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

    def exact_index(self, layer: int) -> ExactIndex:
        """The layer's codes as CSR row blocks for exact search (built on first use, kept)."""
        layer = self.require_layer(layer)
        if layer not in self._exact:
            self._exact[layer] = ExactIndex(self.codes[layer])
        return self._exact[layer]

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

        Recall is measured on `n_recall_queries` stored circuits searching for their neighbours (themselves
        left out). Returns {layer: report} with kind, parameters, build seconds, recall@10 and queries/s.
        """
        reports = {}
        for layer in self.layers if layers is None else [self.require_layer(layer) for layer in layers]:
            started = time.perf_counter()
            options = dict(index_options)
            if kind in ("auto", "postings") and self.exact_index(layer).postings is not None:
                options["posting_lists"] = self.exact_index(layer).postings  # one copy serves both searches
            index = ApproximateIndex.build(self.codes[layer], sketch, kind, progress=progress, **options)
            self.indexes[layer] = index
            report = {
                "kind": index.kind, "params": index.params, "sketch": index.spec.to_dict(),
                "build_seconds": round(time.perf_counter() - started, 3),
            }
            if measure_recall and len(self) > 1:
                report.update(self.measure_recall(layer, k=10, n_queries=n_recall_queries))
            self.index_reports[layer] = report
            reports[layer] = report
        return reports

    def measure_recall(self, layer: int, k: int = 10, n_queries: int = 200, n_candidates: int | None = None, seed: int = 0) -> dict:
        """recall@k of approximate against exact search, and queries/s of both, on stored circuits."""
        layer = self.require_layer(layer)
        rng = np.random.default_rng(seed)
        query_ids = np.sort(rng.choice(len(self), min(n_queries, len(self)), replace=False))
        queries = self.codes[layer].rows(query_ids)
        self.exact_index(layer)
        started = time.perf_counter()
        _, exact_distances = self.search_ids(queries, layer, k, exact=True, exclude=query_ids)
        exact_seconds = time.perf_counter() - started
        started = time.perf_counter()
        _, approximate_distances = self.search_ids(
            queries, layer, k, exact=False, exclude=query_ids, n_candidates=n_candidates
        )
        approximate_seconds = time.perf_counter() - started
        return {
            f"recall_at_{k}": round(recall_at_k(exact_distances, approximate_distances), 5),
            "recall_queries": int(query_ids.size),
            "exact_queries_per_second": round(query_ids.size / max(exact_seconds, 1e-9), 1),
            "approximate_queries_per_second": round(query_ids.size / max(approximate_seconds, 1e-9), 1),
        }

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
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw search: (circuit ids [Q, k], cosine distances [Q, k]); -1 / inf where fewer exist."""
        layer = self.require_layer(layer)
        if k < 1:
            raise CircuitDBError(f"k must be at least 1, got {k}")
        codes = self.codes[layer]
        if queries.size != codes.size:
            raise CircuitDBError(
                f"query codes have size {queries.size} but layer {layer} stores codes of size {codes.size} "
                "(were they made by another model or layer?)"
            )
        exclude = None if exclude is None else np.asarray(exclude, dtype=np.int64)
        if exact:
            return exact_search(codes, self.exact_index(layer), queries, k, exclude)
        if layer not in self.indexes:
            warnings.warn(f"layer {layer} has no approximate index yet: building one now (db.build_index)")
            self.build_index([layer], progress=False)
        return self.indexes[layer].search(codes, queries, k, exclude, n_candidates)

    def search(
        self,
        query: str | SparseCode | CodeMatrix | Mapping[int, SparseCode],
        layer: int,
        k: int = 10,
        exact: bool = True,
        *,
        n_candidates: int | None = None,
    ):
        """The k nearest stored circuits of every query token, as a pandas DataFrame (seed 000, table 3).

        query: text (run through the attached model: every token becomes a query), a SparseCode of any
        leading shape (each row a query), a CodeMatrix, or `model.sparse_codes(cache)` ({layer: SparseCode}).
        exact: True = exact cosine search (equal to brute force); False = FAISS sketches + exact re-ranking of
        `n_candidates` (default max(512, 50 k)) candidates.

        Columns: query_position, query_token, rank (1..k), distance (cosine distance), circuit_id, token,
        context (the neighbour's excerpt with the token marked «like this»), top_predictions (" | "-joined),
        and category, sequence_id, position, token_start, token_end (the token's span in the plain excerpt
        `context_plain`), layer.
        """
        layer = self.require_layer(layer)
        if isinstance(query, str):
            queries, positions, query_tokens = self._text_query(query, layer)
        else:
            if isinstance(query, Mapping):
                if layer not in query:
                    raise CircuitDBError(f"the query codes hold layers {sorted(query)}, not layer {layer}")
                query = query[layer]
            queries = query if isinstance(query, CodeMatrix) else CodeMatrix.from_sparse_code(query)
            positions = np.arange(len(queries))
            query_tokens = [""] * len(queries)
        ids, distances = self.search_ids(queries, layer, k, exact=exact, n_candidates=n_candidates)
        return self._hits_table(ids, distances, positions, query_tokens, layer)

    def _text_query(self, text: str, layer: int) -> tuple[CodeMatrix, np.ndarray, list[str]]:
        if self.model is None or self.tokenizer is None:
            raise CircuitDBError(
                "text queries run the model that built the database: load with CircuitDB.load(folder, model=model) "
                "or call db.attach(model) (the model needs a tokenizer)"
            )
        token_ids = self.tokenizer.encode(text)
        if not token_ids:
            raise CircuitDBError("the query text is empty after tokenization; give at least one character")
        if len(token_ids) > self.model.config.n_ctx:
            raise CircuitDBError(
                f"the query is {len(token_ids)} tokens, longer than the model's context {self.model.config.n_ctx}; "
                "shorten it"
            )
        device = next(self.model.parameters()).device
        tokens = torch.tensor([token_ids], dtype=torch.long, device=device)
        with torch.inference_mode():
            _, cache = self.model.run_with_cache(tokens, names_filter=self.model.sparse_code_hooks([layer]))
            code = self.model.sparse_codes(cache, [layer])[layer]
        queries = CodeMatrix.from_sparse_code(code)
        return queries, np.arange(len(token_ids)), [self.tokenizer.token_str(t) for t in token_ids]

    def _hits_table(self, ids: np.ndarray, distances: np.ndarray, positions: np.ndarray, query_tokens: list[str], layer: int):
        import pandas as pd

        n_queries, k = ids.shape
        found = ids >= 0
        rows = self.metadata.iloc[ids[found]].reset_index(drop=True)
        query_slot = np.repeat(np.arange(n_queries), k).reshape(n_queries, k)[found]
        ranks = np.tile(np.arange(1, k + 1), (n_queries, 1))[found]
        predictions = [" | ".join(str(p) for p in list(item)) for item in rows["top_predictions"]]
        marked = [
            mark_token(str(context), start, end)
            for context, start, end in zip(rows["context"], rows["token_start"], rows["token_end"])
        ]
        return pd.DataFrame(
            {
                "query_position": positions[query_slot].astype(np.int64),
                "query_token": [query_tokens[slot] for slot in query_slot],
                "rank": ranks.astype(np.int64),
                "distance": distances[found],
                "circuit_id": ids[found],
                "token": rows["token"].to_numpy(),
                "context": marked,
                "top_predictions": predictions,
                "category": rows["category"].to_numpy(),
                "sequence_id": rows["sequence_id"].to_numpy(),
                "position": rows["position"].to_numpy(),
                "context_plain": rows["context"].to_numpy(),
                "token_start": rows["token_start"].to_numpy(),
                "token_end": rows["token_end"].to_numpy(),
                "layer": layer,
            }
        )

    def neighbours(
        self,
        layer: int,
        circuit_ids,
        k: int = 10,
        *,
        within=None,
        exact: bool = True,
        n_candidates: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest other circuits of stored circuits: (circuit ids [Q, k], distances [Q, k]).

        within: restrict the neighbours to these circuit ids (for example the circuits of a UMAP map); the
        search then runs on an index of that subset (exact blocked products, or FAISS sketches when
        exact=False).
        """
        layer = self.require_layer(layer)
        circuit_ids = np.asarray(circuit_ids, dtype=np.int64)
        codes = self.codes[layer]
        queries = codes.rows(circuit_ids)
        if within is None:
            return self.search_ids(queries, layer, k, exact=exact, exclude=circuit_ids, n_candidates=n_candidates)
        within = np.asarray(within, dtype=np.int64)
        subset = codes.rows(within)
        position_in_subset = np.full(len(self), -1, dtype=np.int64)
        position_in_subset[within] = np.arange(within.size)
        exclude = position_in_subset[circuit_ids]
        if exact:
            local_ids, distances = exact_search(subset, ExactIndex(subset), queries, k, exclude)
        else:
            spec = self.indexes[layer].spec if layer in self.indexes else SketchSpec()
            index = ApproximateIndex.build(subset, spec, "auto")
            local_ids, distances = index.search(subset, queries, k, exclude, n_candidates)
        return np.where(local_ids >= 0, within[np.maximum(local_ids, 0)], -1), distances

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
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "model_config_hash": self.model_config_hash,
            "tokenizer_hash": self.tokenizer_hash,
            "model_config": self.model_config,
            "model_source": self.model_source,
            "layers": self.layers,
            "n_circuits": len(self),
            "corpus": self.corpus_stats,
            "layer_info": {
                str(layer): {
                    "code_size": matrix.size,
                    "nnz": matrix.nnz,
                    "value_dtype": str(matrix.values.dtype),
                    "layout": self.layer_layouts.get(layer, {}),
                    "index": self.index_reports.get(layer) if layer in self.indexes else None,
                }
                for layer, matrix in self.codes.items()
            },
        }

    def info(self) -> dict:
        """A summary: counts, layers, code shapes, index kinds and measured recall."""
        return self.manifest

    def save(self, folder: str | os.PathLike) -> Path:
        """Save atomically: a crash mid-save leaves the previous database in `folder` readable (see dbstore)."""
        return dbstore.save_database(self, folder)

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
        """Load a saved database, checking every file against the manifest's sha256 (verify=False skips it).

        With `model` (and/or `tokenizer`), refuses a database built with another model or tokenizer
        (DatabaseMismatchError) unless allow_mismatch=True; the model is attached for text queries.
        mmap: memory-map the code arrays instead of reading them into memory.
        """
        db = dbstore.load_database(cls, folder, verify=verify, mmap=mmap)
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if model is not None or tokenizer is not None:
            db.check_model(model, tokenizer, allow_mismatch=allow_mismatch, where=str(Path(folder) / MANIFEST))
            db.model, db.tokenizer = model, tokenizer
        return db

    _layer = require_layer  # the name analyses used before
