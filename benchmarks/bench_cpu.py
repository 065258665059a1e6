"""Every CPU ratio of issue 15 in one run: forward tokens/s of the shipped story models (ratios to
gelu-stories), circuit collection tokens/s of sgatlin-stories, and circuit search at a million codes
(exact and approximate queries/s, recall@10, build seconds).

    python benchmarks/bench_cpu.py                      # 10^6 codes, the issue's size
    python benchmarks/bench_cpu.py --n 100000 --json out.json

Forward passes run under inference mode on batches of 16 x 256 random tokens; the models are measured in
interleaved rounds and each keeps its best round, so a burst of other work on shared cores does not land
on one model only; the ratios of each round's pair (the models run back to back) are printed beside, their
median and range. Collection runs `circuitlab.analysis.collect.collect` over generated held-out stories
(every layer's codes, context excerpts and top-5 predictions written to shards). Search uses structured
synthetic codes of the sgatlin-stories shape (`structured_synthetic_codes`: size 8192, 64 non-zeros) and
fresh queries from the same prototypes; recall@10 counts ties with the exact 10th neighbour as correct.
Approximate search is measured with the postings index (several terms:candidates settings) and FAISS IVF
(several nprobe, 512 candidates); the fastest setting at recall@10 >= 0.99 is set against the target.
Build = the exact index (posting lists of active units, or scipy CSR blocks without numba) + that setting's
approximate index (the postings index shares the exact index's lists). Every rate is wall clock on this machine; the load average is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

TARGETS = {
    "sgatlin_forward_ratio": 0.5, "parity_forward_ratio": 0.5, "collection_tokens_per_second": 2000.0,
    "exact_queries_per_second": 300.0, "approximate_queries_per_second": 1000.0, "recall_at_10": 0.99,
    "build_seconds": 60.0,
}


def load_average() -> float:
    return os.getloadavg()[0]


def forward_benchmark(names: list[str], rounds: int, batch: int, length: int) -> tuple[dict, dict]:
    """(best tokens/s of each model over the rounds, each model's tokens/s in every round)."""
    from circuitlab.architectures.transformer import load_model

    models = {name: load_model(name).eval() for name in names}
    tokens = torch.randint(0, min(m.config.d_vocab for m in models.values()), (batch, length),
                           generator=torch.Generator().manual_seed(0))
    per_round = {name: [] for name in names}
    with torch.inference_mode():
        for model in models.values():
            model(tokens[:2, :32])
        for _ in range(rounds):
            for name, model in models.items():
                started = time.perf_counter()
                model(tokens)
                per_round[name].append(tokens.numel() / (time.perf_counter() - started))
    return {name: max(rates) for name, rates in per_round.items()}, per_round


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def collection_benchmark(n_stories: int, batch_size: int, rounds: int) -> dict:
    from circuitlab.analysis.collect import collect
    from circuitlab.architectures.transformer import load_model
    from circuitlab.data.stories import held_out_stories

    model = load_model("sgatlin-stories").eval()
    corpus = held_out_stories(n_stories)
    rates, n_tokens = [], 0
    with tempfile.TemporaryDirectory() as folder:
        collect(model, corpus[:batch_size], out_dir=Path(folder) / "warm", batch_size=batch_size, progress=False)
        for repeat in range(rounds):
            collection = collect(model, corpus, out_dir=Path(folder) / f"run{repeat}", batch_size=batch_size, progress=False)
            rates.append(collection.stats.tokens_per_second)
            n_tokens = collection.stats.n_tokens
    return {"tokens": n_tokens, "tokens_per_second": max(rates), "batch_size": batch_size}


def search_benchmark(n_codes: int, n_queries: int, settings: list[tuple[int, int]], faiss_nprobe: list[int]) -> dict:
    from circuitlab.analysis.circuitdb import CircuitDB
    from circuitlab.analysis.codeindex import ApproximateIndex, recall_at_k, structured_synthetic_codes

    codes = structured_synthetic_codes(n_codes, seed=0)
    queries = structured_synthetic_codes(n_queries, seed=1, prototypes_seed=0)
    db = CircuitDB.from_codes({0: codes})
    started = time.perf_counter()
    exact_index = db.exact_index(0)
    exact_build = time.perf_counter() - started
    db.search_ids(queries.rows([0, 1]), 0, 10, exact=True)  # compiles the search loop (cached on disk after)
    started = time.perf_counter()
    _, exact_distances = db.search_ids(queries, 0, 10, exact=True)
    exact_qps = n_queries / (time.perf_counter() - started)
    touched = int(exact_index.posting_lengths[queries.indices].sum()) / n_queries

    def measure(index, label: dict, candidates: int) -> dict:
        started = time.perf_counter()
        _, distances = index.search(codes, queries, 10, None, candidates)
        return {**label, "candidates": candidates, "queries_per_second": n_queries / (time.perf_counter() - started),
                "recall_at_10": recall_at_k(exact_distances, distances)}

    rows, builds = [], {}
    if exact_index.postings is not None:
        postings_index = ApproximateIndex.build(codes, kind="postings", posting_lists=exact_index.postings)
        postings_index.search(codes, queries.rows([0, 1]), 10)
        builds["postings"] = 0.0  # shares the exact index's posting lists
        for terms, candidates in settings:
            postings_index.params["terms"] = terms
            rows.append(measure(postings_index, {"index": "postings", "setting": f"terms {terms}"}, candidates))
    if faiss_nprobe:
        started = time.perf_counter()
        ivf = ApproximateIndex.build(codes, kind="ivf" if n_codes >= 20_000 else "flat")
        builds[ivf.kind] = time.perf_counter() - started
        for nprobe in faiss_nprobe if ivf.kind == "ivf" else [0]:
            if ivf.kind == "ivf":
                ivf.params["nprobe"] = ivf.faiss_index.nprobe = nprobe
            rows.append(measure(ivf, {"index": ivf.kind, "setting": f"nprobe {nprobe}"}, 512))
    good = [row for row in rows if row["recall_at_10"] >= TARGETS["recall_at_10"]]
    chosen = max(good, key=lambda row: row["queries_per_second"]) if good else max(rows, key=lambda row: row["recall_at_10"])
    return {
        "codes": n_codes, "queries": n_queries, "exact_engine": exact_index.engine,
        "exact_index_seconds": exact_build, "approximate_index_seconds": builds,
        "build_seconds": exact_build + builds.get(chosen["index"], 0.0), "exact_queries_per_second": exact_qps,
        "posting_entries_per_query": touched, "approximate": rows, "chosen": chosen,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="stored codes for the search benchmark")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved forward rounds (best kept)")
    parser.add_argument("--stories", type=int, default=256, help="held-out stories collected")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--settings", default="16:128,24:128,24:256,32:256",
                        help="approximate settings terms:candidates, comma-separated")
    parser.add_argument("--faiss-nprobe", default="16,32",
                        help="FAISS IVF cells probed, comma-separated (512 candidates re-ranked); empty: skip FAISS")
    parser.add_argument("--skip-models", action="store_true", help="search only")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--json", default="benchmarks/results/cpu.json", help="where to write the results")
    args = parser.parse_args()

    results: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_average_start": load_average(),
    }
    if not args.skip_models:
        names = ["gelu-stories", "sgatlin-stories", "parity-stories"]
        forward, per_round = forward_benchmark(names, args.rounds, 16, 256)
        results["forward_tokens_per_second"] = forward
        results["forward_tokens_per_second_by_round"] = per_round
        results["load_average_after_forward"] = load_average()
        print(f"forward tokens/s (load {results['load_average_after_forward']:.1f}): "
              + ", ".join(f"{name} {rate:,.0f}" for name, rate in forward.items()), flush=True)
        results["collection"] = collection_benchmark(args.stories, args.batch_size, 2)
        results["load_average_after_collection"] = load_average()
        print(f"collection: {results['collection']['tokens_per_second']:,.0f} tokens/s", flush=True)
    if not args.skip_search:
        settings = [tuple(int(x) for x in item.split(":")) for item in args.settings.split(",")]
        nprobe = [int(x) for x in args.faiss_nprobe.split(",") if x.strip()]
        results["search"] = search_benchmark(args.n, args.queries, settings, nprobe)
        results["load_average_after_search"] = load_average()

    lines = [f"CPU benchmarks, {results['date']}, {results['cpu_count']} cores, torch threads {results['torch_threads']}, "
             f"load average {results['load_average_start']:.1f} at start", "",
             f"{'what':58s} {'measured':>14s} {'target':>10s}  met"]

    def line(what: str, value: float, target: float, fmt: str, higher: bool = True) -> None:
        met = value >= target if higher else value <= target
        lines.append(f"{what:58s} {format(value, fmt):>14s} {('>= ' if higher else '<= ') + format(target, 'g'):>10s}  {'yes' if met else 'no'}")

    if "forward_tokens_per_second" in results:
        forward = results["forward_tokens_per_second"]
        gelu = forward["gelu-stories"]
        for name in ("gelu-stories", "sgatlin-stories", "parity-stories"):
            lines.append(f"{'forward tokens/s, ' + name:58s} {forward[name]:14,.0f}")
        line("sgatlin-stories forward / gelu-stories", forward["sgatlin-stories"] / gelu, 0.5, ".2f")
        line("parity-stories forward / gelu-stories", forward["parity-stories"] / gelu, 0.5, ".2f")
        by_round = results["forward_tokens_per_second_by_round"]
        for name in ("sgatlin-stories", "parity-stories"):  # each round's pair run back to back: the same drift
            ratios = [rate / base for rate, base in zip(by_round[name], by_round["gelu-stories"])]
            lines.append(f"{'    ' + name + ' / gelu-stories, paired rounds: median':58s} "
                         f"{median(ratios):14.2f}   (rounds {min(ratios):.2f}-{max(ratios):.2f})")
        line("collection tokens/s, sgatlin-stories", results["collection"]["tokens_per_second"], 2000, ",.0f")
    if "search" in results:
        search = results["search"]
        chosen = search["chosen"]
        size = f"{search['codes']:,} codes"
        line(f"exact queries/s, {size} ({search['exact_engine']})", search["exact_queries_per_second"], 300, ",.0f")
        line(f"approximate queries/s, {size} ({chosen['index']}, {chosen['setting']}, {chosen['candidates']} cand.)",
             chosen["queries_per_second"], 1000, ",.0f")
        line("approximate recall@10", chosen["recall_at_10"], 0.99, ".4f")
        line(f"build seconds, {size} (exact + {chosen['index']} index)", search["build_seconds"], 60, ".1f", higher=False)
        for row in search["approximate"]:
            lines.append(f"    {row['index']} {row['setting']}, {row['candidates']} candidates: "
                         f"{row['queries_per_second']:,.0f} queries/s, recall@10 {row['recall_at_10']:.4f}")
        lines.append(f"    index build seconds: exact ({search['exact_engine']}) {search['exact_index_seconds']:.1f}, "
                     + ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in search["approximate_index_seconds"].items()))
        lines.append(f"    posting entries walked per exact query: {search['posting_entries_per_query']:,.0f}")
    lines.append(f"load average at the end {load_average():.1f}")
    print("\n".join(lines))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
