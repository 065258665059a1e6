"""Circuit lookup at research scale (issue 40): exact and approximate search, on the CPU and on GPUs, at 10^6,
10^7 and 10^8 codes; build time, opening a saved database, peak memory (host and device), queries/s, and
every answer checked against float64 brute force.

Codes are random with the shipped sgatlin-stories model's shape and skew: 64 non-zeros of 8,192 per code
(8 of 1,024 neurons in each of 8 channels), each neuron's popularity log-normal with the spread that gives
the real codes' expected number of shared units between two codes (`SKEW`, fitted by `--fit-skew` from a
collection of models/sgatlin-stories over held-out stories), values log-normal with the real codes'
log-mean, log-spread and fraction of negatives. Queries are fresh codes of the same law (not stored rows),
favouring the same neurons as the stored codes.

On the CPU the codes are written as a database (memory-mapped shards): the build is that write, "open" is
`CircuitDB.open` in a fresh process (time and resident memory), exact search runs the posting lists and
approximate search the postings index and FAISS IVF. On a GPU the codes are drawn on the device into the scan
kernel's layout (a database of 10^8 codes is 51 GB on disk; search reads the same layout either way) and
searched by the Triton scan with float64 certification (circuitlab/analysis/circuitdb/device.py). Beside
each GPU rate is the bound of one pass over the codes per block of queries: the bytes of the codes read per
block / 4 TB/s (an H200's memory bandwidth).

    python benchmarks/bench_search.py                                  # this machine's device, 10^6 codes
    python benchmarks/bench_search.py --device cuda --codes 1e6 1e7 1e8
    torchrun --nproc_per_node=8 benchmarks/bench_search.py --device cuda --codes 1e8   # rows split over ranks
    python benchmarks/bench_search.py --smoke --out /tmp/search.json   # seconds: every path on small sizes
    python benchmarks/bench_search.py --fit-skew 300                   # measure SKEW from real codes again
    python benchmarks/bench_search.py --device cuda --postings-probe   # also time the posting-list design

`--postings-probe` times a design the GPU search does not use, to say whether it should: posting lists
(codes grouped by unit) scored by a Triton kernel that adds each posting's product into a dense score row
per query (float32 atomics), then torch.topk. It skips the float64 certification, so its rate is an upper
bound of an exact engine built that way; its row also gives the postings a query reads (the scan reads every
code's 64 entries per query).

Writes benchmarks/results/search_<device>.json (--out elsewhere) and prints one table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from circuitlab.analysis.codeindex import CodeMatrix, recall_at_k  # noqa: E402
from circuitlab.analysis.codeindex.synthetic import skewed_code_chunks  # noqa: E402

# Fitted by `--fit-skew 300` on models/sgatlin-stories: 300 held-out stories, 23,301 tokens, each layer's codes.
# popularity_spread: log-normal spread of neuron popularity chosen so that two codes share as many units on
# average as the real ones (sum over units of frequency^2, per channel); values: log-normal magnitude
# (log_mean, log_std) and the fraction of negative values. The benchmark uses the penultimate layer (2), the
# one a lookup searches by default.
SKEW = {
    0: {"popularity_spread": 1.225, "log_mean": 0.194, "log_std": 0.871, "negative": 0.032},
    1: {"popularity_spread": 1.709, "log_mean": -0.377, "log_std": 0.932, "negative": 0.085},
    2: {"popularity_spread": 1.456, "log_mean": 0.178, "log_std": 0.781, "negative": 0.024},
    3: {"popularity_spread": 1.369, "log_mean": 0.631, "log_std": 0.771, "negative": 0.014},
}
SKEW_LAYER = 2
BANDWIDTH = 4.0e12  # bytes/s of an H200's HBM
TILE_ROWS = 128  # rows per tile of the device layout (circuitdb/device.py TILE)
K = 10


# --- measuring --------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """Peak resident memory of this process while the block runs (sampled every 5 ms), and the peak device
    memory torch allocated."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.host = 0
        self.device_bytes = 0

    def __enter__(self) -> "PeakMemory":
        self._running = True
        self.host = rss_bytes()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        if self.device.type == "cuda":
            torch.empty(1, device=self.device)  # the allocator answers for a device only once it has been used
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def _sample(self) -> None:
        while self._running:
            self.host = max(self.host, rss_bytes())
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self._running = False
        self._thread.join()
        self.host = max(self.host, rss_bytes())
        if self.device.type == "cuda":
            self.device_bytes = torch.cuda.max_memory_allocated(self.device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def chunks(n_rows: int, seed: int, device, chunk_rows: int = 1 << 16, first_chunk: int = 0, last_chunk: int | None = None,
           layout_seed: int | None = None):
    for number, (indices, values) in enumerate(
        skewed_code_chunks(n_rows, seed=seed, chunk_rows=chunk_rows, first_chunk=first_chunk, device=device,
                           layout_seed=layout_seed, **SKEW[SKEW_LAYER]),
        start=first_chunk,
    ):
        if last_chunk is not None and number >= last_chunk:
            break
        yield number * chunk_rows, indices, values


def queries_of(n_queries: int, seed: int) -> CodeMatrix:
    """Fresh codes favouring the same neurons as the stored set of `seed` (its layout), drawn apart from it."""
    parts = [(i.numpy(), v.numpy()) for _, i, v in chunks(n_queries, seed + 7919, "cpu", layout_seed=seed)]
    return CodeMatrix(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), 8192)


