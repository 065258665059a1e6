"""Hugging Face datasets, as a researcher has them: a hub name, a folder saved with `save_to_disk`, a folder
of data files (parquet, jsonl, json, csv, txt), or one data file.

`iter_documents` yields the non-empty texts one at a time without holding the dataset in memory: a saved
folder is memory-mapped Arrow, data files and hub datasets are read with `streaming=True`. `load_hf_dataset`
collects them into a list. A name that looks like a path is a missing local file, never a question for the
hub; circuitlab downloads nothing unless the user names a hub dataset and the machine can reach it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from circuitlab.data._io import DataError

DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text", ".arrow": "arrow"}


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def data_files_in(folder: Path) -> tuple[str, list[str]]:
    """(the datasets builder, the sorted data files) of a folder of parquet / jsonl / json / csv / txt files,
    searched recursively; one kind of file per folder."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in DATA_FILE_BUILDERS)
    builders = {DATA_FILE_BUILDERS[p.suffix.lower()] for p in files}
    if not files:
        raise DataError(f"{folder} is a folder but neither a dataset saved with save_to_disk (no dataset_info.json) "
                        f"nor a folder of data files ({', '.join(sorted(DATA_FILE_BUILDERS))})")
    if len(builders) > 1:
        raise DataError(f"{folder} mixes data file kinds ({', '.join(sorted(builders))}); give a folder of one kind")
    return builders.pop(), [str(p) for p in files]


def open_dataset(name_or_path: str | os.PathLike, split: str = "train", streaming: bool = False) -> Any:
    """The dataset (or, streaming, an iterable dataset) of one split of a hub name, saved folder, folder of
    data files or data file."""
    try:
        import datasets
    except ImportError:
        raise DataError("reading Hugging Face datasets needs the `datasets` package (pip install circuitlab)") from None
    path = Path(name_or_path)
    if is_saved_dataset(path):
        loaded = datasets.load_from_disk(str(path))  # memory-mapped: iterating does not load it all
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise DataError(f"{path} has splits {sorted(loaded)}; no split {split!r} (pass split=)")
            loaded = loaded[split]
        return loaded
    if path.is_dir():
        builder, files = data_files_in(path)
        return datasets.load_dataset(builder, data_files={split: files}, split=split, streaming=streaming)
    if path.is_file():
        builder = DATA_FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(f"{path}: unknown data file type {path.suffix!r}; expected one of {sorted(DATA_FILE_BUILDERS)}")
        return datasets.load_dataset(builder, data_files={split: str(path)}, split=split, streaming=streaming)
    name = str(name_or_path)
    # a path-like name or a data-file name is a missing local file, never a question for the hub
    if path.is_absolute() or name.startswith((".", "~")) or os.sep + os.sep in name or path.suffix.lower() in DATA_FILE_BUILDERS:
        raise DataError(f"{name}: no such file or folder")
    try:
        return datasets.load_dataset(name, split=split, streaming=streaming)
    except (OSError, ValueError) as error:  # not found, offline or unreachable, bad split
        raise DataError(
            f"cannot load the Hugging Face dataset {name!r} (split {split!r}): {error}; check the name and split, "
            "and that the hub is reachable (or pass a local file, folder of data files or save_to_disk folder)"
        ) from None


def iter_documents(
    name_or_path: str | os.PathLike, split: str = "train", text_field: str = "text", limit: int | None = None
) -> Iterator[str]:
    """The non-empty `text_field` texts of a dataset, one at a time (at most `limit`)."""
    if limit is not None and limit <= 0:
        raise DataError(f"limit={limit}; expected a positive number of documents or None")
    dataset = open_dataset(name_or_path, split, streaming=True)
    columns = list(getattr(dataset, "column_names", None) or [])
    if columns and text_field not in columns:
        raise DataError(f"dataset {name_or_path} has no {text_field!r} column (columns: {columns}); pass text_field=")
    given = 0
    for row in dataset:
        if text_field not in row:
            raise DataError(f"dataset {name_or_path} has no {text_field!r} column (columns: {sorted(row)}); pass text_field=")
        text = row[text_field]
        if isinstance(text, str) and text.strip():
            yield text
            given += 1
            if limit is not None and given >= limit:
                return


def load_hf_dataset(
    name_or_path: str | os.PathLike, split: str = "train", text_field: str = "text", limit: int | None = None
) -> list[str]:
    """The documents of a dataset (see the module docstring) as a list; with `limit`, only the first `limit`
    are read (a hub dataset is streamed, so only those rows are downloaded)."""
    documents = list(iter_documents(name_or_path, split, text_field, limit))
    if not documents:
        raise DataError(f"empty corpus: dataset {name_or_path} (split {split!r}) has no non-empty {text_field!r} texts")
    return documents
