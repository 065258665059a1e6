"""Noun -> adjective facts: distinctness, how often and how consistently the stories state them, the
clean / counterfactual pair builder, and fact accuracy against hand-built logits."""

from __future__ import annotations

import collections
import functools
import re

import pytest
import torch

from circuitlab.data.facts import (
    FACT_ADJECTIVES,
    FACT_BY_NOUN,
    FACTS,
    Fact,
    build_fact_pairs,
    check_facts,
    fact_accuracy,
    fact_pair_tensors,
    fact_rank_figure,
    single_token_facts,
)
from circuitlab.data.stories import generate_stories
from circuitlab.data.tokenizer import train_tokenizer


@functools.lru_cache(maxsize=None)
def stories():
    return tuple(generate_stories(2000, seed=0))


@functools.lru_cache(maxsize=None)
def story_tokenizer():
    return train_tokenizer([story.text for story in stories()], vocab_size=4096, show_progress=False)


def test_facts_are_many_and_distinct():
    assert len(FACTS) >= 40
    assert len({fact.noun for fact in FACTS}) == len(FACTS)
    assert len({fact.adjective for fact in FACTS}) == len(FACTS)
    assert FACTS[0].sentence == "The turtle was slow."
    with pytest.raises(ValueError, match="share the adjective 'slow'"):
        check_facts([Fact("turtle", "slow", "ANIMAL"), Fact("snail", "slow", "ANIMAL")])
    with pytest.raises(ValueError, match="share the noun 'turtle'"):
        check_facts([Fact("turtle", "slow", "ANIMAL"), Fact("turtle", "green", "ANIMAL")])


def test_stories_state_every_fact_often():
    corpus = stories()
    with_fact = sum(bool(story.facts) for story in corpus) / len(corpus)
    assert with_fact > 0.5
    counts = collections.Counter(noun for story in corpus for noun in story.facts)
    assert set(counts) == {fact.noun for fact in FACTS}
    assert min(counts.values()) >= 10
    # Each recorded fact is in the text, with its adjective.
    for story in corpus[:500]:
        for noun in story.facts:
            assert re.search(rf"\b{noun}\b", story.text) and FACT_BY_NOUN[noun].adjective in story.text
    # Some stories open with the exact prompt, as a model sees it after the separator.
    openings = sum(re.match(r"The (\w+) was (\w+)\.", story.text) is not None for story in corpus)
    assert openings / len(corpus) > 0.1
    contexts = collections.Counter(frame for story in corpus for _, _, frame in story.sentences if frame.startswith("fact_"))
    assert len(contexts) >= 10


def test_fact_nouns_and_adjectives_only_meet_each_other():
    """After "the [fact noun] was/is" comes its adjective, and a fact adjective after "was/is" describes its
    noun: the noun itself, "it" standing for the noun, or the noun that opens the sentence with a phrase
    between ("The turtle that Lily saw at the park was slow"): the association is never contradicted."""
    n_statements = n_distant = 0
    for story in stories():
        for match in re.finditer(r"\b(\w+) (?:was|is) (?:(?:very|so|really) )?(\w+)", story.text):
            subject, word = match.group(1).lower(), match.group(2)
            if subject in FACT_BY_NOUN:
                assert word == FACT_BY_NOUN[subject].adjective, match.group(0)
                assert story.text[: match.start()].lower().endswith("the "), match.group(0)
                n_statements += 1
            if word in FACT_ADJECTIVES:
                noun = next(n for n, fact in FACT_BY_NOUN.items() if fact.adjective == word)
                if subject == "it":
                    assert re.search(rf"\b{noun}\b", story.text[: match.start()])
                elif subject != noun:
                    start = max(s for s, _, _ in story.sentences if s <= match.start())
                    assert story.text[start : match.start()].lower().startswith(f"the {noun} "), match.group(0)
                    n_distant += 1
    assert n_statements > 1200 and n_distant > 150, (n_statements, n_distant)  # measured 1601 and 192


def test_all_facts_are_single_tokens_under_a_story_tokenizer():
    tokenizer = story_tokenizer()
    assert single_token_facts(tokenizer) == list(FACTS)