# --- float64 brute force ----------------------------------------------------------------------------------


def brute_force_cpu(parts, queries: CodeMatrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 brute force over (first row, CodeMatrix) parts: scipy's CSR product, every row, ties to the
    smaller id. Independent of the search engines (no posting lists, no kernel)."""
    from circuitlab.analysis.circuitdb.search import merge_top_k
    from circuitlab.analysis.codeindex import cosine_distance_from_dots

    dense = queries.to_dense().astype(np.float64).T  # [S, Q]
    query_norms = np.linalg.norm(dense, axis=0)
    answers = []
    for first, matrix in parts:
        for start in range(0, len(matrix), 1 << 16):
            block = matrix.rows(np.arange(start, min(start + (1 << 16), len(matrix))))
            dots = np.asarray(block.to_csr(np.float64) @ dense).T  # [Q, rows]
            distances = cosine_distance_from_dots(dots, query_norms, block.norms)
            order = np.lexsort((np.broadcast_to(np.arange(len(block)), distances.shape), distances), axis=1)[:, :k]
            answers.append((order + first + start, np.take_along_axis(distances, order, axis=1)))
            answers = [merge_top_k(answers, k)]
    return answers[0]


def brute_force_device(codes, queries: CodeMatrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 brute force on the device: every row's cosine from its entries in float64 (a gather per
    entry, not the scan), ranked by (distance, row)."""
    from circuitlab.analysis.circuitdb.device import dense_block

    dense = dense_block(queries, codes.size, codes.device).double()  # [S, Q]
    query_norms = torch.from_numpy(queries.norms).to(codes.device)
    best_rows = torch.zeros((len(queries), 0), dtype=torch.int64, device=codes.device)
    best = torch.zeros((len(queries), 0), dtype=torch.float64, device=codes.device)
    tile = codes.tile
    for first_tile in range(0, codes.indices.shape[0], 1024):
        units = codes.indices[first_tile : first_tile + 1024].long()  # [T, K, B]
        weights = codes.values[first_tile : first_tile + 1024].double()
        rows = torch.arange(first_tile * tile, first_tile * tile + units.shape[0] * tile, device=codes.device)
        dots = torch.zeros((len(queries), rows.numel()), dtype=torch.float64, device=codes.device)
        for entry in range(codes.nnz):
            gathered = dense[units[:, entry, :].reshape(-1)]  # [rows, Q]
            dots += (gathered * weights[:, entry, :].reshape(-1, 1)).T
        denominator = query_norms[:, None] * codes.norms[rows][None, :]
        cosine = torch.where(denominator > 0, dots / torch.where(denominator > 0, denominator, 1.0), 0.0)
        distances = torch.where(rows[None, :] < codes.n_rows, (1.0 - cosine).clamp(0.0, 2.0), torch.inf)
        candidates = torch.cat([best_rows, rows[None, :].expand(len(queries), -1)], dim=1)
        scores = torch.cat([best, distances], dim=1)
        by_row = torch.argsort(candidates, dim=1, stable=True)
        candidates, scores = candidates.gather(1, by_row), scores.gather(1, by_row)
        by_distance = torch.argsort(scores, dim=1, stable=True)[:, :k]
        best_rows, best = candidates.gather(1, by_distance), scores.gather(1, by_distance)
    return codes.circuit_ids(best_rows).cpu().numpy(), best.cpu().numpy()


def same_answer(ids, distances, reference_ids, reference_distances) -> dict:
    return {
        "identical": bool(np.array_equal(ids, reference_ids) and np.allclose(distances, reference_distances, rtol=0, atol=1e-12)),
        "max_distance_difference": float(np.max(np.abs(distances - reference_distances))) if ids.size else 0.0,
        "recall_at_10": round(recall_at_k(reference_distances, distances), 5),
        "checked_queries": int(ids.shape[0]),
    }


# --- CPU: a database on disk -------------------------------------------------------------------------------


def write_database(folder: Path, n_rows: int, seed: int, shard_rows: int) -> dict:
    """The codes as a saved database (one commit per shard), with a minimal metadata table."""
    import pyarrow as pa

    from circuitlab.analysis.circuitdb.manifest import FORMAT_NAME, FORMAT_VERSION
    from circuitlab.analysis.circuitdb.store import ShardAppender

    fields = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model_config_hash": None,
              "tokenizer_hash": None, "model_config": {}, "model_source": "synthetic (bench_search.py)", "layers": [0],
              "corpus": {"n_sequences": n_rows, "n_tokens": n_rows},
              "layer_info": {"0": {"code_size": 8192, "nnz": 64, "value_dtype": "float32",
                                   "layout": {"kind": "sgatlin", "n_channels": 8, "neurons_per_channel": 1024, "k": 8},
                                   "index": None}}}
    appender = ShardAppender(folder)
    started = time.perf_counter()
    try:
        pending_i, pending_v = [], []
        for first, indices, values in chunks(n_rows, seed, "cpu", chunk_rows=min(shard_rows, 1 << 16)):
            pending_i.append(indices.numpy())
            pending_v.append(values.numpy())
            if sum(len(p) for p in pending_i) >= shard_rows or first + len(indices) >= n_rows:
                matrix = CodeMatrix(np.concatenate(pending_i), np.concatenate(pending_v), 8192, canonical=True)
                start = appender.n_rows
                ids = np.arange(start, start + len(matrix))
                metadata = pa.table({
                    "circuit_id": ids, "sequence_id": ids // 200, "position": (ids % 200).astype(np.int32),
                    "token_id": (ids % 8192).astype(np.int32), "token": pa.array([""] * len(ids)),
                    "category": pa.array([None] * len(ids), pa.string()), "context": pa.array([""] * len(ids)),
                    "token_start": np.zeros(len(ids), np.int32), "token_end": np.zeros(len(ids), np.int32),
                    "top_predictions": pa.array([[]] * len(ids), pa.list_(pa.string())),
                })
                appender.append(metadata, {0: matrix}, fields)
                pending_i, pending_v = [], []
        appender.finish()
    finally:
        appender.close()
    return {"write_seconds": round(time.perf_counter() - started, 2),
            "bytes_on_disk": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())}


