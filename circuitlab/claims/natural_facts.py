"""Factual-recall facts mined from natural text: "The [noun] was [adjective]" sentences that occur in the natural
stories' training split (circuitlab.data.natural), so seed 000's NIE rows read facts the models saw in running
text as well as the planted facts of circuitlab.data.FACTS.

Mining: every match of "The <word> was <word>" (sentence-initial "The") is counted; the second word must be an
ADJECTIVE by circuitlab.data's lexicon (so "was going", "was a", "was very" are left out) and the first a noun
(not an adjective, verb, adverb or closed-class word). Each noun keeps its most frequent adjective (ties:
alphabetical) when seen at least `min_count` times; then, most frequent first, a fact is kept when neither its
noun nor its adjective is already taken (every fact needs its own noun and adjective, as FACTS do).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

PATTERN = re.compile(r"(?:^|(?<=[.!?\"”]\s)|(?<=\n))The ([a-z]+) was ([a-z]+)\b")
MIN_COUNT = 3
NOT_NOUNS = ("ADJECTIVE", "VERB", "ADVERB", "BE", "AUX", "PRONOUN", "DET", "PREP", "CONJ", "OTHER", "NAME")


def count_patterns(texts: Iterable[str]) -> Counter[tuple[str, str]]:
    """(noun, adjective) -> occurrences of "The noun was adjective" at a sentence start, lexicon-filtered."""
    from circuitlab.data.lexicon import label_word

    counts: Counter[tuple[str, str]] = Counter()
    for text in texts:
        for match in PATTERN.finditer(text):
            noun, adjective = match.groups()
            if label_word(adjective, False) == "ADJECTIVE" and label_word(noun, False) not in NOT_NOUNS:
                counts[(noun, adjective)] += 1
    return counts


def mine_facts(texts: Iterable[str], min_count: int = MIN_COUNT) -> list:
    """circuitlab.data.Fact of each mined (noun, adjective), most frequent first (see the module docstring); the
    label is the noun's lexicon category."""
    from circuitlab.data import Fact
    from circuitlab.data.lexicon import label_word

    counts = count_patterns(texts)
    best: dict[str, tuple[int, str]] = {}
    for (noun, adjective), n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if n >= min_count and noun not in best:  # most frequent first, ties alphabetical
            best[noun] = (n, adjective)
    facts, nouns, adjectives = [], set(), set()
    for noun, (n, adjective) in sorted(best.items(), key=lambda item: (-item[1][0], item[0])):
        if noun in nouns or adjective in adjectives:
            continue
        nouns.add(noun)
        adjectives.add(adjective)
        facts.append(Fact(noun, adjective, label_word(noun, False)))
    return facts


def natural_facts(min_count: int = MIN_COUNT) -> list:
    """The facts mined from the natural stories' training split."""
    from circuitlab.data import load_natural_stories

    return mine_facts((story.text for story in load_natural_stories().train()), min_count)


def natural_fact_pairs(model: object, n_pairs: int, min_count: int = MIN_COUNT) -> list:
    """Clean / counterfactual pairs over the mined facts with single-token words under the model's tokenizer
    (every one of them: the facts occur in the training text, so none is filtered by whether the model answers
    it), shuffled with seed 0 and cut to `n_pairs`."""
    from circuitlab.data import build_fact_pairs
    from circuitlab.data.facts import single_token_facts

    tokenizer = model.tokenizer  # type: ignore[attr-defined]
    facts = single_token_facts(tokenizer, natural_facts(min_count))
    return build_fact_pairs(tokenizer, facts=facts, seed=0, n_pairs=min(n_pairs, len(facts) * (len(facts) - 1)))
