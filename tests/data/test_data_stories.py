"""The labelled story generator: determinism, vocabulary, label coverage and correctness, pronoun agreement,
corpus files, token_labels, and the `circuitlab corpus` command."""

from __future__ import annotations

import collections
import functools
import itertools
import json
import re

import pytest

from circuitlab.data import vocabulary as vocab
from circuitlab.cli import main
from circuitlab.data.facts import FACT_ADJECTIVES, FACTS
from circuitlab.data.story_frames import TEMPLATE_DIALOGUE_IDS
from circuitlab.data.story_writer import EXTRA_CLAUSES
from circuitlab.data.stories import (
    FRAME_IDS,
    GENDERED_PRONOUNS,
    GROUP_PRONOUNS,
    HELD_OUT_SEED,
    LABELS,
    MAX_SENTENCES,
    MIN_SENTENCES,
    SPEAKER_PRONOUNS,
    LabelledStory,
    generate_stories,
    generate_story,
    held_out_stories,
    read_corpus,
    token_labels,
    write_corpus,
)


@functools.lru_cache(maxsize=None)
def corpus(n: int = 2000, seed: int = 0) -> tuple[LabelledStory, ...]:
    return tuple(generate_stories(n, seed=seed))


def words_by_label(stories) -> dict[str, collections.Counter]:
    found: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for story in stories:
        for word, label in story.words():
            found[label][word.lower()] += 1
    return found


# -- determinism ------------------------------------------------------------------------------------------


def test_same_seed_same_stories_and_prefix_stable():
    first, second = generate_stories(40, seed=7), generate_stories(40, seed=7)
    assert first == second
    assert generate_stories(15, seed=7) == first[:15]
    assert generate_story(33, seed=7) == first[33]


def test_different_seeds_and_held_out_differ():
    train = [story.text for story in corpus(2000)[:300]]
    other = [story.text for story in generate_stories(300, seed=1)]
    held = [story.text for story in held_out_stories(300)]
    assert held == [story.text for story in generate_stories(300, seed=HELD_OUT_SEED)]
    # Short stories can coincide by chance; whole corpora must not.
    assert sum(a == b for a, b in zip(train, other)) < 15
    assert len(set(train) & set(held)) < 15


# -- vocabulary -------------------------------------------------------------------------------------------


def test_word_list_floors():
    assert len(vocab.FEMALE_NAMES) + len(vocab.MALE_NAMES) >= 150
    assert min(len(vocab.FEMALE_NAMES), len(vocab.MALE_NAMES)) >= 75
    assert len(vocab.ANIMALS) >= 50
    assert len(vocab.OBJECTS) >= 100
    assert len(vocab.ADJECTIVES) >= 60
    assert len(vocab.COLOURS) == 12
    assert len(vocab.PLACES) >= 30
    assert len(FRAME_IDS) >= 30
    for words in (vocab.FEMALE_NAMES + vocab.MALE_NAMES, vocab.ANIMALS, vocab.OBJECTS, vocab.PLACES, vocab.NOUNS):
        assert len(set(words)) == len(words)
        assert all(" " not in word for word in words)


def test_word_lists_are_disjoint_and_fact_adjectives_are_reserved():
    lists = {
        "names": {w.lower() for w in vocab.FEMALE_NAMES + vocab.MALE_NAMES},
        "animals": set(vocab.ANIMALS),
        "objects": set(vocab.OBJECTS),
        "places": set(vocab.PLACES),
        "nouns": set(vocab.NOUNS),
        "colours": set(vocab.COLOURS),
        "adjectives": set(vocab.ADJECTIVES) | set(vocab.CHARACTER_ADJECTIVES) | set(vocab.THING_ADJECTIVES),
        "numbers": set(vocab.NUMBERS),
    }
    for (name_a, a), (name_b, b) in itertools.combinations(lists.items(), 2):
        assert not a & b, f"{name_a} and {name_b} share {sorted(a & b)}"
    assert set(vocab.CHARACTER_ADJECTIVES) <= set(vocab.ADJECTIVES)
    assert set(vocab.THING_ADJECTIVES) <= set(vocab.ADJECTIVES)
    assert not FACT_ADJECTIVES & lists["adjectives"]
    label_lists = {"ANIMAL": lists["animals"], "OBJECT": lists["objects"], "PLACE": lists["places"], "NOUN": lists["nouns"]}
    for fact in FACTS:
        assert fact.noun in label_lists[fact.label], fact


def test_plural():
    cases = {"box": "boxes", "puppy": "puppies", "mouse": "mice", "ball": "balls", "brush": "brushes", "toy": "toys",
             "knife": "knives", "sheep": "sheep", "bus": "buses"}
    assert {noun: vocab.plural(noun) for noun in cases} == cases


