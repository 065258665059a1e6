"""Circuit collection sharded across ranks and merged, for corpora that outgrow one GPU.

Launched with torchrun, every rank collects every world_size-th text (rank r takes texts r, r + W, ...)
into its own shard folder with `circuitlab.analysis.collect.collect`; after a barrier, rank 0 merges the
parts into one collection whose sequence ids are the texts' global indices and whose circuit ids are
renumbered 0..n-1 in (sequence, position) order, so the merged database equals the one a single process
would build. Then rank 0 builds and saves the CircuitDB.

    torchrun --nproc_per_node=2 -m circuitlab.analysis.collect_ranks sgatlin-stories --stories 2000 --out runs/db
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from circuitlab.analysis.collect import SHARD_MANIFEST, Collection, CollectionStats, collect
from circuitlab.atomic import atomic_write_text


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def merge_collections(parts: Sequence[Collection], world_size: int, out_dir: str | os.PathLike) -> Collection:
    """One collection from the per-rank parts of a sharded collection (rank r held texts r, r + W, ...)."""
    import pandas as pd

    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    first = parts[0]
    for rank, part in enumerate(parts):
        if part.model_config_hash != first.model_config_hash or part.layers != first.layers:
            raise ValueError(f"rank {rank}'s collection was made with another model or layers than rank 0's")
    frames, codes = [], {layer: ([], []) for layer in first.layers}
    for rank, part in enumerate(parts):
        metadata = part.metadata()
        metadata["sequence_id"] = metadata["sequence_id"].astype(np.int64) * world_size + rank
        frames.append(metadata)
        for layer in first.layers:
            matrix = part.codes(layer)
            codes[layer][0].append(np.asarray(matrix.indices))
            codes[layer][1].append(np.asarray(matrix.values))
    metadata = pd.concat(frames, ignore_index=True)
    order = np.lexsort((metadata["position"].to_numpy(), metadata["sequence_id"].to_numpy()))
    metadata = metadata.iloc[order].reset_index(drop=True)
    metadata["circuit_id"] = np.arange(len(metadata), dtype=np.int64)
    shard = "shard-00000"
    metadata.to_parquet(out / f"{shard}.parquet", index=False)
    for layer, (indices, values) in codes.items():
        np.save(out / f"{shard}.layer{layer}.indices.npy", np.concatenate(indices)[order])
        np.save(out / f"{shard}.layer{layer}.values.npy", np.concatenate(values)[order])
    stats = CollectionStats(
        n_sequences=sum(p.stats.n_sequences for p in parts),
        n_tokens=sum(p.stats.n_tokens for p in parts),
        seconds=max(p.stats.seconds for p in parts),  # ranks run concurrently
    )
    merged = Collection(
        folder=out, layers=list(first.layers), code_sizes=dict(first.code_sizes), shards=[shard],
        shard_rows=[len(metadata)], model_config_hash=first.model_config_hash, tokenizer_hash=first.tokenizer_hash,
        model_config=first.model_config, layer_layouts=dict(first.layer_layouts), stats=stats,
    )
    merged.save_manifest()
    return merged


def collect_distributed(
    model: Any, texts: Sequence[Any], layers: Sequence[int] | None, out_dir: str | os.PathLike, **options: Any
) -> Collection | None:
    """Collect this rank's share of `texts`; rank 0 returns the merged collection, other ranks None.
    Without an initialised process group this is plain `collect` into out_dir/merged."""
    rank, world = _rank_world()
    out = Path(out_dir)
    part = collect(model, list(texts)[rank::world], layers, out_dir=out / f"rank{rank}", **options)
    if world > 1:
        dist.barrier()
    if rank != 0:
        return None
    parts = [part] + [Collection.open(out / f"rank{r}") for r in range(1, world)]
    merged = merge_collections(parts, world, out / "merged")
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
            model, stories, args.layers, work, batch_size=args.batch_size, progress=rank == 0
        )
        if rank == 0:
            from circuitlab.analysis.circuitdb import CircuitDB

            collect_seconds = time.perf_counter() - started
            db = CircuitDB.from_collection(merged, workdir=work / "arrays")
            db.model, db.tokenizer = model, model.tokenizer
            if not args.no_index:
                db.build_index(progress=True)
            db.save(args.out)
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
