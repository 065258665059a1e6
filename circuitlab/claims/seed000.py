"""Seed 000's claims (sparsely gated linear neurons, sgatlin), measured on sgatlin-stories and gelu-stories.

The iso-FLOP rows (sec. 3) read the ladder's results (results/ladder/ladder_results.json); the circuit rows
(sec. 4, app. C) search the circuit database of held-out stories and patch the facts the model knows.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from circuitlab.claims.context import RANDOM_SGATLIN, Context
from circuitlab.claims.nulls import bootstrap_pairs, enrichment, enrichment_per_source, nie_cells, semantic_lift
from circuitlab.claims.rows import (
    CLUSTER_LIFT, NOT_MEASURED, Claim, Outcome, binomial_outcome, decide, judged, no_interval, scale_judgement,
)
from circuitlab.stats import Estimate

TABLE_3_QUERY = "Once upon a time, there was a big dog named Max. Max had a red ball that he played with every day."

# seed 000's iso-FLOP budgets (sec. 3.1): 1e17 to 6e18 training FLOPs
PAPER_BUDGETS = (1e17, 6e18)


def ladder_scale(results: dict[str, Any], archs: tuple[str, ...]) -> tuple[tuple[float, float], str, float | None]:
    """The smallest and largest budget at which every one of `archs` has a finished run, how many sizes and
    seeds each such budget had and the tokens each run saw, and the most passes any of those runs made over the
    natural stories (None when the ladder did not record them). Runs of a learning-rate grid are left out."""
    from collections import Counter

    lr = results.get("settings", {}).get("lr")
    runs = [run for run in results.get("runs", []) if run.get("arch") in archs and run.get("status", "done") == "done"
            and (lr is None or run.get("lr", lr) == lr)]
    budgets = sorted(b for b in {float(run["budget_flops"]) for run in runs}
                     if all(any(r["arch"] == a and float(r["budget_flops"]) == b for r in runs) for a in archs))
    if not budgets:
        return (0.0, 0.0), "no finished runs", None
    seeds = Counter((run["arch"], float(run["budget_flops"]), run.get("size", run.get("scale"))) for run in runs)
    parts = []
    for budget in budgets:
        mine = [r for r in runs if float(r["budget_flops"]) == budget]
        tokens = [float(r.get("tokens", 0)) for r in mine]
        counts = [n for (a, b, s), n in seeds.items() if b == budget]
        per_size = f"{max(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        parts.append(f"{budget:.2g} FLOPs: {len({r.get('size', r.get('scale')) for r in mine})} size(s), "
                     f"{per_size} seed(s) per design and size, {min(tokens) / 1e6:.1f}-{max(tokens) / 1e6:.1f}M tokens a run")
    passes = [float(r["natural_passes"]) for r in runs if r.get("natural_passes") is not None]
    most = max(passes) if passes else None
    if most is not None:
        parts.append(f"at most {most:.2f} passes over the natural stories")
    return (budgets[0], budgets[-1]), "; ".join(parts), most


def ladder_verdict(context: Context, index: int, archs: tuple[str, ...]) -> Outcome | None:
    """Verdict `index` of ladder_report.verdicts (0: sgatlin vs dense, 1: PEER layer, 2: nonlinearity, 3: PEER
    router) on the iso-FLOP ladder's results, read against the paper's budgets; None when no ladder has been
    run or it lacks the runs. The estimate is the gap at the largest budget (ours minus the best other design,
    each at its best size; nats/token) with its 95% interval over seeds where the ladder ran several."""
    if context.ladder_results is None or not Path(context.ladder_results).is_file():
        return None
    from circuitlab.training.ladder_report import load_results, verdicts

    results = load_results(context.ladder_results)
    found = verdicts(results)[index]
    if found.verdict == "not measured":
        return None
    ours, detail, passes = ladder_scale(results, archs)
    scale = scale_judgement(ours, PAPER_BUDGETS, "training FLOPs", repeats=passes)
    text = f"{found.verdict}: {found.detail} ({detail})"
    largest = found.effects[-1] if found.effects else None
    estimate = None if largest is None else Estimate(largest["gap"], largest["low"], largest["high"])
    if scale is not None:
        where = "" if largest is None else (
            f"; the estimate is {largest['ours']}'s natural held-out loss minus {largest['other']}'s (nats/token, each "
            f"at its best size) at the largest budget, {largest['budget']:.2g} FLOPs")
        return Outcome(text, scale.verdict, None if estimate is None else estimate.value, scale.reason + where, estimate)
    if estimate is not None and estimate.low is not None:
        # PEER's claims are that it does not beat sgatlin (its gap, PEER minus sgatlin, above 0); the others, that
        # sgatlin is lower (a gap below 0)
        return judged(text, estimate, 0.0, ">" if index in (1, 3) else "<", note="95% interval over seeds at the largest budget")
    return no_interval(text, None, found.verdict == "supported",
                       "the ladder ran one seed per size; an interval needs several")


def ladder_sgatlin_vs_dense(context: Context) -> Outcome:
    """The dense half of the claim decides the row; the MoE half (ladder verdict 4, when the sweep planned MoE)
    is reported beside it, since the paper's claim names MoE too."""
    outcome = ladder_verdict(context, 0, ("sgatlin", "mlp", "swiglu"))
    if outcome is None:
        return equal_token_losses(context)
    from circuitlab.training.ladder_report import load_results, verdicts

    found = verdicts(load_results(context.ladder_results))
    if len(found) > 4:
        moe = found[4]
        outcome = dataclasses.replace(outcome, ours=f"{outcome.ours}; against the MoE: {moe.verdict}, {moe.detail}")
    return outcome


