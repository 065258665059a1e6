"""Running a command line: parse it with the given verb groups' parsers, run the verb, and turn what went wrong
into an exit status. A `circuitlab.errors.UserError` (bad arguments, missing or unreadable files, mismatched
models, sizes that do not fit in memory) prints one line and exits with status 2; any other exception is a bug
and keeps its traceback. `circuitlab.cli.main` runs every verb group; the ladder runs `circuitlab train` in
its own process through the train group alone."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from types import ModuleType

from circuitlab.errors import UserError


def version() -> str:
    from circuitlab import __version__

    return __version__


def build_parser(groups: Iterable[ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuitlab",
        description="Mechanistic interpretability for transformers that are interpretable by construction.",
    )
    parser.add_argument("--version", action="version", version=f"circuitlab {version()}",
                        help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="verb", metavar="<verb>")
    for module in groups:
        module.register(subparsers)
    return parser


def run_command(groups: Iterable[ModuleType], argv: list[str]) -> int:
    """Parse `argv` with the verbs of `groups` and run the verb; its exit status."""
    parser = build_parser(groups)
    args = parser.parse_args(argv)
    args.argv = list(argv)  # the command as typed, for the records that rerun it (`circuitlab train` writes it)
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
