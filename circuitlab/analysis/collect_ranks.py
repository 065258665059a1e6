"""Circuit collection sharded across ranks and merged, for corpora that outgrow one GPU.

Launched with torchrun, every rank collects every world_size-th text (rank r takes texts r, r + W, ...)
into its own database folder with `circuitlab.analysis.collect.collect`; after a barrier, rank 0 merges the
parts into one database whose sequence ids are the texts' global indices and whose circuit ids are
renumbered 0..n-1 in (sequence, position) order, so the merged database equals the one a single process
would build. The merge streams: rank r's local text j is global text j * W + r, so it reads the parts' shards
in order, text by text, and writes the merged shards as they fill. Then rank 0 builds the approximate index.

    torchrun --nproc_per_node=2 -m circuitlab.analysis.collect_ranks sgatlin-stories --stories 2000 --out runs/db
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from circuitlab.analysis.circuitdb.manifest import FORMAT_NAME, FORMAT_VERSION
from circuitlab.analysis.circuitdb.store import ShardAppender
from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.analysis.collect import Collection, collect
from circuitlab.atomic import atomic_write_text


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _texts(part: Collection, rank: int, world_size: int) -> Iterator[tuple[int, Any, dict]]:
    """(global sequence id, metadata rows, {layer: codes}) of each run of one text's rows in a part, in order
    (a text split over two shards comes as two runs)."""
    table = part.table
    for shard in range(table.n_shards):
        metadata = table.metadata(shard)
        codes = {layer: table.matrix(layer, shard) for layer in part.layers}
        sequence = metadata["sequence_id"].to_numpy(dtype=np.int64)
        cuts = np.flatnonzero(np.diff(sequence)) + 1
        for start, stop in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(sequence)]])):
            rows = metadata.iloc[start:stop].copy()
            rows["sequence_id"] = sequence[start] * world_size + rank
            yield int(sequence[start] * world_size + rank), rows, {
                layer: CodeMatrix(matrix.indices[start:stop], matrix.values[start:stop], matrix.size, canonical=True)
                for layer, matrix in codes.items()
            }


def merge_collections(parts: Sequence[Collection], world_size: int, out_dir: str | os.PathLike,
                      shard_rows: int = 65536) -> Collection:
    """One database from the per-rank parts of a sharded collection (rank r held texts r, r + W, ...),
    written to `out_dir` shard by shard (replacing a database there once complete)."""
    import pandas as pd

    first = parts[0]
    for rank, part in enumerate(parts):
        if part.model_config_hash != first.model_config_hash or part.layers != first.layers:
            raise ValueError(f"rank {rank}'s collection was made with another model or layers than rank 0's")
    stats = {
        "n_sequences": sum(p.stats.n_sequences for p in parts),
        "n_tokens": sum(p.stats.n_tokens for p in parts),
        "collection_seconds": max(p.stats.seconds for p in parts),  # ranks run concurrently
    }
    layer_info = {str(layer): dict(first.manifest.layer_info[str(layer)].model_dump(), index=None) for layer in first.layers}
    fields = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "model_config_hash": first.model_config_hash,
        "tokenizer_hash": first.tokenizer_hash, "model_config": first.model_config,
        "model_source": first.manifest.model_source, "layers": list(first.layers), "corpus": stats,
        "layer_info": layer_info,
    }
    appender = ShardAppender(out_dir, replace=True)
    try:
        frames, codes, pending = [], {layer: [] for layer in first.layers}, 0

        def flush() -> None:
            nonlocal frames, codes, pending
            metadata = pd.concat(frames, ignore_index=True)
            metadata["circuit_id"] = np.arange(appender.n_rows, appender.n_rows + len(metadata), dtype=np.int64)
            appender.append(metadata, {layer: CodeMatrix.concatenate(parts) for layer, parts in codes.items()}, fields)
            frames, codes, pending = [], {layer: [] for layer in first.layers}, 0

        streams = [_texts(part, rank, world_size) for rank, part in enumerate(parts)]
        for _, rows, text_codes in heapq.merge(*streams, key=lambda run: run[0]):
            frames.append(rows)
            for layer, matrix in text_codes.items():
                codes[layer].append(matrix)
            pending += len(rows)
            if pending >= shard_rows:
                flush()
        if pending:
            flush()
        appender.finish()
    finally:
        appender.close()
    return Collection.open(out_dir)


def collect_distributed(
    model: Any, texts: Sequence[Any], layers: Sequence[int] | None, out_dir: str | os.PathLike,
    merged_dir: str | os.PathLike | None = None, **options: Any
) -> Collection | None:
    """Collect this rank's share of `texts` into out_dir/rank<r>; rank 0 merges the parts into `merged_dir`
    (default out_dir/merged) and returns that collection, other ranks None. Without an initialised process
    group this is plain `collect` and the merge of its one part."""
    rank, world = _rank_world()
    out = Path(out_dir)
    part = collect(model, list(texts)[rank::world], layers, out_dir=out / f"rank{rank}", replace=True, **options)
    if world > 1:
        dist.barrier()
    if rank != 0:
        return None
    parts = [part] + [Collection.open(out / f"rank{r}") for r in range(1, world)]
    merged = merge_collections(parts, world, merged_dir or out / "merged")
    for r in range(world):
        shutil.rmtree(out / f"rank{r}", ignore_errors=True)
    return merged


def _load(spec: str, tokenizer_path: str | None, device: torch.device) -> Any:
    from circuitlab.architectures.summary import build_from_spec

    if tokenizer_path:
        from circuitlab.architectures.transformer import CircuitTransformer
        from circuitlab.config import ModelConfig
        from circuitlab.presets import PRESETS
        from circuitlab.data.tokenizer import CircuitTokenizer

        tokenizer = CircuitTokenizer.from_file(tokenizer_path)
        name = spec[len("preset:"):] if spec.startswith("preset:") else spec
        if name not in PRESETS:
            raise ValueError(f"--tokenizer goes with a preset (an untrained model for timing); {spec!r} is not one")
        torch.manual_seed(0)
        model = CircuitTransformer(ModelConfig.preset(name, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
    else:
        model = build_from_spec(spec)
    return model.to(device).eval()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m circuitlab.analysis.collect_ranks",
        description="Build a circuit database with collection sharded across torchrun ranks.",
    )
    parser.add_argument("model", help="model folder, shipped model, or preset:NAME with --tokenizer (for timing)")
    parser.add_argument("--out", required=True, help="database folder to write")
    parser.add_argument("--stories", type=int, default=2000, help="held-out generated stories to collect")
    parser.add_argument("--layers", type=int, nargs="*", default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tokenizer", default=None, help="tokenizer.json for an untrained preset")
    parser.add_argument("--no-index", action="store_true", help="skip the approximate FAISS indexes")
    parser.add_argument("--stats", default=None, help="write timing (JSON) here")
    args = parser.parse_args(argv)

    from circuitlab.distributed import device_for, setup_distributed, teardown_distributed

    context = setup_distributed("auto")
    rank, world = context.rank, context.world_size
    try:
        device = device_for(context, "auto")
        from circuitlab.data import held_out_stories

        model = _load(args.model, args.tokenizer, device)
        stories = held_out_stories(args.stories)
        work = Path(args.out).with_name(Path(args.out).name + ".parts")
        started = time.perf_counter()
        merged = collect_distributed(
            model, stories, args.layers, work, args.out, batch_size=args.batch_size, progress=rank == 0
        )
        if rank == 0:
            from circuitlab.analysis.circuitdb import CircuitDB
            from circuitlab.analysis.circuitdb.store import save_indexes

            collect_seconds = time.perf_counter() - started
            db = CircuitDB.open(args.out, model=model, verify=False)
            if not args.no_index:
                db.build_index(progress=True)
                save_indexes(db, args.out)
            shutil.rmtree(work, ignore_errors=True)
            record = {
                "world_size": world, "device": str(device), "tokens": merged.stats.n_tokens,
                "collect_seconds": round(collect_seconds, 3),
                "tokens_per_second": round(merged.stats.n_tokens / collect_seconds, 1),
            }
            print(json.dumps(record))
            if args.stats:
                atomic_write_text(args.stats, json.dumps(record, indent=1))
    finally:
        teardown_distributed(context)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
