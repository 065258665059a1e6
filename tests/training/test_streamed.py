"""Streamed corpora: documents tokenized by worker processes into uint16 shards on disk, resumable, read back
memory-mapped; the same splits, tokens and windows as a brute-force pass over the documents."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from circuitlab.data import iter_stories, train_tokenizer
from circuitlab.training.streamed import ShardWindows, split_of_document, write_shards

HELD, VALIDATION = 0.1, 0.1


@pytest.fixture(scope="module")
def corpus():
    texts = [story.text for story in iter_stories(90, seed=21)]
    return texts, train_tokenizer(texts[:60], vocab_size=400, show_progress=False)


def expected_streams(texts, tokenizer):
    """Each split's token stream by brute force: its documents in order, each after the separator."""
    streams = {"train": [], "validation": [], "held_out": []}
    for index, text in enumerate(texts):
        streams[split_of_document(index, HELD, VALIDATION)] += [tokenizer.eos_id, *tokenizer.encode(text)]
    return streams


def shard_streams(folder, manifest):
    return {split: np.concatenate([np.fromfile(folder / group["files"][split]["name"], dtype=manifest["dtype"])
                                   for group in manifest["groups"]]).tolist()
            for split in ("train", "validation", "held_out")}


def build(texts, tokenizer, folder, **options):
    return write_shards(texts, tokenizer, folder, key="k", held_out_fraction=HELD, validation_fraction=VALIDATION,
                        shard_documents=25, show_progress=False, **options)


def test_shards_hold_every_split_s_documents_in_order(tmp_path, corpus):
    texts, tokenizer = corpus
    manifest = build(texts, tokenizer, tmp_path / "one", workers=1)
    assert manifest["complete"] and manifest["dtype"] == "uint16" and len(manifest["groups"]) == 4  # 25+25+25+15
    assert shard_streams(tmp_path / "one", manifest) == expected_streams(texts, tokenizer)
    counts = {split: sum(split_of_document(i, HELD, VALIDATION) == split for i in range(len(texts)))
              for split in ("train", "validation", "held_out")}
    for split, count in counts.items():
        assert sum(group["files"][split]["documents"] for group in manifest["groups"]) == count > 0
    for group in manifest["groups"]:
        for part in group["files"].values():
            assert hashlib.sha256((tmp_path / "one" / part["name"]).read_bytes()).hexdigest() == part["sha256"]
    # worker processes give the same bytes
    parallel = build(texts, tokenizer, tmp_path / "two", workers=2)
    assert [g["files"] for g in parallel["groups"]] == [g["files"] for g in manifest["groups"]]


def test_a_killed_build_resumes_after_its_last_complete_group(tmp_path, corpus):
    texts, tokenizer = corpus

    def dies_after(n):
        for index, text in enumerate(texts):
            if index == n:
                raise KeyboardInterrupt
            yield text

    with pytest.raises(KeyboardInterrupt):
        build(dies_after(60), tokenizer, tmp_path / "s", workers=1)
    partial = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert partial["documents"] == 50 and not partial["complete"]  # two whole groups; the third never written
    seen = []

    def counted():
        for text in texts:
            seen.append(text)
            yield text

    resumed = build(counted(), tokenizer, tmp_path / "s", workers=1)
    whole = build(texts, tokenizer, tmp_path / "whole", workers=1)
    assert [g["files"] for g in resumed["groups"]] == [g["files"] for g in whole["groups"]]
    assert len(seen) == len(texts)  # read again from the start, but only the rest tokenized
    again = build(iter(()), tokenizer, tmp_path / "s", workers=1)  # complete: nothing is read
    assert again["groups"] == resumed["groups"]


def test_shard_windows_are_the_streams_cut_into_windows(tmp_path, corpus):
    texts, tokenizer = corpus
    manifest = build(texts, tokenizer, tmp_path / "w", workers=1)
    window = 17
    windows = ShardWindows(tmp_path / "w", manifest, "train", window)
    per_group = [np.fromfile(tmp_path / "w" / g["files"]["train"]["name"], dtype=np.uint16) for g in manifest["groups"]]
    expected = np.concatenate([stream[: len(stream) // window * window].reshape(-1, window) for stream in per_group])
    assert windows.shape == expected.shape and windows.numel() == expected.size
    rows = torch.tensor([0, len(expected) - 1, 5, 5, len(per_group[0]) // window])
    assert torch.equal(windows[rows], torch.from_numpy(expected[rows.numpy()].astype(np.int32)))
    assert torch.equal(windows.load(), torch.from_numpy(expected.astype(np.int32)))
    assert windows.fingerprint() == ShardWindows(tmp_path / "w", manifest, "train", window).fingerprint()
    assert windows.fingerprint() != ShardWindows(tmp_path / "w", manifest, "train", window + 1).fingerprint()
    with pytest.raises(IndexError):
        windows[torch.tensor([len(expected)])]


def test_train_streams_a_folder_of_jsonl_files(tmp_path):
    from circuitlab.cli import main

    texts = [story.text for story in iter_stories(400, seed=5)]
    folder = tmp_path / "dataset"
    folder.mkdir()
    for part in range(4):
        (folder / f"part-{part}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[part::4]))
    args = ["train", "--preset", "tiny-gelu", "--hf-dataset", str(folder), "--streaming", "--workers", "1",
            "--shard-documents", "150", "--steps", "4", "--batch-size", "4", "--seq-len", "32", "--vocab-size", "400",
            "--eval-every", "2", "--threads", "1", "--quiet", "--held-out-fraction", "0.05", "--validation-fraction", "0.05"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    data = metrics["data"]
    assert data["train_documents"] + data["validation_documents"] + data["held_out_documents"] == 400
    assert data["shards"].startswith("shards-") and "(streamed)" in data["source"]
    (shards,) = (tmp_path / "run" / "data").glob("shards-*")
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["groups"]) == 3
    assert metrics["tokens_seen"] == 4 * 4 * 32 and metrics["epochs"] == pytest.approx(4 * 4 * 32 / data["train_tokens"])
    card = (tmp_path / "run" / "card.md").read_text()
    assert "(streamed)" in card and f"{metrics['epochs']:.2f}" in card  # the card names the source and the passes
