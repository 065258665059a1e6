"""Seed 000's claims (sparsely gated linear neurons, sgatlin), measured on sgatlin-stories and gelu-stories.

The iso-FLOP rows (sec. 3) read the ladder's results (results/ladder/ladder_results.json); the circuit rows
(sec. 4, app. C) search the circuit database of held-out stories and patch the facts the model knows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from circuitlab.claims.context import Context
from circuitlab.claims.rows import (
    CLUSTER_LIFT, NOT_MEASURED, Claim, Outcome, binomial_outcome, no_interval, scale_judgement,
)

TABLE_3_QUERY = "Once upon a time, there was a big dog named Max. Max had a red ball that he played with every day."

# seed 000's iso-FLOP budgets (sec. 3.1): 1e17 to 6e18 training FLOPs
PAPER_BUDGETS = (1e17, 6e18)


def ladder_scale(results: dict[str, Any], archs: tuple[str, ...]) -> tuple[tuple[float, float], str]:
    """The ladder's smallest and largest budget among `archs`' runs, and how many sizes and seeds each had."""
    from collections import Counter

    runs = [run for run in results.get("runs", []) if run.get("arch") in archs and run.get("status", "done") == "done"]
    budgets = sorted({float(run["budget_flops"]) for run in runs})
    if not budgets:
        return (0.0, 0.0), "no finished runs"
    sizes = Counter((run["arch"], run["budget_flops"]) for run in runs)
    seeds = Counter((run["arch"], run["budget_flops"], run.get("scale")) for run in runs)
    detail = "; ".join(
        f"{budget:.2g} FLOPs: {len({r.get('scale') for r in runs if r['budget_flops'] == budget})} size(s), "
        f"{max(seeds[(a, budget, s)] for (a, b, s) in seeds if b == budget)} seed(s) per size"
        for budget in budgets)
    del sizes
    return (budgets[0], budgets[-1]), detail


def ladder_verdict(context: Context, index: int, archs: tuple[str, ...]) -> Outcome | None:
    """Verdict `index` of ladder_report.verdicts (0: sgatlin vs dense, 1: PEER, 2: nonlinearity) on the iso-FLOP
    ladder's results, read against the paper's budgets; None when no ladder has been run."""
    if context.ladder_results is None or not Path(context.ladder_results).is_file():
        return None
    from circuitlab.training.ladder_report import load_results, verdicts

    results = load_results(context.ladder_results)
    found = verdicts(results)[index]
    ours, detail = ladder_scale(results, archs)
    scale = scale_judgement(ours, PAPER_BUDGETS, "training FLOPs")
    text = f"{found.verdict}: {found.detail} ({detail})"
    if scale is not None:
        return Outcome(text, scale.verdict, None, scale.reason)
    return no_interval(text, None, found.verdict == "supported",
                       "the ladder keeps one loss per run; an interval needs the per-story losses of every seed")


def ladder_sgatlin_vs_dense(context: Context) -> Outcome:
    return ladder_verdict(context, 0, ("sgatlin", "mlp", "swiglu")) or equal_token_losses(context)


def ladder_peer(context: Context) -> Outcome:
    return ladder_verdict(context, 1, ("sgatlin", "peer")) or Outcome("-", NOT_MEASURED, None, "needs the iso-FLOP ladder with PEER")


def ladder_nonlinearity(context: Context) -> Outcome:
    return ladder_verdict(context, 2, ("sgatlin", "sgatlin-gelu")) or Outcome("-", NOT_MEASURED, None, "needs the ablation models at one ladder budget")


def equal_token_losses(context: Context) -> Outcome:
    """The shipped sgatlin and GELU models' held-out losses (equal tokens; not a compute-matched comparison)."""
    sgatlin, gelu = context.metrics("sgatlin-stories"), context.metrics("gelu-stories")
    ours = (f"equal tokens, not equal FLOPs: natural held-out loss sgatlin {sgatlin['natural_held_out_loss']:.3f} "
            f"vs GELU {gelu['natural_held_out_loss']:.3f} nats/token")
    return Outcome(ours, NOT_MEASURED, sgatlin["natural_held_out_loss"],
                   "needs the iso-FLOP ladder (models of several sizes per FLOP budget)")


