"""Data manifests name their sources without the machine's folders (relative to the working directory or the
repository, else by file name), and a changed source still makes a new cache key."""

from __future__ import annotations

import json
import os
from pathlib import Path

from circuitlab.training.corpus import DataSpec, _file_signature, _shown_path, content_key, source_payload


def test_sources_inside_the_working_directory_are_recorded_relative(tmp_path, monkeypatch):
    book = tmp_path / "texts" / "book.txt"
    book.parent.mkdir()
    book.write_text("Once upon a time.\n\nThe end.\n")
    monkeypatch.chdir(tmp_path)
    assert _shown_path(book) == "texts/book.txt"
    assert _shown_path(Path("texts/book.txt")) == "texts/book.txt"
    assert _file_signature(book)[0] == "texts/book.txt"
    assert _file_signature(book.parent)[0] == "texts"
    payload = source_payload(DataSpec(source="text", paths=[str(book)]))
    assert str(tmp_path) not in json.dumps(payload)
    assert payload["paths"] == ["texts/book.txt"] and payload["files"][0][0] == "texts/book.txt"


def test_sources_elsewhere_are_recorded_by_name(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere" / "stories.jsonl"
    outside.parent.mkdir()
    outside.write_text('{"text": "A story."}\n')
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    payload = source_payload(DataSpec(source="jsonl", paths=[str(outside)]))
    assert payload["paths"] == ["stories.jsonl"] and payload["files"][0][0] == "stories.jsonl"
    assert str(tmp_path) not in json.dumps(payload)
    before = content_key(payload)
    outside.write_text('{"text": "A longer story than before."}\n')
    os.utime(outside, ns=(1, 1))
    assert content_key(source_payload(DataSpec(source="jsonl", paths=[str(outside)]))) != before, "a changed file is a new key"


def test_the_natural_folder_is_recorded_relative_to_the_repository(tmp_path, monkeypatch):
    repository = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # not inside the repository: the repository is the next base
    payload = source_payload(DataSpec(natural_dir=str(repository / "data" / "natural")))
    assert payload["natural_dir"] == "data/natural" and payload["natural_files"][0] == "data/natural"
    assert str(repository) not in json.dumps(payload)
