"""Atomic file writes: a reader sees the old file or the new one, never half of either.

The new content goes to a temporary file beside the target, is flushed to disk, then renamed over the
target with os.replace (atomic on POSIX and Windows). A crash leaves at most a hidden `.name.*.tmp` file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call write(temporary_path), then move the result onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(temporary))
        descriptor = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the data is on disk before the rename makes it visible
        finally:
            os.close(descriptor)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual mode
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
