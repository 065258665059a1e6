"""Seed 000's factual-recall and neuron-usage rows on natural text: the NIE rows on fact pairs mined from the
natural stories' training split ("The [noun] was [adjective]" sentences that occur there:
circuitlab.claims.natural_facts), with gelu-stories on the same pairs as the null and a bootstrap over pairs;
the usage rows on the natural held-out split, with the randomly initialised sgatlin model as the null. Each
row's claim is the planted / generated-text row's, measured on other text (the same configuration)."""

from __future__ import annotations

from circuitlab.claims.context import Context
from circuitlab.claims.rows import Claim, Outcome
from circuitlab.claims.seed000 import (
    nie_all_layers, nie_moderate, nie_noun_vs_final, nie_strongest_layer, neurons_used, subkey_coactivation, usage_gini,
)

NATURAL = "natural"


def nie_noun_vs_final_natural(context: Context) -> Outcome:
    return nie_noun_vs_final(context, NATURAL)


def nie_strongest_layer_natural(context: Context) -> Outcome:
    return nie_strongest_layer(context, NATURAL)


def nie_all_layers_natural(context: Context) -> Outcome:
    return nie_all_layers(context, NATURAL)


def nie_moderate_natural(context: Context) -> Outcome:
    return nie_moderate(context, NATURAL)


def neurons_used_natural(context: Context) -> Outcome:
    return neurons_used(context, NATURAL)


def usage_gini_natural(context: Context) -> Outcome:
    return usage_gini(context, NATURAL)


def subkey_coactivation_natural(context: Context) -> Outcome:
    return subkey_coactivation(context, NATURAL)


_MINED = ("fact pairs mined from the natural training split (sentence-initial 'The [noun] was [adjective]', the "
          "adjective by circuitlab.data's lexicon, seen at least 3 times, one adjective per noun, single-token words)")
_NATURAL = {
    "s000-nie-noun": nie_noun_vs_final_natural, "s000-nie-layer": nie_strongest_layer_natural,
    "s000-nie-all": nie_all_layers_natural, "s000-nie-moderate": nie_moderate_natural,
    "s000-neurons-used": neurons_used_natural, "s000-gini": usage_gini_natural, "s000-subkey": subkey_coactivation_natural,
}


def natural_claims(claims: tuple[Claim, ...]) -> tuple[Claim, ...]:
    """The natural-text twin of each seed 000 row in `_NATURAL`: its id with "-natural", the same claim and paper,
    its rule said of natural text."""
    twins = []
    for claim in claims:
        measure = _NATURAL.get(claim.id)
        if measure is None:
            continue
        on = _MINED if claim.id.startswith("s000-nie") else "the natural held-out split"
        twins.append(Claim(f"{claim.id}-natural", claim.seed, claim.place, f"{claim.claim} (natural text)", claim.paper,
                           f"{claim.rule}; measured on {on}", measure))
    return tuple(twins)