def peer_router_swap(context: Context) -> Outcome:
    """Seed 000's router swap: the ladder's sgatlin + PEER router ablation (PEER's router, sgatlin's experts)
    against sgatlin at the smallest budget."""
    return ladder_verdict(context, 3, ("sgatlin", "sgatlin-peer-router")) or Outcome(
        "-", NOT_MEASURED, None, "the committed ladder has no sgatlin + PEER router runs (the ablation "
        "`sgatlin-peer-router` that scripts/gpu_ladder.sh trains); the ladder's whole-layer swap is row s000-peer-layer")


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


DENSE = "gelu-stories"
EMBEDDING = "raw token embeddings (sgatlin W_E)"


def _cluster_nulls(context: Context, measure: Any, text: str = "generated") -> dict[str, float]:
    """The same measurement on the dense model's MLP activations, on the randomly initialised sgatlin model,
    with shuffled labels and on the raw token embeddings (circuitlab.claims.nulls.EmbeddingNeighbours);
    `measure(db, shuffle)` -> Estimate, on the same held-out text."""
    return {"gelu-stories": measure(context.db(DENSE, text), False).value,
            "random-init sgatlin": measure(context.db(RANDOM_SGATLIN, text), False).value,
            "shuffled labels": measure(context.db("sgatlin-stories", text), True).value,
            EMBEDDING: measure(context.embedding_db(text), False).value}


def _semantic_clusters(context: Context, text: str) -> Outcome:
    db = context.db("sgatlin-stories", text)
    layer = min(1, max(db.layers))  # seed 000, Figure 5: the second layer
    sizes = context.sizes

    def lift(database: Any, shuffle: bool) -> Any:
        return semantic_lift(database, layer, sizes.semantic_queries, sizes.semantic_shuffles, shuffle_queries=shuffle)

    estimate = lift(db, False)
    ours = (f"{text} held-out text, layer {layer}: same-category share of other-token neighbours {estimate.text(2)}x "
            "the shuffled labels'")
    return judged(ours, estimate, CLUSTER_LIFT, ">", _cluster_nulls(context, lift, text),
                  f"bootstrap over up to {sizes.semantic_queries} query circuits")


def semantic_clusters(context: Context) -> Outcome:
    return _semantic_clusters(context, "generated")


def semantic_clusters_natural(context: Context) -> Outcome:
    return _semantic_clusters(context, "natural")


def category_enrichment(db: Any, layer: int, source: str, target: str, n_points: int, k: int = 10) -> float:
    """Share of the k nearest circuits (within a seeded sample) of `source`-category circuits that are in the
    `target` category, divided by the target's share of the sample (1 = chance)."""
    shares, chance = enrichment_per_source(db, layer, source, target, n_points, k)
    return math.nan if shares.size == 0 or chance == 0 else float(shares.mean()) / chance


