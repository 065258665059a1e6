"""Circuit database performance: build time, queries per second and recall@10 of exact and approximate
search on codes of the sgatlin shape (8 channels x k 8 of N 1024 neurons: size 8192, 64 non-zeros),
collection throughput of a shipped-size model, and UMAP with the database's kNN graph against UMAP alone.

Codes are structured synthetic ones (`structured_synthetic_codes`: Zipf-distributed prototype circuits,
30% of each code's neurons replaced at random, log-normal value noise, 10% exact duplicates). Queries are
fresh codes drawn from the same prototypes (not stored rows, which would find themselves). Recall@10 of
approximate search counts a returned circuit as correct when its exact distance is within the exact 10th
neighbour's (ties are equally correct answers). Timings are wall clock on whatever machine runs this.

    python benchmarks/bench_circuitdb.py                         # 1e5 codes, then collection and UMAP
    python benchmarks/bench_circuitdb.py --codes 1000000 --skip-collection --skip-umap   # issue 15's size
    python benchmarks/bench_circuitdb.py --write BENCHMARKS.md   # also record the results in that file

The last lines printed put every measured number beside its target (issue 15, at 10^6 codes on 2 cores:
exact >= 300 queries/s, approximate >= 1,000 queries/s at recall@10 >= 0.99, build <= 60 s).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import time
from pathlib import Path

import numpy as np
import torch

from circuitlab.analysis.circuitdb import CircuitDB
from circuitlab.atomic import atomic_write_text
from circuitlab.analysis.codeindex import recall_at_k, structured_synthetic_codes

SECTION = "Circuit database (CPU, 2 cores)"


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def search_benchmark(n_codes: int, n_queries: int, seed: int, settings: list[dict], kind: str = "auto") -> list[dict]:
    started = time.perf_counter()
    codes = structured_synthetic_codes(n_codes, seed=seed)
    queries = structured_synthetic_codes(n_queries, seed=seed + 1, prototypes_seed=seed)
    generate_seconds = time.perf_counter() - started
    db = CircuitDB.from_codes({0: codes})

    started = time.perf_counter()
    db.exact_index(0)
    lists_seconds = time.perf_counter() - started
    started = time.perf_counter()
    db.build_index([0], kind=kind, measure_recall=False, progress=False)
    index_seconds = time.perf_counter() - started
    index = db.indexes[0]
    engine = db.exact_index(0).engine
    print(f"{n_codes:>9} codes: generated in {generate_seconds:.1f} s; exact index ({engine}) {lists_seconds:.1f} s; "
          f"{index.kind} index {index_seconds:.1f} s {index.params}", flush=True)
    # compiled loops are loaded (or compiled) on first use: not part of any query's time
    db.search_ids(queries.rows([0, 1]), 0, 10, exact=True)
    db.search_ids(queries.rows([0, 1]), 0, 10, exact=False)

    started = time.perf_counter()
    _, exact_distances = db.search_ids(queries, 0, 10, exact=True)
    exact_seconds = time.perf_counter() - started
    exact_qps = n_queries / exact_seconds
    print(f"    exact: {exact_qps:.1f} queries/s", flush=True)
    rows = []
    if index.kind != "ivf":  # nprobe means nothing to the other kinds: each candidate count once
        settings = [dict(candidates=c) for c in dict.fromkeys(setting["candidates"] for setting in settings)]
    for setting in settings:
        if "nprobe" in setting:
            index.params["nprobe"] = setting["nprobe"]
            index.faiss_index.nprobe = setting["nprobe"]
        started = time.perf_counter()
        _, approximate_distances = db.search_ids(queries, 0, 10, exact=False, n_candidates=setting["candidates"])
        seconds = time.perf_counter() - started
        recall = recall_at_k(exact_distances, approximate_distances)
        row = {
            "codes": n_codes,
            "exact_engine": engine,
            "index": index.kind,
            "nprobe": index.params.get("nprobe", "-"),
            "candidates": setting["candidates"],
            "build_seconds": lists_seconds + index_seconds,
            "exact_index_seconds": lists_seconds,
            "index_seconds": index_seconds,
            "exact_qps": exact_qps,
            "approximate_qps": n_queries / seconds,
            "recall_at_10": recall,
        }
        rows.append(row)
        print(f"    approximate nprobe {row['nprobe']}, {row['candidates']} candidates: {row['approximate_qps']:.1f} "
              f"queries/s, recall@10 {recall:.4f}", flush=True)
    del db, codes
    return rows


def collection_benchmark(n_stories: int, batch_size: int, repeats: int = 2) -> dict:
    from circuitlab import CircuitTransformer, ModelConfig
    from circuitlab.analysis.collect import collect
    from circuitlab.data.stories import generate_stories, held_out_stories
    from circuitlab.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([s.text for s in generate_stories(2000)], vocab_size=4096, show_progress=False)
    config = ModelConfig.preset("sgatlin-stories").replace(d_vocab=tokenizer.vocab_size)
    torch.manual_seed(0)
    model = CircuitTransformer(config, tokenizer=tokenizer).eval()
    corpus = held_out_stories(n_stories)
    import tempfile

    token_lists = [tokenizer.encode(story.text)[: config.n_ctx] for story in corpus]
    n_tokens = sum(map(len, token_lists))

    def bare_forward() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(token_lists), batch_size):
                batch = token_lists[start : start + batch_size]
                tokens = torch.full((len(batch), max(map(len, batch))), tokenizer.eos_id, dtype=torch.long)
                for row, ids in enumerate(batch):
                    tokens[row, : len(ids)] = torch.tensor(ids)
                model(tokens)
        return n_tokens / (time.perf_counter() - started)

    # Alternate the two measurements and keep each one's best, so a burst of other work on shared cores
    # does not land on one side only.
    collect_rates, forward_rates = [], []
    with tempfile.TemporaryDirectory() as folder:
        collect(model, corpus[:batch_size], out_dir=Path(folder) / "warm", batch_size=batch_size, progress=False)
        for repeat in range(repeats):
            forward_rates.append(bare_forward())
            collection = collect(model, corpus, out_dir=Path(folder) / f"run{repeat}", batch_size=batch_size, progress=False)
            collect_rates.append(collection.stats.tokens_per_second)
    result = {
        "model": "sgatlin-stories shape (d_model 256, 4 layers, N 1024 x 8 channels, k 8), random weights",
        "tokens": collection.stats.n_tokens,
        "collect_tokens_per_second": max(collect_rates),
        "forward_tokens_per_second": max(forward_rates),
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
    }
    print(f"collection: {result['tokens']} tokens at {result['collect_tokens_per_second']:.0f} tokens/s "
          f"(bare forward {result['forward_tokens_per_second']:.0f} tokens/s), batch {batch_size}", flush=True)
    return result


def umap_benchmark(n_points: int, seed: int) -> dict:
    """UMAP with the database's kNN graph against UMAP computing its own, on sgatlin-shape codes."""
    import pandas as pd

    from circuitlab.analysis.embedding import knn_speedup

    codes = structured_synthetic_codes(n_points, seed=seed)
    token_ids = np.random.default_rng(seed).integers(0, 100, n_points)
    db = CircuitDB.from_codes({0: codes}, pd.DataFrame({"token_id": token_ids, "token": token_ids.astype(str)}))
    result = knn_speedup(db, 0, n_tokens=100, n_neighbors=15, max_points=None, warm_up=True)
    print(f"UMAP, {result['points']} points: database kNN {result['database_knn_seconds']:.1f} s + layout "
          f"{result['umap_with_database_knn_seconds']:.1f} s vs own kNN {result['umap_own_knn_seconds']:.1f} s "
          f"({result['speedup']:.2f}x)", flush=True)
    return result