def test_corpus_uses_the_vocabulary():
    found = words_by_label(corpus(2000))
    names = {name.lower() for name in vocab.FEMALE_NAMES + vocab.MALE_NAMES}
    assert len(set(found["NAME"]) & names) >= 150
    assert set(found["NAME"]) <= names
    assert len(set(found["ANIMAL"]) & set(vocab.ANIMALS)) >= 50
    assert len(set(found["OBJECT"]) & set(vocab.OBJECTS)) >= 100
    assert len(set(found["ADJECTIVE"]) & set(vocab.ADJECTIVES)) >= 60
    assert set(found["COLOUR"]) == set(vocab.COLOURS)
    assert len(set(found["PLACE"])) >= 30
    frames = collections.Counter(frame.split("+")[0] for story in corpus(2000)[:500] for _, _, frame in story.sentences)
    assert len(frames) >= 30
    assert set(frames) <= set(FRAME_IDS)
    all_frames = {frame for story in corpus(2000) for _, _, frame in story.sentences}
    assert {frame.split("+")[0] for frame in all_frames} == set(FRAME_IDS)
    # with their second clauses, the frames give hundreds of sentence shapes
    assert len(all_frames) >= 250, len(all_frames)
    assert {frame.split("+")[1] for frame in all_frames if "+" in frame} == set(EXTRA_CLAUSES)


def test_to_be_tenses_time_phrases_dialogue_and_morals_occur():
    texts = [story.text for story in corpus(2000)[:600]]
    joined = "\n".join(texts)
    for phrase in (" is ", " was ", " are ", " were ", " am ", " will be ", " had been ", " have been ", " would be ", " being "):
        assert phrase in joined, phrase
    for phrase in ("Once upon a time", "One day", "Every day", "That night", "The next day"):
        assert phrase in joined, phrase
    assert 0.3 < sum('"' in text for text in texts) / len(texts) < 0.95
    assert sum("moral of the story" in text or "learned that" in text for text in texts) > 60
    assert sum("\n\n" in text for text in texts) > 100


# -- labels -----------------------------------------------------------------------------------------------


def test_every_non_space_character_is_in_exactly_one_span():
    for story in corpus(2000)[:500]:
        covered = [0] * len(story.text)
        previous_end = 0
        for start, end, label in story.spans:
            assert label in LABELS
            assert previous_end <= start < end, "spans must be sorted and non-overlapping"
            assert not any(ch.isspace() for ch in story.text[start:end])
            for i in range(start, end):
                covered[i] += 1
            previous_end = end
        for ch, count in zip(story.text, covered):
            assert count == (0 if ch.isspace() else 1)


def test_labels_match_the_word_lists():
    from circuitlab.data.story_pools import WIDE_ANIMALS, WIDE_OBJECTS, WIDE_PLACES

    plural_animals = set(vocab.ANIMALS) | {vocab.plural(a) for a in vocab.ANIMALS} | set(WIDE_ANIMALS)
    plural_objects = set(vocab.OBJECTS) | {vocab.plural(o) for o in vocab.OBJECTS} | set(WIDE_OBJECTS)
    expected = {
        "NAME": {n.lower() for n in vocab.FEMALE_NAMES + vocab.MALE_NAMES},
        "ANIMAL": plural_animals,
        "OBJECT": plural_objects,
        "COLOUR": set(vocab.COLOURS),
        "NUMBER": set(vocab.NUMBERS),
        "BE": {"is", "am", "are", "was", "were", "be", "been", "being"},
        "PUNCT": {".", ",", "!", "?"},
        "QUOTE": {'"'},
        "POSS": {"'s"},
        "DET": {"the", "a", "an", "each"},
        "ADJECTIVE": set(vocab.ADJECTIVES) | set(FACT_ADJECTIVES) | {"right"},
        "PLACE": set(vocab.PLACES) | {"home"} | set(WIDE_PLACES),
    }
    found = words_by_label(corpus(2000)[:800])
    for label, allowed in expected.items():
        assert set(found[label]) <= allowed, (label, set(found[label]) - allowed)
    # A word from a list never appears with a different label in a sentence's noun slots.
    for story in corpus(2000)[:300]:
        for word, label in story.words():
            if word.lower() in vocab.COLOURS:
                assert label == "COLOUR"
            if word in vocab.FEMALE_NAMES + vocab.MALE_NAMES:
                assert label == "NAME"
            if word.lower() in {"is", "was", "were", "are", "am"}:
                assert label == "BE"


