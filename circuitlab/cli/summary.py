"""`circuitlab summary`: parameters per part and hook names of a model."""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    from circuitlab.architectures.summary import build_from_spec, summary_text

    print(summary_text(build_from_spec(args.model)))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("summary", help="parameters per part and hook names of a model")
    parser.add_argument("model", nargs="?", default="sgatlin-stories",
                        help="model folder, shipped model, config.json or preset:NAME (the untrained preset; "
                             "default: sgatlin-stories)")
    parser.set_defaults(func=run)
