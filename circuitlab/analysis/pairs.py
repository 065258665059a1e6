"""Patching pairs: `PatchPair`, and pairs written as text: the one pair format of `circuitlab patch --pairs`, `circuitlab demo --pairs`,
`nie_grid` and the dashboard's patching page.

A pairs file is a JSON list of objects:

    [{"clean": "The turtle was", "patch": "The rabbit was",
      "clean_answer": "slow", "patch_answer": "fast",
      "roles": {"noun": [2, 2]}, "name": "turtle->rabbit"}]

- clean, patch: the clean and the counterfactual prompt. Each is tokenized with the end-of-text token in front
  (what precedes a story in training), so token position 0 is that token and the prompt's words start at 1.
- clean_answer, patch_answer: the answers, one token each under the model's tokenizer (a word is tried with a
  leading space first, as it follows a space in running text). m(x) = logit(clean_answer) - logit(patch_answer)
  is read at the prompt's last token.
- roles (optional): named positions to patch, {"role": [clean position, patch position]}; "final" (the last
  tokens) is always there, and "all" patches every position when the prompts have the same length.
  noun_position / final_position (and patch_noun_position / patch_final_position when the counterfactual's
  differ) are the short form of the roles "noun" and "final".
- name (optional): a label for tables and figures.

Pairs may also be given as token ids (clean_tokens, patch_tokens, clean_answer_id, patch_answer_id, with
noun_position / final_position and their patch_ forms), as `circuitlab.data.facts.build_fact_pairs` makes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError

TEXT_KEYS = ("clean", "patch", "clean_answer", "patch_answer")
POSITION_KEYS = ("noun_position", "final_position", "patch_noun_position", "patch_final_position")
OPTIONAL_KEYS = ("roles", "name", "alignment", *POSITION_KEYS)
TOKEN_KEYS = ("clean_tokens", "patch_tokens", "clean_answer_id", "patch_answer_id")
TOKEN_OPTIONAL_KEYS = ("noun_position", "final_position", "patch_noun_position", "patch_final_position",
                       "roles", "alignment", "name", "clean_noun", "patch_noun")
# A pair whose two prompts give nearly the same m(x) makes NIE a ratio of two small numbers (0.14 nats apart
# gives NIEs above 1 from noise). Pairs with |m(x_patch) - m(x_clean)| below this many nats are reported and
# left out of every mean (nie_grid's `min_difference`, `circuitlab patch --min-difference`).
MIN_LOGIT_DIFFERENCE = 0.5
EXAMPLE = ('{"clean": "The turtle was", "patch": "The rabbit was", "clean_answer": "slow", "patch_answer": "fast", '
           '"roles": {"noun": [2, 2]}}')


class PairFormatError(UserError):
    """A patching pair that does not follow the documented format."""


@dataclass(frozen=True)
class PatchPair:
    """A clean prompt and a counterfactual prompt, their answers, and where each position role sits.

    `roles` maps a role name to (clean position, patch position); "final" is where m(x) is read and
    defaults to the last token of each prompt. `alignment` lists (clean position, patch position) pairs
    that make up the role "all" when the prompts have different lengths.
    """

    clean_tokens: tuple[int, ...]
    patch_tokens: tuple[int, ...]
    clean_answer_id: int
    patch_answer_id: int
    roles: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    alignment: tuple[tuple[int, int], ...] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "clean_tokens", tuple(int(t) for t in self.clean_tokens))
        object.__setattr__(self, "patch_tokens", tuple(int(t) for t in self.patch_tokens))
        if not self.clean_tokens or not self.patch_tokens:
            raise UserError("a patch pair needs non-empty clean and patch token lists")
        roles = {name: (int(c), int(p)) for name, (c, p) in dict(self.roles).items()}
        roles.setdefault("final", (len(self.clean_tokens) - 1, len(self.patch_tokens) - 1))
        for role, (clean_pos, patch_pos) in roles.items():
            if not (0 <= clean_pos < len(self.clean_tokens) and 0 <= patch_pos < len(self.patch_tokens)):
                raise UserError(
                    f"{self.name or 'pair'}: role {role!r} at positions ({clean_pos}, {patch_pos}) lies outside "
                    f"the prompts of {len(self.clean_tokens)} and {len(self.patch_tokens)} tokens"
                )
        object.__setattr__(self, "roles", roles)
        if self.alignment is not None:
            object.__setattr__(self, "alignment", tuple((int(c), int(p)) for c, p in self.alignment))

    @property
    def clean_final(self) -> int:
        return self.roles["final"][0]

    @property
    def patch_final(self) -> int:
        return self.roles["final"][1]

    def patchable_at_all(self) -> bool:
        """Whether position "all" is defined: prompts of equal length, or an explicit alignment."""
        return self.alignment is not None or len(self.clean_tokens) == len(self.patch_tokens)

    def aligned_positions(self, position: str | int) -> list[tuple[int, int]]:
        """(clean position, patch position) pairs that a position spec selects."""
        n_clean, n_patch = len(self.clean_tokens), len(self.patch_tokens)
        if isinstance(position, str) and position == "all":
            if self.alignment is not None:
                return list(self.alignment)
            if n_clean != n_patch:
                raise UserError(
                    f"{self.name or 'pair'}: position 'all' needs prompts of equal length, got {n_clean} and "
                    f"{n_patch} tokens; give the pair an \"alignment\" (a list of [clean position, patch position]) "
                    "or patch it by role only (the positions \"noun\" and \"final\")"
                )
            return [(t, t) for t in range(n_clean)]
        if isinstance(position, str):
            if position not in self.roles:
                raise UserError(
                    f"{self.name or 'pair'} has no position role {position!r}; it has {sorted(self.roles)} "
                    "(and 'all'), or pass integer positions"
                )
            return [self.roles[position]]
        index = int(position)
        if n_clean != n_patch:
            raise UserError(
                f"{self.name or 'pair'}: integer position {index} is ambiguous for prompts of {n_clean} and "
                f"{n_patch} tokens; patch by role instead"
            )
        if not -n_clean <= index < n_clean:
            raise UserError(f"position {index} is outside a prompt of {n_clean} tokens")
        return [(index % n_clean, index % n_clean)]


def as_patch_pair(pair: Any, index: int = 0, model: Any = None) -> PatchPair:
    """A PatchPair from a PatchPair, a text pair (the documented format above; needs
    `model` for its tokenizer), a fact pair (circuitlab.data.facts.FactPair) or a mapping of token ids:
    clean_tokens, patch_tokens, clean_answer_id, patch_answer_id and optionally noun_position,
    final_position, patch_noun_position, patch_final_position, alignment, name."""
    if isinstance(pair, PatchPair):
        return pair
    if is_text_pair(pair):
        if model is None:
            raise PairFormatError(f"pair {index} is a text pair; reading it needs the model's tokenizer (pass model=)")
        return text_pair(model, pair, index)
    get = pair.get if isinstance(pair, Mapping) else (lambda key, default=None: getattr(pair, key, default))
    missing = [key for key in TOKEN_KEYS if get(key) is None]
    if missing:
        raise PairFormatError(
            f"pair {index} lacks the key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: a pair is "
            f"text, like {EXAMPLE}, or token ids with {', '.join(TOKEN_KEYS)} (see circuitlab.analysis.pairs)"
        )
    clean_tokens, patch_tokens = list(get("clean_tokens")), list(get("patch_tokens"))
    roles = dict(get("roles") or {})
    for role in ("noun", "final"):
        clean_pos = get(f"{role}_position")
        if clean_pos is None:
            continue
        patch_pos = get(f"patch_{role}_position")
        roles[role] = (int(clean_pos), int(clean_pos if patch_pos is None else patch_pos))
    name = get("name") or ""
    if not name and get("clean_noun") is not None:
        name = f"{get('clean_noun')}->{get('patch_noun')}"
    return PatchPair(
        clean_tokens=tuple(clean_tokens), patch_tokens=tuple(patch_tokens),
        clean_answer_id=int(get("clean_answer_id")), patch_answer_id=int(get("patch_answer_id")),
        roles=roles, alignment=get("alignment"), name=str(name) or f"pair {index}",
    )


def is_text_pair(record: Any) -> bool:
    return isinstance(record, Mapping) and any(key in record for key in TEXT_KEYS)


def answer_token(tokenizer: Any, word: Any, what: str) -> int:
    """The id of a one-token answer: ' word' (as it follows a space), else 'word' as written."""
    if not isinstance(word, str) or not word.strip():
        raise PairFormatError(f"the {what} must be a non-empty word, got {word!r}")
    for candidate in (" " + word.strip(), word.strip(), word):
        ids = tokenizer.encode(candidate)
        if len(ids) == 1:
            return int(ids[0])
    pieces = [tokenizer.token_str(i) for i in tokenizer.encode(" " + word.strip())]
    raise PairFormatError(
        f"the {what} {word.strip()!r} is {len(pieces)} tokens under this tokenizer ({' | '.join(map(repr, pieces))}); "
        "answers must be single tokens: pick another word"
    )


def text_pair(model: Any, record: Mapping[str, Any], index: int = 0) -> PatchPair:
    """A PatchPair from one text pair of the documented format (module docstring)."""
    where = f"pair {index}"
    if not isinstance(record, Mapping):
        raise PairFormatError(f"{where} is {type(record).__name__}, not an object; a pair looks like {EXAMPLE}")
    missing = [key for key in TEXT_KEYS if key not in record]
    if missing:
        raise PairFormatError(f"{where} lacks the key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}; "
                              f"a pair looks like {EXAMPLE}")
    unknown = sorted(set(record) - set(TEXT_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise PairFormatError(f"{where} has unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(TEXT_KEYS + OPTIONAL_KEYS)}); a pair looks like {EXAMPLE}")
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise PairFormatError("the model has no tokenizer, so text pairs cannot be read; give token ids "
                              f"({', '.join(TOKEN_KEYS)})")
    tokens = {}
    for side in ("clean", "patch"):
        text = record[side]
        if not isinstance(text, str) or not text.strip():
            raise PairFormatError(f"{where}: {side!r} must be a non-empty prompt, got {text!r}")
        tokens[side] = (tokenizer.eos_id, *tokenizer.encode(text))
        if len(tokens[side]) > model.config.n_ctx:
            raise PairFormatError(f"{where}: the {side} prompt is {len(tokens[side])} tokens, longer than the model's "
                                  f"context of {model.config.n_ctx}")
    clean_id = answer_token(tokenizer, record["clean_answer"], f"{where}'s clean_answer")
    patch_id = answer_token(tokenizer, record["patch_answer"], f"{where}'s patch_answer")
    if clean_id == patch_id:
        raise PairFormatError(f"{where}: clean_answer and patch_answer are the same token; m(x) would be 0")
    roles = record.get("roles") or {}
    if not isinstance(roles, Mapping) or not all(
        isinstance(v, Sequence) and len(v) == 2 and all(isinstance(p, int) for p in v) for v in roles.values()
    ):
        raise PairFormatError(f"{where}: roles must map a name to [clean position, patch position], e.g. "
                              '{"noun": [2, 2]}')
    roles = {name: tuple(v) for name, v in roles.items()}
    for role in ("noun", "final"):
        clean_position, patch_position = record.get(f"{role}_position"), record.get(f"patch_{role}_position")
        if clean_position is None and patch_position is None:
            continue
        if not all(isinstance(p, int) for p in (clean_position, patch_position) if p is not None):
            raise PairFormatError(f"{where}: {role}_position must be a token position (an integer)")
        clean_position = patch_position if clean_position is None else clean_position
        roles[role] = (clean_position, clean_position if patch_position is None else patch_position)
    try:
        return PatchPair(
            clean_tokens=tokens["clean"], patch_tokens=tokens["patch"], clean_answer_id=clean_id,
            patch_answer_id=patch_id, roles=roles,
            alignment=record.get("alignment"), name=str(record.get("name") or f"{where}"),
        )
    except ValueError as error:  # a role outside the prompts
        raise PairFormatError(f"{where}: {error} (position 0 is the end-of-text token in front of the prompt)") from None


def read_pairs(path: str | os.PathLike) -> list[dict]:
    """The records of a pairs file (a non-empty JSON list of objects); PairFormatError naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise PairFormatError(f"pairs file {path} does not exist")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PairFormatError(f"pairs file {path} is not valid JSON ({error}); it holds a list like [{EXAMPLE}]") from None
    if not isinstance(records, list) or not records:
        raise PairFormatError(f"pairs file {path} must hold a non-empty JSON list of pairs, like [{EXAMPLE}]")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise PairFormatError(f"pairs file {path}: pair {index} is not a JSON object; a pair looks like {EXAMPLE}")
    return records


def load_pairs(model: Any, path: str | os.PathLike) -> list[PatchPair]:
    """PatchPairs from a pairs file (text pairs, or pairs of token ids)."""
    return [as_patch_pair(record, index, model=model) for index, record in enumerate(read_pairs(path))]