def _names_near_pronouns(context: Context, text: str) -> Outcome:
    db = context.db("sgatlin-stories", text)
    late_layers = [layer for layer in db.layers if layer >= 2]  # "after the second layer"
    points = context.sizes.enrichment_points

    def lift(database: Any, shuffle: bool) -> Any:
        return enrichment(database, late_layers, "NAME", "PRONOUN", points, shuffle=shuffle)

    estimate = lift(db, False)
    if math.isnan(estimate.value):
        return Outcome("no name circuits in the sample", NOT_MEASURED, None, "too few held-out stories for names")
    ours = (f"{text} held-out text: pronouns among the 10 nearest circuits of names, layers "
            f"{', '.join(map(str, late_layers))}: {estimate.text(2)}x chance")
    return judged(ours, estimate, CLUSTER_LIFT, ">", _cluster_nulls(context, lift, text),
                  "bootstrap over the name circuits of the sample")


def names_near_pronouns(context: Context) -> Outcome:
    return _names_near_pronouns(context, "generated")


def names_near_pronouns_natural(context: Context) -> Outcome:
    return _names_near_pronouns(context, "natural")


def table_3_neighbours(context: Context, word: str, db: Any = None) -> Any:
    db = context.sgatlin_db if db is None else db
    layer = max(max(db.layers) - 1, 0)  # the penultimate layer, as seed 000 Table 3
    hits = db.search(TABLE_3_QUERY, layer=layer, k=10)
    positions = hits.loc[hits["query_token"].str.strip() == word, "query_position"]
    return layer, (None if positions.empty else hits[hits["query_position"] == positions.min()])


def _table_3_share(context: Context, word: str, category: str, db: Any) -> float | None:
    _, rows = table_3_neighbours(context, word, db)
    if rows is None:
        return None
    return float(((rows["category"] == category) & (rows["token"].str.strip() != word)).mean())


def _table_3_nulls(context: Context, word: str, category: str) -> dict[str, float | None]:
    return {"gelu-stories": _table_3_share(context, word, category, context.db(DENSE)),
            "random-init sgatlin": _table_3_share(context, word, category, context.db(RANDOM_SGATLIN))}


def max_neighbours_are_names(context: Context) -> Outcome:
    layer, rows = table_3_neighbours(context, "Max")
    if rows is None:
        return Outcome("'Max' is not one token", NOT_MEASURED, None, "the tokenizer splits the query word")
    names = int((rows["category"] == "NAME").sum())
    ours = f"layer {layer}: {names} of {len(rows)} neighbours of 'Max' are names ({' '.join(rows['token'].str.strip())})"
    return binomial_outcome(ours, names, len(rows), 0.5, "names among the neighbours",
                            _table_3_nulls(context, "Max", "NAME"))


def dog_neighbours_are_animals(context: Context) -> Outcome:
    layer, rows = table_3_neighbours(context, "dog")
    if rows is None:
        return Outcome("'dog' is not one token", NOT_MEASURED, None, "the tokenizer splits the query word")
    animals = int(((rows["category"] == "ANIMAL") & (rows["token"].str.strip() != "dog")).sum())
    ours = f"layer {layer}: {animals} of {len(rows)} neighbours of 'dog' are other animals ({' '.join(rows['token'].str.strip())})"
    chance = float((context.sgatlin_db.metadata["category"] == "ANIMAL").mean())
    return binomial_outcome(ours + f"; animals are {chance:.3f} of the database", animals, len(rows), chance,
                            "other animals among the neighbours", _table_3_nulls(context, "dog", "ANIMAL"))


def _n_layers(context: Context, name: str = "sgatlin-stories") -> int:
    return context.model(name).config.n_layers


def _nie_row(context: Context, statistic: Any, text: Any, threshold: Any, direction: str,
             facts: str = "planted") -> Outcome:
    """An NIE statistic of sgatlin-stories bootstrapped over fact pairs (the planted facts, or those mined from
    the natural training split: `facts` "natural"), with gelu-stories' on the same facts as its null."""
    n_layers = _n_layers(context)
    table = context.nie_table("sgatlin-stories", facts)
    estimate = bootstrap_pairs(table, lambda cells: statistic(cells, n_layers))
    dense = statistic(nie_cells(context.nie_table(DENSE, facts)), _n_layers(context, DENSE))
    pairs = len(set(table["pair"]))
    ours = text(nie_cells(table), n_layers, estimate) + ("" if facts == "planted" else
                                                         f" ({pairs} pairs of facts mined from the natural training split)")
    return judged(ours, estimate, threshold, direction, {"gelu-stories": dense},
                  f"bootstrap over {pairs} {'natural ' if facts == 'natural' else ''}fact pairs")


