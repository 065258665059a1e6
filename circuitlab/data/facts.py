"""Noun -> adjective facts ("The turtle was slow."), counterfactual prompt pairs, and fact-recall accuracy.

Seed 000, section 4.3 probes factual recall with prompts "The [noun] was" whose answer is an adjective that
co-occurs with the noun, choosing facts so that no two nouns share a target adjective; clean and patched
prompts use divergent nouns and adjectives, and the effect of patching is read on the logit difference
between the two adjectives. Here the facts are built into the story generator (`circuitlab.data.stories`),
which states them often, always with the same adjective, so a small model trained on the stories can learn
them. The stories also state facts at a distance ("The turtle that Lily saw at the park was slow", "Lily saw
a turtle. She was very happy. It was slow."), and `distant_fact_accuracy` probes recall across such words
(`DISTANT_PROMPTS`), where "The [noun] was" alone could be answered from the token before "was".

Token positions count from 0 in the token list a model sees. With `prepend_eos=True` (the default) that list
starts with the tokenizer's "<|endoftext|>" id, which is what precedes every story in a packed training row
(`circuitlab.data.loaders.pack_sequences`), so the prompt sits where a story starts.

Letters in names: B batch, T position, V vocabulary.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas
    import plotly.graph_objects


@dataclass(frozen=True)
class Fact:
    """One fact: `The {noun} was {adjective}.`; `label` is the noun's category in the stories."""

    noun: str
    adjective: str
    label: str

    @property
    def sentence(self) -> str:
        return f"The {self.noun} was {self.adjective}."


FACTS: tuple[Fact, ...] = (
    Fact("turtle", "slow", "ANIMAL"),
    Fact("cheetah", "fast", "ANIMAL"),
    Fact("elephant", "heavy", "ANIMAL"),
    Fact("mouse", "tiny", "ANIMAL"),
    Fact("giraffe", "tall", "ANIMAL"),
    Fact("owl", "wise", "ANIMAL"),
    Fact("fox", "clever", "ANIMAL"),
    Fact("lion", "brave", "ANIMAL"),
    Fact("pig", "dirty", "ANIMAL"),
    Fact("bee", "busy", "ANIMAL"),
    Fact("whale", "huge", "ANIMAL"),
    Fact("puppy", "playful", "ANIMAL"),
    Fact("kitten", "fluffy", "ANIMAL"),
    Fact("bear", "strong", "ANIMAL"),
    Fact("snake", "long", "ANIMAL"),
    Fact("sloth", "lazy", "ANIMAL"),
    Fact("snail", "slimy", "ANIMAL"),
    Fact("monkey", "cheeky", "ANIMAL"),
    Fact("sun", "hot", "NOUN"),
    Fact("snow", "cold", "NOUN"),
    Fact("night", "dark", "NOUN"),
    Fact("rain", "wet", "NOUN"),
    Fact("thunder", "loud", "NOUN"),
    Fact("cloud", "puffy", "NOUN"),
    Fact("star", "shiny", "NOUN"),
    Fact("ice", "slippery", "NOUN"),
    Fact("king", "rich", "NOUN"),
    Fact("queen", "kind", "NOUN"),
    Fact("witch", "mean", "NOUN"),
    Fact("monster", "scary", "NOUN"),
    Fact("baby", "cute", "NOUN"),
    Fact("clown", "funny", "NOUN"),
    Fact("feather", "light", "OBJECT"),
    Fact("rock", "hard", "OBJECT"),
    Fact("pillow", "soft", "OBJECT"),
    Fact("honey", "sweet", "OBJECT"),
    Fact("lemon", "sour", "OBJECT"),
    Fact("candle", "bright", "OBJECT"),
    Fact("knife", "sharp", "OBJECT"),
    Fact("cookie", "crunchy", "OBJECT"),
    Fact("cake", "yummy", "OBJECT"),
    Fact("bread", "fresh", "OBJECT"),
    Fact("soup", "tasty", "OBJECT"),
    Fact("balloon", "round", "OBJECT"),
    Fact("window", "clear", "OBJECT"),
    Fact("box", "empty", "OBJECT"),
    Fact("basket", "full", "OBJECT"),
    Fact("door", "locked", "OBJECT"),
    Fact("glue", "sticky", "OBJECT"),
    Fact("mountain", "high", "PLACE"),
    Fact("ocean", "deep", "PLACE"),
    Fact("desert", "dry", "PLACE"),
    Fact("library", "quiet", "PLACE"),
    Fact("garden", "pretty", "PLACE"),
    Fact("road", "bumpy", "PLACE"),
)


