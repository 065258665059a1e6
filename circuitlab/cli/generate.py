"""`circuitlab generate MODEL PROMPT...`: continue prompts with `model.generate` (TransformerLens semantics).

Sampling by default (seeded, so a run repeats), `--greedy` for the argmax. Prints one continuation per prompt.
"""

from __future__ import annotations

import argparse
from typing import Any

from circuitlab.errors import UserError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate", help="continue a prompt with the model (greedy, temperature, top-k, top-p)",
        description="Generate text with model.generate: sampling (seeded) by default, --greedy for the argmax. "
        "Every step reruns the whole sequence, so the model sees exactly what a forward pass would.",
    )
    parser.add_argument("model", help="model folder, shipped model name, config.json or preset (preset:NAME)")
    parser.add_argument("prompt", nargs="+", help="one or more prompts (or comma-separated token ids with --tokens)")
    parser.add_argument("--tokens", action="store_true", help="each PROMPT is comma-separated token ids")
    parser.add_argument("--max-new-tokens", type=int, default=40, help="tokens to add to each prompt (default 40)")
    parser.add_argument("--greedy", action="store_true", help="take the most likely token at every step")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy; default 1)")
    parser.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    parser.add_argument("--top-p", type=float, help="sample within the smallest set of tokens holding this probability")
    parser.add_argument("--freq-penalty", type=float, default=0.0, help="subtract this per earlier occurrence of a token")
    parser.add_argument("--seed", type=int, default=0, help="random seed for sampling (default 0)")
    parser.add_argument("--prepend-bos", action="store_true", help="start each prompt with <|endoftext|> (a new document)")
    parser.add_argument("--no-stop-at-eos", action="store_true", help="keep going after <|endoftext|>")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)
    return parser


def register(subparsers: Any) -> None:
    """The hook `circuitlab.cli` calls for every verb module."""
    add_parser(subparsers)


def run(args: argparse.Namespace) -> int:
    import torch

    from circuitlab.architectures.summary import build_from_spec

    if args.max_new_tokens < 0:
        raise UserError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    torch.manual_seed(args.seed)  # a preset's random weights repeat too
    model = build_from_spec(args.model).eval()
    if model.tokenizer is None and not args.tokens:
        raise UserError(
            f"model {model.config.name or args.model!r} has no tokenizer: give a model folder with tokenizer.json, "
            "or pass token ids with --tokens"
        )
    if model.tokenizer is None and not args.no_stop_at_eos:
        args.no_stop_at_eos = True  # no tokenizer, no end-of-text token to stop at
    torch.manual_seed(args.seed)
    options = dict(
        max_new_tokens=args.max_new_tokens, stop_at_eos=not args.no_stop_at_eos, do_sample=not args.greedy,
        top_k=args.top_k, top_p=args.top_p, temperature=args.temperature, freq_penalty=args.freq_penalty,
        prepend_bos=args.prepend_bos, verbose=not args.quiet,
    )
    for prompt in args.prompt:
        if args.tokens:
            ids = _parse_ids(prompt)
            tokens = model.generate(torch.tensor([ids]), return_type="tokens", **options)[0]
            text = f"\t{model.to_string(tokens)!r}" if model.tokenizer is not None else ""
            print(",".join(str(i) for i in tokens.tolist()) + text)
        else:
            print(model.generate(prompt, **options))
    return 0


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise UserError(f"--tokens: {text!r} is not comma-separated integers (e.g. 12,7,301)") from None
    if not ids:
        raise UserError("--tokens: the prompt holds no token ids")
    return ids
