"""The sentence frames: how many there are, that each one is written, and that every word they write is labelled
(template frames: circuitlab.data.story_frames)."""

from __future__ import annotations

import collections
import functools
import re

import pytest

from circuitlab.data.lexicon import label_text
from circuitlab.data.stories import FRAME_IDS, LABELS, generate_stories
from circuitlab.data.story_frames import TEMPLATE_FRAMES, TemplateFrame, _check, _parse


@functools.lru_cache(maxsize=1)
def corpus():
    return tuple(generate_stories(3000, seed=7))


def test_there_are_well_over_two_hundred_distinct_frames_and_each_is_written():
    assert len(FRAME_IDS) == len(set(FRAME_IDS)) >= 230
    written = collections.Counter(frame.split("+")[0] for story in corpus() for _, _, frame in story.sentences)
    assert set(written) == set(FRAME_IDS), sorted(set(FRAME_IDS) - set(written))
    # the syntax varies: questions, quoted lines, passives, relative clauses and subordinate clauses first
    sentences = [story.text[s:e] for story in corpus() for s, e, _ in story.sentences]
    for pattern in (r"^(Where|What|Who|Why|How|Did|Could|Was|Is) .*\?$", r'^[A-Z]\w* said to \w+, "[A-Z]', r" was (found|made|seen|given) by ",
                    r" (that|who|which|whose|where) ", r"^(Because|If|Before|While|Although|When|As soon as) "):
        assert sum(bool(re.search(pattern, sentence)) for sentence in sentences) > 5, pattern


def test_every_generated_word_is_labelled_in_every_frame():
    checked = collections.Counter()
    for story in corpus():
        covered = bytearray(len(story.text))
        for start, end, label in story.spans:
            assert label in LABELS
            for i in range(start, end):
                covered[i] += 1
        for start, end, frame in story.sentences:
            for i in range(start, end):
                assert covered[i] == (0 if story.text[i].isspace() else 1), (frame, story.text[start:end])
            checked[frame.split("+")[0]] += 1
    assert set(checked) == set(FRAME_IDS)


def test_template_nouns_get_the_lexicon_labels():
    """The lexicon's labeller (used for natural text) agrees with the template frames' animals, objects and
    places, so a word keeps one label whichever corpus it comes from."""
    template_ids = {frame.frame_id for frame in TEMPLATE_FRAMES}
    agreed = 0
    for story in corpus()[:1000]:
        theirs = {(start, end): label for start, end, label in label_text(story.text)}
        for start, end, frame in story.sentences:
            if frame.split("+")[0] not in template_ids:
                continue
            for s, e, label in story.spans:
                if start <= s < end and label in ("ANIMAL", "OBJECT", "PLACE", "COLOUR", "NUMBER", "BE"):
                    assert theirs[(s, e)] == label, (story.text[s:e], label, theirs[(s, e)], story.text[start:end])
                    agreed += 1
    assert agreed > 1000


@pytest.mark.parametrize("line, message", [
    ("x | | the:DET turtle:ANIMAL ran:VERB .", "fact word"),
    ("x | | the:DET {animal} was:BE speedy:ADJECTIVE .", "not in the ADJECTIVE word list"),
    ("x | | {A} hugged:VERB {B:o} .", "does not need 'friend'"),
    ("x | | {A} lost:VERB {thing} .", "does not need 'thing'"),
    ("x | | {A} saw:VERB she:PRONOUN .", "character pronouns come from slots"),
    ("x | | {A} ran:VERB home:NOWHERE .", "bad item"),
])
def test_template_checks_refuse_wrong_labels(line, message):
    with pytest.raises(ValueError, match=message):
        _check(_parse(line))


def test_sentence_counts_of_templates():
    one = TemplateFrame("a", "", tuple("{A} ran:VERB .".split()))
    two = TemplateFrame("b", "", tuple("{A} ran:VERB . {A} sat:VERB .".split()))
    quoted = TemplateFrame("c", "", tuple("Q< {line,:A} >Q said:VERB {A:n} . Q< {line:A} >Q".split()))
    assert (one.n_sentences, two.n_sentences, quoted.n_sentences) == (1, 2, 2)