OPEN_PROBE = """
import json, os, sys, time
sys.path.insert(0, {root!r})
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import circuitlab.analysis.circuitdb as circuitdb
before = rss()
started = time.perf_counter()
db = circuitdb.CircuitDB.open({folder!r})
seconds = time.perf_counter() - started
print(json.dumps({{"open_seconds": seconds, "rss_after_imports": before, "rss_after_open": rss(), "circuits": len(db),
                  "shards": db.shard_table.n_shards}}))
"""


def open_in_fresh_process(folder: Path) -> dict:
    probe = subprocess.run([sys.executable, "-c", OPEN_PROBE.format(root=str(ROOT), folder=str(folder))],
                           capture_output=True, text=True, check=True)
    return json.loads(probe.stdout.strip().splitlines()[-1])


def cpu_size(n_rows: int, args, workdir: Path) -> list[dict]:
    from circuitlab.analysis.circuitdb import CircuitDB

    cpu = torch.device("cpu")
    folder = workdir / f"db_{n_rows}"
    with PeakMemory(cpu) as memory:
        written = write_database(folder, n_rows, args.seed, args.shard_rows)
    opened = open_in_fresh_process(folder)
    common = {"codes": n_rows, "device": "cpu", "threads": torch.get_num_threads(), "shards": opened["shards"],
              "open_seconds": round(opened["open_seconds"], 4),
              "open_rss_mb": round(opened["rss_after_open"] / 2**20, 1),
              "open_rss_added_mb": round((opened["rss_after_open"] - opened["rss_after_imports"]) / 2**20, 1),
              "bytes_on_disk": written["bytes_on_disk"]}
    queries = queries_of(args.queries, args.seed)
    checked = queries.rows(np.arange(min(args.check, len(queries))))
    db = CircuitDB.open(folder)
    parts = [(db.shard_table.rows_of(s)[0], db.shard_table.matrix(0, s)) for s in range(db.shard_table.n_shards)]
    reference_ids, reference_distances = brute_force_cpu(parts, checked, K)
    rows = []

    with PeakMemory(cpu) as memory:
        started = time.perf_counter()
        db.search_ids(queries.rows([0]), 0, K, device="cpu")  # maps, hashes and indexes every shard; compiles
        setup = time.perf_counter() - started
        started = time.perf_counter()
        ids, distances = db.search_ids(queries, 0, K, device="cpu")
        seconds = time.perf_counter() - started
    rows.append(dict(common, search="exact", engine=str(db.last_search), build_seconds=written["write_seconds"],
                     index_seconds=round(setup, 2), queries=len(queries), queries_per_second=round(len(queries) / seconds, 1),
                     peak_host_mb=round(memory.host / 2**20, 1),
                     **same_answer(ids[: len(checked)], distances[: len(checked)], reference_ids, reference_distances)))
    print_row(rows[-1])
    kinds = ["postings"] + (["ivf"] if args.faiss and _has_faiss() else [])
    for kind in kinds:
        with PeakMemory(cpu) as memory:
            started = time.perf_counter()
            db.build_index([0], kind=kind, measure_recall=False, progress=False)
            build = time.perf_counter() - started
            db.search_ids(queries.rows([0]), 0, K, exact=False, device="cpu")
            started = time.perf_counter()
            ids, distances = db.search_ids(queries, 0, K, exact=False, device="cpu")
            seconds = time.perf_counter() - started
        rows.append(dict(common, search=f"approximate ({kind})", engine=str(db.last_search),
                         params=db.indexes[0].params, build_seconds=written["write_seconds"], index_seconds=round(build, 2),
                         queries=len(queries), queries_per_second=round(len(queries) / seconds, 1),
                         peak_host_mb=round(memory.host / 2**20, 1),
                         **same_answer(ids[: len(checked)], distances[: len(checked)], reference_ids, reference_distances)))
        print_row(rows[-1])
    if args.device_path_on_cpu:  # the accelerator path (scan + float64 certification), PyTorch scan on the CPU
        from circuitlab.analysis.circuitdb.device import exact_top_k
        from circuitlab.analysis.circuitdb.indexes import device_codes

        codes = device_codes(db, 0, cpu)
        started = time.perf_counter()
        ids, distances, counters = exact_top_k(codes, checked, K)
        seconds = time.perf_counter() - started
        rows.append(dict(common, search="exact (device path)", engine="cpu, PyTorch scan + float64 certificate",
                         queries=len(checked), queries_per_second=round(len(checked) / seconds, 1), counters=counters,
                         **same_answer(ids, distances, reference_ids, reference_distances)))
        print_row(rows[-1])
    return rows