def check_facts(facts: Sequence[Fact]) -> None:
    """Raise ValueError unless nouns and adjectives are each distinct (seed 000, section 4.3)."""
    for field in ("noun", "adjective"):
        seen: dict[str, Fact] = {}
        for fact in facts:
            key = getattr(fact, field)
            if key in seen:
                raise UserError(
                    f"facts {seen[key].sentence!r} and {fact.sentence!r} share the {field} {key!r}; "
                    "every fact needs its own noun and its own adjective"
                )
            seen[key] = fact


check_facts(FACTS)
FACT_BY_NOUN: dict[str, Fact] = {fact.noun: fact for fact in FACTS}
FACT_ADJECTIVES: frozenset[str] = frozenset(fact.adjective for fact in FACTS)


class _Tokenizer(Protocol):
    eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...

    def token_str(self, token_id: int) -> str: ...


ADJACENT_PROMPT = "The {noun} was"
# Prompts with words between the noun and "was", as the generator's distant fact frames write them: the
# answer is then not a lookup of the token before "was". "park", "dog" and "ball" are not fact nouns, and
# "happy" and "red" are not fact adjectives.
DISTANT_PROMPTS: tuple[str, ...] = (
    "The {noun} that Lily saw at the park was",
    "The {noun} next to the happy dog was",
    "The {noun} with a red ball was",
)


def prompt_of(noun: str, template: str = ADJACENT_PROMPT) -> str:
    if "{noun}" not in template:
        raise ValueError(f"fact prompt template {template!r} has no {{noun}} slot")
    return template.format(noun=noun)


def single_token_id(tokenizer: _Tokenizer, word: str) -> int | None:
    """Id of `" " + word` if the tokenizer keeps it as one token, else None."""
    ids = tokenizer.encode(" " + word)
    return ids[0] if len(ids) == 1 else None


def single_token_facts(tokenizer: _Tokenizer, facts: Sequence[Fact] = FACTS) -> list[Fact]:
    """The facts whose noun and adjective are both single tokens with their leading space."""
    return [
        fact
        for fact in facts
        if single_token_id(tokenizer, fact.noun) is not None and single_token_id(tokenizer, fact.adjective) is not None
    ]


@dataclass(frozen=True)
class _EncodedPrompt:
    tokens: list[int]
    noun_position: int
    final_position: int


def _encode_prompt(tokenizer: _Tokenizer, noun: str, prepend_eos: bool, template: str = ADJACENT_PROMPT) -> _EncodedPrompt:
    prompt = prompt_of(noun, template)
    ids, offsets = tokenizer.encode_with_offsets(prompt)
    noun_start = template.index("{noun}")
    noun_end = noun_start + len(noun)
    noun_positions = [i for i, (start, end) in enumerate(offsets) if start < noun_end and end > noun_start]
    if len(noun_positions) != 1:
        raise UserError(f"{noun!r} is not a single token in {prompt!r}: tokens {noun_positions}")
    shift = 1 if prepend_eos else 0
    tokens = ([tokenizer.eos_id] if prepend_eos else []) + list(ids)
    return _EncodedPrompt(tokens=tokens, noun_position=noun_positions[0] + shift, final_position=len(tokens) - 1)


