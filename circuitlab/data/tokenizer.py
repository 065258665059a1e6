"""Byte-level BPE tokenizer (Hugging Face `tokenizers`) with one special token, the document separator.

Byte-level: every string round-trips (`decode(encode(text)) == text`), whatever its characters. Words are
pre-split GPT-2 style, so a word keeps its leading space (" turtle") and the same word is one token or the
same few tokens wherever it appears. `encode` adds no special tokens; "<|endoftext|>" (`eos_id`) separates
documents when packing (`circuitlab.data.loaders.pack_sequences`) and doubles as a beginning-of-text token.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from circuitlab.atomic import atomic_write_text
from circuitlab.errors import UserError

EOS_TOKEN = "<|endoftext|>"
MIN_VOCAB_SIZE = 257  # the 256 byte tokens and the separator


def _byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte -> printable-character map used by the ByteLevel pre-tokenizer."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    characters = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {chr(character): byte for byte, character in zip(printable, characters)}


_BYTE_DECODER = _byte_decoder()


class CircuitTokenizer:
    """A trained byte-level BPE tokenizer; see the module docstring."""

    def __init__(self, tokenizer) -> None:
        eos_id = tokenizer.token_to_id(EOS_TOKEN)
        if eos_id is None:
            raise UserError(
                f"this tokenizer has no {EOS_TOKEN!r} token; circuitlab tokenizers need it as the document "
                "separator (train one with circuitlab.data.train_tokenizer or `circuitlab tokenizer`)"
            )
        self._tokenizer = tokenizer
        self._eos_id = eos_id

    # -- persistence -------------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> CircuitTokenizer:
        from tokenizers import Tokenizer

        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no tokenizer file (expected a tokenizer.json written by CircuitTokenizer.save)")
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception on malformed JSON
            raise UserError(f"{path} is not a Hugging Face tokenizer.json: {error}") from None
        return cls(tokenizer)

    @classmethod
    def from_str(cls, json_text: str) -> CircuitTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(json_text))

    def to_str(self) -> str:
        return self._tokenizer.to_str()

    def save(self, path: str | os.PathLike) -> Path:
        """Write tokenizer.json (a folder path gets `folder/tokenizer.json`)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        return atomic_write_text(path, self.to_str())

    def hash(self) -> str:
        """sha256 hex of the JSON serialisation: equal hashes, equal tokenization."""
        return hashlib.sha256(self.to_str().encode("utf-8")).hexdigest()

    # -- vocabulary --------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def eos_id(self) -> int:
        return self._eos_id

    @property
    def eos_token(self) -> str:
        return EOS_TOKEN

    def check_model_vocab(self, d_vocab: int) -> None:
        if self.vocab_size != d_vocab:
            raise UserError(
                f"tokenizer vocab {self.vocab_size} != model d_vocab {d_vocab} "
                "(was this checkpoint trained with another tokenizer?)"
            )

    def token_str(self, token_id: int) -> str:
        """Readable text of one token: " turtle" for 'Ġturtle'; bytes that are not whole UTF-8 characters
        show as escapes ("\\xe6")."""
        token = self._tokenizer.id_to_token(int(token_id))
        if token is None:
            raise UserError(f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})")
        if token == EOS_TOKEN:
            return token
        return bytes(_BYTE_DECODER[character] for character in token).decode("utf-8", errors="backslashreplace")

    def id_to_token(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(int(token_id))

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    # -- encoding ----------------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and (start, end) character offsets into `text` (a token holding part of a multi-byte
        character covers that whole character)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, [tuple(offset) for offset in encoding.offsets]

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(token_id) for token_id in ids]
        bad = [token_id for token_id in ids if not 0 <= token_id < self.vocab_size]
        if bad:
            raise UserError(f"token ids {bad[:5]} are outside the vocabulary (0..{self.vocab_size - 1})")
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def __repr__(self) -> str:
        return f"CircuitTokenizer(vocab_size={self.vocab_size}, eos_id={self.eos_id}, hash={self.hash()[:12]})"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096, show_progress: bool = True) -> CircuitTokenizer:
    """Train a byte-level BPE on `texts`; the vocabulary is at most `vocab_size` (fewer if the corpus runs
    out of pairs to merge). "<|endoftext|>" is id 0, the 256 bytes follow, then the merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCAB_SIZE:
        raise UserError(f"vocab_size {vocab_size} is too small: need at least {MIN_VOCAB_SIZE} (256 bytes + {EOS_TOKEN})")
    n_texts = 0

    def counted(iterable: Iterable[str]) -> Iterable[str]:
        nonlocal n_texts
        for text in iterable:
            if not isinstance(text, str):
                raise TypeError(f"train_tokenizer needs strings; got {type(text).__name__}")
            n_texts += 1
            yield text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(counted(texts), trainer=trainer)
    if n_texts == 0:
        raise UserError("cannot train a tokenizer on an empty corpus")
    return CircuitTokenizer(tokenizer)


def word_token_share(tokenizer: CircuitTokenizer, texts: Iterable[str]) -> tuple[float, int]:
    """(share of word occurrences that are one token, number of word occurrences) over `texts`.

    A word is a run of ASCII letters ("Lily's" is "Lily" and "s") with the space before it, if any; it is
    whole when exactly one token overlaps it (" turtle"; a lone " " token before "turtle" makes two)."""
    import re
    from bisect import bisect_left, bisect_right

    whole = total = 0
    for text in texts:
        _, offsets = tokenizer.encode_with_offsets(text)
        starts = [start for start, _ in offsets]
        ends = [end for _, end in offsets]
        for match in re.finditer(r"[A-Za-z]+", text):
            start = match.start() - (match.start() > 0 and text[match.start() - 1] == " ")
            first = bisect_right(ends, start)  # first token ending after the word starts
            last = bisect_left(starts, match.end())  # tokens before this one start inside the word
            whole += last - first == 1
            total += 1
    return (whole / total if total else 0.0), total
