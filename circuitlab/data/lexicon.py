"""A lexicon of children's-story English with category labels, and a labeller for any text.

`LEXICON` maps a lower-case word form to one label of `circuitlab.data.story_text.LABELS`. It is built from
the story generator's word lists (`circuitlab.data.vocabulary`, the fact words), the lists of
`circuitlab.data.lexicon_words`, and every inflection of their nouns, verbs and adjectives
(`circuitlab.data.morphology`): several thousand forms.

`label_text(text)` labels any text word by word, as the generator labels its own stories: one span per word,
number, clitic or punctuation mark, never covering whitespace, so every non-whitespace character lies in
exactly one span. How a span gets its label:
- words are looked up lower-cased. A form listed in several categories is ambiguous without its sentence
  (this labeller does no part-of-speech tagging); it takes the first of `PRIORITY` among its categories:
  closed classes first (so "had" is AUX, "that" DET, "one" PRONOUN), then colours and numbers, then animals,
  objects and places before other nouns, nouns before verbs ("play", "walk" and "dream" are NOUN... unless
  listed only as verbs), verbs before adjectives, and adjectives before adverbs. The -ly form of an
  adjective is an ADVERB ("happily").
- a capitalised word that is not sentence-initial and is a known first name, or any capitalised word the
  lexicon does not know ("Ravi", "Maple"), is a NAME;
- another unknown word is labelled by its ending: -ly ADVERB; -ing, -ed VERB; -ful, -ous, -ish, -less,
  -able, -ive, -y ADJECTIVE; anything else NOUN (most words a list misses are nouns);
- clitics are their own spans: "'s" POSS, "n't" ADVERB, "'m"/"'re" BE, "'ll"/"'ve"/"'d" AUX ("don't" is
  "do" + "n't", "can't" is "ca" + "n't" as in the Penn Treebank);
- numbers in digits are NUMBER; double quotes (straight or curly) QUOTE; other punctuation PUNCT (a run of
  one mark, "...", is one span).
"""

from __future__ import annotations

import functools
import re

import circuitlab.data.lexicon_words as words
import circuitlab.data.vocabulary as vocab
from circuitlab.data.facts import FACTS
from circuitlab.data.morphology import adverb, inflections

PRIORITY: tuple[str, ...] = (
    "BE", "AUX", "PRONOUN", "DET", "PREP", "CONJ", "OTHER", "TIME", "COLOUR", "NUMBER", "ANIMAL", "OBJECT",
    "PLACE", "NOUN", "VERB", "ADJECTIVE", "ADVERB", "INTERJECTION",
)

_CLITICS = {"'s": "POSS", "n't": "ADVERB", "'m": "BE", "'re": "BE", "'ll": "AUX", "'ve": "AUX", "'d": "AUX"}
_QUOTES = frozenset('"“”')
_APOSTROPHES = "'’"
_TOKEN = re.compile(
    r"(?P<word>[^\W\d_]+(?:-[^\W\d_]+)*)"
    r"|(?P<number>\d+(?:[.,:]\d+)*)"
    r"|(?P<mark>([^\w\s])\4*)"
)
_CLITIC_AFTER = re.compile(r"['’](s|m|re|ll|ve|d|t)(?![^\W\d_])", re.IGNORECASE)
_SENTENCE_ENDS = frozenset(".!?")


def _add(table: dict[str, set[str]], forms, label: str) -> None:
    for form in forms:
        table.setdefault(form.lower(), set()).add(label)