def test_fact_pairs_positions_and_answers():
    tokenizer = story_tokenizer()
    pairs = build_fact_pairs(tokenizer)
    k = len(FACTS)
    assert len(pairs) == k * (k - 1)
    assert len({(p.clean_noun, p.patch_noun) for p in pairs}) == len(pairs)
    was_id = tokenizer.encode(" was")[0]
    for pair in pairs:
        clean, patch = FACT_BY_NOUN[pair.clean_noun], FACT_BY_NOUN[pair.patch_noun]
        assert clean.noun != patch.noun and clean.adjective != patch.adjective
        assert pair.clean_prompt == f"The {clean.noun} was" and pair.patch_prompt == f"The {patch.noun} was"
        assert pair.clean_tokens[0] == tokenizer.eos_id
        assert tokenizer.decode(pair.clean_tokens[1:]) == pair.clean_prompt
        assert tokenizer.decode(pair.patch_tokens[1:]) == pair.patch_prompt
        assert tokenizer.token_str(pair.clean_tokens[pair.noun_position]) == " " + clean.noun
        assert tokenizer.token_str(pair.patch_tokens[pair.patch_noun_position]) == " " + patch.noun
        assert pair.clean_tokens[pair.final_position] == was_id == pair.patch_tokens[pair.patch_final_position]
        assert pair.final_position == len(pair.clean_tokens) - 1
        assert pair.clean_answer == " " + clean.adjective and pair.patch_answer == " " + patch.adjective
        assert tokenizer.encode(pair.clean_answer) == [pair.clean_answer_id]
        assert tokenizer.encode(pair.patch_answer) == [pair.patch_answer_id]
        assert pair.aligned
    clean_tokens, patch_tokens = fact_pair_tensors(pairs[:10])
    assert clean_tokens.shape == patch_tokens.shape == (10, len(pairs[0].clean_tokens))
    assert clean_tokens.dtype == torch.long


def test_fact_pairs_seed_subset_and_no_eos():
    tokenizer = story_tokenizer()
    everything = build_fact_pairs(tokenizer, seed=0)
    reordered = build_fact_pairs(tokenizer, seed=1)
    key = lambda p: (p.clean_noun, p.patch_noun)  # noqa: E731
    assert [key(p) for p in everything] != [key(p) for p in reordered]
    assert sorted(map(key, everything)) == sorted(map(key, reordered))
    assert build_fact_pairs(tokenizer, seed=0, n_pairs=7) == everything[:7]
    bare = build_fact_pairs(tokenizer, seed=0, n_pairs=7, prepend_eos=False)
    for with_eos, without in zip(everything[:7], bare):
        assert without.clean_tokens == with_eos.clean_tokens[1:]
        assert without.noun_position == with_eos.noun_position - 1
        assert without.final_position == with_eos.final_position - 1
    with pytest.raises(ValueError, match="n_pairs=100000"):
        build_fact_pairs(tokenizer, n_pairs=100000)


def test_fact_pairs_keep_only_single_token_facts():
    # A tokenizer that has seen "turtle"/"slow", "cheetah"/"fast" and "owl"/"wise" often but never "giraffe".
    texts = ["The turtle was slow. The cheetah was fast. The owl was wise."] * 50
    tokenizer = train_tokenizer(texts, vocab_size=300, show_progress=False)
    facts = [FACT_BY_NOUN[noun] for noun in ("turtle", "cheetah", "owl", "giraffe")]
    assert [f.noun for f in single_token_facts(tokenizer, facts)] == ["turtle", "cheetah", "owl"]
    pairs = build_fact_pairs(tokenizer, facts)
    assert {p.clean_noun for p in pairs} == {"turtle", "cheetah", "owl"} and len(pairs) == 6
    bytes_only = train_tokenizer(["ab"], vocab_size=257, show_progress=False)
    with pytest.raises(ValueError, match="only 0 of 55 facts"):
        build_fact_pairs(bytes_only)