def markdown(rows: list[dict], collection: dict | None, n_queries: int, umap: dict | None = None) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"## {SECTION}",
        "",
        f"Measured {today} with `python benchmarks/bench_circuitdb.py` on {platform.machine()} "
        f"({os.cpu_count()} cores, torch threads {torch.get_num_threads()}, other work may have shared the cores).",
        "Codes of the sgatlin shape (size 8192, 64 non-zeros: 8 channels x k 8 of N 1024), structured synthetic "
        f"(prototypes + noise + 10% duplicates); {n_queries} fresh queries from the same prototypes; k = 10. "
        "Exact search (equal to brute force): posting lists walked in row blocks (engine `postings`, with numba) "
        "or blocked scipy.sparse products (`scipy`). Approximate: the postings index (candidates from the posting "
        "lists of each query's 24 largest units; built with the exact index) or 512-dim count sketches in FAISS "
        "(IVF-flat over sqrt(n) k-means cells trained on 40 sketches per cell); candidates are re-ranked with the "
        "exact sparse cosine distance. Build = exact index + approximate index.",
        "",
        "| codes | exact engine | build: exact index (s) | build: approximate index (s) | exact queries/s | approximate index | nprobe | candidates | approximate queries/s | recall@10 | peak memory (GiB) |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['codes']:,} | {row['exact_engine']} | {row['exact_index_seconds']:.1f} | {row['index_seconds']:.1f} | {row['exact_qps']:.0f} "
            f"| {row['index']} | {row['nprobe']} | {row['candidates']} | {row['approximate_qps']:.0f} | {row['recall_at_10']:.4f} "
            f"| {row.get('peak_gib', float('nan')):.1f} |"
        )
    lines += [
        "",
        "Peak memory is the process's, cumulative over the rows above it. Query rates are measured on one batch "
        "each and move by up to 2x between runs when other processes share the cores.",
    ]
    if collection:
        lines += [
            "",
            f"Collection throughput ({collection['model']}; generated held-out stories, batch {collection['batch_size']}, "
            f"{collection['threads']} torch threads): **{collection['collect_tokens_per_second']:.0f} tokens/s** recording "
            f"codes of all 4 layers, context and top-5 predictions to Parquet/.npy shards ({collection['tokens']:,} tokens), "
            f"against {collection['forward_tokens_per_second']:.0f} tokens/s for the bare forward pass on the same batches "
            "(best of 2 alternating runs each): the model's forward pass, not the recording, sets the pace.",
        ]
    if umap:
        lines += [
            "",
            f"UMAP of {umap['points']:,} sgatlin-shape codes (cosine, 15 neighbours, numba warmed up first): the "
            f"database's exact kNN graph {umap['database_knn_seconds']:.1f} s + UMAP layout "
            f"{umap['umap_with_database_knn_seconds']:.1f} s, against {umap['umap_own_knn_seconds']:.1f} s for UMAP "
            f"computing its own neighbours: **{umap['speedup']:.2f}x**.",
        ]
    return "\n".join(lines) + "\n"


