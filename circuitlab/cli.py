"""`circuitlab <verb>`: one entry point; each part of the library registers its own verbs.

User errors (bad arguments, missing or unreadable files, mismatched models, sizes that do not fit in memory)
print one line and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module -> it defines register(subparsers), adding verbs with set_defaults(func=...) (func(args) -> int)
VERB_MODULES = (
    "circuitlab.architectures.summary",
    "circuitlab.data.cli",
    "circuitlab.training.cli",
    "circuitlab.analysis.cli_db",
    "circuitlab.analysis.cli_causal",
    "circuitlab.demo",
    "circuitlab.cli_generate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuitlab",
        description="Mechanistic interpretability for transformers that are interpretable by construction.",
    )
    subparsers = parser.add_subparsers(dest="verb", metavar="<verb>")
    for module_name in VERB_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:  # that part of the library is not installed in this build
                continue
            raise
        module.register(subparsers)
    return parser


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    except (UserError, ValueError, KeyError, OSError) as error:  # OSError: missing, unwritable, not-a-folder paths
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"circuitlab {args.verb}: error: {one_line(message)}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
