"""The natural-story loader: parsing, checks, the held-out split, prompt-word use and the corpus counts."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from circuitlab.data._io import DataError
from circuitlab.data.morphology import adverb, comparative, inflections, past, plural, present_participle
from circuitlab.data.natural import (
    HELD_OUT_PERCENT,
    corpus_stats,
    default_folder,
    is_held_out,
    load_natural_stories,
    parse_story_file,
    prompt_words_used,
    word_counts,
)

ROOT = Path(__file__).resolve().parents[2]


def _prompts(folder: Path, n: int = 40) -> None:
    words = [("puppy", "run", "happy"), ("box", "hop", "big"), ("mouse", "catch", "gentle"), ("star", "try", "shiny")]
    lines = []
    for i in range(n):
        noun, verb, adjective = words[i % len(words)]
        lines.append(json.dumps({"id": i, "noun": noun, "verb": verb, "adjective": adjective, "features": ["dialogue"]}))
    (folder / "prompts.jsonl").write_text("\n".join(lines) + "\n")


def test_morphology():
    assert [plural(w) for w in ("puppy", "box", "mouse", "day", "leaf")] == ["puppies", "boxes", "mice", "days", "leaves"]
    assert [past(w) for w in ("hop", "try", "bake", "run", "play", "catch")] == ["hopped", "tried", "baked", "ran", "played", "caught"]
    assert [present_participle(w) for w in ("run", "bake", "lie", "see", "play")] == ["running", "baking", "lying", "seeing", "playing"]
    assert comparative("big") == ("bigger", "biggest") and comparative("happy") == ("happier", "happiest")
    assert [adverb(w) for w in ("happy", "gentle", "quick")] == ["happily", "gently", "quickly"]
    assert inflections("run", "verb") == ("run", "runs", "ran", "running")


def test_parse_load_split_and_word_use(tmp_path):
    _prompts(tmp_path)
    stories = tmp_path / "stories"
    stories.mkdir()
    (stories / "part_0000.txt").write_text(
        "### 0\nThe happy puppies ran home.\n\nThen they slept.\n\n### 1\nA big box hopped.\n\n"
        "### 2\r\nThe mouse was gentle and caught nothing.\r\n"
    )
    (stories / "part_0001.txt").write_text("### 3\nThe shiniest star twinkled.\n")  # no inflection of "try"
    corpus = load_natural_stories(tmp_path)
    assert [story.id for story in corpus.stories] == [0, 1, 2, 3]
    assert corpus.stories[0].text == "The happy puppies ran home.\n\nThen they slept."
    assert corpus.stories[0].source == "part_0000.txt:1"
    assert corpus.uses_words[3] == {"noun": True, "verb": False, "adjective": True}
    assert corpus.word_use_share() == {"noun": 1.0, "verb": 0.75, "adjective": 1.0, "all": 0.75}
    assert {s.id for s in corpus.train()} | {s.id for s in corpus.held_out()} == {0, 1, 2, 3}
    assert not {s.id for s in corpus.train()} & {s.id for s in corpus.held_out()}
    stats = corpus_stats(corpus)
    assert stats["stories"] == 4 and stats["words"] == 5 + 3 + 4 + 7 + 4
    assert stats["train_stories"] + stats["held_out_stories"] == 4
    assert stats["train_words"] + stats["held_out_words"] == stats["words"]


def test_held_out_split_is_a_fixed_function_of_the_id():
    ids = range(20000)
    held = [i for i in ids if is_held_out(i)]
    assert abs(len(held) / 20000 - HELD_OUT_PERCENT / 100) < 0.01
    # the rule, recomputed by hand
    expected = [i for i in ids if int.from_bytes(hashlib.sha256(f"natural-story/{i}".encode()).digest()[:8], "big") % 100 < 10]
    assert held == expected


@pytest.mark.parametrize(
    "content, message",
    [
        ("### 99\nA story.\n", "story id 99 is not in prompts.jsonl"),
        ("### 1\nOne.\n### 1\nAgain.\n", "story id 1 was already given at part_0000.txt:1"),
        ("Stray text\n### 1\nOne.\n", "text before the first"),
        ("### one\nOne.\n", "needs a numeric prompt id"),
        ("### 1\n\n\n### 2\nTwo.\n", "story 1 is empty"),
    ],
)
def test_bad_story_files(tmp_path, content, message):
    _prompts(tmp_path)
    (tmp_path / "stories").mkdir()
    (tmp_path / "stories" / "part_0000.txt").write_text(content)
    with pytest.raises(DataError, match=message):
        load_natural_stories(tmp_path)


def test_missing_folder_and_prompts(tmp_path):
    with pytest.raises(DataError, match="no prompts file"):
        load_natural_stories(tmp_path)
    _prompts(tmp_path)
    with pytest.raises(DataError, match="no story files"):
        load_natural_stories(tmp_path)


def test_word_counts_and_prompt_words():
    assert word_counts(["Lily's dog ran.", "The dog, the DOG!"]) == (7, 4)  # lily's, dog, ran, the
    assert prompt_words_used("Two mice were catching crumbs gently.", {"noun": "mouse", "verb": "catch", "adjective": "gentle"}) == {
        "noun": True, "verb": True, "adjective": True}


def test_corpus_stats_script_rewrites_the_marked_block(tmp_path):
    _prompts(tmp_path)
    (tmp_path / "stories").mkdir()
    (tmp_path / "stories" / "part_0000.txt").write_text("### 0\nThe happy puppy ran.\n\n### 1\nA big box hopped.\n")
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- corpus_stats -->\nstale counts\n<!-- /corpus_stats -->\nafter\n")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "corpus_stats.py"), "--folder", str(tmp_path), "--readme", str(readme)],
                   check=True, capture_output=True)
    text = readme.read_text()
    assert text.startswith("intro\n<!-- corpus_stats -->\n| | |") and text.endswith("<!-- /corpus_stats -->\nafter\n")
    assert "| stories | 2 (written to 40 prompts) |" in text and "stale counts" not in text


@pytest.mark.skipif(not (default_folder() / "stories").is_dir(), reason="the natural stories are not in this checkout")
def test_the_shipped_natural_stories_load():
    corpus = load_natural_stories()
    assert len(corpus.stories) > 0
    assert corpus.word_use_share()["all"] > 0.9
    assert corpus.train() and len(corpus.held_out()) < len(corpus.train())
