"""`circuitlab db build|query|info|semantic`, `circuitlab embed`, `circuitlab usage`: circuit databases on the
command line (`circuitlab collect`, in cli/collect.py, streams circuits into a database resumably).

    circuitlab db build --model sgatlin-stories --stories 128 --out runs/db
    circuitlab db query runs/db "big dog named Max. Max had a red collar that he wore every day" --layer 2
    torchrun --nproc_per_node=8 -m circuitlab.cli db query runs/db --circuit 7 --device cuda   # shards over GPUs
    circuitlab db info runs/db
    circuitlab db semantic runs/db
    circuitlab embed runs/db --layers 0 1 2 3 --out runs/umap.html
    circuitlab usage runs/db --out-dir runs/usage

User errors (missing folders, mismatched models, bad arguments) are UserErrors:
one line on stderr, exit status 2 (circuitlab.cli.main).
CSV files quote every text field: byte-level tokens may hold carriage returns.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any, Callable

from circuitlab.errors import UserError
from circuitlab.figures import write_figure


def _positive_width(text: str) -> int:
    """--width: a positive number of characters (argparse turns the ValueError into exit status 2)."""
    width = int(text)
    if width < 1:
        raise ValueError(text)
    return width


def register(subparsers: argparse._SubParsersAction) -> None:
    db = subparsers.add_parser(
        "db",
        help="build, query and describe circuit databases",
        description="Circuit databases (seed 000, sections 4.1-4.2): every token of a corpus with its sparse code per "
        "layer, searchable by cosine distance.",
    )
    verbs = db.add_subparsers(dest="db_verb", metavar="<db verb>")
    db.set_defaults(func=_needs_verb(db))

    build = verbs.add_parser("build", help="collect the circuits of a corpus into a database folder")
    build.add_argument("--model", required=True, help="model folder or shipped model name (e.g. sgatlin-stories)")
    build.add_argument("--out", required=True, help="database folder to write (created; an existing database is replaced atomically)")
    source = build.add_mutually_exclusive_group()
    source.add_argument("--corpus", nargs="+", help="corpus files: labelled story .jsonl (with spans), other .jsonl, "
                        "Hugging Face dataset files, or text files split at blank lines")
    source.add_argument("--stories", type=int, default=None, help="use N generated held-out labelled stories (default 128)")
    build.add_argument("--max-texts", type=int, default=None, help="use only the first N texts of the corpus")
    build.add_argument("--layers", type=int, nargs="+", default=None, help="layers to record (default: all)")
    build.add_argument("--batch-size", type=int, default=16, help="texts per forward pass (default 16)")
    build.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    build.add_argument("--index", default="auto", choices=("auto", "postings", "flat", "ivf", "hnsw", "none"),
                       help="approximate index per layer (default auto: posting lists where numba is installed; "
                       "otherwise FAISS flat below 20k circuits, IVF above; none: exact only)")
    build.add_argument("--value-dtype", default="float32", choices=("float32", "float16"), help="stored code values")
    build.add_argument("--shard-rows", type=int, default=65536, help="circuits per shard (default 65536)")
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=run_build)

    query = verbs.add_parser("query", help="nearest stored circuits of every token of a text (seed 000, table 3)")
    query.add_argument("db", help="database folder")
    query.add_argument("text", nargs="?", default=None, help="query text (every token becomes a query)")
    query.add_argument("--circuit", type=int, nargs="+", default=None, help="query with stored circuits by id instead of text")
    query.add_argument("--layer", type=int, default=None, help="layer (default: the penultimate stored layer, as in seed 000)")
    query.add_argument("-k", type=int, default=10, help="neighbours per query token (default 10)")
    query.add_argument("--approximate", action="store_true", help="use the FAISS index (re-ranked exactly) instead of exact search")
    query.add_argument("--model", default=None, help="model folder or name (default: the one recorded when the database was built)")
    query.add_argument("--allow-mismatch", action="store_true", help="accept a model whose config or tokenizer hash differs")
    query.add_argument("--csv", default=None, help="also write the table to this CSV file")
    query.add_argument("--html", default=None, help="also write the distance heatmap (seed 000, figure 6) to this HTML file")
    query.add_argument("--width", type=_positive_width, default=64, help="excerpt width in the printed table")
    query.add_argument("--device", default="auto", help="where exact search runs: auto (a GPU when there is one), cpu, "
                       "cuda or cuda:N; under torchrun each rank searches its shards on its own GPU")
    query.add_argument("--skip-damaged", action="store_true", help="set damaged shards aside (with a warning) and "
                       "search the others")
    query.set_defaults(func=run_query)

    info = verbs.add_parser("info", help="describe a database: counts, layers, codes, indexes, measured recall")
    info.add_argument("db", help="database folder")
    info.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    info.add_argument("--no-verify", action="store_true", help="skip the checksum verification")
    info.set_defaults(func=run_info)

    semantic = verbs.add_parser("semantic", help="semantic score per layer: neighbours sharing the category label, vs shuffled labels")
    semantic.add_argument("db", help="database folder (built from a labelled corpus)")
    semantic.add_argument("--layers", type=int, nargs="+", default=None, help="layers to score (default: all)")
    semantic.add_argument("-k", type=int, default=10, help="neighbours per query circuit (default 10)")
    semantic.add_argument("--queries", type=int, default=2000, help="circuits sampled as queries (default 2000)")
    semantic.add_argument("--shuffles", type=int, default=20, help="label shuffles for the chance baseline (default 20)")
    semantic.add_argument("--approximate", action="store_true", help="use the approximate index instead of exact search")
    semantic.add_argument("--csv", default=None, help="write the per-layer scores to this CSV")
    semantic.set_defaults(func=run_semantic)

    embed = subparsers.add_parser(
        "embed",
        help="UMAP maps of the circuits of the most frequent tokens (seed 000, figures 5 and 9)",
        description="UMAP (cosine) of the codes of the most frequent tokens per layer, using the database's "
        "nearest-neighbour graph as UMAP's precomputed neighbours; embeddings are cached on disk.",
    )
    embed.add_argument("db", help="database folder")
    embed.add_argument("--layers", type=int, nargs="+", default=None, help="layers (default: all)")
    embed.add_argument("--tokens", type=int, default=100, help="most frequent tokens to map (default 100)")
    embed.add_argument("--neighbors", type=int, default=15, help="UMAP n_neighbors (default 15)")
    embed.add_argument("--min-dist", type=float, default=0.1, help="UMAP min_dist (default 0.1)")
    embed.add_argument("--max-points", type=int, default=20000, help="circuits mapped per layer at most (default 20000)")
    embed.add_argument("--seed", type=int, default=0, help="UMAP and sampling seed (default 0)")
    embed.add_argument("--knn", default="database", choices=("database", "umap"), help="whose kNN graph UMAP uses")
    embed.add_argument("--color", default="category", choices=("category", "token"), help="colour points by word category or by token (default category)")
    embed.add_argument("--out", default=None, help="write the plotly figure to this HTML file")
    embed.add_argument("--csv", default=None, help="write the coordinates (with token, category, context) to this CSV")
    embed.add_argument("--cache-dir", default=None, help="embedding cache (default $CIRCUITLAB_CACHE/embeddings or ~/.cache/circuitlab/embeddings)")
    embed.add_argument("--compare-knn", action="store_true", help="also time UMAP with its own kNN and report the speed-up")
    embed.set_defaults(func=run_embed)

    usage = subparsers.add_parser(
        "usage",
        help="neuron usage, Gini and co-activation per layer (seed 000, appendix C.1, figure 8)",
        description="Fraction of neurons used at least once, the Gini coefficient of activation frequency counting "
        "each unique input token once, and the co-activation of the first 128 neurons (shared-subkey pairs marked).",
    )
    usage.add_argument("db", help="database folder")
    usage.add_argument("--layers", type=int, nargs="+", default=None, help="layers (default: all)")
    usage.add_argument("--coactivation", type=int, default=128, help="neurons in the co-activation matrix (default 128)")
    usage.add_argument("--out-dir", default=None, help="write figure 8 per layer (HTML) and a summary figure here")
    usage.add_argument("--csv", default=None, help="write the per-layer table to this CSV")
    usage.set_defaults(func=run_usage)


def _needs_verb(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return run


def _load_model(spec: str, device: str = "cpu") -> Any:
    from circuitlab.architectures.transformer import load_model

    model = load_model(spec, device=device)
    if model.tokenizer is None:
        raise UserError(f"model {spec!r} has no tokenizer.json: circuit databases need one to read text")
    return model.eval()


def _corpus(args: argparse.Namespace) -> tuple[Any, str]:
    """The corpus of `--corpus` or `--stories` as a stream read one text at a time (collecting holds one shard's
    rows, not the corpus), with its description."""
    from circuitlab.data.streams import corpus_stream, story_stream

    if args.corpus:
        texts = corpus_stream(args.corpus)
        counted = f"{texts.n_texts} texts" if texts.n_texts is not None else "texts"
        description = f"{counted} from {', '.join(args.corpus)}"
    else:
        from circuitlab.data.stories import HELD_OUT_SEED

        n = 128 if args.stories is None else args.stories
        if n <= 0:
            raise UserError(f"--stories {n}: need a positive number of stories")
        texts = story_stream(n, HELD_OUT_SEED)
        description = f"{n} generated held-out stories"
    if args.max_texts is not None:
        if args.max_texts <= 0:
            raise UserError(f"--max-texts {args.max_texts}: need a positive number of texts")
        texts = texts.head(args.max_texts)
    return texts, description


def run_build(args: argparse.Namespace) -> int:
    from circuitlab.analysis.circuitdb import CircuitDB
    from circuitlab.analysis.circuitdb.store import save_indexes
    from circuitlab.analysis.collect import collect

    model = _load_model(args.model, args.device)
    texts, description = _corpus(args)
    started = time.perf_counter()
    # the circuits stream into a new data folder of --out; the database there stays whole until they are in
    collect(model, texts, args.layers, out_dir=args.out, batch_size=args.batch_size, value_dtype=args.value_dtype,
            shard_rows=args.shard_rows, replace=True, description=description, model_source=args.model,
            progress=not args.quiet)
    db = CircuitDB.open(args.out, model=model, verify=False)
    if args.index != "none":
        db.build_index(kind=args.index, progress=not args.quiet)
        save_indexes(db, args.out)
    stats = db.corpus_stats
    print(
        f"built {len(db)} circuits x {len(db.layers)} layers from {description} in {time.perf_counter() - started:.1f} s "
        f"(collection {stats['n_tokens'] / max(stats['collection_seconds'], 1e-9):.0f} tokens/s); saved to {args.out}"
    )
    for layer, report in db.index_reports.items():
        print(
            f"  layer {layer}: {report['kind']} index, recall@10 {report.get('recall_at_10', float('nan')):.4f} vs exact "
            f"({report.get('approximate_queries_per_second', 0):.0f} vs {report.get('exact_queries_per_second', 0):.0f} queries/s)"
        )
    return 0


def _open(folder: str, model: Any = None, allow_mismatch: bool = False, verify: bool = True, every_file: bool = False,
          skip_damaged: bool = False) -> Any:
    """The database in `folder`: opened from its manifest (each file checked when first read), or with
    `every_file` read and checked now."""
    from circuitlab.analysis.circuitdb import CircuitDB

    if not Path(folder).is_dir():
        raise UserError(f"no circuit database at {folder}: the folder does not exist (make one with `circuitlab db build`)")
    if every_file:
        return CircuitDB.load(folder, model=model, allow_mismatch=allow_mismatch, verify=verify)
    return CircuitDB.open(folder, model=model, allow_mismatch=allow_mismatch, verify=verify, skip_damaged=skip_damaged)


def run_query(args: argparse.Namespace) -> int:
    from circuitlab.analysis.circuitdb import format_hits, neighbour_heatmap
    from circuitlab.distributed import setup_distributed, teardown_distributed

    if (args.text is None) == (args.circuit is None):
        raise UserError("give either a query text or --circuit ID [ID ...]")
    if args.k < 1:
        raise UserError(f"-k {args.k}: need at least one neighbour")
    context = setup_distributed(args.device)  # under torchrun: every rank searches its own shards
    try:
        db = _open(args.db, skip_damaged=args.skip_damaged)
        db.distribute(context)
        layer = args.layer if args.layer is not None else db.layers[max(0, len(db.layers) - 2)]
        if args.text is not None:
            spec = args.model or db.model_source
            if spec is None:
                raise UserError("text queries need the model: pass --model (the database does not record one)")
            if context.is_main:  # rank 0 turns the text into codes; the other ranks receive them
                db.attach(_load_model(spec), allow_mismatch=args.allow_mismatch)
            hits = db.search(args.text, layer, k=args.k, exact=not args.approximate, device=args.device)
        else:
            bad = [c for c in args.circuit if not 0 <= c < len(db)]
            if bad:
                raise UserError(f"circuit ids {bad} are out of range: the database holds ids 0..{len(db) - 1}")
            query = db.code(layer, args.circuit) if context.is_main else None
            hits = db.search(query, layer, k=args.k, exact=not args.approximate, device=args.device)
            tokens = db.metadata_rows(args.circuit)["token"].to_numpy()
            hits["query_token"] = tokens[hits["query_position"].to_numpy()]
    finally:
        teardown_distributed(context)
    if not context.is_main:
        return 0
    print(f"layer {layer}, {'approximate' if args.approximate else 'exact'} search, {len(db)} circuits, "
          f"served by {hits.attrs['served_by']}")
    print(format_hits(hits, max_context=args.width))
    if args.csv:
        hits.to_csv(args.csv, index=False, quoting=csv.QUOTE_NONNUMERIC)
        print(f"wrote {args.csv}")
    if args.html:
        write_figure(neighbour_heatmap(hits), args.html)
        print(f"wrote {args.html}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    import json

    db = _open(args.db, verify=not args.no_verify, every_file=True)
    manifest = db.info()
    if args.json:
        print(json.dumps(manifest, indent=1, sort_keys=True))
        return 0
    corpus = manifest.get("corpus") or {}
    print(f"circuit database {args.db}")
    print(f"  {manifest['n_circuits']} circuits (tokens) from {corpus.get('n_sequences', '?')} texts; layers {manifest['layers']}; "
          f"{len(manifest['shard_rows'])} shard(s)")
    print(f"  model config hash {str(manifest['model_config_hash'])[:12]}  tokenizer hash {str(manifest['tokenizer_hash'])[:12]}"
          + (f"  model {db.model_source}" if db.model_source else ""))
    for layer, info in manifest["layer_info"].items():
        layout = info.get("layout") or {}
        index = info.get("index")
        index_text = (
            f"{index['kind']} index (sketch {index['sketch']['dim']} dims), recall@10 {index.get('recall_at_10', float('nan')):.4f}"
            if index else "no approximate index"
        )
        print(f"  layer {layer}: {layout.get('kind', 'codes')} codes of size {info['code_size']}, {info['nnz']} non-zeros "
              f"({info['value_dtype']}); {index_text}")
    return 0


def run_semantic(args: argparse.Namespace) -> int:
    for option, value in (("-k", args.k), ("--queries", args.queries), ("--shuffles", args.shuffles)):
        if value < 1:
            raise UserError(f"{option} must be a positive number, got {value}")
    db = _open(args.db)
    table = db.semantic_scores(
        args.layers, k=args.k, n_queries=args.queries, n_shuffles=args.shuffles, exact=not args.approximate
    )
    print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0


def run_embed(args: argparse.Namespace) -> int:
    from circuitlab.analysis.embedding import embed, embedding_figure, knn_speedup

    db = _open(args.db)
    layers = args.layers or db.layers
    for layer in layers:
        db._layer(layer)
    coordinates = embed(
        db, layers, n_tokens=args.tokens, n_neighbors=args.neighbors, min_dist=args.min_dist, seed=args.seed,
        max_points=args.max_points, knn=args.knn, cache_dir=args.cache_dir,
    )
    print(f"embedded {len(coordinates)} circuits of the {args.tokens} most frequent tokens, layers {layers}")
    if args.csv:
        coordinates.to_csv(args.csv, index=False, quoting=csv.QUOTE_NONNUMERIC)
        print(f"wrote {args.csv}")
    if args.out:
        write_figure(embedding_figure(coordinates, color=args.color), args.out)
        print(f"wrote {args.out}")
    if args.compare_knn:
        timing = knn_speedup(db, layers[0], n_tokens=args.tokens, n_neighbors=args.neighbors, min_dist=args.min_dist,
                             seed=args.seed, max_points=args.max_points)
        print(
            f"layer {timing['layer']}, {timing['points']} points: database kNN {timing['database_knn_seconds']:.2f} s + UMAP "
            f"{timing['umap_with_database_knn_seconds']:.2f} s vs UMAP with its own kNN {timing['umap_own_knn_seconds']:.2f} s "
            f"(speed-up {timing['speedup']:.2f}x)"
        )
    return 0


def run_usage(args: argparse.Namespace) -> int:
    from circuitlab.analysis.usage import database_usage, usage_figure, usage_summary_figure, usage_table

    if args.out_dir:
        folder = Path(args.out_dir)
        if folder.exists() and not folder.is_dir():
            raise UserError(f"--out-dir {folder} exists and is not a folder")
        if args.csv and Path(args.csv).resolve() == folder.resolve():
            raise UserError(f"--csv and --out-dir name the same path ({folder}): the table is a file, the figures a folder")
    db = _open(args.db)
    layers = args.layers or db.layers
    for layer in layers:
        db._layer(layer)
    reports = database_usage(db, layers, n_coactivation=args.coactivation)
    print(usage_table(reports).to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    if args.csv:
        usage_table(reports).to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    if args.out_dir:
        folder = Path(args.out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for layer, report in reports.items():
            write_figure(usage_figure(report), folder / f"usage_layer{layer}.html")
        write_figure(usage_summary_figure(reports), folder / "usage_summary.html")
        print(f"wrote {len(reports) + 1} figures to {folder}")
    return 0
