"""Labelled children's stories in the style of TinyStories, generated deterministically from a seed.

A story is 3 to 12 sentences built from sentence frames ("Once upon a time, there was a little girl named
Lily.", `Tom said, "Can I play with you?"`, "The turtle was slow.") around one or two characters who keep
their names and genders for the whole story. Every word and punctuation mark carries a category label, kept
as character spans so the labels survive any tokenization (`token_labels`).

Words, labels and spans: `circuitlab.data.story_text`. The writer and its frames: `circuitlab.data.story_writer`
(characters, openings, middles) and `circuitlab.data.story_plot` (dialogue, facts, endings).

Pronouns that refer to someone or something record their referent (`LabelledStory.referents`): a character's
name for he/she/him/her/his and for I/me/my (the speaker) and you/your (the listener), two names joined by
"&" for we/they, and a noun for "it". A gendered pronoun is only used when no other character of that gender
has been mentioned, so its antecedent is never ambiguous, except a possessive bound to the subject of its own
clause ("Lily lost her ball"), which English reads as the subject's. Generic pronouns ("everyone", "your mom"
in a moral, "it was the best day ever") have no referent.

Seeds: training corpora use `TRAIN_SEED` (0), held-out text uses `HELD_OUT_SEED` (1_000_003), validation
text `VALIDATION_SEED` (1_000_033);
`held_out_stories(n)` is `generate_stories(n, seed=HELD_OUT_SEED)`. Story i of a seed depends only on
(seed, i), so `generate_stories(n, s)[:m] == generate_stories(m, s)`.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from circuitlab.data.facts import FACTS
from circuitlab.data.story_frames import TEMPLATE_FRAME_IDS, TEMPLATE_FRAMES
from circuitlab.data.story_plot import _PlotWriter as _StoryWriter
from circuitlab.data.story_text import (  # noqa: F401  (re-exported: the public names of the stories API)
    GENDERED_PRONOUNS,
    GROUP_PRONOUNS,
    LABELS,
    LISTENER_PRONOUNS,
    SPEAKER_PRONOUNS,
    TOKEN_LABELS,
    LabelledStory,
    _Piece,
    label_tokens,
    token_labels,
)
from circuitlab.data.story_pools import _ATTRIBUTIVE_FACT_NOUNS

TRAIN_SEED = 0
HELD_OUT_SEED = 1_000_003
VALIDATION_SEED = 1_000_033  # the stories a run evaluates as it trains and chooses its checkpoint on
MIN_SENTENCES = 3
MAX_SENTENCES = 12



# (method, weight, needs): needs lists conditions: "friend" (a friend has been introduced), "no_friend" (a
# friend is planned but not yet introduced), "thing" (the story's object has been introduced).
_OPENINGS: tuple[tuple[Callable[[_StoryWriter], None], float, str], ...] = (
    (_StoryWriter.o_there_was, 4.0, ""), (_StoryWriter.o_there_lived, 1.5, ""), (_StoryWriter.o_name_was, 1.5, ""),
    (_StoryWriter.o_went_to, 1.5, ""), (_StoryWriter.o_who_loved, 1.0, ""), (_StoryWriter.o_two_friends, 1.0, "no_friend"),
)
_OPENINGS_AFTER_FACT = tuple(option for option in _OPENINGS if option[0] in (_StoryWriter.o_name_was, _StoryWriter.o_went_to, _StoryWriter.o_who_loved))
# each template frame (circuitlab.data.story_frames) is rarer than a hand-written frame; together they make
# about half of the middle sentences
_TEMPLATE_WEIGHT = 0.3
_MIDDLES: tuple[tuple[Callable[[_StoryWriter], None], float, str], ...] = (
    (_StoryWriter.f_had_thing, 3.0, ""), (_StoryWriter.f_loved_thing, 1.5, ""), (_StoryWriter.f_go_place, 2.0, ""),
    (_StoryWriter.f_see_animal, 1.5, ""), (_StoryWriter.f_meet_friend, 3.0, "no_friend"),
    (_StoryWriter.f_play_together, 2.0, "friend thing"), (_StoryWriter.f_all_day, 1.0, "friend"), (_StoryWriter.f_feel, 1.5, ""),
    (_StoryWriter.f_had_been, 0.7, ""), (_StoryWriter.f_find, 1.0, ""), (_StoryWriter.f_do_thing, 1.0, "thing"),
    (_StoryWriter.f_count_things, 0.7, ""), (_StoryWriter.f_count_animals, 0.7, ""), (_StoryWriter.f_colour, 1.0, "thing"),
    (_StoryWriter.f_animals_were, 0.7, ""), (_StoryWriter.f_weather, 0.4, ""), (_StoryWriter.f_every_day, 1.0, ""),
    (_StoryWriter.f_wanted, 1.0, "thing"), (_StoryWriter.f_suddenly, 0.8, ""), (_StoryWriter.f_ask_mom, 0.7, ""),
    (_StoryWriter.f_run_home, 0.7, ""), (_StoryWriter.f_hug, 1.0, "friend"), (_StoryWriter.f_climb, 0.7, ""),
    (_StoryWriter.f_thought, 0.7, "thing"), (_StoryWriter.f_tomorrow, 0.5, ""), (_StoryWriter.f_give, 1.0, "friend"),
    (_StoryWriter.f_share, 1.0, "friend"), (_StoryWriter.f_help, 1.0, "friend"), (_StoryWriter.f_said_before, 2.0, ""),
    (_StoryWriter.f_said_after, 2.0, ""), (_StoryWriter.f_asked, 1.0, ""), (_StoryWriter.f_shouted, 1.0, ""),
    (_StoryWriter.f_replied, 1.0, "friend"), (_StoryWriter.f_saw_near, 1.0, ""), (_StoryWriter.f_packed, 0.8, ""),
    (_StoryWriter.f_when_got, 1.0, ""), (_StoryWriter.f_after_did, 1.0, ""),
) + tuple((frame, _TEMPLATE_WEIGHT, frame.needs) for frame in TEMPLATE_FRAMES)
_ONE_SENTENCE_MIDDLES = tuple(option for option in _MIDDLES if getattr(option[0], "n_sentences", 1) == 1)
_LOST_ARC_SENTENCES = 3
_FACT_FRAMES: tuple[tuple[Callable[[_StoryWriter, Fact], None], float, int], ...] = (
    # (method, weight, sentences)
    (_StoryWriter.fact_plain, 2.0, 1), (_StoryWriter.fact_encounter, 3.0, 2), (_StoryWriter.fact_so, 1.0, 1),
    (_StoryWriter.fact_and, 1.0, 1), (_StoryWriter.fact_knew, 1.0, 1), (_StoryWriter.fact_remembered, 0.7, 1),
    (_StoryWriter.fact_said, 1.0, 1), (_StoryWriter.fact_look, 1.0, 1), (_StoryWriter.fact_because, 0.8, 1),
    (_StoryWriter.fact_mom, 0.7, 1), (_StoryWriter.fact_attributive, 1.0, 1), (_StoryWriter.fact_distant, 2.0, 1),
    (_StoryWriter.fact_later, 1.5, 3),
)
_ENDINGS: tuple[tuple[Callable[[_StoryWriter], None], float, str], ...] = (
    (_StoryWriter.e_best_friends, 2.0, "friend"), (_StoryWriter.e_learned, 1.5, ""), (_StoryWriter.e_moral, 1.0, ""),
    (_StoryWriter.e_night, 1.0, ""), (_StoryWriter.e_happily, 1.0, ""), (_StoryWriter.e_best_day, 1.0, ""),
    (_StoryWriter.e_home, 1.0, ""), (_StoryWriter.e_always, 1.0, ""),
)
# Facts per story: P(0), P(1), P(2), P(3).
_FACT_COUNT_WEIGHTS = (0.35, 0.35, 0.2, 0.1)
_P_FACT_OPENING = 0.25
_P_MEET_FRIEND_NOW = 0.4  # per sentence, while a planned friend has not been introduced
_P_PARAGRAPH_BREAK = 0.15


def _conditions(writer: _StoryWriter) -> frozenset[str]:
    """The `needs` conditions that hold now."""
    held = set()
    if writer.friend is not None:
        held.add("friend")
    if writer.planned_friend is not None and writer.friend is None:
        held.add("no_friend")
    if writer.thing_known:
        held.add("thing")
    return frozenset(held)


def _pick(rng: random.Random, options: Sequence[tuple[Callable, float, str]], writer: _StoryWriter, used: set) -> Callable:
    held = _conditions(writer)
    eligible = [(method, weight) for method, weight, needs in options if held.issuperset(needs.split())]
    fresh = [(method, weight) for method, weight in eligible if method not in used] or eligible
    methods, weights = zip(*fresh)
    return rng.choices(methods, weights=weights)[0]


def _write_story(rng: random.Random) -> LabelledStory:
    writer = _StoryWriter(rng)
    n_sentences = rng.randint(MIN_SENTENCES, MAX_SENTENCES)
    n_facts = rng.choices(range(len(_FACT_COUNT_WEIGHTS)), weights=_FACT_COUNT_WEIGHTS)[0]
    pending_facts = rng.sample(FACTS, n_facts)

    openings = _OPENINGS
    if pending_facts and rng.random() < _P_FACT_OPENING:
        writer.fact_opening(pending_facts.pop(0))
        openings = _OPENINGS_AFTER_FACT
    _pick(rng, openings, writer, set())(writer)

    used: set = set()
    while (remaining := n_sentences - 1 - len(writer.sentences)) > 0:
        # Spread the facts so that all fit before the ending: certain when as many facts as slots remain.
        if pending_facts and rng.random() < len(pending_facts) / remaining:
            fact = pending_facts.pop(0)
            frames = [(method, weight) for method, weight, size in _FACT_FRAMES if size <= remaining]
            if fact.noun not in _ATTRIBUTIVE_FACT_NOUNS:
                frames = [(method, weight) for method, weight in frames if method is not _StoryWriter.fact_attributive]
            methods, weights = zip(*frames)
            rng.choices(methods, weights=weights)[0](writer, fact)
            continue
        if remaining >= _LOST_ARC_SENTENCES and _StoryWriter.f_lost_arc not in used and rng.random() < 0.07:
            used.add(_StoryWriter.f_lost_arc)
            writer.f_lost_arc()
            continue
        if writer.planned_friend is not None and writer.friend is None and rng.random() < _P_MEET_FRIEND_NOW:
            writer.f_meet_friend()
            continue
        method = _pick(rng, _MIDDLES if remaining > 1 else _ONE_SENTENCE_MIDDLES, writer, used)
        used.add(method)
        method(writer)
    _pick(rng, _ENDINGS, writer, set())(writer)
    return _render(writer, rng)


def _render(writer: _StoryWriter, rng: random.Random) -> LabelledStory:
    parts: list[str] = []
    length = 0
    spans: list[tuple[int, int, str]] = []
    referents: list[tuple[int, int, str]] = []
    sentences: list[tuple[int, int, str]] = []

    def put(text: str) -> int:
        nonlocal length
        parts.append(text)
        length += len(text)
        return length

    for index, (frame_id, pieces) in enumerate(writer.sentences):
        if index > 0:
            put("\n\n" if index >= 2 and rng.random() < _P_PARAGRAPH_BREAK else " ")
        sentence_start = length
        previous: _Piece | None = None
        for piece in pieces:
            if previous is not None and not piece.glue and not previous.opens_quote:
                put(" ")
            start = length
            end = put(piece.text)
            spans.append((start, end, piece.label))
            if piece.referent is not None:
                referents.append((start, end, piece.referent))
            previous = piece
        sentences.append((sentence_start, length, frame_id))
    return LabelledStory(
        text="".join(parts),
        spans=spans,
        characters={character.name: character.gender for character in writer.characters},
        referents=referents,
        sentences=sentences,
        facts=list(writer.facts_stated),
    )


# ---------------------------------------------------------------------------------------------------------
# Public API


def generate_story(index: int, seed: int = TRAIN_SEED) -> LabelledStory:
    """Story number `index` of the corpus with this seed (depends only on seed and index)."""
    return _write_story(random.Random(f"circuitlab-stories/{seed}/{index}"))


def iter_stories(n: int, seed: int = TRAIN_SEED, show_progress: bool = False) -> Iterator[LabelledStory]:
    if n < 0:
        raise ValueError(f"number of stories must be >= 0, got {n}")
    indices: Iterable[int] = range(n)
    if show_progress:
        from tqdm.auto import tqdm

        indices = tqdm(indices, desc="stories", unit="story")
    for index in indices:
        yield generate_story(index, seed)


def generate_stories(n: int, seed: int = TRAIN_SEED, show_progress: bool = False) -> list[LabelledStory]:
    """`n` labelled stories; the same (n, seed) always gives the same stories."""
    return list(iter_stories(n, seed, show_progress))


def held_out_stories(n: int, show_progress: bool = False) -> list[LabelledStory]:
    """Stories for evaluation, drawn with `HELD_OUT_SEED` so they differ from the training corpus."""
    return generate_stories(n, seed=HELD_OUT_SEED, show_progress=show_progress)


def write_corpus(path: str | os.PathLike, n: int, seed: int = TRAIN_SEED, show_progress: bool = True) -> Path:
    """Write `n` stories as JSON lines {"text", "spans", "characters", "referents", "sentences", "facts"}."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as file:
        for story in iter_stories(n, seed, show_progress):
            file.write(story.to_json() + "\n")
    partial.replace(path)
    return path


