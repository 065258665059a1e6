"""File reading shared by the data modules: UTF-8 with errors that name the file and the byte offset."""

from __future__ import annotations

import os
from pathlib import Path

from circuitlab.errors import UserError


class DataError(UserError):
    """A problem with the user's data (missing file, bad encoding, missing field, empty corpus)."""


def read_utf8(path: str | os.PathLike) -> str:
    """The whole file as text; DataError if it is missing, a folder, or not valid UTF-8."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if path.is_dir():
        raise DataError(f"{path} is a folder; expected a text file")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = data[error.start : error.start + 4].hex(" ")
        raise DataError(
            f"{path} is not valid UTF-8: byte offset {error.start} (bytes {bad}): {error.reason}; "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8) and try again"
        ) from None
