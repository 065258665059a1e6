"""Corpora read one text at a time, for work whose memory must not grow with the corpus (`circuitlab collect`).

A `TextStream` can be iterated more than once (each pass reads its sources again) and knows how many texts it
holds where that is cheap to learn: generated stories by their number, JSON-lines and text files by a first
pass that checks every record and keeps none. Datasets (`save_to_disk` folders, parquet, csv, json) are read
through `datasets`' streaming iterator and their length is not counted. The texts are those
the list loaders in `circuitlab.data.loaders` and `circuitlab.data.stories` give; errors name the file and line.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from circuitlab.data._io import DataError
from circuitlab.data.loaders import jsonl_text


class TextStream:
    """Texts (str or labelled stories) made on demand by `make`; `n_texts` is their number, or None when
    unknown. Iterating twice gives the same texts in the same order."""

    def __init__(self, make: Callable[[], Iterable[Any]], n_texts: int | None) -> None:
        self._make, self.n_texts = make, n_texts

    def __iter__(self) -> Iterator[Any]:
        return iter(self._make())

    def head(self, n: int) -> "TextStream":
        """The first `n` texts."""
        return TextStream(lambda: itertools.islice(self._make(), n), n if self.n_texts is None else min(n, self.n_texts))


def story_stream(n: int, seed: int) -> TextStream:
    """`n` generated labelled stories of `seed`, each made when it is read (`circuitlab.data.stories`)."""
    from circuitlab.data.stories import iter_stories

    if n < 0:
        raise DataError(f"number of stories must be >= 0, got {n}")
    return TextStream(lambda: iter_stories(n, seed), n)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 file, one at a time; DataError naming the file and line when a line is
    not valid UTF-8."""
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if path.is_dir():
        raise DataError(f"{path} is a folder; expected a text file")
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path} is not valid UTF-8: line {number}, byte {error.start} of the line: {error.reason}; "
                                "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8) and try again") from None


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}, line {number}: not valid JSON ({error.msg} at column {error.colno})") from None


def _is_labelled(record: Any) -> bool:
    return isinstance(record, dict) and "spans" in record and "text" in record


def _jsonl_source(path: Path, text_field: str, labelled_stories: bool) -> tuple[Callable[[], Iterator[Any]], int]:
    """A JSON-lines file: labelled stories when every record has "text" and "spans" (and labelled_stories),
    else the `text_field` of every record. One checking pass now, keeping nothing."""
    count, labelled, unreadable = 0, labelled_stories, None
    for number, record in _jsonl_records(path):
        count += 1
        labelled = labelled and _is_labelled(record)
        if unreadable is None:
            try:
                jsonl_text(path, number, record, text_field)
            except DataError as error:
                unreadable = error  # raised only if the file is not read as labelled stories
    if count == 0:
        raise DataError(f"empty corpus: {path} has no JSON lines")
    if labelled:
        from circuitlab.data.stories import LabelledStory

        return (lambda: (LabelledStory.from_dict(record) for _, record in _jsonl_records(path))), count
    if unreadable is not None:
        raise unreadable
    return (lambda: (jsonl_text(path, number, record, text_field) for number, record in _jsonl_records(path))), count


def _text_file_source(path: Path) -> tuple[Callable[[], Iterator[str]], int]:
    """Text files split at blank lines (`load_text_files`' default), one file in memory at a time."""
    from circuitlab.data._io import read_utf8
    from circuitlab.data.loaders import _as_paths, _split

    files = _as_paths(path)

    def documents() -> Iterator[str]:
        for file in files:
            yield from _split(read_utf8(file).replace("\r\n", "\n").replace("\r", "\n"), "blank_line")

    count = sum(1 for _ in documents())
    if count == 0:
        raise DataError(f"empty corpus: no text in {', '.join(map(str, files))}")
    return documents, count


def _holds_data_files(path: Path) -> bool:
    """A folder of dataset files (parquet, json, jsonl, csv, arrow) and no text files."""
    if not path.is_dir() or any(path.rglob("*.txt")):
        return False
    return any(p.suffix.lower() in (".parquet", ".json", ".jsonl", ".csv", ".arrow") for p in path.rglob("*"))


def corpus_stream(sources: Sequence[str | os.PathLike], text_field: str = "text", split: str = "train",
                  labelled_stories: bool = True) -> TextStream:
    """The texts of corpus files read one at a time, each source by its kind as `load_documents` reads it: a
    .jsonl file (labelled stories when every line has "text" and "spans" and `labelled_stories`, else its
    `text_field`), a dataset (`save_to_disk` folder, folder of data files, .json/.csv/.parquet/.arrow), or text
    files split at blank lines. Missing files and bad records are reported now, before any text is read."""
    from circuitlab.data.hf import is_saved_dataset, iter_documents

    makers: list[Callable[[], Iterable[Any]]] = []
    total: int | None = 0
    for source in sources:
        path = Path(source)
        if not path.exists():
            raise DataError(f"corpus file {path} does not exist")
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            make, count = _jsonl_source(path, text_field, labelled_stories)
        elif is_saved_dataset(path) or suffix in (".json", ".csv", ".parquet", ".arrow") or _holds_data_files(path):
            first = next(iter_documents(path, split, text_field, limit=1), None)  # checks the column now
            if first is None:
                raise DataError(f"empty corpus: dataset {path} (split {split!r}) has no non-empty {text_field!r} texts")
            make, count = (lambda path=path: iter_documents(path, split, text_field)), None
        else:
            make, count = _text_file_source(path)
        makers.append(make)
        total = None if total is None or count is None else total + count
    return TextStream(lambda: itertools.chain.from_iterable(make() for make in makers), total)
