"""Read corpora (text files, JSON lines; Hugging Face datasets are circuitlab.data.hf), tokenize them with a
cache, pack into rows.

Every loader returns a list of documents (str). Packing concatenates token ids as
    [sep] doc_0 [sep] doc_1 [sep] doc_2 ...
and cuts the stream into rows of `seq_len`, dropping the incomplete last row: each document is preceded by the
separator, so a model sees "<|endoftext|>" before every document start, the same context in which a prompt
with a prepended separator is evaluated. Rows may begin or end in the middle of a document.

Letters in shapes: n_seq rows, seq_len tokens per row.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from circuitlab.data._io import DataError, read_utf8
from circuitlab.data.hf import is_saved_dataset, load_hf_dataset

SPLIT_MODES = ("blank_line", "file", "line", "auto", "eot", "window")
DOCUMENT_MARKER = "<|endoftext|>"
WINDOW_CHARS = 4000


def _as_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    resolved: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not inside:
                raise DataError(f"{path} is a folder with no .txt files in it")
            resolved.extend(inside)
        else:
            resolved.append(path)
    if not resolved:
        raise DataError("no input files given")
    return resolved


def _windows(text: str, window_chars: int) -> list[str]:
    """Consecutive pieces of at most `window_chars` characters, each cut at the last whitespace before the
    limit (mid-word only when a piece has no whitespace at all)."""
    pieces = []
    text = text.strip()
    while len(text) > window_chars:
        cut = max(text.rfind(" ", 0, window_chars + 1), text.rfind("\n", 0, window_chars + 1))
        cut = cut if cut > 0 else window_chars
        pieces.append(text[:cut])
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def _blank_line_parts(text: str) -> list[str]:
    # A document ends at one or more lines holding only whitespace.
    parts, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            parts.append("\n".join(current))
            current = []
    if current:
        parts.append("\n".join(current))
    return parts


def _split(text: str, mode: str, window_chars: int = WINDOW_CHARS) -> list[str]:
    if mode == "file":
        parts = [text]
    elif mode == "line":
        parts = text.splitlines()
    elif mode == "blank_line":
        parts = _blank_line_parts(text)
    elif mode == "eot":
        parts = text.split(DOCUMENT_MARKER)
    elif mode == "window":
        parts = _windows(text, window_chars)
    elif mode == "auto":
        # marked documents if the file has markers, else paragraphs; either way nothing longer than a window
        parts = text.split(DOCUMENT_MARKER) if DOCUMENT_MARKER in text else _blank_line_parts(text)
        parts = [piece for part in parts for piece in _windows(part, window_chars)]
    else:
        raise DataError(f"split_documents={mode!r}; expected one of {', '.join(SPLIT_MODES)}")
    return [part.strip() for part in parts if part.strip()]


def load_text_files(
    paths: str | os.PathLike | Iterable[str | os.PathLike], split_documents: str = "blank_line",
    window_chars: int = WINDOW_CHARS,
) -> list[str]:
    """Documents from UTF-8 text files (folders are searched for *.txt).

    split_documents: "blank_line" (paragraphs separated by blank lines are documents), "eot" (documents
    separated by "<|endoftext|>" markers), "window" (the file cut into consecutive pieces of at most
    `window_chars` characters at whitespace: a book), "auto" (markers when the file has them, else blank
    lines, and any document longer than `window_chars` cut into windows, so one long file gives many
    documents), "file" (one document per file) or "line" (one document per non-empty line). Line ends are
    normalised to "\n" (as Python's text mode does) and each document's leading and trailing whitespace is
    stripped.
    """
    if split_documents not in SPLIT_MODES:
        raise DataError(f"split_documents={split_documents!r}; expected one of {', '.join(SPLIT_MODES)}")
    if window_chars < 1:
        raise DataError(f"window_chars={window_chars}; expected a positive number of characters per window")
    files = _as_paths(paths)
    documents: list[str] = []
    for path in files:
        text = read_utf8(path).replace("\r\n", "\n").replace("\r", "\n")
        documents.extend(_split(text, split_documents, window_chars))
    if not documents:
        raise DataError(f"empty corpus: no text in {', '.join(map(str, files))}")
    return documents


def jsonl_text(path: str | os.PathLike, line_number: int, record: Any, text_field: str) -> str:
    """The `text_field` string of one JSON-lines record; DataError naming the file and line otherwise."""
    if not isinstance(record, dict) or text_field not in record:
        fields = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(f"{path}, line {line_number}: no {text_field!r} field (fields: {fields}); pass text_field=")
    text = record[text_field]
    if not isinstance(text, str):
        raise DataError(f"{path}, line {line_number}: field {text_field!r} is {type(text).__name__}, expected a string")
    return text


def load_jsonl(path: str | os.PathLike, text_field: str = "text") -> list[str]:
    """The `text_field` of every JSON object in a JSON-lines file (blank lines are skipped)."""
    documents = []
    for line_number, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}, line {line_number}: not valid JSON ({error.msg} at column {error.colno})") from None
        documents.append(jsonl_text(path, line_number, record, text_field))
    if not documents:
        raise DataError(f"empty corpus: {path} has no JSON lines")
    return documents


def load_documents(sources: str | os.PathLike | Sequence[str | os.PathLike], text_field: str = "text", split: str = "train") -> list[str]:
    """Documents from a mix of sources, each read by its kind: .jsonl (JSON lines, `text_field`), a
    `save_to_disk` folder or .json/.csv/.parquet (Hugging Face datasets), anything else as text files
    split at blank lines."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    documents: list[str] = []
    for source in sources:
        path = Path(source)
        if path.suffix.lower() == ".jsonl":
            documents.extend(load_jsonl(path, text_field))
        elif is_saved_dataset(path) or path.suffix.lower() in (".json", ".csv", ".parquet", ".arrow"):
            documents.extend(load_hf_dataset(path, split=split, text_field=text_field))
        else:
            documents.extend(load_text_files(path))
    if not documents:
        raise DataError("empty corpus: no sources given")
    return documents


def pack_sequences(docs_token_ids: Iterable[Sequence[int]], seq_len: int, sep_id: int) -> Int[Tensor, "n_seq seq_len"]:
    """Concatenate documents, each preceded by `sep_id`, and cut the stream into rows of `seq_len` tokens.

    The last, incomplete row is dropped. Raises DataError if the stream is shorter than one row.
    """
    if seq_len <= 0:
        raise DataError(f"seq_len={seq_len}; expected a positive row length")
    chunks: list[np.ndarray] = []
    separator = np.array([sep_id], dtype=np.int64)
    n_documents = 0
    for ids in docs_token_ids:
        chunks.append(separator)
        chunks.append(np.asarray(ids, dtype=np.int64).reshape(-1))
        n_documents += 1
    stream = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    n_seq = len(stream) // seq_len
    if n_seq == 0:
        raise DataError(
            f"corpus too small to pack: {len(stream)} tokens in {n_documents} documents (separators included) "
            f"< seq_len {seq_len}; use more text or a shorter seq_len"
        )
    return torch.from_numpy(stream[: n_seq * seq_len].reshape(n_seq, seq_len).copy())


def _corpus_key(texts: Sequence[str], tokenizer) -> str:
    digest = hashlib.sha256()
    digest.update(tokenizer.hash().encode())
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:24]


