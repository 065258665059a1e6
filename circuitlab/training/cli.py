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
2 user error, 3 divergence (the guard's message names the checkpoint saved for inspection).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

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
    run.add_argument("--compile", action="store_true", help="torch.compile the model")
    run.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2 (torchrun only)")
    run.add_argument("--max-minutes", type=float, default=None,
                     help="stop cleanly (checkpoint, evaluate, save) once this much wall time has passed")
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
    optim.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (0 = end only)")
    optim.add_argument("--eval-sequences", type=int, default=None, help="held-out sequences per periodic evaluation")
    optim.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N steps (0 = never)")
    optim.add_argument("--guard-window", type=int, default=None, help="steps in the divergence guard's running median")
    optim.add_argument("--guard-factor", type=float, default=None, help="running-perplexity rise that aborts the run")

    data = parser.add_argument_group("data (default: generated stories)")
    source = data.add_mutually_exclusive_group()
    source.add_argument("--text", nargs="+", default=None, help="UTF-8 text files or folders (documents: see --text-split)")
    source.add_argument("--jsonl", nargs="+", default=None, help="JSON-lines files (field --text-field)")
    source.add_argument("--hf-dataset", nargs="+", default=None, help="Hugging Face dataset name, save_to_disk folder or data file")
    data.add_argument("--text-field", default="text", help="text field of --jsonl / --hf-dataset records (default text)")
    data.add_argument("--hf-split", default="train", help="split of --hf-dataset (default train)")
    data.add_argument("--hf-limit", type=int, default=None, help="read at most this many --hf-dataset rows")
    data.add_argument("--held-out-fraction", type=float, default=0.02, help="fraction of --text/--jsonl/--hf-dataset documents held out (default 0.02)")
    data.add_argument("--text-split", default="auto", choices=("auto", "blank_line", "eot", "window", "file", "line"),
                      help="how --text files become documents: auto (<|endoftext|> markers if present, else blank "
                      "lines; documents longer than --window-chars cut into windows; the default), blank_line, eot, "
                      "window (a book: consecutive windows), file, line")
    data.add_argument("--window-chars", type=int, default=4000, help="characters per window of --text-split auto/window")
    data.add_argument("--natural", nargs="?", const="data/natural", default=None, metavar="DIR",
                      help="mix the natural stories (DIR with prompts.jsonl and stories/; default data/natural) into "
                      "the generated ones: their training split joins the corpus, their held-out split is a second "
                      "held-out set")
    data.add_argument("--natural-upsample", type=int, default=1, help="copies of each natural training story (default 1)")
    data.add_argument("--n-stories", type=int, default=None, help="generated training stories")
    data.add_argument("--held-out-stories", type=int, default=None, help="held-out stories (the held-out generator seed)")
    data.add_argument("--tokenizer", default=None, help="reuse this tokenizer.json instead of training one")
    data.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a tokenizer trained here")
    data.add_argument("--data-dir", default=None, help="tokenized-corpus cache (default: <out>/data); may be shared")
    data.add_argument("--prepare-only", action="store_true", help="build the tokenizer and data cache, then exit")
    parser.set_defaults(func=run_train, train_parser=parser)


def _typed_arguments(args: argparse.Namespace) -> list[str] | None:
    """The arguments after `train` on this process's command line, if they are the ones parsed into `args`
    (not so when main() was called with its own argv, as tests do)."""
    if len(sys.argv) < 2 or Path(sys.argv[0]).name not in ("circuitlab", "cli.py") or sys.argv[1] != "train":
        return None
    typed = sys.argv[2:]
    try:
        reparsed = args.train_parser.parse_args(typed)
    except SystemExit:
        return None
    mine = {k: v for k, v in vars(args).items() if k != "verb"}
    return [a for a in typed if a != "--resume"] if vars(reparsed) == mine else None


def command_line(args: argparse.Namespace, world_size: int) -> str:
    """The command of this run as typed (without --resume); when that is unknown, every option that was given
    a non-default value, in parser order."""
    parts = ["circuitlab", "train"] if world_size == 1 else [
        "torchrun", f"--nproc_per_node={world_size}", "-m", "circuitlab.cli", "train"]
    typed = _typed_arguments(args)
    if typed is not None:
        return shlex.join(parts + typed)
    for action in args.train_parser._actions:
        if not action.option_strings or action.dest in ("help", "resume", "prepare_only"):
            continue
        value = getattr(args, action.dest, None)
        if value is None or value is False or value == action.default:
            continue
        flag = action.option_strings[-1]
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [flag, *map(str, value)]
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _setting(args: argparse.Namespace, defaults: dict[str, Any], name: str, fallback: Any) -> Any:
    value = getattr(args, name)
    if value is not None:
        return value
    return defaults.get(name, fallback)


def build_train_config(args: argparse.Namespace) -> Any:
    from circuitlab.training.trainer import TrainConfig

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
        compile=args.compile,
        fsdp=args.fsdp,
    )