def _has_faiss() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


# --- GPU: codes drawn on the device ------------------------------------------------------------------------


def gpu_size(n_rows: int, args, context) -> list[dict]:
    from circuitlab.analysis.circuitdb.device import QUERY_BLOCK, DeviceCodes, exact_top_k
    from circuitlab.analysis.circuitdb.ranks import gather_top_k

    device = torch.device("cuda", context.local_rank) if args.device != "cpu" and torch.cuda.is_available() else torch.device("cpu")
    # chunks of at most 65,536 rows and at least 64 of them: ranks split whole chunks, and a chunk's codes depend
    # only on its number, so 1, 2 or 8 ranks search the same codes
    at_least_64 = -(-n_rows // 64)
    chunk_rows = min(1 << 16, -(-at_least_64 // TILE_ROWS) * TILE_ROWS)
    n_chunks = -(-n_rows // chunk_rows)
    first = n_chunks * context.rank // context.world_size
    last = n_chunks * (context.rank + 1) // context.world_size
    local_rows = min(last * chunk_rows, n_rows) - first * chunk_rows
    with PeakMemory(device) as memory:
        synchronize(device)
        started = time.perf_counter()
        codes = DeviceCodes(local_rows, 64, 8192, torch.float32, device)
        codes.segments.append((0, first * chunk_rows, local_rows))
        for _, indices, values in chunks(n_rows, args.seed, device, chunk_rows, first, last):
            codes.append(indices, values)
        synchronize(device)
        build = time.perf_counter() - started
    queries = queries_of(args.queries, args.seed)
    checked = queries.rows(np.arange(min(args.check, len(queries))))
    exact_top_k(codes, queries.rows(np.arange(min(len(queries), QUERY_BLOCK))), K)  # autotune and compile
    barrier(context)
    with PeakMemory(device) as search_memory:
        synchronize(device)
        started = time.perf_counter()
        ids, distances, counters = exact_top_k(codes, queries, K)
        ids, distances = gather_top_k(ids, distances, K, context)
        synchronize(device)
        seconds = time.perf_counter() - started
    reference = brute_force_device(codes, checked, K)
    reference = gather_top_k(*reference, K, context) if context.enabled else reference
    scan_bytes = codes.indices.numel() * codes.indices.element_size() + codes.values.numel() * codes.values.element_size() \
        + codes.inverse_norms.numel() * 4
    if context.enabled:  # the slowest rank sets the pace: the bound of the rank with the most bytes
        import torch.distributed as dist

        largest = torch.tensor([scan_bytes], dtype=torch.float64, device=device if context.backend == "nccl" else "cpu")
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        scan_bytes = int(largest.item())
    block = min(QUERY_BLOCK, len(queries))
    bound_qps = block / (scan_bytes / BANDWIDTH)  # one pass over a rank's codes per block of queries
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    import circuitlab.kernels as kernels

    row = {
        "codes": n_rows, "device": f"{device.type}: {name}", "ranks": context.world_size, "search": "exact",
        "engine": "Triton scan kernel" if kernels.kernel_backend(codes.indices) == "triton" else "PyTorch scan",
        "build_seconds": round(build, 2), "queries": len(queries), "queries_per_second": round(len(queries) / seconds, 1),
        "scan_bytes_per_rank": scan_bytes, "query_block": block,
        "bytes_bound_queries_per_second": round(bound_qps, 1),
        "bound": f"{scan_bytes / 1e9:.2f} GB of codes per block of {block} queries / 4 TB/s = "
                 f"{scan_bytes / BANDWIDTH * 1e3:.3f} ms a block per rank",
        "counters": counters, "peak_host_mb": round(max(memory.host, search_memory.host) / 2**20, 1),
        "peak_device_mb": round(max(memory.device_bytes, search_memory.device_bytes) / 2**20, 1),
        **same_answer(ids[: len(checked)], distances[: len(checked)], *reference),
    }
    print_row(row, rank=context.rank)
    probes = []
    if args.postings_probe and not context.enabled:
        needed = codes.n_rows * codes.nnz * POSTINGS_BUILD_BYTES
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else needed
        if needed > free:
            probes.append({"codes": n_rows, "device": row["device"], "ranks": 1, "search": "probe: posting lists",
                           "not_measured": f"grouping the codes by unit takes about {needed / 1e9:.0f} GB of device "
                                           f"memory, {free / 1e9:.0f} GB are free"})
        else:
            probe = postings_probe(codes, queries, reference[0])
            probes.append({"codes": n_rows, "device": row["device"], "ranks": 1, **probe})
            print_row(probes[-1], rank=context.rank)
            print(f"  postings read per query {probe['postings_per_query']:,.0f} (the scan: "
                  f"{probe['scan_entries_per_query']:,} entries)", flush=True)
    from circuitlab.analysis.codeindex import faiss_gpu_available

    reason = ("faiss-gpu is not installed here" if not faiss_gpu_available() else
              "this benchmark draws the codes on the device; FAISS on a GPU runs through a database's index")
    approximate = {"codes": n_rows, "device": row["device"], "ranks": context.world_size,
                   "search": "approximate (FAISS IVF)", "not_measured": reason}
    del codes
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return [row, *probes, approximate]


# --- a design probe: posting lists with atomic accumulation -----------------------------------------------


POSTINGS_BUILD_BYTES = 48  # device bytes per code entry while `postings_of` groups them (int64 units, order, rows)


def postings_of(codes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The device codes grouped by unit: (offsets [S + 1], rows [R * K] int32, values [R * K] float32)."""
    n_tiles, nnz, tile = codes.indices.shape
    units = codes.indices.permute(0, 2, 1).reshape(-1, nnz)[: codes.n_rows].long()
    values = codes.values.permute(0, 2, 1).reshape(-1, nnz)[: codes.n_rows].float()
    rows = torch.arange(codes.n_rows, device=units.device)[:, None].expand_as(units)
    order = torch.argsort(units.reshape(-1), stable=True)
    counts = torch.bincount(units.reshape(-1), minlength=codes.size)
    offsets = torch.zeros(codes.size + 1, dtype=torch.int64, device=units.device)
    offsets[1:] = counts.cumsum(0)
    return offsets, rows.reshape(-1)[order].int().contiguous(), values.reshape(-1)[order].contiguous()


@functools.cache
def _postings_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(offsets_ptr, rows_ptr, values_ptr, units_ptr, weights_ptr, scores_ptr, n_rows,
               NNZ: tl.constexpr, SEGMENT: tl.constexpr, BLOCK: tl.constexpr):
        # one program: query q's entry j, one SEGMENT of that unit's posting list
        pair = tl.program_id(0)
        unit = tl.load(units_ptr + pair).to(tl.int64)
        weight = tl.load(weights_ptr + pair)
        first = tl.load(offsets_ptr + unit) + tl.program_id(1).to(tl.int64) * SEGMENT
        stop = tl.minimum(tl.load(offsets_ptr + unit + 1), first + SEGMENT)
        row_base = scores_ptr + (pair // NNZ).to(tl.int64) * n_rows
        for start in range(first, stop, BLOCK):
            at = start + tl.arange(0, BLOCK)
            inside = at < stop
            rows = tl.load(rows_ptr + at, mask=inside, other=0)
            products = tl.load(values_ptr + at, mask=inside, other=0.0) * weight
            tl.atomic_add(row_base + rows, products, mask=inside, sem="relaxed")

    return kernel


def postings_scores(postings, n_rows: int, query_units, query_values, segment: int = 4096) -> torch.Tensor:
    """Dot products [Q, R] of each query with every row, summed posting by posting (float32, any order)."""
    offsets, rows, values = postings
    n_queries, nnz = query_units.shape
    scores = torch.zeros((n_queries, n_rows), dtype=torch.float32, device=rows.device)
    lengths = offsets[1:] - offsets[:-1]
    segments = max(1, int(-(-int(lengths[query_units].max()) // segment)))
    _postings_kernel()[(n_queries * nnz, segments)](
        offsets, rows, values, query_units.reshape(-1).contiguous(), query_values.reshape(-1).float().contiguous(),
        scores, n_rows, NNZ=nnz, SEGMENT=segment, BLOCK=min(segment, 1024))
    return scores


def postings_probe(codes, queries: CodeMatrix, reference_ids: np.ndarray, block: int | None = None,
                   most_queries: int = 4096) -> dict:
    """The posting-list design timed on `codes` (see the module docstring): q/s, postings read per query, and
    the share of float64 brute force's ids that its float32 top 10 holds on the checked queries. Blocks of
    queries keep the dense score rows within 1 GiB; at most `most_queries` queries are timed."""
    device = codes.device
    block = block or max(1, min(256, (1 << 30) // (4 * codes.n_rows)))
    queries = queries.rows(np.arange(min(len(queries), max(most_queries, len(reference_ids)))))
    postings = postings_of(codes)
    lengths = (postings[0][1:] - postings[0][:-1]).double()
    units = torch.from_numpy(np.ascontiguousarray(queries.indices)).to(device).long()
    values = torch.from_numpy(np.ascontiguousarray(queries.values)).to(device)
    inverse_norms = codes.inverse_norms[: codes.n_rows]

    def answer(first: int, stop: int) -> torch.Tensor:
        scores = postings_scores(postings, codes.n_rows, units[first:stop], values[first:stop])
        return (scores * inverse_norms).topk(K, dim=1).indices

    answer(0, min(block, len(queries)))  # compile
    synchronize(device)
    started = time.perf_counter()
    found = [answer(first, min(first + block, len(queries))) for first in range(0, len(queries), block)]
    synchronize(device)
    seconds = time.perf_counter() - started
    found_ids = codes.circuit_ids(torch.cat(found)).cpu().numpy()
    checked = len(reference_ids)
    return {"search": "probe: posting lists, atomic adds (no float64 certification)", "queries": len(queries),
            "queries_per_second": round(len(queries) / seconds, 1),
            "postings_per_query": round(float(lengths[units].sum(1).mean()), 1),
            "scan_entries_per_query": codes.n_rows * codes.nnz,
            "recall_at_10": round(float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found_ids[:checked], reference_ids)])), 4),
            "checked_queries": checked}


def barrier(context) -> None:
    if context.enabled:
        import torch.distributed as dist

        dist.barrier()


# --- collection's memory ------------------------------------------------------------------------------------


def collection_memory(n_tokens: int, workdir: Path) -> dict:
    """`circuitlab collect` of models/sgatlin-stories over enough held-out stories for `n_tokens` tokens, in a
    child process: its wall time and its peak resident memory (the kernel's count for the child)."""
    stories = -(-n_tokens // 76)  # held-out stories hold 76.8 tokens on average
    folder = workdir / f"collect_{n_tokens}"
    command = [sys.executable, "-m", "circuitlab.cli", "collect", "--model", "sgatlin-stories", "--stories",
               str(stories), "--out", str(folder), "--batch-size", "32", "--index", "none", "--quiet"]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {child.stderr.read().decode()[-2000:]}")
    from circuitlab.analysis.collect import Collection

    collection = Collection.open(folder)
    row = {"stories": stories, "tokens": collection.n_rows, "shards": len(collection.shards),
           "seconds": round(seconds, 1), "tokens_per_second": round(collection.n_rows / seconds, 1),
           "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    print(f"  collection: {row}", flush=True)
    return row


# --- the skew of real codes --------------------------------------------------------------------------------


def fit_skew(n_stories: int) -> dict:
    """Collect models/sgatlin-stories over held-out stories; per layer, the popularity spread that matches the
    real codes' sum of squared unit frequencies (per channel), and the values' log-normal fit."""
    from scipy.optimize import minimize_scalar
    from scipy.stats import norm

    from circuitlab.analysis.collect import collect
    from circuitlab.architectures.transformer import load_model
    from circuitlab.data.stories import held_out_stories

    model = load_model("sgatlin-stories").eval()
    quantiles = norm.ppf(1 - (np.arange(1, 1025) - 0.5) / 1024)
    fitted = {}
    with tempfile.TemporaryDirectory() as folder:
        collection = collect(model, held_out_stories(n_stories), out_dir=Path(folder) / "db", batch_size=32, progress=False)
        print(f"{collection.n_rows} tokens from {n_stories} held-out stories")
        for layer in collection.layers:
            matrix = collection.codes(layer)
            counts = np.bincount(matrix.indices.ravel(), minlength=matrix.size).reshape(8, 1024)
            real = np.sort(counts, axis=1)[:, ::-1].mean(axis=0) / len(matrix)

            def membership(spread):
                weights = np.exp(spread * quantiles)
                return 1 - (1 - weights / weights.sum()) ** 8

            spread = minimize_scalar(lambda s: (np.sum(real**2) - np.sum(membership(s) ** 2)) ** 2,
                                     bounds=(0.1, 5.0), method="bounded").x
            values = matrix.values.astype(np.float64).ravel()
            logs = np.log(np.abs(values[values != 0]))
            fitted[layer] = {"popularity_spread": round(float(spread), 3), "log_mean": round(float(logs.mean()), 3),
                             "log_std": round(float(logs.std()), 3), "negative": round(float((values < 0).mean()), 3)}
            synthetic = next(skewed_code_chunks(len(matrix), chunk_rows=len(matrix), seed=0, **fitted[layer]))[0].numpy()
            simulated = np.sort(np.bincount(synthetic.ravel(), minlength=8192).reshape(8, 1024), axis=1)[:, ::-1].mean(0) / len(synthetic)
            print(f"layer {layer}: {fitted[layer]}; sum f^2 per channel real {np.sum(real**2):.3f} synthetic "
                  f"{np.sum(simulated**2):.3f}; top frequencies real {np.round(real[:3], 3)} synthetic "
                  f"{np.round(simulated[:3], 3)}; median real {np.median(real):.4f} synthetic {np.median(simulated):.4f}")
    return fitted


# --- output -------------------------------------------------------------------------------------------------

COLUMNS = [("codes", "codes", "{:.0e}"), ("device", "device", "{}"), ("search", "search", "{}"),
           ("build_seconds", "build s", "{}"), ("index_seconds", "index s", "{}"), ("open_seconds", "open s", "{}"),
           ("open_rss_mb", "open RSS MB", "{}"), ("queries_per_second", "q/s", "{:,.0f}"),
           ("bytes_bound_queries_per_second", "bytes bound q/s", "{:,.0f}"), ("recall_at_10", "recall@10", "{}"),
           ("identical", "= float64", "{}"), ("peak_host_mb", "peak host MB", "{}"), ("peak_device_mb", "peak dev MB", "{}")]


def print_row(row: dict, rank: int = 0) -> None:
    if rank == 0:
        text = ", ".join(f"{label} {fmt.format(row[key])}" for key, label, fmt in COLUMNS if key in row)
        print(f"  {text}", flush=True)


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(label for _, label, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        if "not_measured" in row:
            lines.append(f"| {row['codes']:.0e} | {row['device']} | {row['search']} | not measured: {row['not_measured']} |")
            continue
        cells = [fmt.format(row[key]) if key in row else "" for key, _, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codes", type=float, nargs="+", default=[1e6], help="database sizes (default 1e6)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument("--queries", type=int, default=None, help="fresh queries (default: 1,000 on the CPU, 16,384 on a GPU)")
    parser.add_argument("--check", type=int, default=100, help="queries checked against float64 brute force (default 100)")
    parser.add_argument("--shard-rows", type=int, default=1 << 16, help="rows per shard of the CPU database")
    parser.add_argument("--no-faiss", dest="faiss", action="store_false", help="skip FAISS IVF on the CPU")
    parser.add_argument("--device-path-on-cpu", action="store_true", help="also run the accelerator path on the CPU")
    parser.add_argument("--scan", action="store_true", help="the GPU benchmark's path (codes drawn into the scan layout, "
                        "device search, ranks) on whatever device: on the CPU, a dry run of it")
    parser.add_argument("--postings-probe", action="store_true", help="also time the posting-list design on the GPU "
                        "path (one rank; see the docstring)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="small sizes, every path, seconds")
    parser.add_argument("--fit-skew", type=int, default=None, metavar="STORIES", help="measure SKEW and exit")
    parser.add_argument("--collect", type=float, nargs="+", default=None, metavar="TOKENS",
                        help="instead: peak memory of `circuitlab collect` (sgatlin-stories) at these token counts")
    parser.add_argument("--workdir", default=None, help="where the CPU databases are written (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/search_<device>.json)")
    args = parser.parse_args(argv)
    if args.fit_skew:
        print(json.dumps(fit_skew(args.fit_skew), indent=1))
        return 0
    if args.collect:
        from circuitlab.atomic import atomic_write_text

        with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
            load_at_start = os.getloadavg()
            rows = [collection_memory(int(n), Path(workdir)) for n in args.collect]
        out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / "search_collection_cpu.json"
        atomic_write_text(out, json.dumps({"machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                                                       "load_average_start_end": [round(load_at_start[0], 2),
                                                                                  round(os.getloadavg()[0], 2)]},
                                           "collection": rows}, indent=1))
        print(f"wrote {out}")
        return 0

    from circuitlab.distributed import setup_distributed, teardown_distributed

    context = setup_distributed(args.device)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    if args.smoke:
        args.codes, args.check, args.shard_rows = [3000], 20, 1024
        args.queries = args.queries or 40
        args.device_path_on_cpu = True
    on_gpu = device.startswith("cuda") or args.scan
    args.queries = args.queries or (16384 if on_gpu else 1000)
    rows: list[dict] = []
    load_at_start = os.getloadavg()  # other work on the machine slows every rate here
    try:
        for size in [int(n) for n in args.codes]:
            if context.rank == 0:
                print(f"{size:.0e} codes on {device}" + (f", {context.world_size} ranks" if context.enabled else ""), flush=True)
            if on_gpu:
                rows += gpu_size(size, args, context)
            else:
                with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
                    rows += cpu_size(size, args, Path(workdir))
    finally:
        teardown_distributed(context)
    if context.rank != 0:
        return 0
    label = torch.cuda.get_device_name(0).lower().replace(" ", "-") if device.startswith("cuda") else "cpu"
    label += "_scan" if args.scan and not device.startswith("cuda") else ""
    label += f"_x{context.world_size}" if context.world_size > 1 else ""
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"search_{label}.json"
    record = {"machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                          "device": label, "ranks": context.world_size,
                          "load_average_start_end": [round(load_at_start[0], 2), round(os.getloadavg()[0], 2)]},
              "skew": {"layer": SKEW_LAYER, **SKEW[SKEW_LAYER]}, "k": K, "rows": rows}
    from circuitlab.atomic import atomic_write_text

    atomic_write_text(out, json.dumps(record, indent=1))
    print(table(rows))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