def test_fact_accuracy_against_planted_ranks():
    tokenizer = story_tokenizer()
    noun_to_fact = {tokenizer.encode(" " + fact.noun)[0]: fact for fact in FACTS}
    vocab_size = tokenizer.vocab_size
    # Fact i gets its adjective at rank 1 + (i % 3): rank 1 (correct) for a third of the facts.
    planted_rank = {fact.noun: 1 + i % 3 for i, fact in enumerate(FACTS)}
    calls = []

    def logits_fn(tokens):
        calls.append(tokens.shape)
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], vocab_size)
        for row in range(tokens.shape[0]):
            fact = noun_to_fact[int(tokens[row, -2])]
            answer = tokenizer.encode(" " + fact.adjective)[0]
            logits[row, -1, answer] = 5.0
            above = [t for t in range(4) if t != answer][: planted_rank[fact.noun] - 1]
            logits[row, -1, above] = 6.0
        return logits

    accuracy, table = fact_accuracy(logits_fn, tokenizer, batch_size=16)
    assert len(table) == len(FACTS)
    assert accuracy == pytest.approx(sum(r == 1 for r in planted_rank.values()) / len(FACTS), abs=1e-12)
    assert dict(zip(table["noun"], table["rank"])) == planted_rank
    assert table["correct"].tolist() == (table["rank"] == 1).tolist()
    assert all(shape[0] <= 16 for shape in calls) and sum(shape[0] for shape in calls) == len(FACTS)
    correct_rows = table[table["correct"]]
    assert (correct_rows["prediction"] == " " + correct_rows["adjective"]).all()
    # p(answer) under softmax: e^5 / (e^5 + (rank-1) e^6 + (V - rank) e^0)
    first = table.iloc[0]
    e = torch.tensor([5.0, 6.0, 0.0]).exp()
    expected = e[0] / (e[0] + (first["rank"] - 1) * e[1] + (vocab_size - first["rank"]) * e[2])
    assert first["answer_prob"] == pytest.approx(float(expected), rel=1e-5)
    figure = fact_rank_figure(table)
    assert len(figure.data[0].x) == len(FACTS)


def test_distant_prompts_defeat_a_previous_token_lookup():
    """A model that reads the adjective off the token before "was" aces "The [noun] was" and fails every
    distant prompt; a model that finds the noun anywhere in the prompt aces both."""
    from circuitlab.data import DISTANT_PROMPTS, distant_fact_accuracy

    tokenizer = story_tokenizer()
    usable = single_token_facts(tokenizer)
    noun_to_answer = {tokenizer.encode(" " + f.noun)[0]: tokenizer.encode(" " + f.adjective)[0] for f in usable}

    def model(look_anywhere: bool):
        def logits_fn(tokens):
            logits = torch.zeros(tokens.shape[0], tokens.shape[1], tokenizer.vocab_size)
            for row in range(tokens.shape[0]):
                window = tokens[row].tolist() if look_anywhere else [int(tokens[row, -2])]
                answers = [noun_to_answer[t] for t in window if t in noun_to_answer]
                logits[row, -1, answers[0] if answers else 0] = 1.0
            return logits
        return logits_fn

    assert fact_accuracy(model(False), tokenizer)[0] == 1.0
    accuracy, table = distant_fact_accuracy(model(False), tokenizer)
    assert accuracy == 0.0 and len(table) == len(DISTANT_PROMPTS) * len(usable)
    assert distant_fact_accuracy(model(True), tokenizer)[0] == 1.0


def test_stories_state_facts_at_a_distance():
    corpus = stories()
    frames = collections.Counter(frame for story in corpus for _, _, frame in story.sentences)
    assert frames["fact_distant"] > 100 and frames["fact_recalled"] > 40  # measured 226 and 71 in 2000 stories
    # in a recalled fact, the noun was met two sentences earlier, with another sentence between
    for story in corpus[:300]:
        for index, (start, end, frame) in enumerate(story.sentences):
            if frame == "fact_recalled":
                assert [f for _, _, f in story.sentences[index - 2 : index]] == ["fact_met", "fact_between"]
                sentence = story.text[start:end]
                adjective = sentence.rstrip(".").split()[-1]
                noun = next(n for n, fact in FACT_BY_NOUN.items() if fact.adjective == adjective)
                assert noun in story.text[story.sentences[index - 2][0] : story.sentences[index - 2][1]]


def test_distant_prompts_hold_no_other_fact_word():
    from circuitlab.data import DISTANT_PROMPTS
    from circuitlab.data.facts import FACT_ADJECTIVES

    for template in DISTANT_PROMPTS:
        other_words = set(re.findall(r"[a-z]+", template.replace("{noun}", "").lower()))
        assert not other_words & (set(FACT_BY_NOUN) | FACT_ADJECTIVES), template