@dataclass(frozen=True)
class FactPair:
    """A clean prompt and a counterfactual (patch) prompt with different nouns and different answers.

    Positions index `clean_tokens` / `patch_tokens`. `noun_position` is the noun's token, `final_position`
    the last token (" was"), whose next-token prediction is scored.
    """

    clean_prompt: str
    patch_prompt: str
    clean_tokens: list[int]
    patch_tokens: list[int]
    clean_answer: str
    patch_answer: str
    clean_answer_id: int
    patch_answer_id: int
    noun_position: int
    final_position: int
    patch_noun_position: int
    patch_final_position: int
    clean_noun: str
    patch_noun: str

    @property
    def aligned(self) -> bool:
        """Both prompts have the same length and the noun at the same position."""
        return (
            len(self.clean_tokens) == len(self.patch_tokens)
            and self.noun_position == self.patch_noun_position
            and self.final_position == self.patch_final_position
        )


def build_fact_pairs(
    tokenizer: _Tokenizer,
    facts: Sequence[Fact] = FACTS,
    seed: int = 0,
    n_pairs: int | None = None,
    prepend_eos: bool = True,
) -> list[FactPair]:
    """Clean / counterfactual pairs "The [noun] was" over the facts that survive as single tokens.

    Every ordered pair of two different surviving facts is a candidate (their adjectives differ because no
    two facts share one); the candidates are shuffled with `seed` and the first `n_pairs` kept (all when
    None). Answers are the adjectives with a leading space (" slow").
    """
    check_facts(facts)
    usable = single_token_facts(tokenizer, facts)
    if len(usable) < 2:
        raise UserError(
            f"only {len(usable)} of {len(facts)} facts have single-token nouns and adjectives under this "
            "tokenizer; need at least 2 (train the tokenizer on the story corpus, or use a larger vocabulary)"
        )
    candidates = list(itertools.permutations(usable, 2))
    random.Random(seed).shuffle(candidates)
    if n_pairs is not None:
        if not 0 < n_pairs <= len(candidates):
            raise UserError(f"n_pairs={n_pairs}, but {len(usable)} usable facts give 1..{len(candidates)} pairs")
        candidates = candidates[:n_pairs]
    encoded = {fact.noun: _encode_prompt(tokenizer, fact.noun, prepend_eos) for fact in usable}
    pairs = []
    for clean, patch in candidates:
        clean_enc, patch_enc = encoded[clean.noun], encoded[patch.noun]
        pairs.append(
            FactPair(
                clean_prompt=prompt_of(clean.noun),
                patch_prompt=prompt_of(patch.noun),
                clean_tokens=list(clean_enc.tokens),
                patch_tokens=list(patch_enc.tokens),
                clean_answer=" " + clean.adjective,
                patch_answer=" " + patch.adjective,
                clean_answer_id=single_token_id(tokenizer, clean.adjective),  # type: ignore[arg-type]
                patch_answer_id=single_token_id(tokenizer, patch.adjective),  # type: ignore[arg-type]
                noun_position=clean_enc.noun_position,
                final_position=clean_enc.final_position,
                patch_noun_position=patch_enc.noun_position,
                patch_final_position=patch_enc.final_position,
                clean_noun=clean.noun,
                patch_noun=patch.noun,
            )
        )
    return pairs


def fact_pair_tensors(pairs: Sequence[FactPair]) -> tuple[Int[Tensor, "pair pos"], Int[Tensor, "pair pos"]]:
    """Stack aligned pairs into (clean_tokens, patch_tokens) LongTensors."""
    if not pairs:
        raise UserError("no fact pairs to stack")
    lengths = {len(pair.clean_tokens) for pair in pairs} | {len(pair.patch_tokens) for pair in pairs}
    if len(lengths) != 1:
        raise UserError(f"fact pairs have prompt lengths {sorted(lengths)}; stack pairs of one length at a time")
    clean = torch.tensor([pair.clean_tokens for pair in pairs], dtype=torch.long)
    patch = torch.tensor([pair.patch_tokens for pair in pairs], dtype=torch.long)
    return clean, patch


LogitsFn = Callable[[Int[Tensor, "batch pos"]], Float[Tensor, "batch pos vocab"]]


