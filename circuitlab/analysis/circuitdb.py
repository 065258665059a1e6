"""CircuitDB: a persistent database of circuits with nearest-neighbour lookup (seed 000, sections 4.1-4.2).

"Given a new circuit, which circuits seen before look like it?" A database holds, per token of a reference
corpus and per chosen layer, the token's sparse code (its circuit), and once per token the token, its
sequence and position, its category label, a context excerpt and the model's top-5 next-token predictions.
Search compares codes by cosine distance (DESIGN section 7), exactly (equal to brute force) or
approximately (FAISS over compact sketches, re-ranked exactly; see `circuitlab.analysis.codeindex`).

    db = CircuitDB.build(model, texts, layers=None)
    hits = db.search("Max had a red collar", layer=2, k=10)      # seed 000, table 3
    neighbour_heatmap(hits).show()                               # seed 000, figure 6
    db.save("runs/db"); db = CircuitDB.load("runs/db", model=model)

On disk a database is a folder:

    manifest.json              format version, model config hash, tokenizer hash, layers, counts, index
                               settings and measured recall, and the sha256 and size of every data file;
                               it names the data folder below and is the commit point of a save
    data-<stamp>/metadata.parquet        one row per token (circuit_id = row number)
    data-<stamp>/layer<l>.indices.npy    int32 [circuits, nnz], sorted per row
    data-<stamp>/layer<l>.values.npy     float32 or float16 [circuits, nnz]
    data-<stamp>/layer<l>.sketch.faiss   the approximate index of layer l, when built

A save writes a new data folder, then replaces manifest.json atomically (os.replace), then deletes the old
data folder: a crash at any point leaves a manifest that names a complete data folder. Data folders no
manifest names (an interrupted save) are removed by the next save or load.

Shape letters: Q queries, k neighbours per query.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from circuitlab.analysis.codeindex import (
    ApproximateIndex,
    CodeMatrix,
    InvertedLists,
    SketchSpec,
    exact_search,
    recall_at_k,
    rerank,
)
from circuitlab.codes import SparseCode
from circuitlab.errors import UserError

FORMAT_NAME = "circuitlab.circuitdb"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK = ".save.lock"
DATA_PREFIX = "data-"
TOKEN_MARKS = ("«", "»")


class CircuitDBError(UserError):
    """A circuit database that cannot be used as asked."""


class CorruptDatabaseError(CircuitDBError):
    """A database file is missing, truncated or modified since it was saved."""


class DatabaseMismatchError(CircuitDBError):
    """A database built with another model or tokenizer than the one given."""


# ------------------------------------------------------------------------------------------------- helpers


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_token(context: str, start: int, end: int, marks: tuple[str, str] = TOKEN_MARKS) -> str:
    """The excerpt with its token wrapped in marks (leading whitespace of the token stays outside)."""
    start, end = int(start), int(end)
    while start < end and context[start].isspace():
        start += 1
    return f"{context[:start]}{marks[0]}{context[start:end]}{marks[1]}{context[end:]}"


def _model_tokenizer_hash(tokenizer: Any) -> str | None:
    return tokenizer.hash() if tokenizer is not None and hasattr(tokenizer, "hash") else None


# ---------------------------------------------------------------------------------------------- database


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
        self._lists: dict[int, InvertedLists] = {}
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

        index: "auto" builds an approximate FAISS index per layer when faiss is installed (flat below 20k
        circuits, IVF above) and measures its recall@10 against exact search; "flat", "ivf" or "hnsw" force
        a kind; None builds none (exact search only; `build_index` adds one later).
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
                try:
                    import faiss  # noqa: F401
                except ImportError:
                    warnings.warn("faiss is not installed: building the database without approximate indexes")
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

    def _layer(self, layer: int) -> int:
        if layer is None:
            raise CircuitDBError(f"pass a layer: this database holds layers {self.layers}")
        layer = int(layer)
        if layer not in self.codes:
            raise CircuitDBError(f"layer {layer} is not in this database; it holds layers {self.layers}")
        return layer

    def code(self, layer: int, circuit_ids) -> SparseCode:
        """The stored codes of some circuits, as a SparseCode [len(circuit_ids), nnz] (usable as a query)."""
        return self.codes[self._layer(layer)].rows(np.atleast_1d(circuit_ids)).to_sparse_code()

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

    def inverted_lists(self, layer: int) -> InvertedLists:
        layer = self._layer(layer)
        if layer not in self._lists:
            self._lists[layer] = InvertedLists(self.codes[layer])
        return self._lists[layer]

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
        for layer in self.layers if layers is None else [self._layer(layer) for layer in layers]:
            started = time.perf_counter()
            index = ApproximateIndex.build(self.codes[layer], sketch, kind, progress=progress, **index_options)
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
        layer = self._layer(layer)
        rng = np.random.default_rng(seed)
        query_ids = np.sort(rng.choice(len(self), min(n_queries, len(self)), replace=False))
        queries = self.codes[layer].rows(query_ids)
        self.inverted_lists(layer)
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
        layer = self._layer(layer)
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
            return exact_search(codes, self.inverted_lists(layer), queries, k, exclude)
        if layer not in self.indexes:
            warnings.warn(f"layer {layer} has no approximate index yet: building one now (db.build_index)")
            self.build_index([layer], progress=False)
        n_candidates = n_candidates or max(512, 50 * k)
        candidates = self.indexes[layer].candidates(queries, n_candidates + (0 if exclude is None else 1))
        return rerank(codes, queries, candidates, k, exclude)

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
        layer = self._layer(layer)
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
        search then runs on an index of that subset (exact inverted lists, or FAISS sketches when
        exact=False).
        """
        layer = self._layer(layer)
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
            local_ids, distances = exact_search(subset, InvertedLists(subset), queries, k, exclude)
        else:
            spec = self.indexes[layer].spec if layer in self.indexes else SketchSpec()
            index = ApproximateIndex.build(subset, spec, "auto")
            wanted = n_candidates or max(512, 50 * k)
            local_ids, distances = rerank(subset, queries, index.candidates(queries, wanted + 1), k, exclude)
        return np.where(local_ids >= 0, within[np.maximum(local_ids, 0)], -1), distances

    # --- semantic score (beyond the paper) ------------------------------------------------------------

    def semantic_score(
        self,
        layer: int,
        k: int = 10,
        *,
        n_queries: int = 2000,
        n_shuffles: int = 20,
        exact: bool = True,
        seed: int = 0,
    ) -> dict:
        """How much do circuits cluster by meaning? A number for seed 000's "semantically related" claim.

        Among circuits whose token has a category label, draw up to `n_queries` (seeded) and find each one's
        k nearest other labelled circuits. `score` is the mean fraction of neighbours whose label equals the
        query's; `baseline` is the same with the labels randomly permuted over the labelled circuits (mean of
        `n_shuffles` permutations, `baseline_std` their spread), which is what label frequencies alone give.
        Identical tokens share a label trivially, so `score_other_tokens` repeats the score over neighbours
        with a different token id only (queries with none are skipped), and `same_token_fraction` says how
        many neighbours are the same token.
        """
        for option, value in (("k", k), ("n_queries", n_queries), ("n_shuffles", n_shuffles)):
            if value < 1:
                raise ValueError(f"semantic score: {option} must be at least 1, got {value}")
        layer = self._layer(layer)
        categories = self.metadata["category"]
        labelled = np.flatnonzero(categories.notna().to_numpy())
        if labelled.size < k + 1:
            raise CircuitDBError(
                f"semantic score needs category labels: only {labelled.size} circuits of layer {layer} have one "
                "(build the database from labelled stories, e.g. circuitlab.data's generated corpus)"
            )
        rng = np.random.default_rng(seed)
        queries = np.sort(rng.choice(labelled, min(n_queries, labelled.size), replace=False))
        neighbour_ids, _ = self.neighbours(layer, queries, k, within=labelled, exact=exact)
        codes_of, label_values = np.unique(categories.to_numpy()[labelled].astype(str), return_inverse=True)
        label = np.full(len(self), -1, dtype=np.int64)
        label[labelled] = label_values
        token_ids = self.metadata["token_id"].to_numpy()
        valid = neighbour_ids >= 0
        safe = np.maximum(neighbour_ids, 0)
        other_token = valid & (token_ids[safe] != token_ids[queries][:, None])

        def scores(labels: np.ndarray) -> tuple[float, float]:
            same = (labels[safe] == labels[queries][:, None]) & valid
            overall = np.mean(same.sum(1) / np.maximum(valid.sum(1), 1))
            has_other = other_token.any(1)
            other = (same & other_token).sum(1)[has_other] / other_token.sum(1)[has_other]
            return float(overall), float(other.mean()) if other.size else float("nan")

        score, score_other = scores(label)
        shuffled = []
        for _ in range(n_shuffles):
            permuted = label.copy()
            permuted[labelled] = rng.permutation(label[labelled])
            shuffled.append(scores(permuted))
        shuffled = np.array(shuffled)
        return {
            "layer": layer,
            "k": k,
            "n_queries": int(queries.size),
            "n_labels": int(codes_of.size),
            "score": score,
            "baseline": float(shuffled[:, 0].mean()),
            "baseline_std": float(shuffled[:, 0].std()),
            "score_other_tokens": score_other,
            "baseline_other_tokens": float(np.nanmean(shuffled[:, 1])),
            "same_token_fraction": float(np.mean((~other_token & valid).sum(1) / np.maximum(valid.sum(1), 1))),
        }

    def semantic_scores(self, layers: Sequence[int] | None = None, **options: Any):
        """`semantic_score` of several layers as a DataFrame (one row per layer)."""
        import pandas as pd

        return pd.DataFrame([self.semantic_score(layer, **options) for layer in (layers or self.layers)])

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
        """Save atomically: a crash mid-save leaves the previous database in `folder` readable."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / MANIFEST).exists():
            strangers = [p.name for p in folder.iterdir() if not (p.name.startswith(DATA_PREFIX) or p.name in (LOCK, f".{MANIFEST}.tmp"))]
            if strangers:
                raise CircuitDBError(
                    f"{folder} is not empty and holds no {MANIFEST} (found {', '.join(sorted(strangers)[:5])}): "
                    "refusing to write a circuit database over other files; choose a new or empty folder"
                )
        with _SaveLock(folder):
            previous = _read_manifest(folder) if (folder / MANIFEST).exists() else None
            _remove_leftovers(folder, keep=previous["data_dir"] if previous else None)
            data_name = f"{DATA_PREFIX}{_dt.datetime.now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
            data_dir = folder / data_name
            data_dir.mkdir()
            files = self._write_data(data_dir)
            for name in files:
                _fsync_path(data_dir / name)
            _fsync_path(data_dir)
            manifest = dict(self.manifest, data_dir=data_name, files=files, saved=_dt.datetime.now().isoformat(timespec="seconds"))
            temporary = folder / f".{MANIFEST}.tmp"
            with open(temporary, "w") as handle:
                json.dump(manifest, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, folder / MANIFEST)  # the commit point
            _fsync_path(folder)
            _remove_leftovers(folder, keep=data_name, announce=False)  # the superseded data folder
        return folder

    def _write_data(self, data_dir: Path) -> dict[str, dict]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = ["metadata.parquet"]
        pq.write_table(pa.Table.from_pandas(self.metadata, preserve_index=False), data_dir / "metadata.parquet")
        for layer, matrix in self.codes.items():
            for part in ("indices", "values"):
                name = f"layer{layer}.{part}.npy"
                _save_array(data_dir / name, getattr(matrix, part))
                names.append(name)
            if layer in self.indexes:
                name = f"layer{layer}.sketch.faiss"
                self.indexes[layer].save(data_dir / name)
                names.append(name)
        return {name: {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size} for name in names}

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
        import pandas as pd

        folder = Path(folder)
        manifest = _read_manifest(folder)
        data_dir = folder / manifest["data_dir"]
        if not (folder / LOCK).exists() or not _lock_alive(folder):
            _remove_leftovers(folder, keep=manifest["data_dir"])
        for name, record in manifest["files"].items():
            path = data_dir / name
            if not path.exists():
                raise CorruptDatabaseError(f"{path} is missing: the database in {folder} is incomplete; rebuild it")
            size = path.stat().st_size
            if size != record["bytes"]:
                raise CorruptDatabaseError(
                    f"{path} has {size} bytes but the manifest records {record['bytes']}: the file was truncated "
                    "or modified; rebuild the database"
                )
            if verify and sha256_file(path) != record["sha256"]:
                raise CorruptDatabaseError(
                    f"{path} fails its sha256 check against {folder / MANIFEST}: the file was modified or "
                    "corrupted; rebuild the database"
                )
        metadata = _read_or_raise(data_dir / "metadata.parquet", lambda p: pd.read_parquet(p))
        codes, indexes, reports, layouts = {}, {}, {}, {}
        for layer in manifest["layers"]:
            info = manifest["layer_info"][str(layer)]
            indices = _read_or_raise(data_dir / f"layer{layer}.indices.npy", lambda p: np.load(p, mmap_mode="r" if mmap else None))
            values = _read_or_raise(data_dir / f"layer{layer}.values.npy", lambda p: np.load(p, mmap_mode="r" if mmap else None))
            code_size = int(info["code_size"])
            if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= code_size):
                raise CorruptDatabaseError(
                    f"{data_dir / f'layer{layer}.indices.npy'} holds neuron ids outside [0, {code_size}): "
                    "the file is damaged; rebuild the database"
                )
            codes[int(layer)] = CodeMatrix(indices, values, code_size, canonical=True)
            layouts[int(layer)] = info.get("layout", {})
            if info.get("index"):
                report = info["index"]
                index_path = data_dir / f"layer{layer}.sketch.faiss"
                indexes[int(layer)] = _read_or_raise(
                    index_path,
                    lambda p: ApproximateIndex.load(p, SketchSpec(**report["sketch"]), report["kind"], report["params"]),
                )
                reports[int(layer)] = report
        db = cls(
            metadata,
            codes,
            model_config_hash=manifest.get("model_config_hash"),
            tokenizer_hash=manifest.get("tokenizer_hash"),
            model_config=manifest.get("model_config"),
            layer_layouts=layouts,
            corpus_stats=manifest.get("corpus"),
            indexes=indexes,
            index_reports=reports,
            model_source=manifest.get("model_source"),
        )
        db._fingerprint = hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if model is not None or tokenizer is not None:
            db.check_model(model, tokenizer, allow_mismatch=allow_mismatch, where=str(folder / MANIFEST))
            db.model, db.tokenizer = model, tokenizer
        return db


# ------------------------------------------------------------------------------------------ persistence


def _save_array(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.lib.format.write_array(handle, np.ascontiguousarray(array), allow_pickle=False)


def _read_or_raise(path: Path, read):
    try:
        return read(path)
    except Exception as error:  # any parse failure of a checksummed file means the file is bad
        raise CorruptDatabaseError(f"{path} cannot be read ({type(error).__name__}: {error}); rebuild the database") from error


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise FileNotFoundError(f"no circuit database at {folder}: the folder does not exist")
    if not path.exists():
        partial = sorted(p.name for p in folder.glob(f"{DATA_PREFIX}*"))
        hint = (
            f" (it holds {', '.join(partial)}: a save that never finished)" if partial else ""
        )
        raise CorruptDatabaseError(f"{path} not found: {folder} is not a saved circuit database{hint}")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptDatabaseError(f"{path} is not valid JSON ({error}); rebuild the database") from error
    if manifest.get("format") != FORMAT_NAME:
        raise CorruptDatabaseError(f"{path} is not a circuit database manifest (format {manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CircuitDBError(
            f"{path} has format version {manifest.get('format_version')}, this circuitlab reads version "
            f"{FORMAT_VERSION}; rebuild the database with this version"
        )
    for key in ("data_dir", "files", "layers", "layer_info"):
        if key not in manifest:
            raise CorruptDatabaseError(f"{path} lacks the field {key!r}; rebuild the database")
    # the manifest may only name files inside this folder's own data folder
    names = [manifest["data_dir"], *manifest["files"]] if isinstance(manifest["files"], dict) else [None]
    if not str(manifest["data_dir"]).startswith(DATA_PREFIX) or not all(_plain_name(n) for n in names):
        raise CorruptDatabaseError(
            f"{path} names data_dir {manifest['data_dir']!r} or files outside the database folder; rebuild the database"
        )
    return manifest


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


def _remove_leftovers(folder: Path, keep: str | None, announce: bool = True) -> list[str]:
    """Delete data folders no manifest names and stale temporary manifests (an interrupted save)."""
    removed = []
    for path in folder.glob(f"{DATA_PREFIX}*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    temporary = folder / f".{MANIFEST}.tmp"
    if temporary.exists():
        temporary.unlink()
        removed.append(temporary.name)
    if removed and announce:
        warnings.warn(f"removed leftovers of an interrupted save in {folder}: {', '.join(sorted(removed))}")
    return removed


def _lock_alive(folder: Path) -> bool:
    try:
        pid = int((folder / LOCK).read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    return pid > 0 and pid != os.getpid() and _pid_alive(pid)


class _SaveLock:
    """One saver per folder; a lock left by a dead process is taken over."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK

    def __enter__(self) -> "_SaveLock":
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _lock_alive(self.path.parent):
                    raise CircuitDBError(
                        f"{self.path} says another process is saving this database; wait for it to finish"
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(descriptor, "w") as handle:
                handle.write(str(os.getpid()))
            return self
        raise CircuitDBError(f"cannot take the save lock {self.path}; remove it if no save is running")

    def __exit__(self, *exc: Any) -> None:
        self.path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ presentation


def format_hits(hits, max_context: int = 64, marks: tuple[str, str] = TOKEN_MARKS) -> str:
    """A plain-text table in the layout of seed 000, table 3 (one block of k rows per query token)."""
    lines = [f"{'Pos':>4}  {'Token':<12} {'Distance':>9}  {'Neighbour input excerpt':<{max_context}}  Neighbour top predictions"]
    previous = None
    for row in hits.itertuples(index=False):
        excerpt = mark_token(row.context_plain, row.token_start, row.token_end, marks)
        excerpt = _fit(excerpt, max_context, marks)
        first = row.query_position != previous
        previous = row.query_position
        position = f"{row.query_position:>4}" if first else " " * 4
        token = repr(row.query_token)[1:-1] if first else ""
        predictions = str(row.top_predictions).replace("\n", "\\n").replace("\r", "\\r")
        lines.append(f"{position}  {token:<12.12} {row.distance:9.2e}  {excerpt:<{max_context}}  {predictions}")
    return "\n".join(lines)


def _fit(excerpt: str, width: int, marks: tuple[str, str]) -> str:
    """Cut a long excerpt around its marked token."""
    excerpt = excerpt.replace("\n", " ")
    if len(excerpt) <= width:
        return excerpt
    centre = excerpt.find(marks[0])
    start = max(0, min(centre - width // 2, len(excerpt) - width))
    return excerpt[start : start + width]


def neighbour_heatmap(hits, title: str | None = None):
    """Seed 000, figure 6: one column per query token, one row per neighbour rank, colour = distance,
    each cell labelled with the neighbour's token (hover: its excerpt and the model's top predictions)."""
    import plotly.graph_objects as go

    positions = sorted(hits["query_position"].unique())
    k = int(hits["rank"].max()) if len(hits) else 0
    z = np.full((k, len(positions)), np.nan)
    text = [["" for _ in positions] for _ in range(k)]
    hover = [["" for _ in positions] for _ in range(k)]
    column = {position: i for i, position in enumerate(positions)}
    labels = {}
    for row in hits.itertuples(index=False):
        c, r = column[row.query_position], int(row.rank) - 1
        z[r, c] = row.distance
        text[r][c] = str(row.token).strip() or repr(str(row.token))
        hover[r][c] = f"{row.context}<br>distance {row.distance:.3g}<br>predicts: {row.top_predictions}"
        labels[row.query_position] = f"{row.query_position}: {str(row.query_token).strip() or repr(str(row.query_token))}"
    figure = go.Figure(
        go.Heatmap(
            z=z, x=[labels[p] for p in positions], y=list(range(1, k + 1)), text=text, texttemplate="%{text}",
            customdata=hover, hovertemplate="%{customdata}<extra></extra>", colorscale="Viridis_r",
            colorbar={"title": "cosine<br>distance"},
        )
    )
    layer = hits["layer"].iloc[0] if "layer" in hits and len(hits) else None
    figure.update_layout(
        title=title or (f"Nearest circuits, layer {layer}" if layer is not None else "Nearest circuits"),
        xaxis_title="query token", yaxis_title="neighbour rank", yaxis_autorange="reversed",
        width=max(500, 70 * len(positions) + 200), height=max(350, 40 * k + 150),
    )
    return figure