def test_sentences_counts_and_shape():
    counts = collections.Counter()
    for story in corpus(2000):
        n = len(story.sentences)
        counts[n] += 1
        assert MIN_SENTENCES <= n <= MAX_SENTENCES
        previous_end = 0
        for start, end, _ in story.sentences:
            sentence = story.text[start:end]
            assert story.text[previous_end:start].strip() == ""
            assert sentence[0].isupper() or sentence[0] == '"', sentence
            assert sentence[-1] in '.!?"', sentence
            previous_end = end
        assert previous_end == len(story.text)
    assert set(counts) == set(range(MIN_SENTENCES, MAX_SENTENCES + 1))


DIALOGUE_FORMATS = {
    "said_before": r'[A-Z]\w* (said|shouted|whispered|asked), "[A-Z][^"]*[.!?]"',
    "asked": r'[A-Z]\w* asked, "[A-Z][^"]*\?"',
    "replied": r'[A-Z]\w* smiled and replied, "[A-Z][^"]*[.!?]"',
    "said_after": r'"[A-Z][^"]*[,!?]" [a-z]+ [A-Z]\w*\.',
    "shouted": r'"[A-Z][^"]*!" shouted [A-Z]\w*\.',
    "fact_look": r'"Look! The [a-z]+ is [a-z]+!" said [A-Z]\w*\.',
    "fact_said": r'[A-Z]\w* said, "The [a-z]+ was [a-z]+\."',
    "fact_mom": r'(Her|His|[A-Z]\w*\'s) mom said, "The [a-z]+ is [a-z]+\."',
}


def test_spacing_and_dialogue_format():
    seen = collections.Counter()
    for story in corpus(2000)[:800]:
        assert not re.search(r" [.,!?]| 's|  |^ | $", story.text.replace("\n\n", "|")), story.text
        for start, end, frame in story.sentences:
            sentence = story.text[start:end]
            if frame in DIALOGUE_FORMATS:
                assert re.fullmatch(DIALOGUE_FORMATS[frame], sentence), (frame, sentence)
                seen[frame] += 1
            elif frame.split("+")[0] in TEMPLATE_DIALOGUE_IDS:
                # a template's quoted line: quotes paired, the line capitalised and closed by . , ! or ?
                assert sentence.count('"') in (0, 2, 4), (frame, sentence)
                assert all(re.fullmatch(r'[A-Z][^"]*[.,!?]', line) for line in re.findall(r'"([^"]*)"', sentence)), (frame, sentence)
                seen["template dialogue"] += '"' in sentence
            else:
                assert '"' not in sentence, (frame, sentence)
    assert all(seen[frame] > 5 for frame in DIALOGUE_FORMATS), seen
    assert seen["template dialogue"] > 20, seen


def test_pronouns_agree_with_their_referents():
    n_checked = collections.Counter()
    for story in corpus(2000):
        referent_at = {(start, end): ref for start, end, ref in story.referents}
        for start, end, label in story.spans:
            if label != "PRONOUN":
                continue
            word = story.text[start:end].lower()
            if word in GENDERED_PRONOUNS:
                referent = referent_at[(start, end)]
                assert story.characters[referent] == GENDERED_PRONOUNS[word], (story.text, word, referent)
                # The antecedent is named before the pronoun.
                assert re.search(rf"\b{referent}\b", story.text[:start]), (story.text, start)
                n_checked[word] += 1
            elif word in GROUP_PRONOUNS:
                members = referent_at[(start, end)].split("&")
                assert len(members) == 2 and all(m in story.characters for m in members)
                n_checked[word] += 1
            elif word in SPEAKER_PRONOUNS and (start, end) in referent_at:
                assert referent_at[(start, end)] in story.characters
                n_checked[word] += 1
            elif word == "it" and (start, end) in referent_at:
                assert referent_at[(start, end)] not in story.characters
                assert re.search(rf"\b{referent_at[(start, end)]}\b", story.text[:start])
    for word in ("he", "she", "his", "her", "him", "they", "we", "i", "my"):
        assert n_checked[word] > 20, (word, n_checked)
    # Subject pronouns outside bound possessives are never ambiguous: when two characters share a gender,
    # "he"/"she" does not occur after both are named.
    for story in corpus(2000):
        if len(story.characters) == 2 and len(set(story.characters.values())) == 1:
            second_named = max(story.text.index(name) for name in story.characters)
            later = [story.text[s:e] for s, e, label in story.spans if label == "PRONOUN" and s > second_named]
            assert not {"he", "she", "him"} & {w.lower() for w in later}, story.text


def test_characters_keep_their_names():
    for story in corpus(2000)[:500]:
        named = {story.text[s:e] for s, e, label in story.spans if label == "NAME"}
        assert named == set(story.characters)
        assert 1 <= len(story.characters) <= 2


# -- corpus files -----------------------------------------------------------------------------------------


