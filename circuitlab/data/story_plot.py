"""Dialogue, fact and ending frames of the story writer (a subclass of `circuitlab.data.story_writer`'s)."""

from __future__ import annotations

import circuitlab.data.vocabulary as vocab
from circuitlab.data.facts import Fact
from circuitlab.data.story_text import (
    _CLOSE_QUOTE,
    _OPEN_QUOTE,
    _article,
    _capitalised,
    _Piece,
    _t,
    _w,
)
from circuitlab.data.story_pools import _LESSONS, _MORALS, _PLAIN_ANIMALS, _PLAIN_OBJECTS, _PLAIN_PLACES, _encounter
from circuitlab.data.story_writer import _Character, _StoryWriter, _Utterance


class _PlotWriter(_StoryWriter):
    """The full writer: the base's state and frames plus dialogue, facts and endings."""

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

    # Facts at a distance: the noun and its adjective apart, with other words and nouns between them, so
    # that recalling the adjective at "was" means looking past the previous token. The words between never
    # hold a fact noun or a fact adjective, so no other noun is ever described by this fact's adjective.

    def _distractor_phrase(self) -> list[_Piece]:
        """A phrase after the fact noun: a relative clause, a place, a neighbour or a thing it has."""
        choice = self.rng.randrange(4)
        place = _w(self.rng.choice(_PLAIN_PLACES), "PLACE")
        if choice == 0:
            verb = self.rng.choice(("saw:VERB", "found:VERB", "met:VERB", "liked:VERB"))
            return _t("that:OTHER") + self.subj(self.actor()) + _t(verb) + _t("at:PREP the:DET") + place
        if choice == 1:
            return _t("in:PREP the:DET") + place
        if choice == 2:
            animal = self.rng.choice(_PLAIN_ANIMALS)
            return _t("next:ADVERB to:PREP the:DET") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _w(animal, "ANIMAL")
        return _t("with:PREP") + self.a((self.rng.choice(vocab.COLOURS), "COLOUR"), (self.rng.choice(_PLAIN_OBJECTS), "OBJECT"))

    def fact_distant(self, fact: Fact) -> None:
        """ "The turtle that Lily saw at the park was slow." """
        self.facts_stated.append(fact.noun)
        self.emit(
            "fact_distant",
            _t("the:DET") + _w(fact.noun, fact.label) + self._distractor_phrase() + _t("was:BE")
            + _w(fact.adjective, "ADJECTIVE") + _t("."),
        )

    def fact_later(self, fact: Fact) -> None:
        """Three sentences: the noun is met, something else happens, then the fact is recalled, by the noun
        or by "it" ("Lily saw a turtle. She was very happy. It was slow.")."""
        actor = self.actor()
        self.emit("fact_met", self.subj(actor) + _encounter(fact, self.rng) + _t("."))
        self.emit("fact_between", self.subj(actor) + _t("was:BE very:ADVERB") + _w(self.rng.choice(vocab.FEELINGS), "ADJECTIVE") + _t("."))
        self.facts_stated.append(fact.noun)
        subject = _w("it", "PRONOUN", fact.noun) if self.rng.random() < 0.5 else _t("the:DET") + _w(fact.noun, fact.label)
        adverb = self.rng.choice(((), ("very", "ADVERB"), ("so", "ADVERB"), ("really", "ADVERB")))
        self.emit(
            "fact_recalled",
            subject + _t("was:BE") + (_w(*adverb) if adverb else []) + _w(fact.adjective, "ADJECTIVE") + _t("."),
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