@functools.lru_cache(maxsize=1)
def _categories() -> dict[str, set[str]]:
    """form -> every label it is listed under."""
    table: dict[str, set[str]] = {}
    nouns = {
        "ANIMAL": set(vocab.ANIMALS) | set(words.ANIMALS) | set(words.PROMPT_ANIMALS) | {f.noun for f in FACTS if f.label == "ANIMAL"},
        "OBJECT": set(vocab.OBJECTS) | set(words.OBJECTS) | set(words.MORE_OBJECTS) | set(words.PROMPT_OBJECTS) | {f.noun for f in FACTS if f.label == "OBJECT"},
        "PLACE": set(vocab.PLACES) | set(words.PLACES) | set(words.PROMPT_PLACES) | {f.noun for f in FACTS if f.label == "PLACE"},
        "NOUN": set(vocab.NOUNS) | set(words.NOUNS) | set(words.MORE_NOUNS) | set(words.PROMPT_NOUNS) | {f.noun for f in FACTS if f.label == "NOUN"},
    }
    for label, lemmas in nouns.items():
        for lemma in lemmas:
            _add(table, inflections(lemma, "noun"), label)
    verbs = {base for base, _ in vocab.INTRANSITIVE_VERBS + vocab.TRANSITIVE_VERBS} | set(words.VERBS) | set(words.MORE_VERBS) | set(words.PROMPT_VERBS)
    for lemma in verbs:
        _add(table, inflections(lemma, "verb"), "VERB")
    _add(table, vocab.SPEECH_VERBS, "VERB")
    adjectives = set(vocab.ADJECTIVES) | set(words.ADJECTIVES) | set(words.MORE_ADJECTIVES) | set(words.PROMPT_ADJECTIVES) | {f.adjective for f in FACTS}
    for lemma in adjectives:
        forms = inflections(lemma, "adjective")
        _add(table, [form for form in forms if form != adverb(lemma)], "ADJECTIVE")
        _add(table, [adverb(lemma)], "ADVERB")
    for label, forms in (
        ("COLOUR", set(vocab.COLOURS) | set(words.COLOURS)), ("NUMBER", set(vocab.NUMBERS) | set(words.NUMBERS)),
        ("ADVERB", words.ADVERBS + words.MORE_ADVERBS), ("BE", words.BE), ("AUX", words.AUX), ("PRONOUN", words.PRONOUNS),
        ("DET", words.DETERMINERS), ("PREP", words.PREPOSITIONS), ("CONJ", words.CONJUNCTIONS),
        ("TIME", words.TIME_WORDS), ("INTERJECTION", words.INTERJECTIONS), ("OTHER", words.OTHER),
    ):
        _add(table, forms, label)
    return table


@functools.lru_cache(maxsize=1)
def lexicon() -> dict[str, str]:
    """form -> its label (the first of `PRIORITY` among the categories it is listed under)."""
    rank = {label: index for index, label in enumerate(PRIORITY)}
    return {form: min(labels, key=rank.__getitem__) for form, labels in _categories().items()}


def ambiguous_forms() -> dict[str, tuple[str, ...]]:
    """Forms listed under more than one label, with their labels in priority order."""
    rank = {label: index for index, label in enumerate(PRIORITY)}
    return {form: tuple(sorted(labels, key=rank.__getitem__)) for form, labels in _categories().items() if len(labels) > 1}


@functools.lru_cache(maxsize=1)
def _first_names() -> frozenset[str]:
    return frozenset(name.lower() for name in vocab.FEMALE_NAMES + vocab.MALE_NAMES)


def _guess(word: str) -> str:
    lower = word.lower()
    if lower.endswith("ly"):
        return "ADVERB"
    if lower.endswith(("ing", "ed")):
        return "VERB"
    if lower.endswith(("ful", "ous", "ish", "less", "able", "ive", "y")):
        return "ADJECTIVE"
    return "NOUN"


def label_word(word: str, sentence_initial: bool) -> str:
    """The label of one word (see the module docstring for the rules)."""
    lower = word.lower()
    known = lexicon().get(lower) or lexicon().get(lower.rsplit("-", 1)[-1])
    if word[0].isupper() and lower != "i":
        if (lower in _first_names() and not sentence_initial) or known is None:
            return "NAME"
    return known or _guess(word)


def label_text(text: str) -> list[tuple[int, int, str]]:
    """(start, end, label) spans covering every non-whitespace character of `text` exactly once."""
    spans: list[tuple[int, int, str]] = []
    sentence_initial = True
    position = 0
    while (match := _TOKEN.search(text, position)) is not None:
        start, end = match.span()
        if match.group("word"):
            word = match.group("word")
            clitic = _CLITIC_AFTER.match(text, end)
            if clitic and clitic.group(1).lower() == "t" and word.lower().endswith("n") and len(word) > 1:
                spans.append((start, end - 1, label_word(word[:-1], sentence_initial)))
                spans.append((end - 1, clitic.end(), "ADVERB"))  # n't
                end = clitic.end()
            else:
                spans.append((start, end, label_word(word, sentence_initial)))
                if clitic and clitic.group(1).lower() != "t":
                    spans.append((end, clitic.end(), _CLITICS["'" + clitic.group(1).lower()]))
                    end = clitic.end()
            sentence_initial = False
        elif match.group("number"):
            spans.append((start, end, "NUMBER"))
            sentence_initial = False
        else:
            mark = match.group("mark")
            spans.append((start, end, "QUOTE" if mark[0] in _QUOTES else "PUNCT"))
            if mark[0] in _QUOTES:  # a sentence starts inside an opening quote, not after a closing one
                sentence_initial = mark[0] == "“" or (mark[0] == '"' and (start == 0 or text[start - 1].isspace()))
            elif mark[0] in _SENTENCE_ENDS:
                sentence_initial = True
        position = end
    return spans
