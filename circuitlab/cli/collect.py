"""`circuitlab collect`: stream a model's circuits over a corpus into a circuit database, shard by shard.

    circuitlab collect --model sgatlin-stories --stories 2000 --out runs/db            # a new database
    circuitlab collect --model sgatlin-stories --stories 2000 --out runs/db --resume   # after a kill
    circuitlab collect --model sgatlin-stories --corpus more.jsonl --out runs/db --append

Every `--shard-rows` circuits are written and committed to the database with how far the corpus was read: a
killed run leaves the database of its committed shards, and `--resume` with the same corpus and options
carries on after them (the corpus is checked against the digest the database recorded). Memory holds one
shard's rows whatever the corpus size. `circuitlab db build` writes a whole new database instead (the old one
stays until the new one is complete).
"""

from __future__ import annotations

import argparse
import time

from circuitlab.cli.db import _corpus, _load_model


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="stream circuits over a corpus into a circuit database (resumable, appendable)",
        description="Run a model over a corpus and stream every token's circuits into the shards of a circuit "
        "database, committing each shard; --resume finishes an interrupted run, --append adds another corpus.",
    )
    parser.add_argument("--model", required=True, help="model folder or shipped model name (e.g. sgatlin-stories)")
    parser.add_argument("--out", required=True, help="database folder (created; see --resume and --append)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--corpus", nargs="+", help="corpus files: labelled story .jsonl (with spans), other .jsonl, "
                        "Hugging Face dataset files, or text files split at blank lines")
    source.add_argument("--stories", type=int, default=None, help="use N generated held-out labelled stories (default 128)")
    parser.add_argument("--max-texts", type=int, default=None, help="use only the first N texts of the corpus")
    parser.add_argument("--layers", type=int, nargs="+", default=None, help="layers to record (default: all)")
    parser.add_argument("--batch-size", type=int, default=16, help="texts per forward pass (default 16)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--shard-rows", type=int, default=65536, help="circuits per shard (default 65536)")
    parser.add_argument("--value-dtype", default="float32", choices=("float32", "float16"), help="stored code values")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="finish the interrupted collection in --out (same corpus and options)")
    again.add_argument("--append", action="store_true", help="add this corpus to the database in --out (same model and layers)")
    parser.add_argument("--index", default="auto", choices=("auto", "postings", "flat", "ivf", "hnsw", "none"),
                        help="approximate index built when the corpus is done (default auto; none: exact search only)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run_collect)


def run_collect(args: argparse.Namespace) -> int:
    from circuitlab.analysis.circuitdb import CircuitDB
    from circuitlab.analysis.circuitdb.store import save_indexes
    from circuitlab.analysis.collect import collect

    model = _load_model(args.model, args.device)
    texts, description = _corpus(args)
    started = time.perf_counter()
    collection = collect(
        model, texts, args.layers, out_dir=args.out, batch_size=args.batch_size, value_dtype=args.value_dtype,
        shard_rows=args.shard_rows, resume=args.resume, append=args.append, description=description,
        model_source=args.model, progress=not args.quiet,
    )
    if args.index != "none":
        db = CircuitDB.open(args.out, model=model, verify=False)
        db.build_index(kind=args.index, progress=not args.quiet)
        save_indexes(db, args.out)
    print(f"{args.out}: {collection.n_rows} circuits in {len(collection.shards)} shards, layers {collection.layers} "
          f"({description}; {time.perf_counter() - started:.1f} s)")
    return 0