def _noun_minus_final(cells: dict, n_layers: int) -> float:
    return sum(cells.get((l, "noun"), 0.0) - cells.get((l, "final"), 0.0) for l in range(n_layers)) / n_layers


def nie_noun_vs_final(context: Context, facts: str = "planted") -> Outcome:
    def text(cells: dict, n: int, estimate: Any) -> str:
        noun = sum(cells.get((l, "noun"), 0.0) for l in range(n)) / n
        final = sum(cells.get((l, "final"), 0.0) for l in range(n)) / n
        return f"mean over single layers: noun {noun:.3f}, final {final:.3f} (noun minus final {estimate.text(3)})"
    return _nie_row(context, _noun_minus_final, text, 0.0, ">", facts)


def _layer_1_margin(cells: dict, n_layers: int) -> float:
    others = [cells.get((l, "noun"), math.nan) for l in range(n_layers) if l != 1]
    return cells.get((1, "noun"), math.nan) - max(others)


def nie_strongest_layer(context: Context, facts: str = "planted") -> Outcome:
    def text(cells: dict, n: int, estimate: Any) -> str:
        noun = [cells.get((l, "noun"), math.nan) for l in range(n)]
        best = max(range(n), key=lambda l: -math.inf if math.isnan(noun[l]) else noun[l])
        return (f"layer {best} (noun position: " + ", ".join(f"L{l} {v:.2f}" for l, v in enumerate(noun))
                + f"; layer 1 minus the best other {estimate.text(3)})")
    return _nie_row(context, _layer_1_margin, text, 0.0, ">", facts)


def _all_over_best(cells: dict, n_layers: int) -> float:
    best = max(cells.get((l, "noun"), -math.inf) for l in range(n_layers))
    return cells.get(("all", "noun"), math.nan) / best if best > 0 else math.nan


def nie_all_layers(context: Context, facts: str = "planted") -> Outcome:
    def text(cells: dict, n: int, estimate: Any) -> str:
        best = max(cells.get((l, "noun"), -math.inf) for l in range(n))
        return (f"all layers {cells.get(('all', 'noun'), math.nan):.2f} vs best single layer {best:.2f} (noun position; "
                f"ratio {estimate.text(2)})")
    return _nie_row(context, _all_over_best, text, 1.5, ">", facts)


def _best_single(cells: dict, n_layers: int) -> float:
    return max(cells.get((l, "noun"), -math.inf) for l in range(n_layers))


def nie_moderate(context: Context, facts: str = "planted") -> Outcome:
    def text(cells: dict, n: int, estimate: Any) -> str:
        return f"largest single-layer NIE {estimate.text(2)} (noun position)"
    return _nie_row(context, _best_single, text, (0.05, 0.6), "within", facts)


def _random_usage(context: Context, text: str = "generated") -> Any:
    """Neuron usage of the randomly initialised sgatlin model on the same stories (the usage rows' null)."""
    return context.usage(RANDOM_SGATLIN, text)


def _stories_interval(resamples, value: float, digits: int) -> tuple[Estimate, str]:
    """`value` (rounded to `digits`) with the percentile interval of `resamples` (one statistic per resample of
    the stories), and a note on how it was drawn. A statistic of the distinct tokens in a sample shifts when a
    resample repeats stories; where more than 97.5% of the resamples fall on one side of the value, the
    interval would not hold it and none is given (the note says so)."""
    import numpy as np

    below = float((np.asarray(resamples) < value).mean())
    if not 0.025 <= below <= 0.975:
        return Estimate(round(value, digits)), (f"{below:.0%} of {len(resamples)} resamples of the stories lie below "
                                                "the value: the bootstrap is biased here")
    low, high = np.percentile(resamples, [2.5, 97.5])
    note = (f"95% interval: percentile bootstrap over the database's stories ({len(resamples)} resamples, "
            f"{below:.0%} of them below the point value)")
    return Estimate(round(value, digits), round(float(low), digits), round(float(high), digits)), note