def build_data_spec(args: argparse.Namespace) -> Any:
    from circuitlab.training.corpus import DataSpec

    defaults = defaults_for(args.preset)
    spec = DataSpec(
        n_stories=_setting(args, defaults, "n_stories", 20000),
        n_held_out=_setting(args, defaults, "held_out_stories", 500),
        vocab_size=_setting(args, defaults, "vocab_size", 4096),
        tokenizer_path=args.tokenizer,
        text_field=args.text_field,
        hf_split=args.hf_split,
        hf_limit=args.hf_limit,
        held_out_fraction=args.held_out_fraction,
        split_seed=args.seed,
        text_split=args.text_split,
        window_chars=args.window_chars,
        natural_dir=args.natural,
        natural_upsample=args.natural_upsample,
    )
    for source, paths in (("text", args.text), ("jsonl", args.jsonl), ("hf", args.hf_dataset)):
        if paths:
            spec.source, spec.paths = source, list(paths)
    spec.validate()
    return spec


def build_model_config(args: argparse.Namespace, vocab_size: int | None = None) -> Any:
    """The preset or --config, with the selectivity overrides, and d_vocab set to the tokenizer's size."""
    from circuitlab.config import ModelConfig, SelectivityConfig

    config = ModelConfig.preset(args.preset) if args.preset else ModelConfig.from_json(args.config)
    pressures = dict(config.selectivity.__dict__)
    for name in ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness"):
        if getattr(args, name) is not None:
            pressures[name] = getattr(args, name)
    config = config.replace(selectivity=SelectivityConfig(**pressures), d_vocab=vocab_size or config.d_vocab)
    config.validate()
    return config


def _device_description(device: Any, world_size: int) -> str:
    import torch

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return f"{world_size} x {name} (bf16 autocast)" if world_size > 1 else f"{name} (bf16 autocast)"
    return f"cpu ({torch.get_num_threads()} threads{f', {world_size} processes' if world_size > 1 else ''}, float32)"


# float32 weights, their gradients and AdamW's two moments: a floor on what training holds per parameter
TRAINING_BYTES_PER_PARAMETER = 16


