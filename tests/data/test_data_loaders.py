"""Corpus loaders (text files, JSON lines, Hugging Face datasets, tested offline on local data), sequence
packing and the tokenized-corpus cache."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from circuitlab.data._io import DataError
from circuitlab.data.loaders import (
    load_documents,
    load_hf_dataset,
    load_jsonl,
    load_text_files,
    pack_sequences,
    tokenize_documents,
)
from circuitlab.data.tokenizer import train_tokenizer

# -- text files -------------------------------------------------------------------------------------------


def test_load_text_files_split_modes(tmp_path):
    first = tmp_path / "a.txt"
    first.write_text("Doc one line one.\nDoc one line two.\n\n\n  \nDoc two.\r\n\r\nDoc three.", encoding="utf-8")
    second = tmp_path / "b.txt"
    second.write_text("\nSolo doc.\n", encoding="utf-8")
    assert load_text_files([first, second]) == [
        "Doc one line one.\nDoc one line two.", "Doc two.", "Doc three.", "Solo doc.",
    ]
    assert load_text_files([first, second], split_documents="line") == [
        "Doc one line one.", "Doc one line two.", "Doc two.", "Doc three.", "Solo doc.",
    ]
    assert load_text_files(first, split_documents="file") == [first.read_text(encoding="utf-8").strip()]
    # A folder is searched for *.txt files, in sorted order.
    (tmp_path / "notes.md").write_text("ignored")
    assert load_text_files(tmp_path, split_documents="file") == [
        first.read_text(encoding="utf-8").strip(), "Solo doc.",
    ]


def test_load_text_files_errors(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Hello café".encode("utf-8") + b"\nna\xefve")
    with pytest.raises(DataError) as error:
        load_text_files(latin)
    message = str(error.value)
    assert "latin.txt is not valid UTF-8: byte offset 14" in message and "ef" in message
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n \n")
    with pytest.raises(DataError, match="empty corpus"):
        load_text_files(empty)
    with pytest.raises(DataError, match="missing.txt: no such file"):
        load_text_files(tmp_path / "missing.txt")
    with pytest.raises(DataError, match="expected one of blank_line, file, line"):
        load_text_files(empty, split_documents="paragraph")
    (tmp_path / "sub").mkdir()
    with pytest.raises(DataError, match="no .txt files"):
        load_text_files(tmp_path / "sub")


# -- JSON lines -------------------------------------------------------------------------------------------


def test_load_jsonl(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"story": f"s{i}", "id": i}) for i in range(5)) + "\n\n", encoding="utf-8")
    assert load_jsonl(path, text_field="story") == [f"s{i}" for i in range(5)]
    with pytest.raises(DataError, match=r"c.jsonl, line 1: no 'text' field \(fields: \['id', 'story'\]\)"):
        load_jsonl(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(DataError, match="bad.jsonl, line 2: not valid JSON"):
        load_jsonl(bad)
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"text": 3}\n')
    with pytest.raises(DataError, match="line 1: field 'text' is int"):
        load_jsonl(numbers)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n")
    with pytest.raises(DataError, match="empty corpus"):
        load_jsonl(blank)


# -- Hugging Face datasets (offline) ----------------------------------------------------------------------


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    datasets.disable_progress_bars()
    return datasets


def test_load_hf_dataset_saved_to_disk(tmp_path, hf_cache):
    datasets = hf_cache
    texts = [f"story {i}" for i in range(10)] + [""]
    datasets.Dataset.from_dict({"text": texts, "n": list(range(11))}).save_to_disk(tmp_path / "single")
    assert load_hf_dataset(tmp_path / "single") == texts[:10]  # empty texts are skipped
    assert load_hf_dataset(str(tmp_path / "single"), limit=3) == texts[:3]
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"story": ["t1", "t2"]}), "validation": datasets.Dataset.from_dict({"story": ["v1"]})}
    )
    splits.save_to_disk(tmp_path / "splits")
    assert load_hf_dataset(tmp_path / "splits", split="validation", text_field="story") == ["v1"]
    with pytest.raises(DataError, match=r"splits \['train', 'validation'\]; no split 'test'"):
        load_hf_dataset(tmp_path / "splits", split="test", text_field="story")
    with pytest.raises(DataError, match=r"no 'text' column \(columns: \['story'\]\)"):
        load_hf_dataset(tmp_path / "splits")
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="neither a dataset saved with save_to_disk .* nor a folder of data files"):
        load_hf_dataset(tmp_path / "plain")
    with pytest.raises(DataError, match="limit=0"):
        load_hf_dataset(tmp_path / "single", limit=0)


def test_load_hf_dataset_from_local_files(tmp_path, hf_cache):
    rows = [{"text": f"doc {i}", "label": i % 2} for i in range(6)]
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
    assert load_hf_dataset(jsonl) == [row["text"] for row in rows]
    assert load_hf_dataset(jsonl, limit=2) == ["doc 0", "doc 1"]
    csv = tmp_path / "data.csv"
    csv.write_text("text,label\nfirst,0\nsecond,1\n", encoding="utf-8")
    assert load_hf_dataset(csv) == ["first", "second"]
    with pytest.raises(DataError, match="unknown data file type '.xyz'"):
        (tmp_path / "x.xyz").write_text("x")
        load_hf_dataset(tmp_path / "x.xyz")
    with pytest.raises(DataError, match="no such file or folder"):
        load_hf_dataset(str(tmp_path / "missing"))


def test_a_folder_of_data_files_is_one_dataset_read_in_file_order(tmp_path, hf_cache):
    import pandas as pd

    from circuitlab.data.hf import iter_documents

    (tmp_path / "parquet" / "sub").mkdir(parents=True)
    pd.DataFrame({"text": ["a0", "a1", ""]}).to_parquet(tmp_path / "parquet" / "part-000.parquet")
    pd.DataFrame({"text": ["b0"]}).to_parquet(tmp_path / "parquet" / "sub" / "part-001.parquet")
    assert load_hf_dataset(tmp_path / "parquet") == ["a0", "a1", "b0"]
    assert list(iter_documents(tmp_path / "parquet", limit=2)) == ["a0", "a1"]
    (tmp_path / "jsonl").mkdir()
    for index in range(3):
        (tmp_path / "jsonl" / f"shard_{index}.jsonl").write_text(json.dumps({"story": f"s{index}"}) + "\n")
    assert load_hf_dataset(tmp_path / "jsonl", text_field="story") == ["s0", "s1", "s2"]
    (tmp_path / "jsonl" / "extra.csv").write_text("story\nx\n")
    with pytest.raises(DataError, match="mixes data file kinds"):
        load_hf_dataset(tmp_path / "jsonl", text_field="story")


def test_load_documents_dispatches_by_kind(tmp_path, hf_cache):
    datasets = hf_cache
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "from jsonl"}) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("text one\n\ntext two\n", encoding="utf-8")
    datasets.Dataset.from_dict({"text": ["from disk"]}).save_to_disk(tmp_path / "ds")
    assert load_documents([tmp_path / "a.jsonl", tmp_path / "b.txt", tmp_path / "ds"]) == [
        "from jsonl", "text one", "text two", "from disk",
    ]
    with pytest.raises(DataError, match="empty corpus"):
        load_documents([])


# -- packing ----------------------------------------------------------------------------------------------


def test_pack_sequences_invariants():
    rng = random.Random(0)
    sep = 0
    docs = [[rng.randrange(1, 50) for _ in range(rng.randrange(0, 40))] for _ in range(30)]
    seq_len = 16
    rows = pack_sequences(docs, seq_len=seq_len, sep_id=sep)
    stream = [token for doc in docs for token in [sep] + doc]
    assert rows.dtype == torch.long and rows.shape == (len(stream) // seq_len, seq_len)
    flat = rows.reshape(-1).tolist()
    assert flat == stream[: len(flat)]  # every token, in order; only the incomplete tail is dropped
    assert len(stream) - len(flat) < seq_len
    # Splitting the packed stream at separators gives back the documents (the last one possibly cut).
    recovered = []
    for token in flat:
        if token == sep:
            recovered.append([])
        else:
            recovered[-1].append(token)
    assert recovered[:-1] == docs[: len(recovered) - 1]
    assert docs[len(recovered) - 1][: len(recovered[-1])] == recovered[-1]
    assert flat.count(sep) == len(recovered)


def test_pack_sequences_exact_and_errors():
    rows = pack_sequences(iter([[1, 2], [3]]), seq_len=5, sep_id=9)
    assert rows.tolist() == [[9, 1, 2, 9, 3]]
    assert pack_sequences([np.array([1, 2, 3])], seq_len=2, sep_id=0).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(DataError, match="corpus too small to pack: 3 tokens in 1 documents"):
        pack_sequences([[1, 2]], seq_len=4, sep_id=0)
    with pytest.raises(DataError, match="0 tokens in 0 documents"):
        pack_sequences([], seq_len=4, sep_id=0)
    with pytest.raises(DataError, match="seq_len=0"):
        pack_sequences([[1]], seq_len=0, sep_id=0)


# -- tokenization cache -----------------------------------------------------------------------------------


class _NoEncoding:
    """Same hash as the real tokenizer, but refuses to encode: proves a result came from the cache."""

    def __init__(self, tokenizer):
        self._hash = tokenizer.hash()

    def hash(self):
        return self._hash

    def encode_batch(self, texts):
        raise AssertionError("the cache should have been used")


def test_tokenize_documents_cache(tmp_path):
    texts = ["The cat sat.", "A dog ran far away.", "", "The cat sat."]
    tokenizer = train_tokenizer(texts * 10, vocab_size=280, show_progress=False)
    expected = [tokenizer.encode(text) for text in texts]
    assert tokenize_documents(texts, tokenizer, show_progress=False) == expected
    assert tokenize_documents(texts, tokenizer, cache_dir=tmp_path, batch_size=3, show_progress=False) == expected
    assert len(list(tmp_path.glob("tokens-*.npz"))) == 1
    assert tokenize_documents(texts, _NoEncoding(tokenizer), cache_dir=tmp_path, show_progress=False) == expected
    # Other texts, or another tokenizer, miss the cache.
    with pytest.raises(AssertionError, match="cache should have been used"):
        tokenize_documents(texts[:3], _NoEncoding(tokenizer), cache_dir=tmp_path, show_progress=False)
    other = train_tokenizer(["zebra quiz"] * 10, vocab_size=270, show_progress=False)
    assert tokenize_documents(texts, other, cache_dir=tmp_path, show_progress=False) == [other.encode(t) for t in texts]
    assert len(list(tmp_path.glob("tokens-*.npz"))) == 2