def semantic_clusters(context: Context) -> Outcome:
    db = context.sgatlin_db
    layer = min(1, max(db.layers))  # seed 000, Figure 5: the second layer
    score = db.semantic_score(layer, n_queries=context.sizes.semantic_queries, n_shuffles=context.sizes.semantic_shuffles)
    lift = round(score["score_other_tokens"] / score["baseline_other_tokens"], 2)
    ours = (f"layer {layer}: {score['score_other_tokens']:.3f} of neighbours (other tokens) share the category vs "
            f"{score['baseline_other_tokens']:.3f} shuffled ({lift:.2f}x)")
    return no_interval(ours, lift, lift >= CLUSTER_LIFT, "one score over the sampled queries")


def category_enrichment(db: Any, layer: int, source: str, target: str, n_points: int, k: int = 10) -> float:
    """Share of the k nearest circuits (within a seeded sample) of `source`-category circuits that are in the
    `target` category, divided by the target's share of the sample (1 = chance)."""
    import numpy as np

    labels = db.metadata["category"].fillna("(none)").to_numpy()
    sample = np.sort(np.random.default_rng(0).choice(len(db), min(len(db), n_points), replace=False))
    sources = sample[labels[sample] == source]
    chance = float(np.mean(labels[sample] == target))
    if sources.size == 0 or chance == 0:
        return math.nan
    neighbour_ids, _ = db.neighbours(layer, sources, k, within=sample)
    valid = neighbour_ids >= 0
    hit = (labels[np.maximum(neighbour_ids, 0)] == target) & valid
    return float(hit.sum() / max(valid.sum(), 1)) / chance


def names_near_pronouns(context: Context) -> Outcome:
    db = context.sgatlin_db
    late_layers = [layer for layer in db.layers if layer >= 2]  # "after the second layer"
    values = [category_enrichment(db, layer, "NAME", "PRONOUN", context.sizes.enrichment_points) for layer in late_layers]
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return Outcome("no name circuits in the sample", NOT_MEASURED, None, "too few held-out stories for names")
    lift = round(sum(finite) / len(finite), 2)
    ours = "pronouns among the neighbours of names: " + ", ".join(
        f"layer {layer} {value:.2f}x" for layer, value in zip(late_layers, values)) + f" chance (mean {lift:.2f}x)"
    return no_interval(ours, lift, lift >= CLUSTER_LIFT, "one enrichment per layer over the sample")


def table_3_neighbours(context: Context, word: str) -> Any:
    db = context.sgatlin_db
    layer = max(max(db.layers) - 1, 0)  # the penultimate layer, as seed 000 Table 3
    hits = db.search(TABLE_3_QUERY, layer=layer, k=10)
    positions = hits.loc[hits["query_token"].str.strip() == word, "query_position"]
    return layer, (None if positions.empty else hits[hits["query_position"] == positions.min()])


def max_neighbours_are_names(context: Context) -> Outcome:
    layer, rows = table_3_neighbours(context, "Max")
    if rows is None:
        return Outcome("'Max' is not one token", NOT_MEASURED, None, "the tokenizer splits the query word")
    names = int((rows["category"] == "NAME").sum())
    ours = f"layer {layer}: {names} of {len(rows)} neighbours of 'Max' are names ({' '.join(rows['token'].str.strip())})"
    return binomial_outcome(ours, names, len(rows), 0.5, "names among the neighbours")


def dog_neighbours_are_animals(context: Context) -> Outcome:
    layer, rows = table_3_neighbours(context, "dog")
    if rows is None:
        return Outcome("'dog' is not one token", NOT_MEASURED, None, "the tokenizer splits the query word")
    animals = int(((rows["category"] == "ANIMAL") & (rows["token"].str.strip() != "dog")).sum())
    ours = f"layer {layer}: {animals} of {len(rows)} neighbours of 'dog' are other animals ({' '.join(rows['token'].str.strip())})"
    chance = float((context.sgatlin_db.metadata["category"] == "ANIMAL").mean())
    return binomial_outcome(ours + f"; animals are {chance:.3f} of the database", animals, len(rows), chance,
                            "other animals among the neighbours")


