"""Sentence frames written as templates: questions, dialogue with the said-clause before, inside or after the
line, subordinate clauses first or last, passives, relative clauses, lists, and pronouns that refer back
across sentences. Each template is one line; the story writer fills its slots and labels every word.

Template items, separated by spaces:

    word:LABEL          a literal word with its label (LABELS of `circuitlab.data.story_text`)
    . , ! ?             punctuation
    Q< >Q               an opening and a closing double quote
    {A} {A:o} {A:p} {A:n}   the acting character as subject, object, possessive (bound to the subject: "her"),
                        or by name; the first subject mention may be a name, later ones are pronouns where unambiguous
    {B} {B:o} {B:p} {B:n}   the other character (templates using it need a friend)
    {G}                 both characters ("they" or "Lily and Max"; needs a friend)
    {thing} {it}        the story's object, and "it" referring to it once it has been mentioned
    {line:A} {line,:A}  something A says, with its own . ! ? (or with "," instead of "." before a said-clause)
    {ask:A}             a question A asks, with its "?"
    {a:S1:S2...}        "a"/"an" followed by words drawn from the slot pools S1, S2, ...
    {the:S1:S2...}      "the" followed by words from the pools
    {S}                 one word from pool S: animal, animals, object, objects, place, feeling, tadj, cadj,
                        colour, number, vi (intransitive verb, past), vi0 (base), vt (transitive, past), vt0
    {time}              a time phrase ("One day", "Later")

Literal words never include a fact noun or a fact adjective (facts are stated only by the fact frames), and a
literal adjective, determiner, number or place must come from the generator's word lists, so labels stay
those of the rest of the corpus (checked when this module is imported).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import circuitlab.data.vocabulary as vocab
from circuitlab.data.facts import FACT_ADJECTIVES, FACT_BY_NOUN
from circuitlab.data.story_text import LABELS, _CLOSE_QUOTE, _OPEN_QUOTE, _article, _Piece, _t, _w

# id | needs | template
TEMPLATES_TEXT = r"""
q_where_went | | where:OTHER did:AUX {A} want:VERB to:OTHER go:VERB ? {A} wanted:VERB to:OTHER go:VERB to:PREP the:DET {place} .
q_what_find | | what:OTHER would:AUX {A} find:VERB at:PREP the:DET {place} ?
q_who_knew | | who:OTHER knew:VERB that:CONJ {a:animal} lived:VERB in:PREP the:DET {place} ?
q_why_sad | | why:OTHER was:BE {A} so:ADVERB {feeling} ?
q_could_find | thing | could:AUX {A} find:VERB {A:p} {thing} before:CONJ lunch:NOUN ?
q_did_know | | did:AUX {A} know:VERB where:OTHER the:DET {animals} were:BE ?
q_how_got | | how:OTHER did:AUX {A} get:VERB to:PREP the:DET {place} ? {A} {vi} all:TIME the:TIME way:TIME .
q_was_it | thing | was:BE {A:p} {thing} in:PREP the:DET {place} or:CONJ at:PREP home:PLACE ?
said_mid | friend | Q< {line,:A} >Q said:VERB {A:n} . Q< {line:A} >Q
said_to | friend | {A} said:VERB to:PREP {B:o} , Q< {line:A} >Q
whispered_after | | Q< {line,:A} >Q whispered:VERB {A:n} .
called_out | | {A} called:VERB out:ADVERB , Q< {line:A} >Q
ask_back | friend | Q< {ask:A} >Q asked:VERB {A:n} . {B:n} smiled:VERB .
told_that | friend | {A} told:VERB {B:o} that:CONJ the:DET {place} was:BE {tadj} .
yelled_after | | Q< {line,:A} >Q yelled:VERB {A:n} , and:CONJ {A} ran:VERB to:PREP the:DET {place} .
said_softly | | {A} said:VERB softly:ADVERB , Q< {line:A} >Q
answered | friend | {A} answered:VERB , Q< {line:A} >Q
laughed_said | | Q< {line,:A} >Q said:VERB {A:n} with:PREP a:DET smile:NOUN .
because_tired | | because:CONJ {A} was:BE {feeling} , {A} sat:VERB down:ADVERB under:PREP a:DET tree:NOUN .
because_last | | {A} {vi} in:PREP the:DET {place} because:CONJ {A} felt:VERB {feeling} .
if_then | | if:CONJ {A} found:VERB {a:object} , {A} would:AUX show:VERB {A:p} mom:NOUN .
before_left | | before:CONJ {A} left:VERB the:DET {place} , {A} picked:VERB up:ADVERB {a:tadj:object} .
after_ate | | after:CONJ {A} ate:VERB lunch:NOUN , {A} {vi} for:TIME a:TIME while:TIME .
while_waited | | while:CONJ {A} waited:VERB , {a:animal} walked:VERB by:ADVERB .
while_played | friend | while:CONJ {A} {vi} , {B} watched:VERB from:PREP the:DET {place} .
until_dark | | {A} {vi} until:CONJ the:DET sky:NOUN was:BE {colour} .
as_soon_as | | as:CONJ soon:ADVERB as:CONJ {A} saw:VERB the:DET {animals} , {A} smiled:VERB .
even_though | | even:ADVERB though:CONJ {A} was:BE {feeling} , {A} went:VERB to:PREP the:DET {place} .
although | | although:CONJ the:DET {object} was:BE {tadj} , {A} liked:VERB it:PRONOUN .
so_that | | {A} ran:VERB to:PREP the:DET {place} so:CONJ that:CONJ {A} could:AUX see:VERB the:DET {animals} .
when_saw_it | thing | when:CONJ {A} saw:VERB {A:p} {thing} , {A} was:BE {feeling} .
once_there | | once:CONJ {A} got:VERB to:PREP the:DET {place} , {A} looked:VERB around:ADVERB .
passive_found | | {a:tadj:object} was:BE found:VERB by:PREP {A:n} near:PREP the:DET {place} .
passive_made | | the:DET {object} was:BE made:VERB by:PREP {A:p} dad:NOUN .
passive_given | friend | {A} was:BE given:VERB {a:colour:object} by:PREP {B:n} .
passive_seen | | the:DET {animals} were:BE seen:VERB in:PREP the:DET {place} .
passive_thing | thing | {A:p} {thing} was:BE kept:VERB in:PREP {a:object} .
passive_hidden | | {a:object} had:AUX been:BE hidden:VERB under:PREP the:DET bed:OBJECT .
passive_carried | | the:DET {objects} were:BE carried:VERB to:PREP the:DET {place} .
passive_helped | friend | {A} was:BE helped:VERB by:PREP {B:n} .
rel_that_found | | the:DET {object} that:CONJ {A} found:VERB was:BE {tadj} .
rel_who_lived | | {A} met:VERB {a:animal} who:OTHER lived:VERB near:PREP the:DET {place} .
rel_which | | {A} liked:VERB the:DET {place} , which:PRONOUN was:BE {tadj} .
rel_whose | | {A} saw:VERB {a:animal} whose:PRONOUN home:PLACE was:BE the:DET {place} .
rel_where | | {A} went:VERB to:PREP the:DET {place} where:OTHER the:DET {animals} {vi} .
rel_thing | thing | the:DET {thing} that:CONJ {A} loved:VERB was:BE {colour} .
list_three | | {A} saw:VERB {a:animal} , {a:animal} and:CONJ {a:animal} .
list_packed | | {A} packed:VERB {a:object} , {a:object} and:CONJ {a:object} .
list_colours | | the:DET {objects} were:BE {colour} , {colour} and:CONJ {colour} .
list_verbs | | {A} {vi} , {vi} and:CONJ {vi} all:TIME day:TIME .
list_places | | {A} walked:VERB past:PREP the:DET {place} , the:DET {place} and:CONJ the:DET {place} .
list_feel | | {A} was:BE {feeling} , {feeling} and:CONJ a:DET little:ADJECTIVE {feeling} .
pro_later | thing | {A} put:VERB {A:p} {thing} on:PREP the:DET table:OBJECT . later:TIME , {A} took:VERB {it} to:PREP the:DET {place} .
pro_back | | {A} looked:VERB at:PREP {a:tadj:object} for:TIME a:TIME while:TIME . then:TIME {A} put:VERB it:PRONOUN down:ADVERB .
pro_her_friend | friend | {A} waited:VERB for:PREP {B:o} at:PREP the:DET {place} .
pro_gave_back | friend | {A} gave:VERB {B:o} {A:p} {object} , and:CONJ {B} said:VERB thank:VERB you:PRONOUN .
pro_each_other | friend | {G} smiled:VERB at:PREP each:DET other:PRONOUN .
pro_group_went | friend | {G} went:VERB to:PREP the:DET {place} together:ADVERB .
pro_group_sat | friend | {G} sat:VERB by:PREP the:DET {place} and:CONJ {vi} .
pro_it_again | thing | {A} could:AUX not:ADVERB stop:VERB looking:VERB at:PREP {A:p} {thing} .
neg_not | | {A} did:AUX not:ADVERB want:VERB to:OTHER {vi0} .
neg_never | | {A} had:AUX never:ADVERB seen:VERB {a:animal} before:ADVERB .
neg_nobody | | nobody:PRONOUN knew:VERB where:OTHER the:DET {object} was:BE .
neg_could_not | | {A} could:AUX not:ADVERB find:VERB {A:p} {object} anywhere:ADVERB .
neg_nobody_there | | nobody:PRONOUN was:BE at:PREP the:DET {place} , so:CONJ {A} {vi} alone:ADVERB .
comp_more | | {A} was:BE more:ADVERB {feeling} than:CONJ ever:ADVERB .
comp_contrast | | the:DET {animal} was:BE {feeling} , but:CONJ the:DET {animal} was:BE {feeling} .
comp_best | | the:DET {place} was:BE {A:p} favorite:ADJECTIVE place:NOUN .
mod_could | | {A} could:AUX {vi0} all:TIME day:TIME .
mod_should | | {A} knew:VERB {A} should:AUX go:VERB home:PLACE soon:ADVERB .
mod_might | | maybe:ADVERB the:DET {animals} would:AUX come:VERB back:ADVERB .
mod_must | thing | {A} had:AUX to:OTHER find:VERB {A:p} {thing} .
mod_will | | tomorrow:TIME , {A} will:AUX go:VERB to:PREP the:DET {place} .
tense_is | | is:BE {A} {feeling} today:TIME ? yes:INTERJECTION , {A} is:BE .
tense_are | | the:DET {animals} are:BE {feeling} today:TIME .
tense_am | | Q< I:PRONOUN am:BE {feeling} , >Q thought:VERB {A:n} .
tense_was_ing | | {A} was:BE {vi_ing} when:CONJ {A} heard:VERB a:DET noise:NOUN .
tense_were_ing | | the:DET {animals} were:BE {vi_ing} in:PREP the:DET {place} .
tense_had_ed | | {A} had:AUX already:ADVERB {vt_pp} the:DET {object} .
tense_has | | {A} has:VERB {a:colour:object} at:PREP home:PLACE .
tense_will_be | | {A} will:AUX be:BE {feeling} tomorrow:TIME .
adv_slowly | | slowly:ADVERB , {A} walked:VERB to:PREP the:DET {place} .
adv_carefully | | {A} carefully:ADVERB picked:VERB up:ADVERB the:DET {object} .
adv_quickly | | {A} quickly:ADVERB ran:VERB to:PREP the:DET {place} .
adv_quietly | | quietly:ADVERB , {A} opened:VERB the:DET {object} .
adv_happily | | {A} happily:ADVERB {vi} with:PREP {a:animal} .
adv_luckily | | luckily:ADVERB , the:DET {object} was:BE not:ADVERB broken:ADJECTIVE .
adv_nowhere | | out:ADVERB of:PREP nowhere:ADVERB , {a:animal} jumped:VERB onto:PREP the:DET {object} .
adv_finally | thing | finally:ADVERB , {A} found:VERB {A:p} {thing} .
time_morning | | in:TIME the:TIME morning:TIME , {A} {vi} in:PREP the:DET {place} .
time_evening | | in:TIME the:TIME evening:TIME , {A} sat:VERB by:PREP the:DET {place} .
time_later | | a:TIME little:TIME later:TIME , {A} saw:VERB {a:animal} .
time_after | | after:TIME a:TIME while:TIME , {A} felt:VERB {feeling} .
time_yesterday | | yesterday:TIME , {A} had:VERB {a:tadj:object} .
time_every | | every:TIME morning:TIME , {A} fed:VERB the:DET {animals} .
time_weekend | | on:TIME the:TIME weekend:TIME , {A} went:VERB to:PREP the:DET {place} .
time_long | | for:TIME a:TIME while:TIME , {A} just:ADVERB {vi} .
feel_felt | | {A} felt:VERB {feeling} and:CONJ {feeling} .
feel_seemed | | the:DET {animal} seemed:VERB {feeling} .
feel_looked | | {A} looked:VERB {feeling} .
feel_got | | {A} got:VERB {feeling} when:CONJ the:DET {animals} ran:VERB away:ADVERB .
feel_made | friend | the:DET {object} made:VERB {B:o} {feeling} .
feel_because | | {A} was:BE {feeling} because:CONJ {A} lost:VERB {A:p} {object} .
act_tried | | {A} tried:VERB to:OTHER {vt0} the:DET {object} .
act_decided | | {A} decided:VERB to:OTHER {vi0} in:PREP the:DET {place} .
act_began | | {A} began:VERB to:OTHER {vi0} .
act_forgot | | {A} forgot:VERB {A:p} {object} at:PREP the:DET {place} .
act_remembered | thing | {A} remembered:VERB where:OTHER {A} had:AUX left:VERB {A:p} {thing} .
act_hoped | | {A} hoped:VERB to:OTHER see:VERB {a:animal} .
act_wished | | {A} wished:VERB for:PREP {a:colour:object} .
act_noticed | | {A} noticed:VERB {a:tadj:object} on:PREP the:DET floor:NOUN .
act_wondered | | {A} wondered:VERB what:OTHER was:BE inside:PREP the:DET {object} .
act_hurried | | {A} hurried:VERB to:PREP the:DET {place} .
act_built | | {A} built:VERB {a:tadj:object} out:PREP of:PREP {objects} .
act_drew | | {A} drew:VERB {a:colour:animal} .
act_fed | | {A} fed:VERB the:DET {animals} .
act_washed | | {A} washed:VERB the:DET {object} in:PREP the:DET {place} .
act_fixed | friend | {A} fixed:VERB {B:p} {object} .
act_showed | friend | {A} showed:VERB {B:o} {a:tadj:object} .
act_asked_for | friend | {A} asked:VERB {B:o} for:PREP {a:object} .
act_followed | | {A} followed:VERB the:DET {animal} to:PREP the:DET {place} .
act_chased | | {a:animal} chased:VERB {a:animal} around:PREP the:DET {place} .
act_looked_under | | {A} looked:VERB under:PREP the:DET {object} .
act_listened | | {A} listened:VERB to:PREP the:DET {animals} .
act_counted | | {A} counted:VERB {number} {objects} .
act_sang_to | | {A} sang:VERB a:DET song:NOUN to:PREP the:DET {animals} .
act_painted | | {A} painted:VERB the:DET {object} {colour} .
act_splashed | | {A} splashed:VERB in:PREP the:DET {place} .
act_took_home | | {A} took:VERB the:DET {animal} home:PLACE .
act_gave_to | friend | {A} gave:VERB the:DET {object} to:PREP {B:o} .
act_made_for | friend | {A} made:VERB {a:object} for:PREP {B:o} .
act_waved | friend | {A} waved:VERB at:PREP {B:o} .
act_called | friend | {A} called:VERB {B:o} to:OTHER come:VERB and:CONJ see:VERB .
act_played_with | | {A} played:VERB with:PREP {a:cadj:animal} .
act_hid | | {A} hid:VERB behind:PREP the:DET {object} .
act_jumped_over | | {A} jumped:VERB over:PREP the:DET {object} .
act_sat_on | | {A} sat:VERB on:PREP the:DET {object} and:CONJ {vi} .
desc_had | | the:DET {animal} had:VERB {a:colour:object} .
desc_there_were | | there:OTHER were:BE {number} {animals} in:PREP the:DET {place} .
desc_there_was | | there:OTHER was:BE {a:tadj:object} in:PREP the:DET {place} .
desc_place | | the:DET {place} was:BE {tadj} and:CONJ {colour} .
desc_it_was | | it:PRONOUN was:BE {a:tadj:place} .
desc_looked_like | | the:DET {object} looked:VERB like:PREP {a:animal} .
desc_belonged | friend | the:DET {object} belonged:VERB to:PREP {B:n} .
desc_lived | | {a:cadj:animal} lived:VERB in:PREP the:DET {place} .
desc_smelled | | the:DET {place} smelled:VERB {tadj} .
desc_thing_colour | thing | {A:p} {thing} was:BE {colour} and:CONJ {tadj} .
want_wanted | friend | {A} wanted:VERB {B:o} to:OTHER {vi0} too:ADVERB .
want_let | friend | {A} let:VERB {B:o} {vt0} the:DET {object} .
want_help_find | friend | {A} helped:VERB {B:o} find:VERB {a:object} .
want_asked_to | friend | {A} asked:VERB {B:o} to:OTHER {vi0} .
want_would_like | | {A} would:AUX like:VERB {a:colour:object} .
cause_so | | the:DET {object} was:BE {tadj} , so:CONJ {A} took:VERB it:PRONOUN home:PLACE .
cause_but | | {A} wanted:VERB to:OTHER {vi0} , but:CONJ {A} had:AUX to:OTHER go:VERB home:PLACE .
cause_or | | {A} could:AUX {vi0} or:CONJ {vi0} .
cause_then | | {A} {vi} . then:TIME {A} {vi} .
cause_and_then | | {A} {vi} , and:CONJ then:TIME {A} went:VERB home:PLACE .
cause_first | | first:ADVERB , {A} {vi} . then:TIME , {A} {vi} .
cause_instead | | instead:ADVERB of:PREP {vi_ing} , {A} {vi} .
cause_not_only | | {A} {vi} and:CONJ {vi} , too:ADVERB .
exclaim_what | | what:OTHER {a:tadj:place} it:PRONOUN was:BE !
exclaim_how | | how:OTHER {feeling} {A} was:BE !
exclaim_wow | | wow:INTERJECTION , the:DET {animals} were:BE everywhere:ADVERB !
exclaim_oh | | oh:INTERJECTION , {A} had:AUX forgotten:VERB {A:p} {object} !
exclaim_look | | look:INTERJECTION , {a:animal} !
""".strip()


@dataclass(frozen=True)
class TemplateFrame:
    """One template frame; calling it with a writer emits its sentence(s)."""

    frame_id: str
    needs: str
    items: tuple[str, ...]

    def __call__(self, writer) -> None:
        render_template(writer, self)

    @property
    def n_sentences(self) -> int:
        """Sentences it emits: terminals outside quotes, plus a last sentence that ends inside a quote."""
        count, quoted = 0, False
        for item in self.items:
            if item in ("Q<", ">Q"):
                quoted = item == "Q<"
            elif item in (".", "!", "?") and not quoted:
                count += 1
        return count + (self.items[-1] not in (".", "!", "?"))

    def __repr__(self) -> str:
        return f"TemplateFrame({self.frame_id!r})"


_SLOT = re.compile(r"^\{([^}]+)\}$")
_POOL_LABELS = {
    "animal": "ANIMAL", "animals": "ANIMAL", "object": "OBJECT", "objects": "OBJECT", "place": "PLACE",
    "feeling": "ADJECTIVE", "tadj": "ADJECTIVE", "cadj": "ADJECTIVE", "colour": "COLOUR", "number": "NUMBER",
    "vi": "VERB", "vi0": "VERB", "vi_ing": "VERB", "vt": "VERB", "vt0": "VERB", "vt_pp": "VERB",
}
# past participles and -ing forms of the generator's verbs (irregular ones spelled out)
_PARTICIPLES = {
    "find": "found", "like": "liked", "want": "wanted", "take": "taken", "hold": "held", "hug": "hugged",
    "throw": "thrown", "catch": "caught", "kick": "kicked", "push": "pushed", "pull": "pulled", "carry": "carried",
    "fix": "fixed", "open": "opened", "clean": "cleaned", "wash": "washed", "build": "built", "make": "made",
    "drop": "dropped", "buy": "bought", "pick": "picked", "touch": "touched", "watch": "watched", "see": "seen",
    "love": "loved", "share": "shared", "keep": "kept", "hide": "hidden", "show": "shown", "paint": "painted",
}
_ING = {
    "play": "playing", "run": "running", "jump": "jumping", "dance": "dancing", "sing": "singing",
    "swim": "swimming", "walk": "walking", "laugh": "laughing", "hop": "hopping", "skip": "skipping",
    "draw": "drawing", "read": "reading", "paint": "painting", "explore": "exploring", "bake": "baking",
    "rest": "resting", "sleep": "sleeping", "wait": "waiting", "clap": "clapping", "splash": "splashing",
}
# "hop the ball" does not read; transitive slots take verbs whose object may be any thing
_TRANSITIVE = tuple(pair for pair in vocab.TRANSITIVE_VERBS if pair[0] not in ("see", "love", "like", "want", "share"))


def _pools():
    from circuitlab.data.story_pools import (
        _PLAIN_ANIMALS,
        _PLAIN_OBJECTS,
        _PLAIN_PLACES,
        WIDE_ANIMALS,
        WIDE_OBJECTS,
        WIDE_PLACES,
    )

    return {
        "animal": _PLAIN_ANIMALS + WIDE_ANIMALS,
        "animals": tuple(vocab.plural(a) for a in _PLAIN_ANIMALS),
        "object": _PLAIN_OBJECTS + WIDE_OBJECTS,
        "objects": tuple(vocab.plural(o) for o in _PLAIN_OBJECTS),
        "place": _PLAIN_PLACES + WIDE_PLACES,
        "feeling": vocab.FEELINGS, "tadj": vocab.THING_ADJECTIVES, "cadj": vocab.CHARACTER_ADJECTIVES,
        "colour": vocab.COLOURS, "number": vocab.NUMBERS,
        "vi": tuple(past for _, past in vocab.INTRANSITIVE_VERBS), "vi0": tuple(base for base, _ in vocab.INTRANSITIVE_VERBS),
        "vi_ing": tuple(_ING[base] for base, _ in vocab.INTRANSITIVE_VERBS),
        "vt": tuple(past for _, past in _TRANSITIVE), "vt0": tuple(base for base, _ in _TRANSITIVE),
        "vt_pp": tuple(_PARTICIPLES[base] for base, _ in _TRANSITIVE),
    }


def _draw(writer, pool: str) -> list[_Piece]:
    if pool not in _POOL_LABELS:
        raise ValueError(f"unknown template pool {pool!r}; known: {', '.join(_POOL_LABELS)}")
    return _w(writer.rng.choice(_pools_cached()[pool]), _POOL_LABELS[pool])


_POOLS: dict | None = None


def _pools_cached() -> dict:
    global _POOLS
    if _POOLS is None:
        _POOLS = _pools()
    return _POOLS


def _utterance(writer, speaker, kind: str) -> list[_Piece]:
    terminal = "?" if kind == "ask" else None
    line = writer.utterance(speaker, terminal)
    final = line.terminal
    if kind == "line," and final == ".":
        final = ","
    return line.pieces + _t(final)


def render_template(writer, frame: TemplateFrame) -> None:
    """Fill the template's slots from the writer's state and emit its sentence(s) ("." "!" "?" end one)."""
    actor = writer.actor()
    other = writer.other(actor)
    subject_seen = {"A": False, "B": False}
    pieces: list[_Piece] = []
    sentences: list[list[_Piece]] = []

    def person(key: str):
        character = actor if key == "A" else other
        if character is None:
            raise ValueError(f"template {frame.frame_id}: {{{key}}} needs a friend (declare needs 'friend')")
        return character

    for item in frame.items:
        slot = _SLOT.match(item)
        if item == "Q<":
            pieces.append(_OPEN_QUOTE)
        elif item == ">Q":
            pieces.append(_CLOSE_QUOTE)
        elif slot is None:
            pieces += _t(item)
            if item in (".", "!", "?") and not _inside_quote(pieces):
                sentences.append(pieces)
                pieces = []
            continue
        else:
            name = slot.group(1)
            head, _, rest = name.partition(":")
            if head in ("A", "B"):
                character = person(head)
                if rest == "":
                    # a second mention in one sentence is a pronoun whenever one is unambiguous ("Lily knew she ...")
                    pieces += writer.subj(character, p_pronoun=1.0 if subject_seen[head] else 0.55)
                    subject_seen[head] = True
                elif rest == "o":
                    pieces += writer.obj(character)
                elif rest == "p":
                    # "her" binds to the clause's subject only once A is that subject
                    pieces += writer.poss(character, bound=head == "A" and subject_seen["A"])
                elif rest == "n":
                    pieces += writer.name(character)
                else:
                    raise ValueError(f"template {frame.frame_id}: unknown form {{{name}}}")
            elif head == "G":
                pieces += writer.group()
            elif head == "thing":
                writer.thing_known = True
                pieces += _w(writer.thing, "OBJECT")
            elif head == "it":
                pieces += _w("it", "PRONOUN", referent=writer.thing)
            elif head in ("line", "line,", "ask"):
                pieces += _utterance(writer, person(rest), head)
            elif head in ("a", "the"):
                words = [_draw(writer, pool) for pool in rest.split(":")]
                pieces += (_article(words[0][0].text) if head == "a" else _w("the", "DET")) + [p for w in words for p in w]
            elif head == "time":
                pieces += writer.time_start()
            else:
                pieces += _draw(writer, head)
    if pieces:
        sentences.append(pieces)
    for sentence in sentences:
        writer.emit(frame.frame_id, sentence)


def _inside_quote(pieces: list[_Piece]) -> bool:
    return sum(piece.label == "QUOTE" for piece in pieces) % 2 == 1


def _parse(text: str) -> tuple[TemplateFrame, ...]:
    frames = []
    for line in text.splitlines():
        frame_id, needs, template = (part.strip() for part in line.split("|"))
        frames.append(TemplateFrame(frame_id, needs, tuple(template.split())))
    return tuple(frames)


def _check(frames: tuple[TemplateFrame, ...]) -> None:
    """Literal words keep the corpus's labels: no fact word, and listed labels only from their lists."""
    listed = {
        "ADJECTIVE": set(vocab.ADJECTIVES), "COLOUR": set(vocab.COLOURS), "NUMBER": set(vocab.NUMBERS),
        "DET": {"the", "a", "an", "each"}, "BE": {"is", "am", "are", "was", "were", "be", "been", "being"},
        "PLACE": set(vocab.PLACES) | {"home"}, "OBJECT": set(vocab.OBJECTS), "ANIMAL": set(vocab.ANIMALS),
    }
    reserved = set(FACT_BY_NOUN) | set(FACT_ADJECTIVES)
    ids = [frame.frame_id for frame in frames]
    if len(ids) != len(set(ids)):
        raise ValueError(f"template frame ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    for frame in frames:
        text = " ".join(frame.items)
        if ("{B" in text or "{G}" in text) and "friend" not in frame.needs.split():
            raise ValueError(f"template {frame.frame_id} uses the other character but does not need 'friend'")
        if ("{thing}" in text or "{it}" in text) and "thing" not in frame.needs.split():
            raise ValueError(f"template {frame.frame_id} uses the story's thing but does not need 'thing'")
        for item in frame.items:
            if item in ("Q<", ">Q", ".", ",", "!", "?") or _SLOT.match(item):
                continue
            word, _, label = item.rpartition(":")
            if label not in LABELS or not word:
                raise ValueError(f"template {frame.frame_id}: bad item {item!r}")
            if word.lower() in reserved:
                raise ValueError(f"template {frame.frame_id}: {word!r} is a fact word")
            if label in listed and word.lower() not in listed[label]:
                raise ValueError(f"template {frame.frame_id}: {word!r} is not in the {label} word list")
            if label == "PRONOUN" and word.lower() in ("he", "she", "him", "his", "her", "they", "them", "their", "we", "us", "our"):
                raise ValueError(f"template {frame.frame_id}: character pronouns come from slots ({word!r})")


TEMPLATE_FRAMES: tuple[TemplateFrame, ...] = _parse(TEMPLATES_TEXT)
_check(TEMPLATE_FRAMES)
TEMPLATE_FRAME_IDS: tuple[str, ...] = tuple(frame.frame_id for frame in TEMPLATE_FRAMES)
# frames whose sentences hold a quoted line
TEMPLATE_DIALOGUE_IDS: frozenset[str] = frozenset(frame.frame_id for frame in TEMPLATE_FRAMES if "Q<" in frame.items)
