"""Facts mined from natural text (circuitlab.claims.natural_facts) against a hand count on constructed text, and
the natural-text twins of seed 000's rows."""

from __future__ import annotations

from circuitlab.claims.natural_facts import count_patterns, mine_facts


TEXTS = [
    "The moon was bright. The moon was bright. The moon was full. The moon was bright.",
    "Tom ran. The sea was calm. The sea was calm. The sea was calm. The sea was going away.",
    "She said the moon was bright. The cat was happy. The cat was happy. The cat was happy. The dog was bright.",
    "The dog was bright. The dog was bright. The box was very big. The box was a gift.",
]


def test_count_patterns_by_hand():
    counts = count_patterns(TEXTS)
    # sentence-initial only ("said the moon was" is not), adjectives only ("going", "very", "a" are not)
    assert counts[("moon", "bright")] == 3 and counts[("moon", "full")] == 1
    assert counts[("sea", "calm")] == 3 and ("sea", "going") not in counts
    assert counts[("cat", "happy")] == 3 and counts[("dog", "bright")] == 3
    assert not any(noun == "box" for noun, _ in counts)


def test_mine_facts_keeps_one_noun_and_one_adjective_each():
    facts = mine_facts(TEXTS, min_count=3)
    # dog and moon both want "bright" (3 each): the first by noun keeps it, the other is left out
    pairs = [(fact.noun, fact.adjective) for fact in facts]
    assert ("cat", "happy") in pairs and ("sea", "calm") in pairs
    assert ("dog", "bright") in pairs and "moon" not in {noun for noun, _ in pairs}
    assert len({noun for noun, _ in pairs}) == len(pairs)
    assert mine_facts(TEXTS, min_count=4) == []


def test_natural_twins_of_seed_000_rows():
    from circuitlab.claims import CLAIMS

    ids = {claim.id: claim for claim in CLAIMS}
    for base in ("s000-nie-noun", "s000-nie-layer", "s000-nie-all", "s000-nie-moderate", "s000-neurons-used",
                 "s000-gini", "s000-subkey"):
        twin = ids[f"{base}-natural"]
        assert twin.paper == ids[base].paper and twin.config == ids[base].config
        assert twin.measured_by.startswith("circuitlab.claims.") and twin.measured_by.endswith("_natural")


def test_natural_fact_pairs_on_the_shipped_tokenizer():
    from circuitlab.architectures.transformer import load_model
    from circuitlab.claims.natural_facts import natural_fact_pairs, natural_facts
    from circuitlab.data import load_natural_stories

    facts = natural_facts()
    assert len(facts) >= 10
    training = " ".join(story.text for story in load_natural_stories().train())
    for fact in facts[:5]:  # each mined sentence occurs in the training split
        assert f"The {fact.noun} was {fact.adjective}" in training
    model = load_model("sgatlin-stories")
    pairs = natural_fact_pairs(model, 8)
    assert len(pairs) == 8 and all(pair.clean_noun != pair.patch_noun for pair in pairs)
    assert {pair.clean_noun for pair in pairs} <= {fact.noun for fact in facts}
