"""Collection: every token of a corpus becomes one row per layer, with the code and context the model gives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from circuitdb_fixtures import stories, tiny_model, tokenizer
from circuitlab.analysis.codeindex import CodeMatrix
from circuitlab.analysis.collect import Collection, collect


def direct_run(model, token_ids):
    """Logits and codes of one forward pass per window of n_ctx tokens, concatenated along positions."""
    window = model.config.n_ctx
    logits, codes = [], {}
    for start in range(0, len(token_ids), window):
        with torch.inference_mode():
            window_logits, cache = model.run_with_cache(torch.tensor([token_ids[start : start + window]]))
        logits.append(window_logits[0])
        for layer, code in model.sparse_codes(cache).items():
            codes.setdefault(layer, []).append(code.flatten())
    merged = {
        layer: type(parts[0])(torch.cat([p.indices for p in parts]), torch.cat([p.values for p in parts]), parts[0].size)
        for layer, parts in codes.items()
    }
    return torch.cat(logits), merged


def test_collect_records_codes_context_labels_and_predictions(tmp_path):
    from circuitlab.data.stories import token_labels

    model = tiny_model("tiny-sgatlin")
    tok = model.tokenizer
    corpus = list(stories(5)) + ["A plain text line\nwith no labels."]
    collection = collect(model, corpus, out_dir=tmp_path, batch_size=4, progress=False)
    metadata = collection.metadata()
    encoded = [tok.encode_with_offsets(getattr(item, "text", item)) for item in corpus]
    assert len(metadata) == sum(len(ids) for ids, _ in encoded) == collection.n_rows
    assert metadata["circuit_id"].tolist() == list(range(len(metadata)))
    assert collection.layers == [0, 1] and collection.code_sizes == {0: 128, 1: 128}
    assert collection.stats.n_tokens == len(metadata) and collection.stats.n_sequences == 6

    for sequence_id, item in enumerate(corpus):
        text = getattr(item, "text", item)
        ids, offsets = encoded[sequence_id]
        rows = metadata[metadata["sequence_id"] == sequence_id]
        assert rows["position"].tolist() == list(range(len(ids)))
        assert rows["token_id"].tolist() == ids
        assert rows["token"].tolist() == [tok.token_str(i) for i in ids]
        expected_labels = token_labels(offsets, item.spans, text) if hasattr(item, "spans") else [None] * len(ids)
        assert [c if isinstance(c, str) else None for c in rows["category"]] == expected_labels
        for row in rows.itertuples():
            start, end = offsets[row.position]
            assert row.context[row.token_start : row.token_end] == text[start:end].replace("\n", " ")
        logits, codes = direct_run(model, ids)
        np.testing.assert_array_equal(np.stack(rows["top_prediction_ids"].to_numpy()), logits.topk(5).indices.numpy())
        assert list(rows["top_predictions"].iloc[0]) == [tok.token_str(i) for i in logits[0].topk(5).indices.tolist()]
        for layer in (0, 1):
            stored = collection.codes(layer).rows(rows["circuit_id"].to_numpy())
            expected = CodeMatrix.from_sparse_code(codes[layer])
            np.testing.assert_array_equal(stored.indices, expected.indices)
            np.testing.assert_allclose(stored.values, expected.values, rtol=1e-5, atol=1e-6)
    assert metadata["category"].notna().sum() == sum(len(ids) for ids, _ in encoded[:5])
    assert (metadata[metadata["sequence_id"] < 5]["category"] == "NAME").any()


def test_shards_and_windows(tmp_path):
    model = tiny_model("tiny-sgatlin")
    tok = model.tokenizer
    long_text = " ".join(story.text for story in stories(12))
    ids = tok.encode(long_text)
    assert len(ids) > 3 * 32
    sharded = collect(model, [long_text, stories(1)[0]], [1], out_dir=tmp_path / "a", window=32, shard_rows=40, batch_size=2, progress=False)
    assert len(sharded.shards) > 2
    metadata = sharded.metadata()
    rows = metadata[metadata["sequence_id"] == 0]
    assert rows["position"].tolist() == list(range(len(ids)))
    # The second window runs on its own: its codes are those of a fresh forward pass on those 32 tokens.
    _, codes = direct_run(model, ids[32:64])
    window_codes = sharded.codes(1).rows(np.arange(32, 64))
    np.testing.assert_array_equal(window_codes.indices, CodeMatrix.from_sparse_code(codes[1]).indices)
    # The excerpt still reaches back into the previous window: context comes from the whole text.
    assert rows["token_start"].iloc[33] > 0
    # Concatenated shards into memory maps equal the in-memory concatenation; the manifest reopens.
    on_disk = sharded.codes(1, out=tmp_path / "arrays")
    np.testing.assert_array_equal(on_disk.indices, sharded.codes(1).indices)
    reopened = Collection.open(tmp_path / "a")
    assert reopened.shards == sharded.shards and reopened.n_rows == len(metadata)


@pytest.mark.parametrize(
    "preset, size, nnz",
    [("tiny-sgatlin", 2 * 64, 2 * 4), ("tiny-gelu", 128, 32), ("tiny-parity", 2**10, 8), ("tiny-legible", None, 16)],
)
def test_every_architecture_gives_codes(tmp_path, preset, size, nnz):
    model = tiny_model(preset)
    collection = collect(model, list(stories(3)), out_dir=tmp_path, progress=False)
    for layer in (0, 1):
        codes = collection.codes(layer)
        assert codes.nnz == nnz and len(codes) == collection.n_rows
        if size is not None:
            assert codes.size == size
        assert collection.layer_layouts[layer]["kind"] == {
            "tiny-sgatlin": "sgatlin", "tiny-gelu": "mlp", "tiny-parity": "parity", "tiny-legible": "ncffn"
        }[preset]


def test_collect_refuses_bad_requests(tmp_path):
    model = tiny_model("tiny-sgatlin")
    with pytest.raises(ValueError, match=r"layers \[5\] do not exist"):
        collect(model, ["hello"], [5], out_dir=tmp_path, progress=False)
    other = tokenizer(other=True)
    with pytest.raises(ValueError, match="vocab"):
        collect(model, ["hello"], out_dir=tmp_path, tokenizer=other, progress=False)
    bare = tiny_model("tiny-sgatlin")
    bare.tokenizer = None
    with pytest.raises(ValueError, match="needs a tokenizer"):
        collect(bare, ["hello"], out_dir=tmp_path, progress=False)


def per_token_metadata(model, corpus, window, context_before=6, context_after=5):
    """The metadata as the earlier per-token loop built it: one token at a time, one window per forward
    pass, excerpts cut from the whole text with newlines shown as spaces."""
    tok = model.tokenizer
    rows = []
    for sequence_id, item in enumerate(corpus):
        text = getattr(item, "text", item)
        ids, offsets = tok.encode_with_offsets(text)
        for start in range(0, len(ids), window):
            piece = ids[start : start + window]
            with torch.inference_mode():
                top = model(torch.tensor([piece]))[0].topk(5).indices.tolist()
            for local, token_id in enumerate(piece):
                position = start + local
                first, last = max(0, position - context_before), min(len(ids) - 1, position + context_after)
                excerpt_start = offsets[first][0]
                rows.append({
                    "sequence_id": sequence_id, "position": position, "token_id": token_id,
                    "token": tok.token_str(token_id),
                    "context": text[excerpt_start : offsets[last][1]].replace("\n", " ").replace("\r", " "),
                    "token_start": offsets[position][0] - excerpt_start,
                    "token_end": offsets[position][1] - excerpt_start,
                    "top_prediction_ids": top[local], "top_predictions": [tok.token_str(p) for p in top[local]],
                })
    return rows


def test_batched_metadata_equals_the_per_token_loop(tmp_path):
    model = tiny_model("tiny-sgatlin")
    corpus = [" ".join(story.text for story in stories(4)), "Line one\nline two\r\nthree.", *stories(3)]
    collection = collect(model, corpus, out_dir=tmp_path, window=24, batch_size=3, shard_rows=50, progress=False)
    metadata = collection.metadata()
    expected = per_token_metadata(model, corpus, window=24)
    assert len(metadata) == len(expected) and len(collection.shards) > 1
    for name in ("sequence_id", "position", "token_id", "token", "context", "token_start", "token_end"):
        assert metadata[name].tolist() == [row[name] for row in expected], name
    assert [list(p) for p in metadata["top_prediction_ids"]] == [row["top_prediction_ids"] for row in expected]
    assert [list(p) for p in metadata["top_predictions"]] == [row["top_predictions"] for row in expected]
    plain = metadata["sequence_id"] < 2
    assert metadata["category"][plain].isna().all() and metadata["category"][~plain].notna().all()
    assert str(metadata["position"].dtype) == "int32" and str(metadata["sequence_id"].dtype) == "int64"


# ------------------------------------------------------------------------------------- streaming into shards

KILLED_AFTER_COMMITS = textwrap.dedent(
    """
    import os, signal, sys
    import circuitlab.analysis.circuitdb.store as store
    from circuitlab.cli import main

    real_commit, commits = store.commit, []

    def dying_commit(folder, manifest):
        real_commit(folder, manifest)
        commits.append(folder)
        if len(commits) == {after}:  # this shard is committed: the process dies before the next one
            os.kill(os.getpid(), signal.SIGKILL)

    store.commit = dying_commit
    sys.exit(main(sys.argv[1:]))
    """
)


def same_collection(a: Collection, b: Collection) -> None:
    first, second = a.metadata(), b.metadata()
    assert len(first) == len(second)
    for column in ("circuit_id", "sequence_id", "position", "token_id", "token", "category", "context", "token_start"):
        assert first[column].tolist() == second[column].tolist(), column
    for layer in a.layers:
        np.testing.assert_array_equal(a.codes(layer).indices, b.codes(layer).indices)
        # windows are batched differently after a restart, so float rounding may differ in the last bits
        np.testing.assert_allclose(a.codes(layer).values, b.codes(layer).values, rtol=0, atol=1e-5)


def test_collect_killed_with_sigkill_resumes_to_the_database_of_one_run(tmp_path, capsys):
    from circuitlab.analysis.circuitdb import CircuitDB
    from circuitlab.cli import main

    tiny_model("tiny-sgatlin").save(tmp_path / "model")
    command = ["collect", "--model", str(tmp_path / "model"), "--stories", "6", "--batch-size", "2",
               "--shard-rows", "150", "--index", "none", "--quiet"]
    assert main([*command, "--out", str(tmp_path / "whole")]) == 0
    whole = Collection.open(tmp_path / "whole")
    assert len(whole.shards) >= 4 and whole.sources[-1].complete

    script = tmp_path / "killed.py"
    script.write_text(KILLED_AFTER_COMMITS.format(after=2))
    victim = subprocess.run([sys.executable, str(script), *command, "--out", str(tmp_path / "db")],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    killed = Collection.open(tmp_path / "db")  # the database of the two committed shards
    assert len(killed.shards) == 2 and not killed.sources[-1].complete and killed.n_rows >= 300
    progress = killed.sources[-1]
    assert 0 < progress.texts_done + (progress.position > 0) < 6
    partial = CircuitDB.open(tmp_path / "db")
    assert len(partial.search(partial.code(1, [0, 299]), 1, k=3)) == 6  # it answers queries meanwhile
    capsys.readouterr()
    assert main([*command, "--out", str(tmp_path / "db")]) == 2  # not over it without --resume or --append
    assert "already holds a circuit database" in capsys.readouterr().err

    assert main([*command, "--out", str(tmp_path / "db"), "--resume"]) == 0
    resumed = Collection.open(tmp_path / "db")
    assert resumed.sources[-1].complete and resumed.stats.n_sequences == whole.stats.n_sequences
    same_collection(resumed, whole)
    assert main([*command, "--out", str(tmp_path / "db"), "--resume"]) == 0  # nothing left to do
    assert Collection.open(tmp_path / "db").n_rows == whole.n_rows


def test_resume_refuses_another_corpus_and_append_continues_the_sequence_ids(tmp_path):
    from circuitlab.analysis.circuitdb import CircuitDBError

    model = tiny_model("tiny-sgatlin")
    first, second = list(stories(4)), ["A plain text line\nwith no labels.", stories(6)[5]]
    collect(model, first, out_dir=tmp_path / "a", shard_rows=100, batch_size=2, progress=False)
    appended = collect(model, second, out_dir=tmp_path / "a", shard_rows=100, batch_size=2, append=True,
                       description="more", progress=False)
    together = collect(model, first + second, out_dir=tmp_path / "b", shard_rows=100, batch_size=2, progress=False)
    same_collection(appended, together)
    assert [source.first_sequence_id for source in appended.sources] == [0, 4]
    assert [source.description for source in appended.sources] == ["corpus", "more"]

    with pytest.raises(CircuitDBError, match="another model, tokenizer or layers"):
        collect(model, second, [1], out_dir=tmp_path / "a", append=True, progress=False)
    # an interrupted collection of `first`, resumed with other texts, is refused by the corpus digest
    import json

    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    manifest["collection"][-1].update(complete=False, texts_done=2, position=0)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CircuitDBError, match="the corpus differs"):
        collect(model, list(reversed(first)) + second, out_dir=tmp_path / "b", shard_rows=100, batch_size=2,
                resume=True, progress=False)
