"""The story writer's state (characters, the story's thing and place, who has been mentioned), how it refers
to characters (names, pronouns that are never ambiguous), and the opening and middle sentence frames.

`circuitlab.data.story_plot` adds dialogue, fact and ending frames; `circuitlab.data.stories` picks frames
and renders the story.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import circuitlab.data.vocabulary as vocab
from circuitlab.data.facts import FACT_BY_NOUN
from circuitlab.data.story_pools import (
    EXTRA_CLAUSES,
    WIDE_ANIMALS,
    WIDE_OBJECTS,
    WIDE_PLACES,
    _HIDING_SPOTS,
    _HOME_PLACES,
    _OBJECT_PRONOUN,
    _PLAIN_ANIMALS,
    _PLAIN_OBJECTS,
    _POSSESSIVE_PRONOUN,
    _P_EXTRA_CLAUSE,
    _SUBJECT_PRONOUN,
    _TIME_STARTS,
    _VERBS_IN_A_PLACE,
)
from circuitlab.data.story_text import (
    _POSSESSIVE_S,
    _article,
    _capitalised,
    _Piece,
    _t,
    _w,
)

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
        # A plain statement may go on with a second clause; the frame id records it ("find+and_felt").
        extendable = pieces[-1].text == "." and not frame_id.startswith("fact_") and all(p.label != "QUOTE" for p in pieces)
        if extendable and self.rng.random() < _P_EXTRA_CLAUSE:
            name = self.rng.choice(EXTRA_CLAUSES)
            pieces = pieces[:-1] + _t(",") + self._extra_clause(name) + pieces[-1:]
            frame_id = f"{frame_id}+{name}"
        self.sentences.append((frame_id, _capitalised(pieces)))

    def _extra_clause(self, name: str) -> list[_Piece]:
        hero = self.hero
        if name == "and_felt":
            return _t("and:CONJ") + self.subj(hero) + _t("was:BE very:ADVERB") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE")
        if name == "so_reacted":
            return _t("so:CONJ") + self.subj(hero) + _t(self.rng.choice(("smiled:VERB", "laughed:VERB", "clapped:VERB", "nodded:VERB")))
        if name == "but_minded":
            return _t("but:CONJ") + self.subj(hero) + _t("did:AUX not:ADVERB mind:VERB")
        if name == "while_watched":
            return _t("while:CONJ the:DET") + _w(vocab.plural(self.rng.choice(_PLAIN_ANIMALS)), "ANIMAL") + _t("watched:VERB")
        return _t("then:TIME") + self.subj(hero) + _t("went:VERB to:PREP the:DET") + _w(self.rng.choice(WIDE_PLACES), "PLACE")

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

    # -- frames with the lexicon's wider vocabulary and other clause orders ----------------------------

    def f_saw_near(self) -> None:
        actor, animal, place = self.actor(), self.rng.choice(WIDE_ANIMALS), self.rng.choice(WIDE_PLACES)
        self.emit(
            "saw_near",
            self.subj(actor) + _t("saw:VERB") + self.a((animal, "ANIMAL")) + _t("near:PREP the:DET") + _w(place, "PLACE") + _t("."),
        )

    def f_packed(self) -> None:
        actor = self.actor()
        first, second = self.rng.sample(WIDE_OBJECTS, 2)
        self.emit(
            "packed",
            self.subj(actor) + _t("put:VERB") + self.a((first, "OBJECT")) + _t("and:CONJ") + self.a((second, "OBJECT"))
            + _t("in:PREP") + self.poss(actor, bound=True) + _t("bag:OBJECT ."),
        )

    def f_when_got(self) -> None:
        actor, place, animal = self.actor(), self.rng.choice(WIDE_PLACES), self.rng.choice(WIDE_ANIMALS)
        clause = _t("when:CONJ") + self.subj(actor) + _t("got:VERB to:PREP the:DET") + _w(place, "PLACE") + _t(",")
        self.emit("when_got", clause + self.subj(actor, p_pronoun=0.9) + _t("saw:VERB") + self.a((animal, "ANIMAL")) + _t("."))

    def f_after_did(self) -> None:
        actor = self.actor()
        _, done = self.rng.choice(vocab.INTRANSITIVE_VERBS)
        _, then = self.rng.choice(vocab.TRANSITIVE_VERBS)
        thing = self.rng.choice(WIDE_OBJECTS)
        self.emit(
            "after_did",
            _t("after:CONJ") + self.subj(actor) + _w(done, "VERB") + _t(",") + self.subj(actor, p_pronoun=0.9)
            + _w(then, "VERB") + self.a((thing, "OBJECT")) + _t("."),
        )

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