def neurons_used(context: Context, text: str = "generated") -> Outcome:
    used = [report.fraction_used for report in context.usage("sgatlin-stories", text).values()]
    null = round(min(r.fraction_used for r in _random_usage(context, text).values()) * 100, 1)
    ours = ("per layer " + ", ".join(f"{u:.1%}" for u in used) + " of neurons fire at least once "
            f"({len(context.db('sgatlin-stories', text))} tokens of {text} held-out text); the least of the layers is judged")
    # a count of neurons that ever fire shrinks when a resample repeats stories: _stories_interval gives no
    # interval when the resamples do not straddle the value
    resampled = context.usage_resamples("sgatlin-stories", text)["fraction_used"].min(axis=1) * 100
    estimate, note = _stories_interval(resampled, min(used) * 100, 1)
    return decide(ours, estimate, 90.0, ">", {"random-init sgatlin": null}, note=note, why=f"one count per layer; {note}")


def usage_gini(context: Context, text: str = "generated") -> Outcome:
    ginis = [report.gini for report in context.usage("sgatlin-stories", text).values()]
    mean = round(sum(ginis) / len(ginis), 2)
    random_ginis = [r.gini for r in _random_usage(context, text).values()]
    ours = f"{text} held-out text: mean {mean:.2f} (per layer " + ", ".join(f"{g:.2f}" for g in ginis) + ")"
    estimate, note = _stories_interval(context.usage_resamples("sgatlin-stories", text)["gini"].mean(axis=1),
                                       sum(ginis) / len(ginis), 3)
    return decide(ours, estimate, (0.48, 0.68), "within",
                  {"random-init sgatlin": round(sum(random_ginis) / len(random_ginis), 2)}, note=note, why=note)


def subkey_coactivation(context: Context, text: str = "generated") -> Outcome:
    reports = context.usage("sgatlin-stories", text)
    layer = max(max(reports) - 1, min(reports))
    shared, other = reports[layer].shared_subkey_coactivation, reports[layer].other_pair_coactivation
    if shared is None or other is None:
        return Outcome("no shared-subkey pairs", NOT_MEASURED, None, "the layer has no product-key subkeys")
    ratio = round(shared / other, 2) if other else math.inf
    ours = f"{text} held-out text, layer {layer}: P(j|i) {shared:.4f} for shared-subkey pairs vs {other:.4f} for other pairs ({ratio:.2f}x)"
    random = _random_usage(context, text)[layer]
    null = (round(random.shared_subkey_coactivation / random.other_pair_coactivation, 2)
            if random.shared_subkey_coactivation is not None and random.other_pair_coactivation else None)
    return decide(ours, Estimate(ratio), 1.1, ">", {"random-init sgatlin": null}, why="one co-activation ratio")