TARGETS = {"exact_qps": 300.0, "approximate_qps": 1000.0, "recall_at_10": 0.99, "build_seconds": 60.0}


def targets(rows: list[dict]) -> str:
    """Each size's measurements beside issue 15's targets, as measured/target ratios (>= 1 meets it; for the
    build time the ratio is target/measured). The approximate row is the fastest setting with recall >= 0.99."""
    lines = ["", "Against the targets (issue 15, set for 10^6 codes on 2 cores); ratio >= 1 meets the target:", "",
             "| codes | exact q/s (ratio to 300) | approximate q/s at recall@10 >= 0.99 (ratio to 1,000) | setting | build s (60 / build) |",
             "|---:|---:|---:|---|---:|"]
    for size in sorted({row["codes"] for row in rows}):
        mine = [row for row in rows if row["codes"] == size]
        good = [row for row in mine if row["recall_at_10"] >= TARGETS["recall_at_10"]]
        best = max(good, key=lambda row: row["approximate_qps"]) if good else max(mine, key=lambda row: row["recall_at_10"])
        exact, build = mine[0]["exact_qps"], mine[0]["build_seconds"]
        approximate = f"{best['approximate_qps']:.0f} ({best['approximate_qps'] / TARGETS['approximate_qps']:.2f}x)" if good \
            else f"none reached 0.99 (best recall {best['recall_at_10']:.4f})"
        lines.append(f"| {size:,} | {exact:.0f} ({exact / TARGETS['exact_qps']:.2f}x) | {approximate} | {best['index']}, "
                     f"nprobe {best['nprobe']}, {best['candidates']} candidates, recall {best['recall_at_10']:.4f} | {build:.1f} "
                     f"({TARGETS['build_seconds'] / build:.2f}x) |")
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace this benchmark's section of `path` (or append it), leaving other sections alone."""
    existing = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^## {re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(existing):
        updated = pattern.sub(lambda _: text + "\n", existing)
    else:
        updated = existing.rstrip("\n") + "\n\n" + text
    atomic_write_text(path, updated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--codes", type=int, nargs="+", default=[100_000],
                        help="stored codes (several sizes run one after the other); issue 15's target size is 1000000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--candidates", type=int, nargs="+", default=[256, 512], help="candidates re-ranked exactly")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 32], help="IVF cells visited")
    parser.add_argument("--index", default="auto", choices=("auto", "postings", "flat", "ivf", "hnsw"),
                        help="approximate index (default auto: postings where numba is installed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-collection", action="store_true")
    parser.add_argument("--skip-umap", action="store_true")
    parser.add_argument("--umap-points", type=int, default=10000)
    parser.add_argument("--stories", type=int, default=128, help="stories collected for the throughput test")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--write", default=None, help="record the results in this markdown file (own section only)")
    args = parser.parse_args()

    settings = [
        {"candidates": c, **({} if p is None else {"nprobe": p})} for p in args.nprobe for c in args.candidates
    ]
    rows = []
    for size in args.codes:
        size_rows = search_benchmark(size, args.queries, args.seed, settings, args.index)
        peak = peak_rss_gib()
        for row in size_rows:
            row["peak_gib"] = peak
        rows += size_rows
        print(f"    peak memory so far {peak:.1f} GiB", flush=True)
    collection = None if args.skip_collection else collection_benchmark(args.stories, args.batch_size)
    umap = None if args.skip_umap else umap_benchmark(args.umap_points, args.seed)
    text = markdown(rows, collection, args.queries, umap) + targets(rows)
    print()
    print(text)
    if args.write:
        write_section(Path(args.write), text)
        print(f"wrote the '{SECTION}' section of {args.write}")


if __name__ == "__main__":
    main()
