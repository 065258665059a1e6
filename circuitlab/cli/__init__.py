"""`circuitlab <verb>`: one entry point, one module per verb group.

Each module below defines `register(subparsers)`, adding its verbs with `set_defaults(func=...)`
(`func(args) -> int`). Modules import the heavy libraries (torch, pandas, plotly) inside their commands, so
`circuitlab --help` starts quickly.

A `circuitlab.errors.UserError` (bad arguments, missing or unreadable files, mismatched models, sizes that do
not fit in memory) prints one line and exits with status 2; any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import sys

import circuitlab.cli.causal as causal
import circuitlab.cli.data as data
import circuitlab.cli.db as db
import circuitlab.cli.demo as demo
import circuitlab.cli.ladder as ladder
import circuitlab.cli.summary as summary
import circuitlab.cli.train as train
from circuitlab.errors import UserError

try:  # `circuitlab generate` (text generation) lives in its own module
    import circuitlab.cli_generate as generate
except ModuleNotFoundError as error:
    if error.name != "circuitlab.cli_generate":
        raise
    generate = None

VERB_GROUPS = tuple(module for module in (summary, data, train, ladder, db, causal, generate, demo) if module is not None)


def version() -> str:
    from circuitlab import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuitlab",
        description="Mechanistic interpretability for transformers that are interpretable by construction.",
    )
    parser.add_argument("--version", action="version", version=f"circuitlab {version()}",
                        help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="verb", metavar="<verb>")
    for module in VERB_GROUPS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as typed, for the records that rerun it (`circuitlab train` writes it)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that closed early (`| head`)
        sys.stderr.close()
        return 0
    except UserError as error:
        print(f"circuitlab {args.verb}: error: {one_line(error)}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise  # a bug, not bad input: keep the traceback
        print(f"circuitlab {args.verb}: error: out of memory ({one_line(error) or type(error).__name__}); use a "
              "smaller model, batch, corpus or context, or a machine with more memory", file=sys.stderr)
        return 2


def one_line(message: object) -> str:
    """A message on one terminal line (library errors sometimes span several)."""
    return " ".join(part.strip() for part in str(message).replace("\r", "\n").split("\n") if part.strip())


def is_out_of_memory(error: BaseException) -> bool:
    """MemoryError, torch's OutOfMemoryError, or the CPU allocator's failure (a RuntimeError), e.g. for a config
    whose sizes ask for more memory than the machine has."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())


__all__ = ["UserError", "build_parser", "main"]
