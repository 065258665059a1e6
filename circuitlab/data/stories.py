"""Labelled children's stories in the style of TinyStories, generated deterministically from a seed.

A story is 3 to 12 sentences built from sentence frames ("Once upon a time, there was a little girl named
Lily.", `Tom said, "Can I play with you?"`, "The turtle was slow.") around one or two characters who keep
their names and genders for the whole story. Every word and punctuation mark carries a category label, kept
as character spans so the labels survive any tokenization (`token_labels`).

Labels (`LABELS`):
    NAME          a character's first name ("Lily")
    PRONOUN       personal, possessive, reflexive and indefinite pronouns ("she", "his", "I", "you", "it",
                  "they", "everyone", "this")
    NOUN          nouns that are not animals, objects or places: people, nature, abstractions ("girl",
                  "mom", "sun", "friend", "moral")
    ANIMAL        animals ("turtle", "dogs")
    OBJECT        things you can hold or use ("ball", "cookies")
    PLACE         places ("park", "home")
    ADJECTIVE     adjectives other than colours and numbers ("happy", "slow")
    COLOUR        colour words ("red")
    NUMBER        number words ("two")
    VERB          verbs other than "to be" and auxiliaries, any form ("played", "play", "looking")
    BE            forms of "to be" ("is", "am", "are", "was", "were", "be", "been", "being")
    AUX           auxiliaries and modals ("will", "had", "have", "can", "did", "do", "would")
    ADVERB        adverbs and particles ("very", "up", "together", "not", "ever")
    DET           articles and determiners ("the", "a", "an", "every", "each")
    PREP          prepositions ("in", "with", "under", "to" in "went to the park")
    CONJ          conjunctions and complementisers ("and", "but", "so", "because", "that")
    TIME          every word of a time phrase ("Once upon a time", "One day", "That night", "From that day
                  on", "all day", "tomorrow")
    INTERJECTION  "Oh", "Wow", "Yes", "No", "Look"
    POSS          the possessive "'s" ("Lily's")
    QUOTE         the double quote marks around dialogue
    PUNCT         other punctuation (". , ! ?")
    OTHER         function words that fit none of the above ("there", infinitive "to", "who")

Spans are word-level: one span per word or punctuation mark, never covering whitespace, so every
non-whitespace character lies in exactly one span. Sentences are separated by one space, or by a blank line
("\\n\\n") at a paragraph break.

Pronouns that refer to someone or something record their referent (`LabelledStory.referents`): a character's
name for he/she/him/her/his and for I/me/my (the speaker) and you/your (the listener), two names joined by
"&" for we/they, and a noun for "it". A gendered pronoun is only used when no other character of that gender
has been mentioned, so its antecedent is never ambiguous, except a possessive bound to the subject of its own
clause ("Lily lost her ball"), which English reads as the subject's. Generic pronouns ("everyone", "your mom"
in a moral, "it was the best day ever") have no referent.

Seeds: training corpora use `TRAIN_SEED` (0), held-out text uses `HELD_OUT_SEED` (1_000_003);
`held_out_stories(n)` is `generate_stories(n, seed=HELD_OUT_SEED)`. Story i of a seed depends only on
(seed, i), so `generate_stories(n, s)[:m] == generate_stories(m, s)`.
"""

from __future__ import annotations

import functools
import json
import os
import random
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from circuitlab.data import vocabulary as vocab
from circuitlab.data.facts import FACT_BY_NOUN, FACTS, Fact

LABELS: tuple[str, ...] = (
    "NAME", "PRONOUN", "NOUN", "ANIMAL", "OBJECT", "PLACE", "ADJECTIVE", "COLOUR", "NUMBER", "VERB", "BE",
    "AUX", "ADVERB", "DET", "PREP", "CONJ", "TIME", "INTERJECTION", "POSS", "QUOTE", "PUNCT", "OTHER",
)
# token_labels also returns SPACE (a whitespace-only token) and, with text given, OTHER for unlabelled text.
TOKEN_LABELS: tuple[str, ...] = LABELS + ("SPACE",)

TRAIN_SEED = 0
HELD_OUT_SEED = 1_000_003
MIN_SENTENCES = 3
MAX_SENTENCES = 12

GENDERED_PRONOUNS: dict[str, str] = {
    "he": "male", "him": "male", "his": "male", "himself": "male",
    "she": "female", "her": "female", "herself": "female",
}
GROUP_PRONOUNS = frozenset({"we", "us", "our", "they", "them", "their"})
SPEAKER_PRONOUNS = frozenset({"i", "me", "my"})
LISTENER_PRONOUNS = frozenset({"you", "your"})

_VOWEL_SOUND_EXCEPTIONS = ("uni", "use", "eu")
_TERMINALS = frozenset(".!?")


@dataclass
class LabelledStory:
    """A story and its labels.

    spans: (start, end, label) character spans, sorted and non-overlapping, one per word or punctuation mark.
    characters: name -> "female" | "male".
    referents: (start, end, referent) for pronouns that refer (see the module docstring).
    sentences: (start, end, frame_id) per sentence.
    facts: nouns of the facts stated in the story, in order of statement (repeats allowed).
    """

    text: str
    spans: list[tuple[int, int, str]]
    characters: dict[str, str] = field(default_factory=dict)
    referents: list[tuple[int, int, str]] = field(default_factory=list)
    sentences: list[tuple[int, int, str]] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def words(self) -> list[tuple[str, str]]:
        """(text, label) of every span, in order."""
        return [(self.text[start:end], label) for start, end, label in self.spans]

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, record: dict) -> LabelledStory:
        if "text" not in record or "spans" not in record:
            raise ValueError(f"a labelled story needs 'text' and 'spans'; got fields {sorted(record)}")
        return cls(
            text=record["text"],
            spans=[(int(s), int(e), str(label)) for s, e, label in record["spans"]],
            characters=dict(record.get("characters", {})),
            referents=[(int(s), int(e), str(ref)) for s, e, ref in record.get("referents", [])],
            sentences=[(int(s), int(e), str(frame)) for s, e, frame in record.get("sentences", [])],
            facts=list(record.get("facts", [])),
        )


