"""`circuitlab train`: train any circuitlab architecture on a corpus from one command.

    circuitlab train --preset tiny-sgatlin --out runs/tiny                       # ~30 s on 2 CPU cores
    circuitlab train --preset sgatlin-stories --steps 3000 --batch-size 64 --seq-len 256 --lr 1e-3 \\
        --warmup 100 --out runs/sgatlin
    circuitlab train --out runs/sgatlin --preset sgatlin-stories --resume       # after a crash or kill
    torchrun --nproc_per_node=2 -m circuitlab.cli train --preset sgatlin-stories --out runs/ddp

The corpus defaults to generated stories (--n-stories); --text, --jsonl or --hf-dataset read other text.
Settings not given on the command line come from the preset's training defaults (TRAINING_DEFAULTS), then
from TrainConfig. The model's d_vocab always follows the tokenizer's vocabulary size.

Outputs in --out: config.json, model.safetensors, tokenizer.json (a model folder: load_model(out)),
train_log.jsonl, metrics.json, card.md, checkpoints/, and data/ (the tokenized corpus cache, unless
--data-dir puts it elsewhere). Exit status: 0 done (also when --max-minutes stopped the run cleanly),
2 user error, 3 divergence (the guard's message names the checkpoint saved for inspection), 130 Ctrl-C (the run
stops after the step in progress with a checkpoint; --resume continues it; a second Ctrl-C stops at once).
A run that fails before writing anything leaves no --out folder behind.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError
from circuitlab.resources import natural_root

TRAINING_DEFAULTS: dict[str, dict[str, Any]] = {
    # the tiny presets: a few hundred steps on 2 CPU cores, well below the corpus' unigram entropy
    "tiny": dict(steps=300, batch_size=16, seq_len=128, lr=3e-3, warmup=30, eval_every=100, ckpt_every=100,
                 eval_sequences=64, n_stories=3000, held_out_stories=200, vocab_size=2048, grad_clip=1.0),
    # the shipped story models (seed 000, appendix B.1.2: lr 1e-3, 100 warmup steps, clipping at 2.0)
    "stories": dict(steps=3000, batch_size=64, seq_len=256, lr=1e-3, warmup=100, eval_every=250, ckpt_every=500,
                    eval_sequences=256, n_stories=400000, held_out_stories=2000, vocab_size=4096, grad_clip=2.0),
    "other": dict(n_stories=20000, held_out_stories=500, vocab_size=4096),
}

EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130  # the shell's status for a process stopped by Ctrl-C


def defaults_for(preset: str | None) -> dict[str, Any]:
    if preset is None:
        return TRAINING_DEFAULTS["other"]
    if preset.startswith("tiny-"):
        return TRAINING_DEFAULTS["tiny"]
    if preset.endswith("-stories") or preset == "seed000-tinystories":
        return TRAINING_DEFAULTS["stories"]
    return TRAINING_DEFAULTS["other"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model (stories corpus by default); resumable, torchrun-ready",
        description="Train a circuitlab model with AdamW and a warmup-stable-decay schedule. Settings left out "
        "come from the preset's training defaults. Outputs a model folder plus train_log.jsonl, metrics.json "
        "and card.md in --out. Exit status 2: a user error; 3: the run diverged.",
        epilog="training defaults: " + "; ".join(
            f"{family}: " + ", ".join(f"{k}={v}" for k, v in values.items()) for family, values in TRAINING_DEFAULTS.items()
        ) + " (tiny = tiny-* presets, stories = *-stories and seed000-tinystories)",
    )
    model = parser.add_argument_group("model")
    which = model.add_mutually_exclusive_group(required=True)
    which.add_argument("--preset", help="a ModelConfig preset, e.g. tiny-sgatlin, sgatlin-stories")
    which.add_argument("--config", help="a model config.json (ModelConfig.to_json)")
    for surface in ("attn-sparsity", "attn-crispness", "ffn-sparsity", "ffn-crispness"):
        model.add_argument(f"--{surface}", type=float, default=None,
                           help=f"override the config's {surface.replace('-', '_')} selectivity pressure (0 = off)")

    run = parser.add_argument_group("run")
    run.add_argument("--out", required=True, help="run folder (created)")
    run.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    run.add_argument("--seed", type=int, default=0, help="seed of the model init and the data order (default 0)")
    run.add_argument("--device", default="auto", help="auto (CUDA when present; the default), cpu, cuda, cuda:N")
    run.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    run.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                     help="torch.compile the model (default: on CUDA yes, on the CPU no)")
    run.add_argument("--compile-mode", default=None,
                     help="torch.compile mode: default, reduce-overhead (CUDA graphs), max-autotune or "
                          "max-autotune-no-cudagraphs (default: reduce-overhead on one CUDA device, else default)")
    run.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2 (torchrun only)")
    run.add_argument("--max-minutes", type=float, default=None,
                     help="stop cleanly (checkpoint, evaluate, save) once this much wall time has passed")
    run.add_argument("--fit-to-time", action="store_true",
                     help="with --max-minutes: run the learning-rate decay on the time budget, so a run that cannot "
                          "reach --steps in time still ends fully decayed (--steps is then the most it takes)")
    run.add_argument("--save-dtype", choices=("float32", "bf16"), default="float32", help="dtype of model.safetensors (default float32; checkpoints stay float32)")
    run.add_argument("--card-notes", default=None, help="a text/markdown file for the card's design notes")
    run.add_argument("--quiet", action="store_true", help="no progress bars")

    optim = parser.add_argument_group("optimisation (defaults: the preset's training defaults)")
    optim.add_argument("--steps", type=int, default=None, help="optimizer steps")
    optim.add_argument("--batch-size", type=int, default=None, help="sequences per step (global, all ranks)")
    optim.add_argument("--seq-len", type=int, default=None, help="tokens per sequence")
    optim.add_argument("--lr", type=float, default=None, help="peak learning rate")
    optim.add_argument("--warmup", type=int, default=None, help="warmup steps (linear from 0)")
    optim.add_argument("--decay-fraction", type=float, default=None, help="final fraction with square-root decay")
    optim.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay on matrices")
    optim.add_argument("--no-embedding-decay", action="store_true", help="exempt the embeddings from weight decay")
    optim.add_argument("--grad-clip", type=float, default=None, help="global gradient norm clip (0 = off)")
    optim.add_argument("--grad-accum", type=int, default=None, help="micro-batches per step")
    optim.add_argument("--micro-batch", type=int, default=0,
                       help="sequences per forward/backward on each rank (default 0: batch / grad-accum, halved "
                            "on running out of GPU memory; the effective batch stays --batch-size)")
    optim.add_argument("--eval-every", type=int, default=None, help="validation evaluation every N steps (0 = end only)")
    optim.add_argument("--keep-last", action="store_true",
                       help="end with the last step's weights (default: those of the lowest validation loss among the "
                       "evaluations)")
    optim.add_argument("--eval-sequences", type=int, default=None, help="validation windows per periodic evaluation (the last uses all)")
    optim.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N steps (0 = never)")
    optim.add_argument("--guard-window", type=int, default=None, help="steps in the divergence guard's running median")
    optim.add_argument("--guard-factor", type=float, default=None, help="running-perplexity rise that aborts the run")

    data = parser.add_argument_group("data (default: generated stories)")
    source = data.add_mutually_exclusive_group()
    source.add_argument("--text", nargs="+", default=None, help="UTF-8 text files or folders (documents: see --text-split)")
    source.add_argument("--jsonl", nargs="+", default=None, help="JSON-lines files (field --text-field)")
    source.add_argument("--hf-dataset", nargs="+", default=None, metavar="NAME_OR_PATH",
                        help="Hugging Face dataset: a hub name, a save_to_disk folder, a folder of parquet / jsonl / "
                        "json / csv / txt files, or one data file")
    data.add_argument("--text-field", default="text", help="text field of --jsonl / --hf-dataset records (default text)")
    data.add_argument("--hf-split", default="train", help="split of --hf-dataset (default train)")
    data.add_argument("--hf-limit", type=int, default=None, help="read at most this many --hf-dataset rows")
    data.add_argument("--streaming", action="store_true",
                      help="read --hf-dataset document by document into uint16 token shards on disk, tokenized by "
                      "--workers processes, resumable (never the whole corpus in memory)")
    data.add_argument("--workers", type=int, default=0, help="tokenizing processes of --streaming (default: cores, at most 8)")
    data.add_argument("--shard-documents", type=int, default=20000, help="documents per shard group of --streaming")
    data.add_argument("--held-out-fraction", type=float, default=0.02, help="fraction of --text/--jsonl/--hf-dataset documents held out (default 0.02)")
    data.add_argument("--validation-fraction", type=float, default=0.02,
                      help="fraction of --text/--jsonl/--hf-dataset documents set aside for validation: the loss the "
                      "run evaluates as it trains and chooses its checkpoint on (default 0.02)")
    data.add_argument("--text-split", default="auto", choices=("auto", "blank_line", "eot", "window", "file", "line"),
                      help="how --text files become documents: auto (<|endoftext|> markers if present, else blank "
                      "lines; documents longer than --window-chars cut into windows; the default), blank_line, eot, "
                      "window (a book: consecutive windows), file, line")
    data.add_argument("--window-chars", type=int, default=4000, help="characters per window of --text-split auto/window")
    data.add_argument("--natural", nargs="?", const=str(natural_root()), default=None, metavar="DIR",
                      help="mix the natural stories (DIR with prompts.jsonl and stories/; default: the stories circuitlab ships) into "
                      "the generated ones: their training split joins the corpus, their validation and held-out "
                      "splits are second validation and held-out sets")
    data.add_argument("--natural-upsample", type=int, default=1, help="copies of each natural training story (default 1)")
    data.add_argument("--n-stories", type=int, default=None, help="generated training stories")
    data.add_argument("--held-out-stories", type=int, default=None, help="held-out stories (the held-out generator seed)")
    data.add_argument("--validation-stories", type=int, default=None, help="validation stories (the validation generator seed)")
    data.add_argument("--tokenizer", default=None, help="reuse this tokenizer.json instead of training one")
    data.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a tokenizer trained here")
    data.add_argument("--data-dir", default=None, help="tokenized-corpus cache (default: <out>/data); may be shared")
    data.add_argument("--prepare-only", action="store_true", help="build the tokenizer and data cache, then exit")
    parser.set_defaults(func=run_train)


def command_line(args: argparse.Namespace, world_size: int) -> str:
    """The command of this run as typed (without --resume): the arguments after `train` that main() parsed."""
    parts = ["circuitlab", "train"] if world_size == 1 else [
        "torchrun", f"--nproc_per_node={world_size}", "-m", "circuitlab.cli", "train"]
    argv = list(getattr(args, "argv", None) or [])
    typed = argv[argv.index("train") + 1:] if "train" in argv else []
    return shlex.join(parts + [part for part in typed if part != "--resume"])


def _setting(args: argparse.Namespace, defaults: dict[str, Any], name: str, fallback: Any) -> Any:
    value = getattr(args, name)
    if value is not None:
        return value
    return defaults.get(name, fallback)


def build_train_config(args: argparse.Namespace) -> Any:
    from circuitlab.training.settings import TrainConfig

    defaults = defaults_for(args.preset)
    base = TrainConfig()
    settings = {
        name: _setting(args, defaults, name, getattr(base, name))
        for name in ("steps", "batch_size", "seq_len", "lr", "warmup", "decay_fraction", "weight_decay", "grad_clip",
                     "grad_accum", "eval_every", "eval_sequences", "ckpt_every", "guard_window", "guard_factor")
    }
    return TrainConfig(
        **settings,
        decay_embeddings=not args.no_embedding_decay,
        seed=args.seed,
        max_minutes=args.max_minutes,
        fit_to_time=args.fit_to_time,
        compile=args.compile,
        compile_mode=args.compile_mode,
        micro_batch=args.micro_batch,
        fsdp=args.fsdp,
        select_best=not args.keep_last,
    )


def build_data_spec(args: argparse.Namespace) -> Any:
    from circuitlab.training.corpus import DataSpec

    defaults = defaults_for(args.preset)
    source, paths = "stories", ()
    for name, given in (("text", args.text), ("jsonl", args.jsonl), ("hf", args.hf_dataset)):
        if given:
            source, paths = name, tuple(given)
    return DataSpec(
        source=source,
        paths=paths,
        n_stories=_setting(args, defaults, "n_stories", 20000),
        n_held_out=_setting(args, defaults, "held_out_stories", 500),
        vocab_size=_setting(args, defaults, "vocab_size", 4096),
        tokenizer_path=args.tokenizer,
        text_field=args.text_field,
        hf_split=args.hf_split,
        hf_limit=args.hf_limit,
        held_out_fraction=args.held_out_fraction,
        validation_fraction=args.validation_fraction,
        n_validation=_setting(args, defaults, "validation_stories", 200),
        streaming=args.streaming,
        workers=args.workers,
        shard_documents=args.shard_documents,
        split_seed=args.seed,
        text_split=args.text_split,
        window_chars=args.window_chars,
        natural_dir=args.natural,
        natural_upsample=args.natural_upsample,
    )


def build_model_config(args: argparse.Namespace, vocab_size: int | None = None) -> Any:
    """The preset or --config, with the selectivity overrides, and d_vocab set to the tokenizer's size."""
    from circuitlab.config import ModelConfig, SelectivityConfig

    config = ModelConfig.preset(args.preset) if args.preset else ModelConfig.from_json(args.config)
    pressures = config.selectivity.model_dump()
    for name in ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness"):
        if getattr(args, name) is not None:
            pressures[name] = getattr(args, name)
    config = config.replace(selectivity=SelectivityConfig(**pressures), d_vocab=vocab_size or config.d_vocab)
    config.validate()
    return config


def run_train(args: argparse.Namespace) -> int:
    from circuitlab.distributed import launched_by_torchrun
    from circuitlab.training.guard import DivergenceError
    from circuitlab.training.interrupt import TrainingInterrupted
    from circuitlab.training.run import train

    if args.config is not None and not Path(args.config).is_file():
        raise UserError(f"--config {args.config}: no such file")
    train_config = build_train_config(args)
    spec = build_data_spec(args)
    model_config = build_model_config(args)  # bad presets, configs and pressures fail before any data work
    world_size = int(os.environ["WORLD_SIZE"]) if launched_by_torchrun() else 1
    try:
        train(
            args.out, model_config, train_config, spec, data_dir=args.data_dir, device=args.device,
            resume=args.resume, prepare_only=args.prepare_only, threads=args.threads, save_dtype=args.save_dtype,
            card_notes=Path(args.card_notes).read_text() if args.card_notes else "",
            command=command_line(args, world_size), progress=not args.quiet,
        )
    except DivergenceError as diverged:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"circuitlab train: diverged: {diverged}", file=sys.stderr)
        return EXIT_DIVERGED
    except TrainingInterrupted as interrupted:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"circuitlab train: {interrupted}; continue with the same command and --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0
