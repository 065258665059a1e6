"""`circuitlab corpus` and `circuitlab tokenizer`: the data sub-commands, registered on the main parser.

    circuitlab corpus --out stories.jsonl --n 20000 --seed 0
    circuitlab tokenizer --corpus stories.jsonl --vocab-size 4096 --out tokenizer.json
    circuitlab tokenizer --vocab-size 4096 --out tokenizer.json        # generates 20000 stories (seed 0)
    circuitlab tokenizer --natural --natural-upsample 4 --n 100000 --vocab-size 8192 --out tokenizer.json
                                                                       # the training mixture

User errors (missing or unreadable files, bad arguments) are UserErrors:
one line on stderr, exit status 2 (circuitlab.cli.main).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from circuitlab.errors import UserError
from circuitlab.resources import natural_root


def register(subparsers: argparse._SubParsersAction) -> None:
    corpus = subparsers.add_parser(
        "corpus",
        help="write a labelled story corpus (JSON lines)",
        description="Generate labelled children's stories and write them as JSON lines "
        '({"text", "spans", "characters", "referents", "sentences", "facts"}).',
    )
    corpus.add_argument("--out", required=True, help="output .jsonl path")
    corpus.add_argument("--n", type=int, default=20000, help="number of stories (default 20000)")
    corpus.add_argument("--seed", type=int, default=None, help="seed (default 0, the training seed)")
    corpus.add_argument("--held-out", action="store_true", help="use the held-out seed (1000003) instead of --seed")
    corpus.add_argument("--quiet", action="store_true", help="no progress bar")
    corpus.set_defaults(func=run_corpus)

    tokenizer = subparsers.add_parser(
        "tokenizer",
        help="train a byte-level BPE tokenizer",
        description="Train a byte-level BPE tokenizer with the <|endoftext|> separator. Sources: .jsonl files "
        "(field --text-field), Hugging Face save_to_disk folders or .json/.csv/.parquet files, or plain text files "
        "(documents separated by blank lines). Without --corpus, --n stories are generated with --seed.",
    )
    tokenizer.add_argument("--corpus", nargs="*", default=None, help="corpus files or folders (default: generated stories)")
    tokenizer.add_argument("--text-field", default="text", help="text field of .jsonl / dataset sources (default text)")
    tokenizer.add_argument("--vocab-size", type=int, default=4096, help="maximum vocabulary size (default 4096)")
    tokenizer.add_argument("--out", required=True, help="output tokenizer.json path")
    tokenizer.add_argument("--n", type=int, default=20000, help="stories to generate when --corpus is omitted")
    tokenizer.add_argument("--seed", type=int, default=0, help="seed of the generated stories (default 0)")
    tokenizer.add_argument("--natural", nargs="?", const=str(natural_root()), default=None, metavar="DIR",
                           help="train on the mixture: the natural stories' training split (DIR; default: the stories circuitlab ships) "
                           "plus --n generated stories; reports the share of natural held-out words kept whole")
    tokenizer.add_argument("--natural-upsample", type=int, default=1, help="copies of each natural training story")
    tokenizer.add_argument("--quiet", action="store_true", help="no progress bars")
    tokenizer.set_defaults(func=run_tokenizer)


def run_corpus(args: argparse.Namespace) -> int:
    from circuitlab.data.stories import HELD_OUT_SEED, TRAIN_SEED, write_corpus

    if args.n <= 0:
        raise UserError(f"--n {args.n}: need a positive number of stories")
    if args.held_out and args.seed is not None:
        raise UserError("--held-out and --seed both given; choose one")
    seed = HELD_OUT_SEED if args.held_out else (TRAIN_SEED if args.seed is None else args.seed)
    if Path(args.out).is_dir():  # before generating, not after
        raise UserError(f"--out {args.out} is a folder; give the path of the .jsonl file to write")
    started = time.perf_counter()
    try:
        path = write_corpus(args.out, args.n, seed=seed, show_progress=not args.quiet)
    except OSError as error:
        raise UserError(f"cannot write {args.out}: {error.strerror or error}") from None
    print(f"wrote {args.n} stories (seed {seed}) to {path} in {time.perf_counter() - started:.1f} s")
    return 0


def run_tokenizer(args: argparse.Namespace) -> int:
    from circuitlab.data.loaders import load_documents
    from circuitlab.data.stories import iter_stories
    from circuitlab.data.tokenizer import MIN_VOCAB_SIZE, train_tokenizer

    if args.vocab_size < MIN_VOCAB_SIZE:
        raise UserError(f"--vocab-size {args.vocab_size}: need at least {MIN_VOCAB_SIZE} (256 bytes + <|endoftext|>)")
    natural_held_out: list[str] = []
    try:
        if args.natural is not None:
            if args.corpus:
                raise UserError("--natural and --corpus both given; choose one")
            from circuitlab.training.corpus import DataSpec, load_document_sets

            spec = DataSpec(n_stories=args.n, story_seed=args.seed, natural_dir=args.natural,
                            natural_upsample=args.natural_upsample)
            documents = load_document_sets(spec, show_progress=not args.quiet)
            texts, natural_held_out = documents.train, documents.held_out["natural"]
            source = f"the mixture ({spec.describe()})"
        elif args.corpus:
            texts = load_documents(args.corpus, text_field=args.text_field)
            source = f"{len(texts)} documents from {', '.join(args.corpus)}"
        else:
            if args.n <= 0:
                raise UserError(f"--n {args.n}: need a positive number of stories")
            texts = [story.text for story in iter_stories(args.n, args.seed, show_progress=not args.quiet)]
            source = f"{args.n} generated stories (seed {args.seed})"
        tokenizer = train_tokenizer(texts, vocab_size=args.vocab_size, show_progress=not args.quiet)
        path = tokenizer.save(args.out)
    except FileNotFoundError as error:  # a mixture whose story folder is missing
        raise UserError(str(error)) from None
    except OSError as error:  # the file named by the error: an input that cannot be read, or the output
        raise UserError(f"{getattr(error, 'filename', None) or args.out}: {error.strerror or error}") from None
    print(f"trained a {tokenizer.vocab_size}-token BPE on {source}; saved {path} (sha256 {tokenizer.hash()[:12]})")
    if natural_held_out:
        from circuitlab.data.tokenizer import word_token_share

        share, n_words = word_token_share(tokenizer, natural_held_out)
        print(f"natural held-out stories: {share:.1%} of {n_words:,} word occurrences are single tokens")
    if tokenizer.vocab_size < args.vocab_size:
        print(f"note: the corpus ran out of merges before {args.vocab_size} tokens; set the model's d_vocab to {tokenizer.vocab_size}")
    return 0