# ---------------------------------------------------------------------------------------------------------
# Pieces: a word or punctuation mark with its label, rendered with English spacing.


@dataclass(frozen=True)
class _Piece:
    text: str
    label: str
    glue: bool = False  # no space before (punctuation, closing quote, "'s")
    opens_quote: bool = False  # no space after
    referent: str | None = None


def _t(spec: str) -> list[_Piece]:
    """Pieces from "word:LABEL word:LABEL , ." (punctuation marks alone need no label)."""
    return list(_parse_spec(spec))


@functools.lru_cache(maxsize=4096)
def _parse_spec(spec: str) -> tuple[_Piece, ...]:
    pieces = []
    for item in spec.split():
        if item in (".", ",", "!", "?", ";", ":"):
            pieces.append(_Piece(item, "PUNCT", glue=True))
            continue
        word, _, label = item.rpartition(":")
        if label not in LABELS or not word:
            raise ValueError(f"bad piece spec {item!r} in {spec!r}")
        pieces.append(_Piece(word, label))
    return tuple(pieces)


def _w(word: str, label: str, referent: str | None = None) -> list[_Piece]:
    return [_Piece(word, label, referent=referent)]


_OPEN_QUOTE = _Piece('"', "QUOTE", opens_quote=True)
_CLOSE_QUOTE = _Piece('"', "QUOTE", glue=True)
_POSSESSIVE_S = _Piece("'s", "POSS", glue=True)


def _article(next_word: str) -> list[_Piece]:
    starts_with_vowel = next_word[0].lower() in "aeiou" and not next_word.lower().startswith(_VOWEL_SOUND_EXCEPTIONS)
    return _w("an" if starts_with_vowel else "a", "DET")


def _capitalised(pieces: list[_Piece]) -> list[_Piece]:
    """Capitalise the first word of the sentence and the first word after an opening quote or a . ! ?"""
    out = []
    capitalise_next = True
    for piece in pieces:
        if piece.text[0].isalpha():
            if capitalise_next and piece.text[0].islower():
                piece = _Piece(piece.text[0].upper() + piece.text[1:], piece.label, piece.glue, piece.opens_quote, piece.referent)
            capitalise_next = False
        if piece.opens_quote or piece.text in _TERMINALS:
            capitalise_next = True
        elif piece.label == "QUOTE":  # a closing quote: `"Hi!" said Lily`
            capitalise_next = False
        out.append(piece)
    return out


# ---------------------------------------------------------------------------------------------------------
# Word pools. Fact nouns only ever appear as predicate subjects with their own fact adjective, so the pools
# used for "The [noun] was ..." sentences leave them out.