CLAIMS: tuple[Claim, ...] = (
    Claim("s000-isoflop", "000", "sec. 3.1, Fig. 1 and 3",
          "At equal training FLOPs, sgatlin reaches a lower test perplexity than dense (GELU, SwiGLU) and MoE FFNs",
          "lower perplexity at all four budgets, 1e17-6e18 FLOPs (SlimPajama)",
          "reproduced when sgatlin's loss is lower than GELU's and SwiGLU's at every ladder budget, beyond the seed "
          "spread (ladder_report.verdicts); the comparison with the MoE is reported beside it", ladder_sgatlin_vs_dense),
    Claim("s000-nonlinearity", "000", "sec. 3.2, Table 1",
          "Adding a nonlinearity to the sgatlin neurons makes perplexity worse",
          "ReLU 21.09, GELU 20.84, Swish 20.64 vs sgatlin 18.19 (6e18 FLOPs, 1.2B)",
          "reproduced when every nonlinear variant has the higher loss (ladder_report.verdicts)", ladder_nonlinearity),
    Claim("s000-peer-router", "000", "sec. 3.2, Table 1",
          "sgatlin's gating network is as good as PEER's router",
          "PEER router 18.30 vs sgatlin 18.19",
          "sgatlin with PEER's router swapped in does not beat sgatlin at equal FLOPs", peer_router_swap),
    Claim("s000-peer-layer", "000", "sec. 3.2, Table 1",
          "sgatlin's gating network is as good as PEER's router",
          "PEER router 18.30 vs sgatlin 18.19",
          "the whole PEER layer does not beat sgatlin at any ladder scale (ladder_report.verdicts), read against the "
          "paper's budgets", ladder_peer, config="whole PEER layer (the ladder), not a router swap"),
    Claim("s000-semantic-clusters", "000", "sec. 4.1, Fig. 5",
          "Circuits of the second layer cluster by the meaning of their tokens",
          "clusters partly explained by token semantics (by eye, no number)",
          f"the 95% interval (over query circuits) of the same-category share of other-token neighbours, over the "
          f"shuffled labels', above {CLUSTER_LIFT}x; nulls: gelu-stories' MLP activations, a random-init sgatlin, "
          "shuffled labels, raw token embeddings (sgatlin's W_E row of each circuit's token; neighbours among other "
          "tokens')",
          semantic_clusters),
    Claim("s000-names-pronouns", "000", "sec. 4.1, Fig. 9",
          "After the second layer, names and pronouns are processed by similar circuits",
          "names cluster near pronouns from layer 3 on (by eye)",
          f"the 95% interval (over name circuits) of pronouns among their 10 nearest circuits over chance, mean over "
          f"layers 2+ (from 0), above {CLUSTER_LIFT}x; nulls as the clustering row",
          names_near_pronouns),
    Claim("s000-semantic-clusters-natural", "000", "sec. 4.1, Fig. 5",
          "Circuits of the second layer cluster by the meaning of their tokens (natural held-out stories)",
          "clusters partly explained by token semantics (by eye, no number)",
          "as s000-semantic-clusters, on the natural held-out split (words labelled by circuitlab.data's lexicon)",
          semantic_clusters_natural),
    Claim("s000-names-pronouns-natural", "000", "sec. 4.1, Fig. 9",
          "After the second layer, names and pronouns are processed by similar circuits (natural held-out stories)",
          "names cluster near pronouns from layer 3 on (by eye)",
          "as s000-names-pronouns, on the natural held-out split (words labelled by circuitlab.data's lexicon)",
          names_near_pronouns_natural),
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
          "noun > final", "the 95% interval (over fact pairs) of the mean single-layer NIE at the noun minus at the "
          "final token above 0; null: gelu-stories", nie_noun_vs_final),
    Claim("s000-nie-layer", "000", "sec. 4.3, Fig. 7",
          "Among single layers, patching the second layer has the strongest effect",
          "the second layer (layer 1 from 0)", "the 95% interval (over fact pairs) of layer 1's NIE at the noun minus the best other layer's above 0; null: "
          "gelu-stories", nie_strongest_layer),
    Claim("s000-nie-all", "000", "sec. 4.3, Fig. 7",
          "Patching all layers together has an outsized effect (the layers work in conjunction)",
          "all layers far above any single layer", "the 95% interval (over fact pairs) of the all-layer NIE over the best single layer's (noun) above 1.5; null: "
          "gelu-stories", nie_all_layers),
    Claim("s000-nie-moderate", "000", "sec. 4.3, Fig. 7",
          "The effects of patching single layers are of moderate magnitude",
          "moderate (facts are also stored elsewhere)", "the 95% interval (over fact pairs) of the largest single-layer NIE within 0.05-0.6; null: gelu-stories",
          nie_moderate),
    Claim("s000-neurons-used", "000", "app. C.1, Fig. 8",
          "Almost all sgatlin neurons are used", "almost all",
          "the 95% interval (over stories) of the least layer's share of neurons that fire on the held-out sample "
          "above 90%; null: random-init sgatlin", neurons_used),
    Claim("s000-gini", "000", "app. C.1, Fig. 8",
          "Neuron activation frequency (each unique token counted once) is moderately unequal",
          "Gini 0.58 on average", "the 95% interval (over stories) of the mean Gini over layers within 0.10 of 0.58; "
          "null: random-init sgatlin", usage_gini),
    Claim("s000-subkey", "000", "app. C.1, Fig. 8",
          "Neurons that share a product-key subkey co-activate more than other pairs",
          "shared-subkey pairs preferably co-activate", "mean P(j active | i active) of shared-subkey pairs > 1.1x other pairs", subkey_coactivation),
)
