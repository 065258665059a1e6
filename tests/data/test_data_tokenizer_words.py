"""Whole words under the byte-level BPE: the share of word occurrences that are one token, against brute
force, and the >= 90% target on the natural stories for a tokenizer trained on the mixture."""

from __future__ import annotations

import re

import pytest

from circuitlab.data.natural import default_folder
from circuitlab.data.tokenizer import train_tokenizer, word_token_share


def test_word_token_share_matches_brute_force():
    from circuitlab.data import iter_stories

    texts = [story.text for story in iter_stories(200, seed=5)]
    tokenizer = train_tokenizer(texts, vocab_size=400, show_progress=False)  # small: many words split
    sample = texts[:40] + ['He said, "Go!"\nThe zyxwvut quokkas didn\'t care.  Two  spaces.']
    share, total = word_token_share(tokenizer, sample)
    whole = n = 0
    for text in sample:
        for match in re.finditer(r"[A-Za-z]+", text):
            prefix = " " if match.start() > 0 and text[match.start() - 1] == " " else ""
            whole += len(tokenizer.encode(prefix + match.group())) == 1
            n += 1
    assert total == n and share == pytest.approx(whole / n, abs=1e-12)
    assert 0.2 < share < 0.95  # a 400-token vocabulary keeps common words whole and splits the rest
    assert word_token_share(tokenizer, ["", "123 !"]) == (0.0, 0)


@pytest.mark.skipif(not (default_folder() / "stories").is_dir(), reason="the natural stories are not in this checkout")
def test_mixture_tokenizer_keeps_natural_words_whole():
    from circuitlab.data import iter_stories, load_natural_stories

    corpus = load_natural_stories()
    train = [story.text for story in corpus.train()]
    generated = [story.text for story in iter_stories(2000)]
    tokenizer = train_tokenizer(train * 4 + generated, vocab_size=8192, show_progress=False)
    share, total = word_token_share(tokenizer, [story.text for story in corpus.held_out()])
    assert total > 500 and share >= 0.90, (share, total)


def test_tokenizer_command_on_the_mixture(tmp_path, capsys):
    import json

    from circuitlab.cli import main
    from circuitlab.data import iter_stories
    from circuitlab.data.tokenizer import CircuitTokenizer

    folder = tmp_path / "natural"
    (folder / "stories").mkdir(parents=True)
    (folder / "prompts.jsonl").write_text("".join(
        json.dumps({"id": i, "noun": "dog", "verb": "run", "adjective": "big"}) + "\n" for i in range(40)))
    texts = [story.text for story in iter_stories(40, seed=9)]
    (folder / "stories" / "part_0000.txt").write_text("".join(f"### {i}\n{text}\n\n" for i, text in enumerate(texts)))
    out = tmp_path / "tokenizer.json"
    assert main(["tokenizer", "--natural", str(folder), "--natural-upsample", "2", "--n", "50", "--vocab-size", "600",
                 "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    match = re.search(r"natural held-out stories: ([\d.]+)% of ([\d,]+) word occurrences", printed)
    assert match, printed
    from circuitlab.data.natural import is_held_out

    held = [text for i, text in enumerate(texts) if is_held_out(i)]
    share, total = word_token_share(CircuitTokenizer.from_file(out), held)
    assert float(match.group(1)) == pytest.approx(100 * share, abs=0.05) and int(match.group(2).replace(",", "")) == total
    assert main(["tokenizer", "--natural", str(folder), "--corpus", str(out), "--out", str(out)]) == 2