def _without_fact_nouns(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(word for word in words if word not in FACT_BY_NOUN)


_PLAIN_ANIMALS = _without_fact_nouns(vocab.ANIMALS)
_PLAIN_OBJECTS = _without_fact_nouns(vocab.OBJECTS)
_VERBS_IN_A_PLACE = ("played", "ran", "walked", "danced", "sang", "jumped", "hopped", "skipped", "explored", "rested")
_HOME_PLACES = ("village", "town", "house", "forest")
_HIDING_SPOTS = ("bed:OBJECT", "table:OBJECT", "tree:NOUN", "chair:OBJECT")
_TIME_STARTS = (
    "one:TIME day:TIME", "the:TIME next:TIME day:TIME", "in:TIME the:TIME morning:TIME", "after:TIME lunch:TIME",
    "later:TIME", "then:TIME", "soon:TIME", "one:TIME sunny:TIME day:TIME", "that:TIME afternoon:TIME",
    "one:TIME morning:TIME",
)
_MORALS = (
    "sharing:VERB is:BE good:ADJECTIVE",
    "it:PRONOUN is:BE good:ADJECTIVE to:OTHER help:VERB others:PRONOUN",
    "friends:NOUN help:VERB each:DET other:PRONOUN",
    "being:BE careful:ADJECTIVE is:BE smart:ADJECTIVE",
    "it:PRONOUN is:BE nice:ADJECTIVE to:OTHER share:VERB",
    "telling:VERB the:DET truth:NOUN is:BE good:ADJECTIVE",
    "playing:VERB together:ADVERB is:BE more:ADVERB fun:NOUN",
)
_LESSONS = (
    "be:BE nice:ADJECTIVE", "share:VERB", "help:VERB others:PRONOUN", "tell:VERB the:DET truth:NOUN",
    "listen:VERB to:PREP your:PRONOUN mom:NOUN", "be:BE careful:ADJECTIVE", "be:BE polite:ADJECTIVE",
)
# How a character comes across each kind of fact noun ("Lily saw a turtle."); NOUN facts need their own verb.
_ENCOUNTERS: dict[str, tuple[str, ...]] = {
    "ANIMAL": ("saw:VERB a:DET", "met:VERB a:DET", "found:VERB a:DET"),
    "OBJECT": ("found:VERB a:DET", "saw:VERB a:DET", "had:VERB a:DET"),
    "PLACE": ("went:VERB to:PREP the:DET", "walked:VERB to:PREP the:DET", "visited:VERB the:DET"),
}
_NOUN_ENCOUNTERS: dict[str, str] = {
    "sun": "looked:VERB up:ADVERB at:PREP the:DET", "snow": "played:VERB in:PREP the:DET",
    "night": "looked:VERB out:ADVERB at:PREP the:DET", "rain": "walked:VERB in:PREP the:DET",
    "thunder": "heard:VERB the:DET", "ice": "stepped:VERB on:PREP the:DET", "king": "met:VERB the:DET",
    "queen": "met:VERB the:DET",
}
# Fact nouns that read naturally after "a [adjective]" ("a slow turtle", "a cute baby").
_ATTRIBUTIVE_FACT_NOUNS = frozenset(
    [fact.noun for fact in FACTS if fact.label in ("ANIMAL", "OBJECT")]
    + ["baby", "clown", "monster", "cloud", "star", "witch", "king"]
)
_SUBJECT_PRONOUN = {"female": "she", "male": "he"}
_OBJECT_PRONOUN = {"female": "her", "male": "him"}
_POSSESSIVE_PRONOUN = {"female": "her", "male": "his"}


def _encounter(fact: Fact, rng: random.Random) -> list[_Piece]:
    if fact.label in _ENCOUNTERS:
        pieces = _t(rng.choice(_ENCOUNTERS[fact.label]))
    else:
        pieces = _t(_NOUN_ENCOUNTERS.get(fact.noun, "saw:VERB a:DET"))
    if pieces[-1].text == "a":
        pieces[-1:] = _article(fact.noun)
    return pieces + _w(fact.noun, fact.label)


@dataclass
class _Character:
    name: str
    gender: str  # "female" | "male"
    kind: str  # "girl", "boy" or an animal
    kind_label: str  # NOUN or ANIMAL


@dataclass
class _Utterance:
    pieces: list[_Piece]
    terminal: str  # "." | "!" | "?"


class _StoryWriter:
    """Writes one story sentence by sentence; each `f_*`/`o_*`/`e_*` method is a sentence frame."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.characters: list[_Character] = []
        self.mentioned: set[str] = set()
        self.sentences: list[tuple[str, list[_Piece]]] = []
        self.facts_stated: list[str] = []
        self.hero = self._new_character(taken=())
        self.characters.append(self.hero)
        self.planned_friend = self._new_character(taken=(self.hero.name,)) if rng.random() < 0.7 else None
        self.friend: _Character | None = None
        self.thing = rng.choice(_PLAIN_OBJECTS)
        self.thing_known = False  # "the [thing]" only after "a [thing]" or "her [thing]"
        self.place = rng.choice(vocab.PLACES)

    # -- characters and how to refer to them -----------------------------------------------------------

    def _new_character(self, taken: Sequence[str]) -> _Character:
        gender = self.rng.choice(("female", "male"))
        names = vocab.FEMALE_NAMES if gender == "female" else vocab.MALE_NAMES
        name = self.rng.choice([name for name in names if name not in taken])
        if self.rng.random() < 0.25:
            return _Character(name, gender, self.rng.choice(_PLAIN_ANIMALS), "ANIMAL")
        return _Character(name, gender, "girl" if gender == "female" else "boy", "NOUN")

    def introduce_friend(self) -> _Character:
        assert self.planned_friend is not None and self.friend is None
        self.friend = self.planned_friend
        self.characters.append(self.friend)
        return self.friend

    def name(self, character: _Character) -> list[_Piece]:
        self.mentioned.add(character.name)
        return _w(character.name, "NAME")

    def _pronoun_ok(self, character: _Character) -> bool:
        # A gendered pronoun is unambiguous only if no other mentioned character shares the gender.
        return character.name in self.mentioned and not any(
            other is not character and other.gender == character.gender and other.name in self.mentioned
            for other in self.characters
        )

    def _pronoun_or_name(self, character: _Character, table: dict[str, str], p_pronoun: float) -> list[_Piece] | None:
        if self._pronoun_ok(character) and self.rng.random() < p_pronoun:
            return _w(table[character.gender], "PRONOUN", referent=character.name)
        return None

    def subj(self, character: _Character, p_pronoun: float = 0.55) -> list[_Piece]:
        return self._pronoun_or_name(character, _SUBJECT_PRONOUN, p_pronoun) or self.name(character)

    def obj(self, character: _Character) -> list[_Piece]:
        return self._pronoun_or_name(character, _OBJECT_PRONOUN, 0.6) or self.name(character)

    def poss(self, character: _Character, bound: bool = False) -> list[_Piece]:
        """ "her"/"his" or "Lily's". `bound`: the possessor is the subject of this clause ("Lily lost her
        ball"), where English reads the pronoun as the subject's even if another character shares the gender."""
        if bound and character.name in self.mentioned:
            return _w(_POSSESSIVE_PRONOUN[character.gender], "PRONOUN", referent=character.name)
        return self._pronoun_or_name(character, _POSSESSIVE_PRONOUN, 0.8) or self.name(character) + [_POSSESSIVE_S]

    def both_known(self) -> bool:
        return self.friend is not None and {self.hero.name, self.friend.name} <= self.mentioned

    def group_ref(self) -> str:
        assert self.friend is not None
        return f"{self.hero.name}&{self.friend.name}"

    def group(self) -> list[_Piece]:
        assert self.friend is not None
        if self.both_known() and self.rng.random() < 0.5:
            return _w("they", "PRONOUN", referent=self.group_ref())
        return self.name(self.hero) + _t("and:CONJ") + self.name(self.friend)

    def actor(self) -> _Character:
        if self.friend is not None and self.rng.random() < 0.35:
            return self.friend
        return self.hero

    def other(self, character: _Character) -> _Character | None:
        if self.friend is None:
            return None
        return self.friend if character is self.hero else self.hero

    # -- noun phrases ------------------------------------------------------------------------------------

    def a(self, *words: tuple[str, str]) -> list[_Piece]:
        """ "a"/"an" followed by (word, label) pairs."""
        pieces = _article(words[0][0])
        for word, label in words:
            pieces += _w(word, label)
        return pieces

    def time_start(self) -> list[_Piece]:
        return _t(self.rng.choice(_TIME_STARTS))

    def emit(self, frame_id: str, pieces: list[_Piece]) -> None:
        self.sentences.append((frame_id, _capitalised(pieces)))

    # -- openings ----------------------------------------------------------------------------------------

    def o_there_was(self) -> None:
        hero, adjective = self.hero, self.rng.choice(vocab.CHARACTER_ADJECTIVES)
        self.emit(
            "there_was",
            _t("once:TIME upon:TIME a:TIME time:TIME , there:OTHER was:BE")
            + self.a((adjective, "ADJECTIVE"), (hero.kind, hero.kind_label))
            + _t("named:VERB") + self.name(hero) + _t("."),
        )

    def o_there_lived(self) -> None:
        hero = self.hero
        adjective = self.rng.choice(("little", "small", "big", "old", "nice", "cozy"))
        self.emit(
            "there_lived",
            _t("once:TIME upon:TIME a:TIME time:TIME , in:PREP")
            + self.a((adjective, "ADJECTIVE"), (self.rng.choice(_HOME_PLACES), "PLACE"))
            + _t(", there:OTHER lived:VERB") + self.a((hero.kind, hero.kind_label))
            + _t("named:VERB") + self.name(hero) + _t("."),
        )

    def o_name_was(self) -> None:
        hero, adjective = self.hero, self.rng.choice(vocab.CHARACTER_ADJECTIVES)
        self.emit(
            "name_was",
            self.name(hero) + _t("was:BE") + self.a((adjective, "ADJECTIVE"), (hero.kind, hero.kind_label)) + _t("."),
        )

    def o_went_to(self) -> None:
        hero, adjective = self.hero, self.rng.choice(vocab.CHARACTER_ADJECTIVES)
        self.emit(
            "went_to",
            self.time_start() + _t(",") + self.a((adjective, "ADJECTIVE"), (hero.kind, hero.kind_label))
            + _t("named:VERB") + self.name(hero) + _t("went:VERB to:PREP the:DET") + _w(self.place, "PLACE") + _t("."),
        )

    def o_who_loved(self) -> None:
        hero = self.hero
        verb, _ = self.rng.choice(vocab.INTRANSITIVE_VERBS)
        self.emit(
            "who_loved",
            _t("there:OTHER was:BE") + self.a((hero.kind, hero.kind_label)) + _t("named:VERB") + self.name(hero)
            + _t("who:OTHER loved:VERB to:OTHER") + _w(verb, "VERB") + _t("."),
        )

    def o_two_friends(self) -> None:
        friend = self.introduce_friend()
        self.emit(
            "two_friends",
            _t("once:TIME upon:TIME a:TIME time:TIME , there:OTHER were:BE two:NUMBER friends:NOUN ,")
            + self.name(self.hero) + _t("and:CONJ") + self.name(friend) + _t("."),
        )

    # -- middle frames -----------------------------------------------------------------------------------

    def f_had_thing(self) -> None:
        actor, colour = self.actor(), self.rng.choice(vocab.COLOURS)
        self.thing_known = True
        self.emit("had_thing", self.subj(actor) + _t("had:VERB") + self.a((colour, "COLOUR"), (self.thing, "OBJECT")) + _t("."))

    def f_loved_thing(self) -> None:
        actor = self.actor()
        self.thing_known = True
        self.emit(
            "loved_thing",
            self.subj(actor) + _t("loved:VERB") + self.poss(actor, bound=True) + _w(self.thing, "OBJECT") + _t("very:ADVERB much:ADVERB ."),
        )

    def f_go_place(self) -> None:
        actor = self.actor()
        pieces = self.time_start() + _t(",") + self.subj(actor) + _t("went:VERB to:PREP the:DET") + _w(self.place, "PLACE")
        if self.rng.random() < 0.5:
            self.thing_known = True
            pieces += _t("with:PREP") + self.poss(actor, bound=True) + _w(self.thing, "OBJECT")
        self.emit("go_place", pieces + _t("."))

    def f_see_animal(self) -> None:
        actor = self.actor()
        adjective, animal = self.rng.choice(vocab.CHARACTER_ADJECTIVES), self.rng.choice(_PLAIN_ANIMALS)
        self.emit(
            "see_animal",
            _t("at:PREP the:DET") + _w(self.place, "PLACE") + _t(",") + self.subj(actor) + _t("saw:VERB")
            + self.a((adjective, "ADJECTIVE"), (animal, "ANIMAL")) + _t("."),
        )

    def f_meet_friend(self) -> None:
        friend = self.introduce_friend()
        adjective = self.rng.choice(vocab.CHARACTER_ADJECTIVES)
        self.emit(
            "meet_friend",
            self.subj(self.hero) + _t("met:VERB") + self.a((adjective, "ADJECTIVE"), (friend.kind, friend.kind_label))
            + _t("named:VERB") + self.name(friend) + _t("."),
        )

    def f_play_together(self) -> None:
        self.emit(
            "play_together",
            self.group() + _t("played:VERB with:PREP the:DET") + _w(self.thing, "OBJECT") + _t("in:PREP the:DET")
            + _w(self.place, "PLACE") + _t("."),
        )

    def f_all_day(self) -> None:
        _, verb = self.rng.choice(vocab.INTRANSITIVE_VERBS)
        self.emit("all_day", self.group() + _w(verb, "VERB") + _t("together:ADVERB all:TIME day:TIME ."))

    def f_feel(self) -> None:
        actor = self.actor()
        self.emit("feel", self.subj(actor) + _t("was:BE very:ADVERB") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _t("."))

    def f_had_been(self) -> None:
        actor = self.actor()
        self.emit(
            "had_been",
            self.subj(actor) + _t("had:AUX been:BE") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _t("all:TIME day:TIME ."),
        )

    def f_find(self) -> None:
        actor = self.actor()
        adjective, found = self.rng.choice(vocab.THING_ADJECTIVES), self.rng.choice(_PLAIN_OBJECTS)
        self.emit(
            "find",
            self.subj(actor) + _t("found:VERB") + self.a((adjective, "ADJECTIVE"), (found, "OBJECT"))
            + _t("under:PREP the:DET") + _t(self.rng.choice(_HIDING_SPOTS)) + _t("."),
        )

    def f_do_thing(self) -> None:
        actor = self.actor()
        _, verb = self.rng.choice(vocab.TRANSITIVE_VERBS)
        self.emit(
            "do_thing",
            self.time_start() + _t(",") + self.subj(actor) + _w(verb, "VERB") + _t("the:DET") + _w(self.thing, "OBJECT") + _t("."),
        )

    def f_count_things(self) -> None:
        actor = self.actor()
        self.emit(
            "count_things",
            self.subj(actor) + _t("had:VERB") + _w(self.rng.choice(vocab.NUMBERS), "NUMBER")
            + _w(vocab.plural(self.rng.choice(_PLAIN_OBJECTS)), "OBJECT") + _t("."),
        )

    def f_count_animals(self) -> None:
        actor = self.actor()
        self.emit(
            "count_animals",
            self.subj(actor) + _t("saw:VERB") + _w(self.rng.choice(vocab.NUMBERS), "NUMBER")
            + _w(vocab.plural(self.rng.choice(_PLAIN_ANIMALS)), "ANIMAL") + _t("in:PREP the:DET") + _w(self.place, "PLACE") + _t("."),
        )

    def f_colour(self) -> None:
        self.emit("colour", _t("the:DET") + _w(self.thing, "OBJECT") + _t("was:BE") + _w(self.rng.choice(vocab.COLOURS), "COLOUR") + _t("."))

    def f_animals_were(self) -> None:
        self.emit(
            "animals_were",
            _t("the:DET") + _w(vocab.plural(self.rng.choice(_PLAIN_ANIMALS)), "ANIMAL") + _t("were:BE")
            + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _t("."),
        )

    def f_weather(self) -> None:
        sky = self.rng.choice(("blue", "gray"))
        self.facts_stated.append("sun")
        self.emit(
            "weather",
            _t("the:DET sky:NOUN was:BE") + _w(sky, "COLOUR") + _t("and:CONJ the:DET sun:NOUN was:BE")
            + _w(FACT_BY_NOUN["sun"].adjective, "ADJECTIVE") + _t("."),
        )

    def f_every_day(self) -> None:
        actor = self.actor()
        verb = self.rng.choice(_VERBS_IN_A_PLACE)
        self.emit(
            "every_day",
            _t("every:TIME day:TIME ,") + self.subj(actor) + _w(verb, "VERB") + _t("in:PREP the:DET") + _w(self.place, "PLACE") + _t("."),
        )

    def f_wanted(self) -> None:
        actor = self.actor()
        verb, _ = self.rng.choice(vocab.TRANSITIVE_VERBS)
        self.emit(
            "wanted",
            self.subj(actor) + _t("wanted:VERB to:OTHER") + _w(verb, "VERB") + _t("the:DET") + _w(self.thing, "OBJECT") + _t("."),
        )

    def f_suddenly(self) -> None:
        actor = self.actor()
        adjective = self.rng.choice(("strange", "big", "little", "new"))
        self.emit(
            "suddenly",
            _t("suddenly:ADVERB ,") + self.subj(actor) + _t("heard:VERB") + self.a((adjective, "ADJECTIVE"), ("noise", "NOUN")) + _t("."),
        )

    def f_ask_mom(self) -> None:
        actor = self.actor()
        wanted = self.rng.choice(_PLAIN_OBJECTS)
        self.emit(
            "ask_mom",
            self.subj(actor) + _t("asked:VERB") + self.poss(actor, bound=True) + _t("mom:NOUN for:PREP") + self.a((wanted, "OBJECT")) + _t("."),
        )

    def f_run_home(self) -> None:
        actor = self.actor()
        self.emit("run_home", _t("then:TIME") + self.subj(actor) + _t("ran:VERB home:PLACE to:OTHER tell:VERB") + self.poss(actor, bound=True) + _t("mom:NOUN ."))

    def f_hug(self) -> None:
        actor = self.actor()
        other = self.other(actor)
        assert other is not None
        self.emit("hug", self.subj(actor) + _t("smiled:VERB and:CONJ hugged:VERB") + self.obj(other) + _t("."))

    def f_climb(self) -> None:
        actor = self.actor()
        self.emit("climb", self.subj(actor) + _t("climbed:VERB up:ADVERB the:DET") + _t(self.rng.choice(("tree:NOUN", "hill:PLACE"))) + _t("."))

    def f_thought(self) -> None:
        actor = self.actor()
        self.emit(
            "thought",
            self.subj(actor) + _t("thought:VERB that:CONJ the:DET") + _w(self.thing, "OBJECT") + _t("was:BE")
            + _w(self.rng.choice(vocab.THING_ADJECTIVES), "ADJECTIVE") + _t("."),
        )

    def f_tomorrow(self) -> None:
        actor = self.actor()
        adjective = self.rng.choice(("good", "great", "special", "wonderful", "new"))
        self.emit(
            "tomorrow",
            self.subj(actor) + _t("knew:VERB that:CONJ tomorrow:TIME would:AUX be:BE") + self.a((adjective, "ADJECTIVE"), ("day", "NOUN")) + _t("."),
        )

    def f_give(self) -> None:
        actor = self.actor()
        other = self.other(actor)
        assert other is not None
        colour, gift = self.rng.choice(vocab.COLOURS), self.rng.choice(_PLAIN_OBJECTS)
        self.emit("give", self.subj(actor) + _t("gave:VERB") + self.obj(other) + self.a((colour, "COLOUR"), (gift, "OBJECT")) + _t("."))

    def f_share(self) -> None:
        actor = self.actor()
        other = self.other(actor)
        assert other is not None
        self.emit("share", self.subj(actor) + _t("shared:VERB") + self.poss(actor, bound=True) + _w(self.thing, "OBJECT") + _t("with:PREP") + self.obj(other) + _t("."))

    def f_help(self) -> None:
        actor = self.actor()
        other = self.other(actor)
        assert other is not None
        self.emit("help", self.subj(actor) + _t("wanted:VERB to:OTHER help:VERB") + self.obj(other) + _t("."))

    def f_lost_arc(self) -> None:
        hero = self.hero
        self.thing_known = True
        self.emit("lost", _t("but:CONJ then:TIME ,") + self.subj(hero) + _t("lost:VERB") + self.poss(hero, bound=True) + _w(self.thing, "OBJECT") + _t("."))
        if self.rng.random() < 0.5:
            self.emit("cry", self.subj(hero) + _t("was:BE sad:ADJECTIVE and:CONJ began:VERB to:OTHER cry:VERB ."))
        else:
            searcher = self.group() if self.friend is not None else self.subj(hero)
            self.emit("look_for", searcher + _t("looked:VERB for:PREP the:DET") + _w(self.thing, "OBJECT") + _t("everywhere:ADVERB ."))
        finder = self.actor()
        found = _w("it", "PRONOUN", referent=self.thing) if self.rng.random() < 0.5 else _t("the:DET") + _w(self.thing, "OBJECT")
        self.emit(
            "found_it",
            _t("at:TIME last:TIME ,") + self.subj(finder) + _t("found:VERB") + found + _t("under:PREP the:DET")
            + _t(self.rng.choice(_HIDING_SPOTS)) + _t("."),
        )

    # -- dialogue ----------------------------------------------------------------------------------------

    def utterance(self, speaker: _Character, terminal: str | None = None) -> _Utterance:
        """Something `speaker` says; "you" is the other character, so lines with "you" need one."""
        listener = self.other(speaker)
        me, my = _w("I", "PRONOUN", speaker.name), _w("my", "PRONOUN", speaker.name)
        options: list[tuple[str, Callable[[], list[_Piece]]]] = [
            ("?", lambda: _t("what:OTHER is:BE that:PRONOUN")),
            ("?", lambda: _t("can:AUX") + me + _t("go:VERB to:PREP the:DET") + _w(self.place, "PLACE")),
            ("!", lambda: me + _t("am:BE so:ADVERB") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE")),
            (".", lambda: me + _t("was:BE") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _t(", but:CONJ now:TIME")
                + _w("I", "PRONOUN", speaker.name) + _t("am:BE") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE")),
            ("!", lambda: _t("this:PRONOUN is:BE the:DET best:ADJECTIVE day:NOUN ever:ADVERB")),
            (".", lambda: me + _t("want:VERB to:OTHER") + _w(self.rng.choice(vocab.INTRANSITIVE_VERBS)[0], "VERB")),
            ("!", lambda: _t("wow:INTERJECTION , the:DET") + _w(self.rng.choice(_PLAIN_ANIMALS), "ANIMAL") + _t("is:BE so:ADVERB")
                + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE")),
            ("!", lambda: _t("this:PRONOUN will:AUX be:BE fun:NOUN")),
        ]
        if self.thing_known:
            options += [
                ("!", lambda: _w("it", "PRONOUN", self.thing) + _t("is:BE") + _w(self.rng.choice(vocab.THING_ADJECTIVES), "ADJECTIVE")),
                ("?", lambda: _t("where:OTHER is:BE") + my + _w(self.thing, "OBJECT")),
                ("!", lambda: _t("oh:INTERJECTION no:INTERJECTION !") + my + _w(self.thing, "OBJECT") + _t("is:BE broken:ADJECTIVE")),
            ]
        if listener is not None:
            you, your = _w("you", "PRONOUN", listener.name), _w("your", "PRONOUN", listener.name)
            we = _w("we", "PRONOUN", self.group_ref())
            options += [
                (".", lambda: me + _t("like:VERB") + your + _w(self.rng.choice(_PLAIN_OBJECTS), "OBJECT")),
                ("?", lambda: _t("can:AUX") + me + _t("play:VERB with:PREP") + you),
                (".", lambda: you + _t("are:BE") + my + _t("best:ADJECTIVE friend:NOUN")),
                ("!", lambda: we + _t("will:AUX be:BE friends:NOUN forever:ADVERB")),
                ("?", lambda: _t("do:AUX") + you + _t("want:VERB to:OTHER play:VERB")),
                ("!", lambda: _t("thank:VERB") + you),
                ("!", lambda: me + _t("have:AUX been:BE looking:VERB for:PREP") + you),
                (".", lambda: _t("yes:INTERJECTION ,") + me + _t("will:AUX help:VERB") + you),
                ("?", lambda: _t("can:AUX") + you + _t("help:VERB") + _w("me", "PRONOUN", speaker.name)),
                ("?", lambda: _t("will:AUX") + you + _t("be:BE") + my + _t("friend:NOUN")),
                (".", lambda: you + _t("were:BE right:ADJECTIVE")),
                ("!", lambda: we + _t("can:AUX go:VERB to:PREP the:DET") + _w(self.place, "PLACE")),
            ]
        chosen_terminal, make_line = self.rng.choice([option for option in options if terminal in (None, option[0])])
        return _Utterance(make_line(), chosen_terminal)

    def _quoted(self, line: _Utterance, final: str) -> list[_Piece]:
        return [_OPEN_QUOTE] + line.pieces + _t(final) + [_CLOSE_QUOTE]

    def f_said_before(self) -> None:
        speaker = self.actor()
        line = self.utterance(speaker)
        verb = "asked" if line.terminal == "?" else self.rng.choice(("said", "said", "shouted", "whispered"))
        self.emit("said_before", self.subj(speaker) + _w(verb, "VERB") + _t(",") + self._quoted(line, line.terminal))

    def f_said_after(self) -> None:
        speaker = self.actor()
        line = self.utterance(speaker)
        final = "," if line.terminal == "." else line.terminal
        verb = "asked" if line.terminal == "?" else self.rng.choice(vocab.SPEECH_VERBS[:1] * 2 + vocab.SPEECH_VERBS[2:])
        self.emit("said_after", self._quoted(line, final) + _w(verb, "VERB") + self.name(speaker) + _t("."))

    def f_asked(self) -> None:
        speaker = self.actor()
        line = self.utterance(speaker, terminal="?")
        self.emit("asked", self.subj(speaker) + _t("asked:VERB ,") + self._quoted(line, "?"))

    def f_shouted(self) -> None:
        speaker = self.actor()
        line = self.utterance(speaker, terminal="!")
        self.emit("shouted", self._quoted(line, "!") + _t("shouted:VERB") + self.name(speaker) + _t("."))

    def f_replied(self) -> None:
        speaker = self.actor()
        line = self.utterance(speaker)
        self.emit(
            "replied",
            self.subj(speaker) + _t("smiled:VERB and:CONJ replied:VERB ,") + self._quoted(line, line.terminal),
        )

    # -- facts -------------------------------------------------------------------------------------------

    def _fact_clause(self, fact: Fact, tense: str = "was:BE", determiner: str = "the:DET") -> list[_Piece]:
        self.facts_stated.append(fact.noun)
        return _t(determiner) + _w(fact.noun, fact.label) + _t(tense) + _w(fact.adjective, "ADJECTIVE")

    def fact_opening(self, fact: Fact) -> None:
        self.emit("fact_opening", self._fact_clause(fact) + _t("."))

    def fact_plain(self, fact: Fact) -> None:
        self.emit("fact_plain", self._fact_clause(fact) + _t("."))

    def fact_encounter(self, fact: Fact) -> None:
        actor = self.actor()
        self.emit("fact_encounter", self.subj(actor) + _encounter(fact, self.rng) + _t("."))
        self.emit("fact_plain", self._fact_clause(fact) + _t("."))

    def fact_so(self, fact: Fact) -> None:
        actor = self.actor()
        reaction = self.rng.choice(("smiled:VERB", "laughed:VERB", "clapped:VERB", "was:BE glad:ADJECTIVE", "was:BE surprised:ADJECTIVE"))
        self.emit("fact_so", self._fact_clause(fact) + _t(", so:CONJ") + self.subj(actor) + _t(reaction) + _t("."))

    def fact_and(self, fact: Fact) -> None:
        actor = self.actor()
        self.emit(
            "fact_and",
            self._fact_clause(fact) + _t("and:CONJ") + self.subj(actor) + _t("liked:VERB") + _w("it", "PRONOUN", fact.noun) + _t("."),
        )

    def fact_knew(self, fact: Fact) -> None:
        self.emit("fact_knew", _t("everyone:PRONOUN knew:VERB that:CONJ") + self._fact_clause(fact) + _t("."))

    def fact_remembered(self, fact: Fact) -> None:
        actor = self.actor()
        self.emit("fact_remembered", self.subj(actor) + _t("remembered:VERB that:CONJ") + self._fact_clause(fact) + _t("."))

    def fact_said(self, fact: Fact) -> None:
        speaker = self.actor()
        self.emit(
            "fact_said",
            self.subj(speaker) + _t("said:VERB ,") + [_OPEN_QUOTE] + self._fact_clause(fact) + _t(".") + [_CLOSE_QUOTE],
        )

    def fact_look(self, fact: Fact) -> None:
        speaker = self.actor()
        self.emit(
            "fact_look",
            [_OPEN_QUOTE] + _t("look:INTERJECTION !") + self._fact_clause(fact, tense="is:BE") + _t("!") + [_CLOSE_QUOTE]
            + _t("said:VERB") + self.name(speaker) + _t("."),
        )

    def fact_because(self, fact: Fact) -> None:
        actor = self.actor()
        self.facts_stated.append(fact.noun)
        self.emit(
            "fact_because",
            self.subj(actor) + _t("liked:VERB the:DET") + _w(fact.noun, fact.label) + _t("because:CONJ")
            + _w("it", "PRONOUN", fact.noun) + _t("was:BE") + _w(fact.adjective, "ADJECTIVE") + _t("."),
        )

    def fact_mom(self, fact: Fact) -> None:
        actor = self.actor()
        self.emit(
            "fact_mom",
            self.poss(actor) + _t("mom:NOUN said:VERB ,") + [_OPEN_QUOTE] + self._fact_clause(fact, tense="is:BE") + _t(".") + [_CLOSE_QUOTE],
        )

    def fact_attributive(self, fact: Fact) -> None:
        actor = self.actor()
        self.facts_stated.append(fact.noun)
        verb = self.rng.choice(("saw:VERB", "had:VERB", "found:VERB")) if fact.label != "NOUN" else "saw:VERB"
        self.emit(
            "fact_attributive",
            self.subj(actor) + _t(verb) + self.a((fact.adjective, "ADJECTIVE"), (fact.noun, fact.label)) + _t("."),
        )

    # -- endings -----------------------------------------------------------------------------------------

    def e_best_friends(self) -> None:
        assert self.friend is not None
        self.emit(
            "end_best_friends",
            _t("from:TIME that:TIME day:TIME on:TIME ,") + self.name(self.hero) + _t("and:CONJ") + self.name(self.friend)
            + _t("were:BE best:ADJECTIVE friends:NOUN ."),
        )

    def e_learned(self) -> None:
        self.emit("end_learned", self.subj(self.hero) + _t("learned:VERB that:CONJ") + _t(self.rng.choice(_MORALS)) + _t("."))

    def e_moral(self) -> None:
        self.emit(
            "end_moral",
            _t("the:DET moral:NOUN of:PREP the:DET story:NOUN is:BE to:OTHER always:ADVERB") + _t(self.rng.choice(_LESSONS)) + _t("."),
        )

    def e_night(self) -> None:
        self.emit("end_night", _t("that:TIME night:TIME ,") + self.subj(self.hero) + _t("slept:VERB with:PREP a:DET big:ADJECTIVE smile:NOUN ."))

    def e_happily(self) -> None:
        who = self.group() if self.friend is not None else self.name(self.hero)
        self.emit("end_happily", who + _t("lived:VERB happily:ADVERB ever:ADVERB after:ADVERB ."))

    def e_best_day(self) -> None:
        self.emit("end_best_day", _t("it:PRONOUN was:BE the:DET best:ADJECTIVE day:NOUN ever:ADVERB ."))

    def e_home(self) -> None:
        self.emit("end_home", _t("then:TIME") + self.subj(self.hero) + _t("went:VERB home:PLACE , happy:ADJECTIVE and:CONJ tired:ADJECTIVE ."))

    def e_always(self) -> None:
        hero = self.hero
        habit = self.rng.choice(("played:VERB with:PREP", "took:VERB good:ADJECTIVE care:NOUN of:PREP"))
        self.emit(
            "end_always",
            _t("from:TIME then:TIME on:TIME ,") + self.subj(hero) + _t("always:ADVERB") + _t(habit) + self.poss(hero, bound=True)
            + _w(self.thing, "OBJECT") + _t("."),
        )


# (method, weight, needs): needs lists conditions: "friend" (a friend has been introduced), "no_friend" (a
# friend is planned but not yet introduced), "thing" (the story's object has been introduced).
_OPENINGS: tuple[tuple[Callable[[_StoryWriter], None], float, str], ...] = (
    (_StoryWriter.o_there_was, 4.0, ""), (_StoryWriter.o_there_lived, 1.5, ""), (_StoryWriter.o_name_was, 1.5, ""),
    (_StoryWriter.o_went_to, 1.5, ""), (_StoryWriter.o_who_loved, 1.0, ""), (_StoryWriter.o_two_friends, 1.0, "no_friend"),
)
_OPENINGS_AFTER_FACT = tuple(option for option in _OPENINGS if option[0] in (_StoryWriter.o_name_was, _StoryWriter.o_went_to, _StoryWriter.o_who_loved))
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
    (_StoryWriter.f_replied, 1.0, "friend"),
)
_LOST_ARC_SENTENCES = 3
_FACT_FRAMES: tuple[tuple[Callable[[_StoryWriter, Fact], None], float, int], ...] = (
    # (method, weight, sentences)
    (_StoryWriter.fact_plain, 2.0, 1), (_StoryWriter.fact_encounter, 3.0, 2), (_StoryWriter.fact_so, 1.0, 1),
    (_StoryWriter.fact_and, 1.0, 1), (_StoryWriter.fact_knew, 1.0, 1), (_StoryWriter.fact_remembered, 0.7, 1),
    (_StoryWriter.fact_said, 1.0, 1), (_StoryWriter.fact_look, 1.0, 1), (_StoryWriter.fact_because, 0.8, 1),
    (_StoryWriter.fact_mom, 0.7, 1), (_StoryWriter.fact_attributive, 1.0, 1),
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
        method = _pick(rng, _MIDDLES, writer, used)
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


def token_labels(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]], text: str | None = None
) -> list[str]:
    """The label of the word each token came from.

    A token takes the label of the first span it overlaps (" turtle" -> ANIMAL; a merged '."' -> PUNCT).
    A token that overlaps no span is whitespace-only ("\\n\\n", a lone " ") and gets "SPACE"; when `text`
    is given, a token overlapping no span but holding non-whitespace characters gets "OTHER" (text that was
    never labelled). `spans` must be sorted and non-overlapping, as in a LabelledStory.
    """
    ends = [end for _, end, _ in spans]
    labels = []
    for start, end in offsets:
        index = bisect_right(ends, start)  # first span ending after the token starts
        if index < len(spans) and spans[index][0] < end:
            labels.append(spans[index][2])
        elif text is not None and text[start:end].strip():
            labels.append("OTHER")
        else:
            labels.append("SPACE")
    return labels


def label_tokens(tokenizer, story: LabelledStory) -> tuple[list[int], list[str]]:
    """(token ids, label per token) of a story under a tokenizer with `encode_with_offsets`."""
    ids, offsets = tokenizer.encode_with_offsets(story.text)
    return ids, token_labels(offsets, story.spans, story.text)


FRAME_IDS: tuple[str, ...] = (
    "there_was", "there_lived", "name_was", "went_to", "who_loved", "two_friends",
    "had_thing", "loved_thing", "go_place", "see_animal", "meet_friend", "play_together", "all_day", "feel",
    "had_been", "find", "do_thing", "count_things", "count_animals", "colour", "animals_were", "weather",
    "every_day", "wanted", "suddenly", "ask_mom", "run_home", "hug", "climb", "thought", "tomorrow", "give",
    "share", "help", "lost", "cry", "look_for", "found_it",
    "said_before", "said_after", "asked", "shouted", "replied",
    "fact_opening", "fact_plain", "fact_encounter", "fact_so", "fact_and", "fact_knew", "fact_remembered",
    "fact_said", "fact_look", "fact_because", "fact_mom", "fact_attributive",
    "end_best_friends", "end_learned", "end_moral", "end_night", "end_happily", "end_best_day", "end_home",
    "end_always",
)