def test_corpus_round_trip(tmp_path):
    path = write_corpus(tmp_path / "sub" / "stories.jsonl", 25, seed=3, show_progress=False)
    assert read_corpus(path) == generate_stories(25, seed=3)
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"text", "spans", "characters", "referents", "sentences", "facts"}
    # Lines with only text and spans are accepted.
    minimal = tmp_path / "minimal.jsonl"
    minimal.write_text(json.dumps({"text": "Hi.", "spans": [[0, 2, "INTERJECTION"], [2, 3, "PUNCT"]]}) + "\n\n")
    assert read_corpus(minimal) == [LabelledStory("Hi.", [(0, 2, "INTERJECTION"), (2, 3, "PUNCT")])]


def test_read_corpus_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "spans": []}\n{"text": "no spans"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: .*'text' and 'spans'"):
        read_corpus(bad)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin.jsonl is not valid UTF-8: byte offset 13"):
        read_corpus(latin)


# -- token_labels -----------------------------------------------------------------------------------------


def test_token_labels_rules():
    text = 'The turtle ran."\n\nOk'
    spans = [(0, 3, "DET"), (4, 10, "ANIMAL"), (11, 14, "VERB"), (14, 15, "PUNCT"), (15, 16, "QUOTE"), (18, 20, "INTERJECTION")]
    offsets = [(0, 3), (3, 10), (10, 14), (14, 16), (16, 18), (18, 19), (19, 20)]
    assert token_labels(offsets, spans) == ["DET", "ANIMAL", "VERB", "PUNCT", "SPACE", "INTERJECTION", "INTERJECTION"]
    # Unlabelled non-space text is OTHER when the text is given; a token straddling two words takes the first.
    assert token_labels([(0, 6), (6, 9)], [(0, 3, "DET")], "The cat") == ["DET", "OTHER"]
    assert token_labels([(0, 6), (6, 7)], [(0, 3, "DET")]) == ["DET", "SPACE"]
    assert token_labels([(2, 6)], [(0, 3, "DET"), (4, 6, "NOUN")]) == ["DET"]
    assert token_labels([], spans) == []


def test_token_labels_matches_brute_force_on_random_offsets():
    import random

    rng = random.Random(0)
    for story in corpus(2000)[:50]:
        char_label = [None] * len(story.text)
        for start, end, label in story.spans:
            for i in range(start, end):
                char_label[i] = label
        cuts = sorted(set(rng.sample(range(1, len(story.text)), k=min(60, len(story.text) - 1))))
        bounds = [0] + cuts + [len(story.text)]
        offsets = list(zip(bounds[:-1], bounds[1:]))
        expected = []
        for start, end in offsets:
            labels = [char_label[i] for i in range(start, end) if char_label[i] is not None]
            expected.append(labels[0] if labels else "SPACE")
        assert token_labels(offsets, story.spans, story.text) == expected


# -- CLI --------------------------------------------------------------------------------------------------


def _run_cli(argv: list[str]) -> int:
    return main(argv)


def test_corpus_command(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert _run_cli(["corpus", "--out", str(out), "--n", "12", "--seed", "5", "--quiet"]) == 0
    assert read_corpus(out) == generate_stories(12, seed=5)
    assert _run_cli(["corpus", "--out", str(tmp_path / "h.jsonl"), "--n", "3", "--held-out", "--quiet"]) == 0
    assert read_corpus(tmp_path / "h.jsonl") == held_out_stories(3)
    capsys.readouterr()
    assert _run_cli(["corpus", "--out", str(out), "--n", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--n 0" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _run_cli(["corpus", "--out", str(blocker / "c.jsonl"), "--n", "2", "--quiet"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_wider_vocabulary_from_the_lexicon():
    from circuitlab.data.facts import FACT_BY_NOUN
    from circuitlab.data.lexicon import label_text, lexicon
    from circuitlab.data.story_pools import WIDE_ANIMALS, WIDE_OBJECTS, WIDE_PLACES

    for pool, label in ((WIDE_ANIMALS, "ANIMAL"), (WIDE_OBJECTS, "OBJECT"), (WIDE_PLACES, "PLACE")):
        assert len(pool) >= 60 and all(lexicon()[word] == label and word not in FACT_BY_NOUN for word in pool)
    found = words_by_label(corpus(2000))
    assert len(set(found["ANIMAL"]) & set(WIDE_ANIMALS)) >= 60
    assert len(set(found["OBJECT"]) & set(WIDE_OBJECTS)) >= 100
    # the lexicon's labeller gives these frames' nouns the labels the generator gave them
    for story in corpus(2000)[:300]:
        mine = {(start, end): label for start, end, label in label_text(story.text)}
        for start, end, frame in story.sentences:
            if frame in ("saw_near", "packed", "when_got"):
                for s, e, label in story.spans:
                    if start <= s < end and label in ("ANIMAL", "OBJECT", "PLACE"):
                        assert mine[(s, e)] == label, story.text[s:e]
