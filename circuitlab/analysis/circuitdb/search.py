"""Circuit search over a database's shards: exact and approximate, on the CPU or a device, and the hits table.

Exact search answers each shard on its own (the CPU engines of `codeindex`, or all shards at once with the
device scan of `circuitdb.device`) and merges the answers by (distance, circuit id): each shard's k best hold
the k best of the union, so the merged answer is the brute-force one whatever the shards. Approximate search
proposes candidates (posting lists per shard, or one FAISS index over every shard, on a GPU where faiss-gpu
is installed) and re-ranks them exactly.

Every search reports where it ran (`Served`): the dashboard and the CLI say which device answered.

Shape letters: Q queries, k neighbours per query.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from circuitlab.analysis.circuitdb.errors import CircuitDBError
from circuitlab.analysis.circuitdb.indexes import CpuDevice, LayerRows, device_codes, faiss_on, group_index, shard_groups
from circuitlab.analysis.codeindex import CodeMatrix, exact_search, rerank

CircuitDB = Any  # circuitlab.analysis.circuitdb.database.CircuitDB (which imports this module)
DEVICE_ENV_VAR = "CIRCUITLAB_SEARCH_DEVICE"  # where "auto" searches: cpu, cuda or cuda:N


@dataclass
class Served:
    """Where a search ran: `device` ("cpu", "cuda:0", ...), its name, the engine, and how many ranks."""

    device: str
    device_name: str
    engine: str
    ranks: int = 1

    def __str__(self) -> str:
        where = self.device if self.device_name == self.device else f"{self.device} ({self.device_name})"
        spread = f", {self.ranks} ranks" if self.ranks > 1 else ""
        return f"{where}, {self.engine}{spread}"


def resolve_device(device: str | None = "auto"):
    """The device a search runs on (a torch.device, or the CPU): "auto" takes $CIRCUITLAB_SEARCH_DEVICE, else
    the current CUDA device when there is one, else the CPU."""
    choice = (device or "auto").strip().lower()
    if choice == "auto":
        choice = os.environ.get(DEVICE_ENV_VAR, "auto").strip().lower()
    if choice == "cpu":
        return CpuDevice()
    import torch

    if choice == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if choice.startswith("cuda") and not torch.cuda.is_available():
        raise CircuitDBError(f"search device {choice!r} was asked for but CUDA is not available here; use cpu or auto")
    try:
        return torch.device(choice)
    except RuntimeError:
        raise CircuitDBError(f"search device {device!r} is not a device; expected auto, cpu, cuda or cuda:N") from None


def device_name(device) -> str:
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return device.type


def merge_top_k(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of several answers by (distance, circuit id); -1 / inf where fewer exist."""
    ids = np.concatenate([part[0] for part in parts], axis=1)
    distances = np.concatenate([part[1] for part in parts], axis=1)
    ids = np.where(np.isfinite(distances), ids, -1)
    order = np.lexsort((np.where(ids >= 0, ids, np.iinfo(np.int64).max), distances), axis=1)[:, :k]
    out_ids = np.full((ids.shape[0], k), -1, dtype=np.int64)
    out_distances = np.full((ids.shape[0], k), np.inf)
    out_ids[:, : order.shape[1]] = np.take_along_axis(ids, order, axis=1)
    out_distances[:, : order.shape[1]] = np.take_along_axis(distances, order, axis=1)
    return out_ids, out_distances


def _local_exclude(exclude: np.ndarray | None, start: int, stop: int) -> np.ndarray | None:
    if exclude is None:
        return None
    inside = (exclude >= start) & (exclude < stop)
    return np.where(inside, exclude - start, -1) if inside.any() else None


def _to_circuits(ids: np.ndarray, start: int) -> np.ndarray:
    return np.where(ids >= 0, ids + start, -1)