def _read_token_cache(path: Path, n_documents: int) -> list[list[int]] | None:
    """Token ids stored by tokenize_documents, or None when there is no cache or it is damaged (then rebuilt)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            flat, offsets = stored["ids"], stored["offsets"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if (
        offsets.ndim != 1 or len(offsets) != n_documents + 1 or offsets[0] != 0 or offsets[-1] != len(flat)
        or bool((np.diff(offsets) < 0).any())
    ):
        return None  # written for other texts or cut short: not trustworthy
    return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(n_documents)]


def tokenize_documents(
    texts: Sequence[str],
    tokenizer,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 1024,
    show_progress: bool = True,
) -> list[list[int]]:
    """Token ids of every document. With `cache_dir`, the result is stored under a key made of the tokenizer
    hash and the texts, and read back on the next call with the same tokenizer and texts."""
    cache_path = None
    if cache_dir is not None:
        cache_path = Path(cache_dir) / f"tokens-{_corpus_key(texts, tokenizer)}.npz"
        cached = _read_token_cache(cache_path, len(texts))
        if cached is not None:
            return cached
    batches = range(0, len(texts), batch_size)
    if show_progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="tokenizing", unit="batch")
    token_ids: list[list[int]] = []
    for start in batches:
        token_ids.extend(tokenizer.encode_batch(list(texts[start : start + batch_size])))
    if cache_path is not None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        offsets = np.cumsum([0] + [len(ids) for ids in token_ids], dtype=np.int64)
        flat = np.fromiter((token for ids in token_ids for token in ids), dtype=np.int32, count=int(offsets[-1]))
        partial = cache_path.with_name(cache_path.stem + ".partial.npz")
        np.savez(partial, ids=flat, offsets=offsets)
        partial.replace(cache_path)
    return token_ids