def device_memory_bytes(device: Any) -> int | None:
    """Total memory of a CUDA device, or the machine's physical memory for the CPU; None when unknown."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # not a POSIX system that reports it
        return None


def check_model_fits(config: Any, device: Any, world_size: int = 1, fsdp: bool = False) -> int:
    """Refuse, before any data work, a config whose parameters alone cannot be trained on `device`.

    The parameter count comes from building the model on the meta device (no memory) with the smallest
    vocabulary a tokenizer can have, so it never overestimates; activations are not counted either. Returns
    the count."""
    import torch

    from circuitlab.architectures.transformer import CircuitTransformer
    from circuitlab.data.tokenizer import MIN_VOCAB_SIZE

    with torch.device("meta"):
        parameters = sum(p.numel() for p in CircuitTransformer(config.replace(d_vocab=MIN_VOCAB_SIZE)).parameters())
    available = device_memory_bytes(device)
    if available is None:
        return parameters
    per_device = TRAINING_BYTES_PER_PARAMETER * parameters / (world_size if fsdp else 1)
    # processes on the CPU share the machine's memory; on CUDA each rank has its own device
    needed = per_device * (world_size if device.type == "cpu" else 1)
    if needed > available:
        raise ValueError(
            f"the model config{f' {config.name!r}' if config.name else ''} has at least {parameters:,} parameters: "
            f"training needs at least {needed / 2**30:,.1f} GiB for weights, gradients and AdamW moments, but "
            f"{'the machine has' if device.type == 'cpu' else f'{device} has'} {available / 2**30:,.1f} GiB; "
            "reduce d_model, n_layers or the feed-forward width" + ("" if fsdp or world_size == 1 else ", or shard with --fsdp")
        )
    return parameters


def _check_out_folder(out: Path, resume: bool) -> None:
    from circuitlab.training.trainer import LOG_FILE

    if resume or not out.exists():
        return
    existing = [name for name in (LOG_FILE, "checkpoints", "metrics.json") if (out / name).exists()]
    if existing:
        raise ValueError(
            f"--out {out} already holds a run ({', '.join(existing)}); pass --resume to continue it, or choose "
            "another --out folder"
        )


def run_train(args: argparse.Namespace) -> int:
    started = time.monotonic()
    cpu_started = time.process_time()
    import torch

    from circuitlab.training.distributed import (
        barrier,
        broadcast_object,
        device_for,
        setup_distributed,
        teardown_distributed,
        unwrap_model,
    )

    if args.threads is not None:
        if args.threads <= 0:
            raise ValueError(f"--threads must be positive, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.config is not None and not Path(args.config).is_file():
        raise FileNotFoundError(f"--config {args.config}: no such file")
    out = Path(args.out)
    train_config = build_train_config(args)
    spec = build_data_spec(args)
    from circuitlab.training.distributed import launched_by_torchrun

    if args.fsdp and not launched_by_torchrun():
        raise ValueError("--fsdp shards a model across processes: launch with torchrun --nproc_per_node=N")
    early_config = build_model_config(args)  # bad presets, configs and pressures fail before any data work
    if train_config.seq_len > early_config.n_ctx:
        raise ValueError(f"--seq-len {train_config.seq_len} exceeds the model's context n_ctx={early_config.n_ctx}")
    context = setup_distributed(args.device)
    try:
        train_config.validate(context.world_size)
        _check_out_folder(out, args.resume or args.prepare_only)  # on every rank, so all of them stop together
        device = device_for(context, args.device)
        check_model_fits(early_config, device, context.world_size, train_config.fsdp)  # before minutes of data work
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        data_dir = Path(args.data_dir) if args.data_dir else out / "data"

        from circuitlab.training.corpus import prepare_data, unigram_entropy

        error = None
        if context.is_main:  # rank 0 builds the cache, the others read it
            try:
                prepared = prepare_data(spec, train_config.seq_len, data_dir, show_progress=not args.quiet)
            except Exception as caught:  # re-raised on every rank below, so no rank waits forever
                error = caught
        error_text = broadcast_object(None if error is None else f"{type(error).__name__}: {error}", context)
        if error is not None:
            raise error
        if error_text is not None:
            raise ValueError(f"rank 0 could not prepare the data ({error_text})")
        if not context.is_main:
            prepared = prepare_data(spec, train_config.seq_len, data_dir, show_progress=False)
        barrier(context)
        manifest = prepared.manifest
        if context.is_main:
            print(
                f"data: {manifest['source']}: {manifest['train_windows']} training windows "
                f"({manifest['train_tokens']:,} tokens), {manifest['held_out_windows']} held-out windows; "
                f"tokenizer vocabulary {prepared.tokenizer.vocab_size}",
                file=sys.stderr,
            )
        if args.prepare_only:
            return 0

        model_config = build_model_config(args, prepared.tokenizer.vocab_size)
        from circuitlab.architectures.transformer import CircuitTransformer
        from circuitlab.training.guard import DivergenceError
        from circuitlab.training.trainer import Trainer, find_checkpoint

        model = CircuitTransformer(model_config, tokenizer=prepared.tokenizer)
        model.reset_parameters(seed=args.seed)
        if args.resume and context.is_main and find_checkpoint(out) is None:
            print(f"note: no checkpoint in {out}; starting from scratch", file=sys.stderr)
        trainer = Trainer(
            model, train_config, prepared.train_windows, prepared.held_out_windows, out, device=device,
            context=context, tokenizer=prepared.tokenizer, progress=not args.quiet, clock_start=started,
        )
        try:
            result = trainer.fit(resume=args.resume)
        except DivergenceError as diverged:
            if context.is_main:
                print(f"circuitlab train: diverged: {diverged}", file=sys.stderr)
            return EXIT_DIVERGED

        from circuitlab.training.corpus import evaluate_held_out_sets

        set_metrics = evaluate_held_out_sets(trainer, prepared.held_out_sets, prepared.tokenizer.vocab_size)
        full_state = trainer.full_model_state() if train_config.fsdp else None
        if context.is_main:
            if full_state is None:
                final_model = unwrap_model(trainer.base_model)
            else:
                final_model = CircuitTransformer(model_config, tokenizer=prepared.tokenizer)
                final_model.load_state_dict(full_state)
                final_model.to(device)
            _finish(args, out, final_model, result, train_config, prepared, device, context.world_size,
                    (started, cpu_started), unigram_entropy(prepared.held_out_windows, prepared.tokenizer.vocab_size),
                    set_metrics)
        barrier(context)
        return 0
    finally:
        teardown_distributed(context)


def _finish(args, out, model, result, train_config, prepared, device, world_size, started, entropy, set_metrics=None) -> None:
    """Save the model folder, measure fact accuracy, write metrics.json and card.md (rank 0).

    started: (time.monotonic(), time.process_time()) at the start of the command."""
    import torch

    from circuitlab.architectures.checkpoint import save_model
    from circuitlab.training.card import write_card

    model.eval()
    save_model(model, out, dtype=torch.bfloat16 if args.save_dtype == "bf16" else None)
    fact_accuracy, fact_note, distant_accuracy = None, None, None
    if args.text is None and args.jsonl is None and args.hf_dataset is None:
        from circuitlab.data import distant_fact_accuracy
        from circuitlab.data import fact_accuracy as measure_facts

        try:
            with torch.no_grad():
                fact_accuracy, table = measure_facts(lambda tokens: model(tokens.to(device)), prepared.tokenizer)
                distant_accuracy, _ = distant_fact_accuracy(lambda tokens: model(tokens.to(device)), prepared.tokenizer)
            fact_note = (f"{int(table['correct'].sum())} of {len(table)} single-token facts after 'The [noun] was'; "
                         f"{100 * distant_accuracy:.1f}% with words between noun and 'was' (DISTANT_PROMPTS)")
        except ValueError as error:
            fact_note = f"not measured: {error}"
    parameters = sum(p.numel() for p in model.parameters())
    # earlier sessions' training time plus all of this command (data, training, evaluation, saving)
    wall_seconds = result.train_seconds - result.session_seconds + (time.monotonic() - started[0])
    metrics = {
        "name": model.config.name or out.name,
        "held_out_loss": result.held_out_loss,
        "held_out_ppl": result.held_out_ppl,
        "held_out_unigram_entropy": entropy,
        **{f"{name}_held_out_{key}": value for name, values in (set_metrics or {}).items()
           for key, value in values.items() if key in ("loss", "unigram_entropy")},
        "held_out_sets": set_metrics or {},
        "fact_accuracy": fact_accuracy,
        "fact_accuracy_distant": distant_accuracy,
        "fact_accuracy_detail": fact_note,
        "tokens_seen": result.tokens_seen,
        "steps": result.step,
        "stopped": result.stopped,
        "train_seconds": result.train_seconds,
        "wall_seconds": wall_seconds,
        "cpu_seconds": time.process_time() - started[1],  # this command, this process, all its threads
        "device": _device_description(device, world_size),
        "world_size": world_size,
        "command": command_line(args, world_size),
        "seed": args.seed,
        "parameters": parameters,
        "config_hash": model.config.hash(),
        "tokenizer_hash": prepared.tokenizer.hash(),
        "data": prepared.manifest,
        "train_settings": train_config.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    notes = Path(args.card_notes).read_text() if args.card_notes else ""
    write_card(
        out, command=metrics["command"], seed=args.seed, tokens_seen=result.tokens_seen, wall_seconds=wall_seconds,
        device=metrics["device"], held_out_ppl=result.held_out_ppl, fact_accuracy=fact_accuracy,
        config=model.config, design_notes=notes, parameter_count=parameters,
        train_settings={k: v for k, v in train_config.to_dict().items() if v not in (None, False)},
        extra_metrics={
            "held-out loss (nats/token)": f"{result.held_out_loss:.4f}",
            "held-out unigram entropy (nats/token)": f"{entropy:.4f}",
            **{f"{name} held-out loss / unigram entropy (nats/token)":
               f"{values['loss']:.4f} / {values['unigram_entropy']:.4f} ({values['tokens']:,} tokens)"
               for name, values in (set_metrics or {}).items()},
            "facts": fact_note or "n/a",
            "corpus": prepared.manifest["source"],
            "stopped": result.stopped,
        },
    )
    print(
        f"done: {result.step} steps, {result.tokens_seen:,} tokens, held-out ppl {result.held_out_ppl:.3f} "
        f"(loss {result.held_out_loss:.4f}, unigram entropy {entropy:.4f})"
        + "".join(f", {name} held-out loss {values['loss']:.4f}" for name, values in (set_metrics or {}).items())
        + (f", fact accuracy {100 * fact_accuracy:.1f}%" if fact_accuracy is not None else "")
        + f"; model in {out}" + ("" if result.stopped == "completed" else f" (stopped: {result.stopped})"),
        file=sys.stderr,
    )
