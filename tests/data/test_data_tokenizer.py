"""Byte-level BPE tokenizer: round trips, ids and offsets, persistence and hashing, labels through
tokenization, the vocab-mismatch error, and the `circuitlab tokenizer` command."""

from __future__ import annotations

import functools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from circuitlab.cli import main
from circuitlab.data.stories import generate_stories, iter_stories, label_tokens, write_corpus
from circuitlab.data.tokenizer import EOS_TOKEN, CircuitTokenizer, train_tokenizer

ODD_TEXTS = [
    "",
    " ",
    "\n\n\n",
    "  leading and trailing  ",
    "tabs\tand\r\nwindows line ends\r",
    "日本語のテキスト",
    "emoji 🙂🐢👩‍👩‍👧 family (zero-width joiner)",
    "combining e\u0301 vs é, Å, ﬁ ligature",
    "right-to-left: שלום مرحبا",
    "control \x00\x01\x7f and nbsp\u00a0here",
    "surrogate-free astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    f"a{EOS_TOKEN}b and {EOS_TOKEN}",
    "The turtle was slow.",
]


@functools.lru_cache(maxsize=None)
def stories():
    return tuple(generate_stories(300, seed=11))


@functools.lru_cache(maxsize=None)
def tokenizer() -> CircuitTokenizer:
    return train_tokenizer([s.text for s in stories()], vocab_size=600, show_progress=False)


def test_vocab_size_and_special_token():
    tok = tokenizer()
    assert tok.vocab_size == 600 == len(tok)
    assert tok.eos_id == 0 and tok.token_to_id(EOS_TOKEN) == 0
    assert tok.encode(EOS_TOKEN) == [tok.eos_id]
    assert tok.token_str(tok.eos_id) == EOS_TOKEN
    ids = [i for story in stories() for i in tok.encode(story.text)]
    assert max(ids) < tok.vocab_size and min(ids) >= 0
    assert tok.eos_id not in ids  # encode adds no special tokens


def test_round_trip_on_stories_and_odd_unicode():
    tok = tokenizer()
    for story in stories():
        assert tok.decode(tok.encode(story.text)) == story.text
    for text in ODD_TEXTS:
        assert tok.decode(tok.encode(text)) == text, repr(text)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_round_trip_on_random_text(text):
    tok = tokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_encode_batch_offsets_and_token_str():
    tok = tokenizer()
    texts = [s.text for s in stories()[:20]]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    for text in texts:
        ids, offsets = tok.encode_with_offsets(text)
        assert ids == tok.encode(text)
        assert "".join(text[start:end] for start, end in offsets) == text  # ASCII text: offsets tile it
        assert "".join(tok.token_str(i) for i in ids) == text
    # Leading spaces show as real spaces; partial UTF-8 bytes show escaped.
    assert tok.token_str(tok.encode(" the")[0]) == " the"
    pieces = [tok.token_str(i) for i in tok.encode("🐢")]
    assert len(pieces) > 1 and all("\\x" in piece for piece in pieces)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.token_str(600)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([1, 10_000])


def test_labels_survive_tokenization():
    texts = [s.text for s in stories()]
    tok = train_tokenizer(texts + ["The turtle was slow."] * 30, vocab_size=700, show_progress=False)
    story = next(s for s in iter_stories(3000, seed=0) if " turtle" in s.text)
    ids, labels = label_tokens(tok, story)
    turtle = tok.encode(" turtle")
    assert len(turtle) == 1
    turtle_labels = [label for token, label in zip(ids, labels) if token == turtle[0]]
    assert turtle_labels and set(turtle_labels) == {"ANIMAL"}
    # Against the character-level labels: a token's label is that of its first labelled character.
    for story in stories()[:60]:
        char_label = {}
        for start, end, label in story.spans:
            char_label.update({i: label for i in range(start, end)})
        ids, labels = label_tokens(tok, story)
        _, offsets = tok.encode_with_offsets(story.text)
        for (start, end), label in zip(offsets, labels):
            inside = [char_label[i] for i in range(start, end) if i in char_label]
            assert label == (inside[0] if inside else "SPACE")


def test_save_load_and_hash(tmp_path):
    tok = tokenizer()
    path = tok.save(tmp_path / "tokenizer.json")
    again = CircuitTokenizer.from_file(path)
    assert again.hash() == tok.hash() and len(tok.hash()) == 64
    assert CircuitTokenizer.from_file(tmp_path).hash() == tok.hash()  # a folder holding tokenizer.json
    text = stories()[0].text
    assert again.encode(text) == tok.encode(text)
    # Training is deterministic; another corpus gives another hash.
    assert train_tokenizer([s.text for s in stories()], vocab_size=600, show_progress=False).hash() == tok.hash()
    assert train_tokenizer([s.text for s in stories()[:50]], vocab_size=600, show_progress=False).hash() != tok.hash()
    assert "vocab_size=600" in repr(tok)


def test_errors(tmp_path):
    tok = tokenizer()
    tok.check_model_vocab(600)
    with pytest.raises(ValueError) as error:
        tok.check_model_vocab(8192)
    assert str(error.value) == "tokenizer vocab 600 != model d_vocab 8192 (was this checkpoint trained with another tokenizer?)"
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        CircuitTokenizer.from_file(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a Hugging Face tokenizer.json"):
        CircuitTokenizer.from_file(tmp_path / "broken.json")
    # A valid tokenizer.json without the separator.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = []
    del spec["model"]["vocab"][EOS_TOKEN]
    with pytest.raises(ValueError, match=re.escape("no '<|endoftext|>' token")):
        CircuitTokenizer.from_str(json.dumps(spec))
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(["abc"], vocab_size=100)
    with pytest.raises(ValueError, match="empty corpus"):
        train_tokenizer([], vocab_size=300, show_progress=False)


def _run_cli(argv: list[str]) -> int:
    return main(argv)


def test_tokenizer_command(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "stories.jsonl", 60, seed=2, show_progress=False)
    out = tmp_path / "tok" / "tokenizer.json"
    assert _run_cli(["tokenizer", "--corpus", str(corpus), "--vocab-size", "400", "--out", str(out), "--quiet"]) == 0
    trained = CircuitTokenizer.from_file(out)
    expected = train_tokenizer([s.text for s in generate_stories(60, seed=2)], vocab_size=400, show_progress=False)
    assert trained.hash() == expected.hash()
    # Without --corpus the stories are generated: the same tokenizer as from the written corpus.
    generated = tmp_path / "generated.json"
    assert _run_cli(["tokenizer", "--n", "60", "--seed", "2", "--vocab-size", "400", "--out", str(generated), "--quiet"]) == 0
    assert CircuitTokenizer.from_file(generated).hash() == expected.hash()
    # Plain text files.
    text_file = tmp_path / "a.txt"
    text_file.write_text("One doc.\n\nAnother doc.\n", encoding="utf-8")
    assert _run_cli(["tokenizer", "--corpus", str(text_file), "--vocab-size", "300", "--out", str(tmp_path / "t.json"), "--quiet"]) == 0
    capsys.readouterr()
    # User errors: one line, status 2.
    bad = tmp_path / "latin.txt"
    bad.write_bytes(b"caf\xe9\n")
    for argv, fragment in (
        (["tokenizer", "--corpus", str(tmp_path / "nope.jsonl"), "--out", str(out)], "no such file"),
        (["tokenizer", "--corpus", str(bad), "--out", str(out)], "latin.txt is not valid UTF-8: byte offset 3"),
        (["tokenizer", "--vocab-size", "10", "--out", str(out)], "--vocab-size 10"),
    ):
        assert _run_cli(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err