def exact_ids(db: CircuitDB, queries: CodeMatrix, layer: int, k: int, exclude: np.ndarray | None, device,
              shards: list[int]) -> tuple[np.ndarray, np.ndarray, Served]:
    """Exact search over `shards` of one layer on `device` (a torch.device)."""
    table = db.shard_table
    if device.type != "cpu":
        import circuitlab.kernels as kernels
        from circuitlab.analysis.circuitdb.device import exact_top_k

        codes = device_codes(db, layer, device, shards)
        ids, distances, counters = exact_top_k(codes, queries, k, exclude)
        db.last_search_counters = counters
        backend = kernels.kernel_backend(codes.indices)
        engine = "Triton scan kernel" if backend == "triton" else "PyTorch scan"
        return ids, distances, Served(str(device), device_name(device), f"exact, {engine}")
    parts = []
    engine = None
    for start, group in shard_groups(table, layer, shards):
        index, matrix = group_index(db, layer, group)
        engine = "posting lists" if index.postings is not None else "scipy blocks"
        ids, distances = exact_search(matrix, index, queries, k, _local_exclude(exclude, start, start + len(matrix)))
        parts.append((_to_circuits(ids, start), distances))
    if not parts:
        raise CircuitDBError("every shard of this database is damaged and set aside: nothing to search")
    ids, distances = merge_top_k(parts, k)
    return ids, distances, Served("cpu", "cpu", f"exact, {engine}")


