"""The dashboard's text inputs, checked and run without Streamlit (apps/ imports them from here).

Odd input (empty, longer than the context, characters that are not valid Unicode, answers that are several
tokens) comes back as a message, never as an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas


MAX_TEXT_CHARACTERS = 20_000


@dataclass
class Checked:
    """A checked text input: token ids when usable, else a message saying what to change."""

    token_ids: list[int] | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.message is None


def check_text(model: Any, text: Any, what: str = "text", reserve: int = 0) -> Checked:
    """Turn user text into token ids for `model`, or say why it cannot be used (`reserve`: context positions
    kept free for tokens added in front)."""
    if not isinstance(text, str):
        return Checked(message=f"the {what} must be text")
    if not text.strip():
        return Checked(message=f"the {what} is empty: type a sentence")
    if len(text) > MAX_TEXT_CHARACTERS:
        return Checked(message=f"the {what} has {len(text):,} characters; the limit is {MAX_TEXT_CHARACTERS:,}: shorten it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return Checked(message=f"the {what} contains characters that are not valid Unicode (lone surrogates): retype it")
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return Checked(message="this model has no tokenizer, so it cannot read typed text")
    token_ids = list(tokenizer.encode(text))
    if not token_ids:
        return Checked(message=f"the {what} gives no tokens: type a sentence")
    n_ctx = model.config.n_ctx - reserve
    if len(token_ids) > n_ctx:
        return Checked(
            message=f"the {what} is {len(token_ids)} tokens, longer than the {n_ctx} tokens the model's context leaves: "
            f"shorten it (the first {n_ctx} tokens end at character {_char_limit(tokenizer, text, n_ctx)})"
        )
    return Checked(token_ids=token_ids)


def _char_limit(tokenizer: Any, text: str, n_tokens: int) -> int:
    if hasattr(tokenizer, "encode_with_offsets"):
        _, offsets = tokenizer.encode_with_offsets(text)
        if len(offsets) >= n_tokens:
            return int(offsets[n_tokens - 1][1])
    return len(text)


def single_token(model: Any, word: Any, what: str) -> tuple[int | None, str | None]:
    """The id of a one-token answer word: ' word' (as it follows a space) or, failing that, 'word' as typed."""
    from circuitlab.analysis.pairs import PairFormatError, answer_token

    if not isinstance(word, str) or not word.strip():
        return None, f"the {what} is empty: type one word"
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return None, f"the {what} contains characters that are not valid Unicode: retype it"
    try:
        return answer_token(model.tokenizer, word, what), None
    except PairFormatError as error:
        return None, str(error)


def lookup_circuits(db: Any, model: Any, text: Any, layer: int, k: int = 10) -> tuple[pandas.DataFrame | None, str | None]:
    """Nearest stored circuits of every token of `text` at `layer` (seed 000, Table 3), or a message. The
    search runs on a GPU when there is one; `hits.attrs["served_by"]` says where it ran."""
    checked = check_text(model, text)
    if not checked.ok:
        return None, checked.message
    if layer not in db.layers:
        return None, f"layer {layer} is not in the circuit database (it has layers {db.layers})"
    if len(db) == 0:
        return None, "the circuit database is empty: rebuild it with `circuitlab demo`"
    return db.search(text, layer=layer, k=max(1, min(int(k), len(db)))), None


def attribute_prompt(
    model: Any, text: Any, target: Any = "", position: int = -1
) -> tuple[pandas.DataFrame | None, str | None]:
    """Direct logit attribution of the prediction at `position` of `text` (target blank = the top prediction)."""
    from circuitlab.analysis.attribution import direct_logit_attribution

    checked = check_text(model, text, "prompt")
    if not checked.ok:
        return None, checked.message
    target_id = None
    if isinstance(target, str) and target.strip():
        target_id, message = single_token(model, target, "target")
        if message:
            return None, message
    n_tokens = len(checked.token_ids)
    if not -n_tokens <= position < n_tokens:
        return None, f"position {position} is outside the prompt of {n_tokens} tokens"
    table = direct_logit_attribution(model, checked.token_ids, target=target_id, position=position)
    return table, None


def custom_patch_pair(
    model: Any, clean: Any, patch: Any, clean_answer: Any, patch_answer: Any
) -> tuple[Any, list, str | None]:
    """A PatchPair from typed prompts and answers, the positions to patch, or a message.

    The typed pair is read exactly as a text pair of a pairs file (circuitlab.analysis.pairs): each prompt gets the
    end-of-text token in front, which is what precedes a story in training, so position 0 is that token.
    """
    from circuitlab.analysis.pairs import PairFormatError, text_pair

    checked_clean = check_text(model, clean, "clean prompt", reserve=1)
    if not checked_clean.ok:
        return None, [], checked_clean.message
    checked_patch = check_text(model, patch, "counterfactual prompt", reserve=1)
    if not checked_patch.ok:
        return None, [], checked_patch.message
    clean_id, message = single_token(model, clean_answer, "clean answer")
    if message:
        return None, [], message
    patch_id, message = single_token(model, patch_answer, "counterfactual answer")
    if message:
        return None, [], message
    if clean_id == patch_id:
        return None, [], "the two answers are the same token: the logit difference would be 0; pick different answers"
    record = {"clean": clean, "patch": patch, "clean_answer": clean_answer, "patch_answer": patch_answer,
              "name": "your pair"}
    try:
        pair = text_pair(model, record)
    except PairFormatError as error:
        return None, [], str(error)
    if len(pair.clean_tokens) == len(pair.patch_tokens):
        positions: list = list(range(len(pair.clean_tokens))) + ["all"]
    else:
        positions = ["final"]
    return pair, positions, None


def run_custom_patch(model: Any, pair: Any, positions: list) -> tuple[pandas.DataFrame | None, str | None]:
    """NIE of every layer (and all at once) x position for one typed pair, or a message when it is undefined
    or untrustworthy (the two prompts' logit differences closer than circuitlab.analysis.pairs.MIN_LOGIT_DIFFERENCE)."""
    from circuitlab.analysis.patching import nie_grid
    from circuitlab.analysis.pairs import MIN_LOGIT_DIFFERENCE

    # one pair: its values are shown (with the note below when they are untrustworthy), not left out
    table = nie_grid(model, [pair], positions=positions, progress=False, min_difference=0.0)
    m_clean, m_patch = float(table["m_clean"].iloc[0]), float(table["m_patch"].iloc[0])
    if math.isclose(m_clean, m_patch, rel_tol=0.0, abs_tol=1e-9):
        return table, (
            f"the model gives the same logit difference on both prompts (m = {m_clean:.4g}), so NIE is undefined: "
            "choose prompts whose answers differ"
        )
    if abs(m_patch - m_clean) < MIN_LOGIT_DIFFERENCE:
        return table, (
            f"m(counterfactual) - m(clean) = {m_patch - m_clean:+.3f} nats, below {MIN_LOGIT_DIFFERENCE:g} in size: "
            "NIE divides by that difference, so these values are mostly noise and are left out of means; choose "
            "prompts the model tells apart more clearly"
        )
    return table, None
