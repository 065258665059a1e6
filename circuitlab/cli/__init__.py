"""`circuitlab <verb>`: one entry point, one module per verb group.

Each module below defines `register(subparsers)`, adding its verbs with `set_defaults(func=...)`
(`func(args) -> int`). Modules import the heavy libraries (torch, pandas, plotly) inside their commands, so
`circuitlab --help` starts quickly.

A `circuitlab.errors.UserError` (bad arguments, missing or unreadable files, mismatched models, sizes that do
not fit in memory) prints one line and exits with status 2; any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import sys

import circuitlab.cli.causal as causal
import circuitlab.cli.collect as collect
import circuitlab.cli.data as data
import circuitlab.cli.db as db
import circuitlab.cli.demo as demo
import circuitlab.cli.generate as generate
import circuitlab.cli.ladder as ladder
import circuitlab.cli.report as report
import circuitlab.cli.summary as summary
import circuitlab.cli.train as train
from circuitlab.cli.entry import build_parser as _build_parser
from circuitlab.cli.entry import run_command

VERB_GROUPS = (summary, data, train, ladder, db, collect, causal, report, generate, demo)


def build_parser():
    return _build_parser(VERB_GROUPS)


def main(argv: list[str] | None = None) -> int:
    return run_command(VERB_GROUPS, list(sys.argv[1:] if argv is None else argv))