def approximate_ids(db: CircuitDB, queries: CodeMatrix, layer: int, k: int, exclude: np.ndarray | None,
                    n_candidates: int | None, device, shards: list[int]) -> tuple[np.ndarray, np.ndarray, Served]:
    """Candidates from the layer's approximate index, re-ranked exactly."""
    table = db.shard_table
    if layer not in db.indexes:
        warnings.warn(f"layer {layer} has no approximate index yet: building one now (db.build_index)")
        db.build_index([layer], progress=False)
    index = db.indexes[layer]
    if index.kind == "postings":
        from circuitlab.analysis.postings import pruned_top_k

        wanted = n_candidates or index.params["candidates"]
        parts = []
        for start, group in shard_groups(table, layer, shards):
            lists, matrix = group_index(db, layer, group)
            # the candidates are the best partial scores of all rows: each run of shards proposes its share
            share = max(k, -(-wanted * len(matrix) // max(table.n_rows, 1)))
            ids, distances = pruned_top_k(lists.postings, queries, k, index.params["terms"], share,
                                          _local_exclude(exclude, start, start + len(matrix)))
            parts.append((_to_circuits(ids, start), distances))
        ids, distances = merge_top_k(parts, k)
        return ids, distances, Served("cpu", "cpu", "approximate, posting lists")
    searcher, where = faiss_on(db, layer, device)
    wanted = n_candidates or max(512, 50 * k)
    candidates = searcher.candidates(queries, wanted + (0 if exclude is None else 1))
    if len(shards) < table.n_shards or any(not table.alive(shard) for shard in shards):
        held = np.zeros(table.n_rows + 1, dtype=bool)
        for shard in shards:
            if table.alive(shard):
                held[slice(*table.rows_of(shard))] = True
        candidates = np.where(held[candidates], candidates, -1)
    ids, distances = rerank(LayerRows(table, layer), queries, candidates, k, exclude)
    return ids, distances, Served(str(where), device_name(where), f"approximate, FAISS {index.kind}")


def search_ids(db: CircuitDB, queries: CodeMatrix, layer: int, k: int, exact: bool, exclude, n_candidates: int | None,
               device) -> tuple[np.ndarray, np.ndarray]:
    """`CircuitDB.search_ids`: checks, then the search over this process's shards (or every rank's)."""
    if k < 1:
        raise CircuitDBError(f"k must be at least 1, got {k}")
    size = db.shard_table.layer_info(layer)[0]
    if queries.size != size:
        raise CircuitDBError(
            f"query codes have size {queries.size} but layer {layer} stores codes of size {size} "
            "(were they made by another model or layer?)"
        )
    exclude = None if exclude is None else np.asarray(exclude, dtype=np.int64)
    if db.ranks is not None:
        ids, distances, served = db.ranks.search(db, queries, layer, k, exact, exclude, n_candidates, device)
    else:
        shards = list(range(db.shard_table.n_shards))
        where = resolve_device(device)
        if exact:
            ids, distances, served = exact_ids(db, queries, layer, k, exclude, where, shards)
        else:
            ids, distances, served = approximate_ids(db, queries, layer, k, exclude, n_candidates, where, shards)
    db.last_search = served
    return ids, distances


def search_table(db: CircuitDB, query, layer: int, k: int, exact: bool, n_candidates: int | None, device):
    """`CircuitDB.search`: the queries from text or codes, their neighbours, the hits table."""
    from collections.abc import Mapping

    if db.ranks is not None and db.ranks.context.rank != 0:
        queries, positions, query_tokens = db.ranks.same_queries(None)  # rank 0 reads the query
    elif isinstance(query, str):
        queries, positions, query_tokens = text_query(db, query, layer)
    else:
        if isinstance(query, Mapping):
            if layer not in query:
                raise CircuitDBError(f"the query codes hold layers {sorted(query)}, not layer {layer}")
            query = query[layer]
        queries = query if isinstance(query, CodeMatrix) else CodeMatrix.from_sparse_code(query)
        positions = np.arange(len(queries))
        query_tokens = [""] * len(queries)
    if db.ranks is not None and db.ranks.context.rank == 0:
        db.ranks.same_queries((queries, positions, query_tokens))
    ids, distances = search_ids(db, queries, layer, k, exact, None, n_candidates, device)
    hits = hits_table(db, ids, distances, positions, query_tokens, layer)
    hits.attrs["served_by"] = str(db.last_search)
    return hits


def neighbours(db: CircuitDB, layer: int, circuit_ids, k: int, within, exact: bool, n_candidates: int | None):
    """`CircuitDB.neighbours`: stored circuits' nearest others, optionally within a subset of circuits."""
    from circuitlab.analysis.codeindex import ApproximateIndex, ExactIndex, SketchSpec

    circuit_ids = np.asarray(circuit_ids, dtype=np.int64)
    queries = db.shard_table.rows(layer, circuit_ids)
    if within is None:
        return search_ids(db, queries, layer, k, exact, circuit_ids, n_candidates, "auto")
    within = np.asarray(within, dtype=np.int64)
    subset = db.shard_table.rows(layer, within)
    position_in_subset = np.full(len(db), -1, dtype=np.int64)
    position_in_subset[within] = np.arange(within.size)
    exclude = position_in_subset[circuit_ids]
    if exact:
        local_ids, distances = exact_search(subset, ExactIndex(subset), queries, k, exclude)
    else:
        spec = db.indexes[layer].spec if layer in db.indexes else SketchSpec()
        index = ApproximateIndex.build(subset, spec, "auto")
        local_ids, distances = index.search(subset, queries, k, exclude, n_candidates)
    return np.where(local_ids >= 0, within[np.maximum(local_ids, 0)], -1), distances


def hits_table(db: CircuitDB, ids: np.ndarray, distances: np.ndarray, positions: np.ndarray,
               query_tokens: list[str], layer: int):
    """The search result for people: one row per (query, neighbour), with the neighbour's metadata."""
    import pandas as pd

    from circuitlab.analysis.neighbour_figures import mark_token

    n_queries, k = ids.shape
    found = ids >= 0
    rows = db.metadata_rows(ids[found])
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


def text_query(db: CircuitDB, text: str, layer: int) -> tuple[CodeMatrix, np.ndarray, list[str]]:
    """Every token of `text` as a query: its code at `layer` from the attached model."""
    import torch

    if db.model is None or db.tokenizer is None:
        raise CircuitDBError(
            "text queries run the model that built the database: load with CircuitDB.load(folder, model=model) "
            "or call db.attach(model) (the model needs a tokenizer)"
        )
    token_ids = db.tokenizer.encode(text)
    if not token_ids:
        raise CircuitDBError("the query text is empty after tokenization; give at least one character")
    if len(token_ids) > db.model.config.n_ctx:
        raise CircuitDBError(
            f"the query is {len(token_ids)} tokens, longer than the model's context {db.model.config.n_ctx}; "
            "shorten it"
        )
    device = next(db.model.parameters()).device
    tokens = torch.tensor([token_ids], dtype=torch.long, device=device)
    with torch.inference_mode():
        _, cache = db.model.run_with_cache(tokens, names_filter=db.model.sparse_code_hooks([layer]))
        code = db.model.sparse_codes(cache, [layer])[layer]
    queries = CodeMatrix.from_sparse_code(code)
    return queries, np.arange(len(token_ids)), [db.tokenizer.token_str(t) for t in token_ids]
