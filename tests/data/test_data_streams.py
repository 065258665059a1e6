"""Corpora read one text at a time: the same texts as the list loaders, errors before the first text, and
`circuitlab collect` drawing its stories while it commits shards rather than all before it starts."""

from __future__ import annotations

import json

import pytest

from circuitlab.data._io import DataError
from circuitlab.data.loaders import load_jsonl, load_text_files
from circuitlab.data.stories import HELD_OUT_SEED, generate_stories, read_corpus, write_corpus
from circuitlab.data.streams import corpus_stream, story_stream


def test_streams_give_the_list_loaders_texts_and_can_be_read_twice(tmp_path):
    labelled = write_corpus(tmp_path / "labelled.jsonl", 7, seed=3, show_progress=False)
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(json.dumps({"text": f"story {i}", "id": i}) for i in range(5)) + "\n\n")
    folder = tmp_path / "texts"
    (folder / "inner").mkdir(parents=True)
    (folder / "a.txt").write_text("One.\n\nTwo\r\nlines.\n\n\n")
    (folder / "inner" / "b.txt").write_text("Three.")

    stream = corpus_stream([labelled, plain, folder])
    expected = [story.text for story in read_corpus(labelled)] + load_jsonl(plain) + load_text_files(folder)
    first = [item if isinstance(item, str) else item.text for item in stream]
    assert first == expected and stream.n_texts == len(expected) == 7 + 5 + 3
    second = list(stream)
    assert [story.spans for story in second[:7]] == [story.spans for story in read_corpus(labelled)]
    assert [t if isinstance(t, str) else t.text for t in second] == expected
    assert [t if isinstance(t, str) else t.text for t in stream.head(9)] == expected[:9]
    assert stream.head(100).n_texts == len(expected)

    stories = story_stream(4, HELD_OUT_SEED)
    assert stories.n_texts == 4 and [s.text for s in stories] == [s.text for s in generate_stories(4, HELD_OUT_SEED)]


def test_a_jsonl_file_with_one_unlabelled_line_is_read_as_plain_texts(tmp_path):
    path = write_corpus(tmp_path / "mixed.jsonl", 3, seed=1, show_progress=False)
    with path.open("a") as file:
        file.write(json.dumps({"text": "no spans here"}) + "\n")
    texts = list(corpus_stream([path]))
    assert all(isinstance(text, str) for text in texts) and texts[-1] == "no spans here" and len(texts) == 4


def test_a_dataset_folder_is_streamed(tmp_path):
    pytest.importorskip("datasets")
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pyarrow.table({"text": ["first", "", "second"]}), tmp_path / "data" / "part0.parquet")
    pq.write_table(pyarrow.table({"text": ["third"]}), tmp_path / "data" / "part1.parquet")
    stream = corpus_stream([tmp_path / "data"])
    assert stream.n_texts is None and list(stream) == ["first", "second", "third"] == list(stream)
    assert list(stream.head(2)) == ["first", "second"]


@pytest.mark.parametrize("content, message", [
    ('{"text": "fine"}\n{"text": \n', "line 2: not valid JSON"),
    ('{"text": "fine"}\n\n{"body": "x"}\n', r"line 3: no 'text' field \(fields: \['body'\]\)"),
    ('{"text": 5}\n', "line 1: field 'text' is int, expected a string"),
    ("\n\n", "empty corpus"),
])
def test_bad_jsonl_is_reported_before_any_text_is_read(tmp_path, content, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        corpus_stream([path])


def test_missing_empty_and_undecodable_sources_are_named(tmp_path):
    with pytest.raises(DataError, match="missing.txt does not exist"):
        corpus_stream([tmp_path / "missing.txt"])
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    with pytest.raises(DataError, match="empty corpus: no text in"):
        corpus_stream([tmp_path / "blank.txt"])
    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match="latin.jsonl is not valid UTF-8: line 2"):
        corpus_stream([tmp_path / "latin.jsonl"])


def test_collect_draws_its_stories_while_it_commits_shards(tmp_path, monkeypatch):
    """The command holds no list of the corpus: when the last story is made, shards are already committed.
    (With the corpus read whole before collecting, no shard exists when the last story is made.)"""
    import circuitlab.data.stories as stories_module
    from circuitdb_fixtures import tiny_model
    from circuitlab.analysis.collect import Collection
    from circuitlab.cli import main

    tiny_model("tiny-sgatlin").save(tmp_path / "model")
    out = tmp_path / "db"
    committed_when_made: list[int] = []  # circuits committed when each story was made
    real = stories_module.iter_stories

    def watched(n, seed=stories_module.TRAIN_SEED, show_progress=False):
        for story in real(n, seed, show_progress):
            manifest = out / "manifest.json"
            committed_when_made.append(json.loads(manifest.read_text())["n_circuits"] if manifest.exists() else 0)
            yield story

    monkeypatch.setattr(stories_module, "iter_stories", watched)
    assert main(["collect", "--model", str(tmp_path / "model"), "--stories", "8", "--batch-size", "1",
                 "--shard-rows", "100", "--index", "none", "--quiet", "--out", str(out)]) == 0
    collection = Collection.open(out)
    assert len(committed_when_made) == 8 and collection.stats.n_sequences == 8
    assert committed_when_made[0] == 0 and committed_when_made[-1] >= 100
    assert committed_when_made == sorted(committed_when_made)