def fact_accuracy(
    logits_fn: LogitsFn,
    tokenizer: _Tokenizer,
    facts: Sequence[Fact] = FACTS,
    prepend_eos: bool = True,
    batch_size: int = 64,
    template: str = ADJACENT_PROMPT,
) -> tuple[float, pandas.DataFrame]:
    """Fraction of single-token facts whose argmax next token after "The [noun] was" is the adjective.

    `template` places the noun in another prompt ending before the answer, e.g. one of `DISTANT_PROMPTS`
    ("The {noun} that Lily saw at the park was"), where recall must reach past the words in between.
    Returns (accuracy, table); the table has one row per single-token fact with the prediction, whether it
    is correct, the rank of the right adjective among all tokens (1 = top) and its probability.
    """
    import pandas as pd

    usable = single_token_facts(tokenizer, facts)
    if not usable:
        raise UserError(
            f"none of the {len(facts)} facts has a single-token noun and adjective under this tokenizer; "
            "train the tokenizer on the story corpus (circuitlab tokenizer) so the fact words are merged"
        )
    rows = []
    by_length: dict[int, list[tuple[Fact, _EncodedPrompt]]] = {}
    for fact in usable:
        encoded = _encode_prompt(tokenizer, fact.noun, prepend_eos, template)
        by_length.setdefault(len(encoded.tokens), []).append((fact, encoded))
    with torch.no_grad():
        for group in by_length.values():
            for start in range(0, len(group), batch_size):
                chunk = group[start : start + batch_size]
                tokens_BxT = torch.tensor([encoded.tokens for _, encoded in chunk], dtype=torch.long)
                logits_BxTxV = logits_fn(tokens_BxT)
                final_logits_BxV = logits_BxTxV[:, -1, :].float().cpu()
                probs_BxV = final_logits_BxV.softmax(dim=-1)
                for row, (fact, _) in enumerate(chunk):
                    answer_id = single_token_id(tokenizer, fact.adjective)
                    logits_V = final_logits_BxV[row]
                    predicted_id = int(logits_V.argmax())
                    rank = 1 + int((logits_V > logits_V[answer_id]).sum())
                    rows.append(
                        {
                            "noun": fact.noun,
                            "adjective": fact.adjective,
                            "label": fact.label,
                            "prediction": tokenizer.token_str(predicted_id),
                            "correct": predicted_id == answer_id,
                            "rank": rank,
                            "answer_prob": float(probs_BxV[row, answer_id]),
                        }
                    )
    table = pd.DataFrame(rows).sort_values(["correct", "rank", "noun"], ascending=[False, True, True])
    table = table.reset_index(drop=True)
    return float(table["correct"].mean()), table


def distant_fact_accuracy(
    logits_fn: LogitsFn, tokenizer: _Tokenizer, facts: Sequence[Fact] = FACTS, prepend_eos: bool = True
) -> tuple[float, pandas.DataFrame]:
    """Fact accuracy over every prompt of `DISTANT_PROMPTS` (mean over prompts and facts), with the
    per-prompt table rows stacked (column "prompt")."""
    import pandas as pd

    tables = []
    for template in DISTANT_PROMPTS:
        _, table = fact_accuracy(logits_fn, tokenizer, facts, prepend_eos, template=template)
        tables.append(table.assign(prompt=template))
    table = pd.concat(tables, ignore_index=True)
    return float(table["correct"].mean()), table


def fact_rank_figure(table: pandas.DataFrame) -> plotly.graph_objects.Figure:
    """Bar chart of the right adjective's rank per fact (log scale; rank 1 = predicted)."""
    import plotly.graph_objects as go

    colours = ["#2a9d8f" if correct else "#e76f51" for correct in table["correct"]]
    figure = go.Figure(
        go.Bar(
            x=[f"{noun} -> {adj}" for noun, adj in zip(table["noun"], table["adjective"])],
            y=table["rank"],
            marker_color=colours,
            hovertext=[f"predicted {pred!r}, p(answer)={p:.3f}" for pred, p in zip(table["prediction"], table["answer_prob"])],
        )
    )
    accuracy = float(table["correct"].mean()) if len(table) else 0.0
    figure.update_layout(
        title=f"Fact recall: 'The [noun] was' -> adjective (accuracy {accuracy:.0%})",
        yaxis_title="rank of the right adjective (1 = top)",
        yaxis_type="log",
        xaxis_tickangle=-60,
    )
    return figure