def read_corpus(path: str | os.PathLike) -> list[LabelledStory]:
    """Stories written by `write_corpus` (lines need "text" and "spans"; the other fields are optional)."""
    from circuitlab.data._io import DataError, read_utf8

    stories = []
    for line_number, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            stories.append(LabelledStory.from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError, TypeError) as error:
            raise DataError(f"{path}, line {line_number}: not a labelled story ({error})") from None
    return stories


FRAME_IDS: tuple[str, ...] = (
    "there_was", "there_lived", "name_was", "went_to", "who_loved", "two_friends",
    "had_thing", "loved_thing", "go_place", "see_animal", "meet_friend", "play_together", "all_day", "feel",
    "had_been", "find", "do_thing", "count_things", "count_animals", "colour", "animals_were", "weather",
    "every_day", "wanted", "suddenly", "ask_mom", "run_home", "hug", "climb", "thought", "tomorrow", "give",
    "share", "help", "lost", "cry", "look_for", "found_it", "saw_near", "packed", "when_got", "after_did",
    "said_before", "said_after", "asked", "shouted", "replied",
    "fact_opening", "fact_plain", "fact_encounter", "fact_so", "fact_and", "fact_knew", "fact_remembered",
    "fact_said", "fact_look", "fact_because", "fact_mom", "fact_attributive", "fact_distant", "fact_met",
    "fact_between", "fact_recalled",
    "end_best_friends", "end_learned", "end_moral", "end_night", "end_happily", "end_best_day", "end_home",
    "end_always",
) + TEMPLATE_FRAME_IDS
