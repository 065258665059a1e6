"""The project's own user-error class.

`UserError` marks an error caused by what the user asked for (a bad argument, a file that is missing or in the
wrong format, a model that does not fit the data): the CLI prints it as one line and exits with status 2.
Any other exception is a bug and keeps its traceback. It subclasses ValueError, so Python callers that
catch ValueError around the library keep working.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


class UserError(ValueError):
    """An error in the user's input: printed as one line by the CLI, exit status 2."""


def require_file(path: str | os.PathLike, what: str) -> str:
    """`path` when it names a readable file; UserError saying what is missing otherwise."""
    if not os.path.exists(path):
        raise UserError(f"{what} {os.fspath(path)} does not exist")
    if os.path.isdir(path):
        raise UserError(f"{what} {os.fspath(path)} is a folder; give a file")
    if not os.access(path, os.R_OK):
        raise UserError(f"{what} {os.fspath(path)} is not readable (permission denied)")
    return os.fspath(path)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """'; did you mean X?' for the candidate closest to a mistyped name, or '' when none is close."""
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""
