"""Labels, labelled stories and the pieces stories are written in: words and punctuation with their labels.

Labels (`LABELS`), one per word or punctuation mark:
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
"""

from __future__ import annotations

import functools
import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

LABELS: tuple[str, ...] = (
    "NAME", "PRONOUN", "NOUN", "ANIMAL", "OBJECT", "PLACE", "ADJECTIVE", "COLOUR", "NUMBER", "VERB", "BE",
    "AUX", "ADVERB", "DET", "PREP", "CONJ", "TIME", "INTERJECTION", "POSS", "QUOTE", "PUNCT", "OTHER",
)
# token_labels also returns SPACE (a whitespace-only token) and, with text given, OTHER for unlabelled text.
TOKEN_LABELS: tuple[str, ...] = LABELS + ("SPACE",)


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
    referents: (start, end, referent) for pronouns that refer (see `circuitlab.data.stories`).
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