def _nie_cells(context: Context) -> tuple[dict, int]:
    summary = context.sgatlin_nie
    return {(row.layer, row.position): round(float(row.nie), 3) for row in summary.itertuples()}, \
        context.model("sgatlin-stories").config.n_layers


def nie_noun_vs_final(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    noun = round(sum(cell.get((l, "noun"), 0.0) for l in range(n_layers)) / n_layers, 3)
    final = round(sum(cell.get((l, "final"), 0.0) for l in range(n_layers)) / n_layers, 3)
    return no_interval(f"mean over single layers: noun {noun:.3f}, final {final:.3f}", noun, noun > final, "one NIE per cell (mean over pairs)")


def nie_strongest_layer(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    noun = [cell.get((l, "noun"), math.nan) for l in range(n_layers)]
    best = max(range(n_layers), key=lambda l: -math.inf if math.isnan(noun[l]) else noun[l])
    ours = f"layer {best} (noun position: " + ", ".join(f"L{l} {v:.2f}" for l, v in enumerate(noun)) + ")"
    return no_interval(ours, best, best == 1, "one NIE per cell (mean over pairs)")


def nie_all_layers(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    best = max(cell.get((l, "noun"), -math.inf) for l in range(n_layers))
    together = cell.get(("all", "noun"), math.nan)
    ours = f"all layers {together:.2f} vs best single layer {best:.2f} (noun position)"
    return no_interval(ours, together, round(together, 2) >= 1.5 * round(best, 2), "one NIE per cell (mean over pairs)")


def nie_moderate(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    best = round(max(cell.get((l, "noun"), -math.inf) for l in range(n_layers)), 2)
    return no_interval(f"largest single-layer NIE {best:.2f} (noun position)", best, 0.05 <= best <= 0.6,
                       "one NIE per cell (mean over pairs)")


def neurons_used(context: Context) -> Outcome:
    used = [report.fraction_used for report in context.sgatlin_usage.values()]
    low = round(min(used) * 100, 1)
    ours = "per layer " + ", ".join(f"{u:.1%}" for u in used) + f" of neurons fire at least once ({len(context.sgatlin_db)} tokens)"
    return no_interval(ours, low, low >= 90.0, "one count per layer")


def usage_gini(context: Context) -> Outcome:
    ginis = [report.gini for report in context.sgatlin_usage.values()]
    mean = round(sum(ginis) / len(ginis), 2)
    ours = f"mean {mean:.2f} (per layer " + ", ".join(f"{g:.2f}" for g in ginis) + ")"
    return no_interval(ours, mean, abs(mean - 0.58) <= 0.10, "one Gini per layer")


def subkey_coactivation(context: Context) -> Outcome:
    reports = context.sgatlin_usage
    layer = max(max(reports) - 1, min(reports))
    shared, other = reports[layer].shared_subkey_coactivation, reports[layer].other_pair_coactivation
    if shared is None or other is None:
        return Outcome("no shared-subkey pairs", NOT_MEASURED, None, "the layer has no product-key subkeys")
    ratio = round(shared / other, 2) if other else math.inf
    ours = f"layer {layer}: P(j|i) {shared:.4f} for shared-subkey pairs vs {other:.4f} for other pairs ({ratio:.2f}x)"
    return no_interval(ours, ratio, ratio > 1.1, "one co-activation ratio")


CLAIMS: tuple[Claim, ...] = (
    Claim("s000-isoflop", "000", "sec. 3.1, Fig. 1 and 3",
          "At equal training FLOPs, sgatlin reaches a lower test perplexity than dense (GELU, SwiGLU) and MoE FFNs",
          "lower perplexity at all four budgets, 1e17-6e18 FLOPs (SlimPajama)",
          "reproduced when sgatlin's loss is lower than GELU's and SwiGLU's at every ladder scale, beyond the seed "
          "spread (ladder_report.verdicts)", ladder_sgatlin_vs_dense),
    Claim("s000-nonlinearity", "000", "sec. 3.2, Table 1",
          "Adding a nonlinearity to the sgatlin neurons makes perplexity worse",
          "ReLU 21.09, GELU 20.84, Swish 20.64 vs sgatlin 18.19 (6e18 FLOPs, 1.2B)",
          "reproduced when every nonlinear variant has the higher loss (ladder_report.verdicts)", ladder_nonlinearity),
    Claim("s000-peer-router", "000", "sec. 3.2, Table 1",
          "sgatlin's gating network is as good as PEER's router",
          "PEER router 18.30 vs sgatlin 18.19",
          "reproduced when PEER does not beat sgatlin at any ladder scale (ladder_report.verdicts)", ladder_peer),
    Claim("s000-semantic-clusters", "000", "sec. 4.1, Fig. 5",
          "Circuits of the second layer cluster by the meaning of their tokens",
          "clusters partly explained by token semantics (by eye, no number)",
          f"share of neighbours with the same category (other tokens) >= {CLUSTER_LIFT}x the shuffled baseline",
          semantic_clusters),
    Claim("s000-names-pronouns", "000", "sec. 4.1, Fig. 9",
          "After the second layer, names and pronouns are processed by similar circuits",
          "names cluster near pronouns from layer 3 on (by eye)",
          f"pronouns among the 10 nearest circuits of names >= {CLUSTER_LIFT}x chance, mean over layers 2+ (from 0)",
          names_near_pronouns),
    Claim("s000-max-names", "000", "sec. 4.2, Table 3",
          "The nearest circuits of a character name are circuits of other names",
          "10 of 10 neighbours of 'Max' are names",
          "names are most of the 10 neighbours (penultimate layer): the exact binomial interval of the share above 0.5",
          max_neighbours_are_names),
    Claim("s000-dog-animals", "000", "sec. 4.2, Table 3",
          "The nearest circuits of an animal noun include other animals",
          "5 of 10 neighbours of 'dog' are other animals",
          "other animals among the 10 neighbours above the animals' share of the database (penultimate layer): "
          "the exact binomial interval of the share above that chance", dog_neighbours_are_animals),
    Claim("s000-nie-noun", "000", "sec. 4.3, Fig. 7",
          "Patching FFN circuits at the noun moves a fact more than patching at the final token",
          "noun > final", "comparison of the mean NIE over single layers", nie_noun_vs_final),
    Claim("s000-nie-layer", "000", "sec. 4.3, Fig. 7",
          "Among single layers, patching the second layer has the strongest effect",
          "the second layer (layer 1 from 0)", "the largest single-layer NIE at the noun is layer 1", nie_strongest_layer),
    Claim("s000-nie-all", "000", "sec. 4.3, Fig. 7",
          "Patching all layers together has an outsized effect (the layers work in conjunction)",
          "all layers far above any single layer", "NIE of all layers >= 1.5x the best single layer (noun)", nie_all_layers),
    Claim("s000-nie-moderate", "000", "sec. 4.3, Fig. 7",
          "The effects of patching single layers are of moderate magnitude",
          "moderate (facts are also stored elsewhere)", "largest single-layer NIE between 0.05 and 0.6", nie_moderate),
    Claim("s000-neurons-used", "000", "app. C.1, Fig. 8",
          "Almost all sgatlin neurons are used", "almost all",
          "every layer uses >= 90% of its neurons on the held-out sample", neurons_used),
    Claim("s000-gini", "000", "app. C.1, Fig. 8",
          "Neuron activation frequency (each unique token counted once) is moderately unequal",
          "Gini 0.58 on average", "mean Gini over layers within 0.10 of 0.58", usage_gini),
    Claim("s000-subkey", "000", "app. C.1, Fig. 8",
          "Neurons that share a product-key subkey co-activate more than other pairs",
          "shared-subkey pairs preferably co-activate", "mean P(j active | i active) of shared-subkey pairs > 1.1x other pairs", subkey_coactivation),
)
