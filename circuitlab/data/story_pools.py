"""The story writer's word pools and stock phrases: the animals, objects and places a story may draw (fact
nouns left out where a sentence would state them without their fact), the opening times, morals and lessons,
and how characters meet a fact's noun. `circuitlab.data.story_writer` writes stories from them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import circuitlab.data.lexicon_words as lexicon_words
import circuitlab.data.vocabulary as vocab
from circuitlab.data.facts import FACT_BY_NOUN, FACTS, Fact
from circuitlab.data.story_text import _article, _Piece, _t, _w

# used for "The [noun] was ..." sentences leave them out.


def _without_fact_nouns(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(word for word in words if word not in FACT_BY_NOUN)


_PLAIN_ANIMALS = _without_fact_nouns(vocab.ANIMALS)
_PLAIN_OBJECTS = _without_fact_nouns(vocab.OBJECTS)
_PLAIN_PLACES = _without_fact_nouns(vocab.PLACES)


def _wide_pool(lemmas: Iterable[str], label: str) -> tuple[str, ...]:
    """Lexicon words that are only ever `label` (never a fact noun, never in another generator list, never
    plural-looking), so that the wider vocabulary keeps every word's label and every fact unambiguous."""
    from circuitlab.data.lexicon import lexicon

    generator_words = set(vocab.ANIMALS + vocab.OBJECTS + vocab.PLACES + vocab.NOUNS + vocab.COLOURS + vocab.ADJECTIVES)
    return tuple(sorted(
        word for word in set(lemmas)
        if lexicon().get(word) == label and word not in FACT_BY_NOUN and word not in generator_words
        and not word.endswith("s") and word not in ("inside", "outside", "space", "home", "world")
    ))


# Second clauses a plain statement may take (see _StoryWriter.emit); frame ids "<frame>+<clause>".
EXTRA_CLAUSES = ("and_felt", "so_reacted", "but_minded", "while_watched", "then_went")
_P_EXTRA_CLAUSE = 0.25

# the lexicon's wider vocabulary, for the frames that draw from it
WIDE_ANIMALS = _wide_pool(lexicon_words.ANIMALS, "ANIMAL")
# things one has "a" of: mass nouns ("a tea", "a chalk") are left out
_MASS_NOUNS = frozenset((
    "breakfast butter cardboard cheese chocolate cinnamon cloth coffee corn cream dinner dirt dough flour foil "
    "food frosting fruit glass glitter hay ink iron jam jelly juice lemonade mail meat milk moss paper pasta "
    "popcorn pudding rice rubber salad salt sauce spaghetti steam stuff sugar supper tea toast water wool yarn "
    "yogurt chalk tape"
).split())
WIDE_OBJECTS = tuple(w for w in _wide_pool(lexicon_words.OBJECTS + lexicon_words.MORE_OBJECTS, "OBJECT") if w not in _MASS_NOUNS)
WIDE_PLACES = _wide_pool(lexicon_words.PLACES, "PLACE")
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


