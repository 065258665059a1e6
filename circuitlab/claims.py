"""The papers' headline claims, each measured on the shipped models: the registry behind analyses/claims.md.

Every row names a claim of seed 000 (sgatlin), seed 002 (legible attention and NC-FFN) or seed 003 (parity
bottleneck), the paper's number, our number, a verdict and the function that measured it. A row's verdict
follows the rule written in its `rule` field; the general rules are `VERDICT_RULES`. Rows whose experiment
the shipped models cannot run read the committed results of the runs that can: the iso-FLOP ladder
(results/ladder/ladder_results.json), seed 002's pressure sweep (results/legible-sweep/legibility_regimes.json)
and the parity report (results/parity/parity_report.json), each applying the row's rule in code. Rows with no
such run (an SAE baseline) say "not measured" and why, and read their result from `analyses/results/*.json`
once a run writes one there:

    {"claims": {"s000-isoflop": {"ours": "sgatlin 21.3 vs GELU 23.0 ppl at 1e17 FLOPs", "value": 21.3,
                                 "verdict": "reproduced", "reason": "...", "measured_by": "circuitlab ladder"}}}

`scripts/claims.py` writes the file; `measure_claims` returns the rows; `read_claims` parses the file back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from circuitlab.errors import UserError

VERDICTS = ("reproduced", "not reproduced", "not measured")
REPRODUCED, NOT_REPRODUCED, NOT_MEASURED = VERDICTS

VERDICT_RULES = """\
- **Percentages** (seed 002's legibility columns): reproduced when ours lies in the paper's range (or value)
  widened by 5 percentage points on each side (`PERCENT_TOLERANCE`); the paper's own designs and seeds
  spread over 5-20 points.
- **Comparisons** (A > B, the strongest layer, a count of neighbours): reproduced when the comparison holds on
  the numbers as printed (rounded as shown).
- **Clustering** (seed 000's "semantic clusters"): reproduced when the share of neighbours in the category is
  at least 1.5x what the shuffled labels give (`CLUSTER_LIFT`).
- **Quality parity** (seed 002): reproduced when the perplexity is within 10% of the baseline's
  (`PARITY_PPL_RATIO`); the paper calls LAMBADA perplexity 115.7 against 109.4 (6% apart) parity.
- **Not measured**: the experiment needs a set-up the shipped models lack (its reason says which); the row
  fills in from `analyses/results/*.json` when a run writes its result there.

Every number is measured by the function named in its row, on the shipped models (d_model 256, 4 layers; 6 for
legible-stories; trained on children's stories) or read by it from the committed results of the iso-FLOP
ladder (results/ladder), seed 002's pressure sweep (results/legible-sweep: four 6-layer models, one per
regime) and the parity report (results/parity), not on the papers' corpora and scales: a verdict says whether
the claim's pattern holds on these models, not that the paper's experiment was repeated."""

PERCENT_TOLERANCE = 5.0
CLUSTER_LIFT = 1.5
PARITY_PPL_RATIO = 1.10

TABLE_3_QUERY = "Once upon a time, there was a big dog named Max. Max had a red ball that he played with every day."


@dataclass(frozen=True)
class Sizes:
    """How much held-out data each measurement sees."""

    db_stories: int  # generated held-out stories in the circuit database (about 70 tokens each)
    semantic_queries: int
    semantic_shuffles: int
    enrichment_points: int
    nie_pairs: int
    legibility_windows: int  # windows of natural held-out text
    legibility_seq_len: int
    coherence_directions: int

    @classmethod
    def full(cls) -> Sizes:
        # seed 002 probes 12 batches of 8 x 256 tokens; seed 000 collects 128 stories of up to 1024 tokens
        return cls(db_stories=400, semantic_queries=2000, semantic_shuffles=20, enrichment_points=4000,
                   nie_pairs=128, legibility_windows=96, legibility_seq_len=256, coherence_directions=4096)

    @classmethod
    def fast(cls) -> Sizes:
        return cls(db_stories=24, semantic_queries=150, semantic_shuffles=3, enrichment_points=600,
                   nie_pairs=6, legibility_windows=12, legibility_seq_len=64, coherence_directions=512)


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: `ours` as printed in the file, `value` the headline number (None if none)."""

    ours: str
    verdict: str
    value: float | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


Measure = Callable[["Context"], Outcome]


@dataclass(frozen=True)
class Claim:
    id: str
    seed: str  # "000" | "002" | "003"
    place: str  # section / figure / table
    claim: str  # one line, our words
    paper: str  # the paper's number or statement
    rule: str  # how this row's verdict is decided
    measure: Measure | None = None
    blocked: str = ""  # why the shipped models cannot measure it (rows without `measure`)

    @property
    def measured_by(self) -> str:
        return f"{self.measure.__module__}.{self.measure.__qualname__}" if self.measure else ""


@dataclass(frozen=True)
class ClaimRow:
    """One row of analyses/claims.md."""

    id: str
    seed: str
    place: str
    claim: str
    paper: str
    ours: str
    verdict: str
    reason: str
    rule: str
    measured_by: str
    value: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# --- the measuring context: models and shared computations, each made once --------------------------------


@dataclass
class Context:
    """Models (by shipped name, from `models_dir` when given) and the analyses several rows share."""

    fast: bool = False
    models_dir: Path | None = None
    results_dir: Path | None = None
    ladder_results: Path | None = None  # results/ladder/ladder_results.json of `circuitlab ladder`, when run
    legible_sweep: Path | None = None  # results/legible-sweep/legibility_regimes.json of scripts/legibility_report.py
    parity_report: Path | None = None  # results/parity/parity_report.json of scripts/parity_report.py
    progress: bool = False
    _models: dict[str, Any] = field(default_factory=dict)

    @property
    def sizes(self) -> Sizes:
        return Sizes.fast() if self.fast else Sizes.full()

    def folder(self, name: str) -> Path:
        from circuitlab.architectures.checkpoint import resolve_model_folder

        if self.models_dir is not None:
            folder = Path(self.models_dir) / name
            if not folder.is_dir():
                raise UserError(f"{folder} does not exist: the claims read the models {MODELS} from the models folder")
            return folder
        return resolve_model_folder(name)

    def model(self, name: str) -> Any:
        if name not in self._models:
            from circuitlab import load_model

            self._models[name] = load_model(self.folder(name)).eval()
        return self._models[name]

    def metrics(self, name: str) -> dict[str, Any]:
        path = self.folder(name) / "metrics.json"
        if not path.is_file():
            raise UserError(f"{path} is missing: the model's training metrics are needed for this claim")
        return json.loads(path.read_text())

    # shared analyses (cached per context)

    @cached_property
    def sgatlin_db(self) -> Any:
        from circuitlab.analysis.circuitdb import CircuitDB
        from circuitlab.data import held_out_stories

        return CircuitDB.build(self.model("sgatlin-stories"), held_out_stories(self.sizes.db_stories),
                               index=None, progress=self.progress)

    @cached_property
    def sgatlin_nie(self) -> Any:
        from circuitlab.analysis.patching import nie_grid, nie_summary

        model = self.model("sgatlin-stories")
        return nie_summary(nie_grid(model, known_fact_pairs(model, self.sizes.nie_pairs), progress=self.progress))

    @cached_property
    def sgatlin_usage(self) -> Any:
        from circuitlab.analysis.usage import database_usage

        return database_usage(self.sgatlin_db)

    @cached_property
    def legible_stats(self) -> Any:
        from circuitlab.analysis.legibility import held_out_windows, legibility_stats
        from circuitlab.data import load_natural_stories

        model = self.model("legible-stories")
        texts = [story.text for story in load_natural_stories().held_out()]
        tokens = held_out_windows(model, texts, seq_len=self.sizes.legibility_seq_len)[: self.sizes.legibility_windows]
        return legibility_stats(model, tokens, progress=self.progress)

    @cached_property
    def legible_dla(self) -> Any:
        from circuitlab.analysis.attribution import direct_logit_attribution

        model = self.model("legible-stories")
        return direct_logit_attribution(model, [model.tokenizer.eos_id] + model.tokenizer.encode("The turtle was"))

    def result_file(self, name: str) -> dict[str, Any] | None:
        """The JSON of `legible_sweep` or `parity_report` (by field name), or None when it is not given or absent."""
        path = getattr(self, name)
        if path is None or not Path(path).is_file():
            return None
        try:
            record = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise UserError(f"{path}: not valid JSON ({error})") from error
        if not isinstance(record, dict):
            raise UserError(f"{path}: expected a JSON object, got {type(record).__name__}")
        return record

    def results(self) -> dict[str, dict[str, Any]]:
        """Claim entries of every analyses/results/*.json (later files override earlier ones)."""
        entries: dict[str, dict[str, Any]] = {}
        if self.results_dir is None or not Path(self.results_dir).is_dir():
            return entries
        for path in sorted(Path(self.results_dir).glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except json.JSONDecodeError as error:
                raise UserError(f"{path}: not valid JSON ({error})") from error
            claims = record.get("claims", {}) if isinstance(record, dict) else {}
            if not isinstance(claims, dict):
                raise UserError(f"{path}: 'claims' must map claim ids to results, got {type(claims).__name__}")
            for claim_id, entry in claims.items():
                if not isinstance(entry, dict) or "ours" not in entry or entry.get("verdict") not in VERDICTS:
                    raise UserError(
                        f"{path}: claim {claim_id!r} needs 'ours' (text) and 'verdict' (one of {', '.join(VERDICTS)})"
                    )
                entries[claim_id] = {**entry, "source": path.name}
        return entries


MODELS = ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories")


def known_fact_pairs(model: Any, n_pairs: int) -> list:
    """Fact pairs built from the facts the model answers correctly (all single-token facts if fewer than 2)."""
    from circuitlab.data import FACTS, build_fact_pairs, fact_accuracy

    _, table = fact_accuracy(lambda tokens: model(tokens), model.tokenizer)
    known = set(table.loc[table["correct"], "noun"])
    facts = [fact for fact in FACTS if fact.noun in known]
    if len(facts) < 2:
        facts = [fact for fact in FACTS if fact.noun in set(table["noun"])]
    return build_fact_pairs(model.tokenizer, facts=facts, seed=0, n_pairs=min(n_pairs, len(facts) * (len(facts) - 1)))


# --- verdict helpers --------------------------------------------------------------------------------------


def percent_verdict(ours: float, low: float, high: float | None = None) -> str:
    """Reproduced when `ours` (percent, rounded to 0.1 as printed) lies in [low, high] +- PERCENT_TOLERANCE."""
    high = low if high is None else high
    ours = round(ours, 1)
    return REPRODUCED if low - PERCENT_TOLERANCE <= ours <= high + PERCENT_TOLERANCE else NOT_REPRODUCED


def holds(condition: bool) -> str:
    return REPRODUCED if condition else NOT_REPRODUCED


# --- seed 000 -------------------------------------------------------------------------------------------


# circuitlab.training.ladder_report words its verdicts "supported" / "contradicted" / "mixed" / "not measured"
_LADDER_VERDICTS = {"supported": REPRODUCED, "contradicted": NOT_REPRODUCED, "mixed": NOT_REPRODUCED,
                    "within noise": NOT_REPRODUCED, "not measured": NOT_MEASURED}


def ladder_verdict(context: Context, index: int) -> Outcome | None:
    """Verdict `index` of ladder_report.verdicts (0: sgatlin vs dense, 1: PEER, 2: nonlinearity) on the iso-FLOP
    ladder's results, or None when no ladder has been run."""
    if context.ladder_results is None or not Path(context.ladder_results).is_file():
        return None
    from circuitlab.training.ladder_report import load_results, verdicts

    found = verdicts(load_results(context.ladder_results))[index]
    verdict = _LADDER_VERDICTS.get(found.verdict, NOT_REPRODUCED)
    return Outcome(f"{found.verdict}: {found.detail}", verdict, None,
                   "ladder results of `circuitlab ladder`" if verdict != NOT_MEASURED else found.detail)


def ladder_sgatlin_vs_dense(context: Context) -> Outcome:
    return ladder_verdict(context, 0) or equal_token_losses(context)


def ladder_peer(context: Context) -> Outcome:
    return ladder_verdict(context, 1) or Outcome("-", NOT_MEASURED, None, "needs the iso-FLOP ladder with PEER")


def ladder_nonlinearity(context: Context) -> Outcome:
    return ladder_verdict(context, 2) or Outcome("-", NOT_MEASURED, None, "needs the ablation models at one ladder budget")


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
    return Outcome(ours, holds(lift >= CLUSTER_LIFT), lift)


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
    return Outcome(ours, holds(lift >= CLUSTER_LIFT), lift)


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
    return Outcome(ours, holds(names >= 8), names)


def dog_neighbours_are_animals(context: Context) -> Outcome:
    layer, rows = table_3_neighbours(context, "dog")
    if rows is None:
        return Outcome("'dog' is not one token", NOT_MEASURED, None, "the tokenizer splits the query word")
    animals = int(((rows["category"] == "ANIMAL") & (rows["token"].str.strip() != "dog")).sum())
    ours = f"layer {layer}: {animals} of {len(rows)} neighbours of 'dog' are other animals ({' '.join(rows['token'].str.strip())})"
    return Outcome(ours, holds(animals >= 3), animals)


def _nie_cells(context: Context) -> tuple[dict, int]:
    summary = context.sgatlin_nie
    return {(row.layer, row.position): round(float(row.nie), 3) for row in summary.itertuples()}, \
        context.model("sgatlin-stories").config.n_layers


def nie_noun_vs_final(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    noun = round(sum(cell.get((l, "noun"), 0.0) for l in range(n_layers)) / n_layers, 3)
    final = round(sum(cell.get((l, "final"), 0.0) for l in range(n_layers)) / n_layers, 3)
    return Outcome(f"mean over single layers: noun {noun:.3f}, final {final:.3f}", holds(noun > final), noun)


def nie_strongest_layer(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    noun = [cell.get((l, "noun"), math.nan) for l in range(n_layers)]
    best = max(range(n_layers), key=lambda l: -math.inf if math.isnan(noun[l]) else noun[l])
    ours = f"layer {best} (noun position: " + ", ".join(f"L{l} {v:.2f}" for l, v in enumerate(noun)) + ")"
    return Outcome(ours, holds(best == 1), best)


def nie_all_layers(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    best = max(cell.get((l, "noun"), -math.inf) for l in range(n_layers))
    together = cell.get(("all", "noun"), math.nan)
    ours = f"all layers {together:.2f} vs best single layer {best:.2f} (noun position)"
    return Outcome(ours, holds(round(together, 2) >= 1.5 * round(best, 2)), together)


def nie_moderate(context: Context) -> Outcome:
    cell, n_layers = _nie_cells(context)
    best = round(max(cell.get((l, "noun"), -math.inf) for l in range(n_layers)), 2)
    return Outcome(f"largest single-layer NIE {best:.2f} (noun position)", holds(0.05 <= best <= 0.6), best)


def neurons_used(context: Context) -> Outcome:
    used = [report.fraction_used for report in context.sgatlin_usage.values()]
    low = round(min(used) * 100, 1)
    ours = "per layer " + ", ".join(f"{u:.1%}" for u in used) + f" of neurons fire at least once ({len(context.sgatlin_db)} tokens)"
    return Outcome(ours, holds(low >= 90.0), low)


def usage_gini(context: Context) -> Outcome:
    ginis = [report.gini for report in context.sgatlin_usage.values()]
    mean = round(sum(ginis) / len(ginis), 2)
    ours = f"mean {mean:.2f} (per layer " + ", ".join(f"{g:.2f}" for g in ginis) + ")"
    return Outcome(ours, holds(abs(mean - 0.58) <= 0.10), mean)


def subkey_coactivation(context: Context) -> Outcome:
    reports = context.sgatlin_usage
    layer = max(max(reports) - 1, min(reports))
    shared, other = reports[layer].shared_subkey_coactivation, reports[layer].other_pair_coactivation
    if shared is None or other is None:
        return Outcome("no shared-subkey pairs", NOT_MEASURED, None, "the layer has no product-key subkeys")
    ratio = round(shared / other, 2) if other else math.inf
    ours = f"layer {layer}: P(j|i) {shared:.4f} for shared-subkey pairs vs {other:.4f} for other pairs ({ratio:.2f}x)"
    return Outcome(ours, holds(ratio > 1.1), ratio)


# --- seed 002 -------------------------------------------------------------------------------------------


def _legible_summary(context: Context) -> dict[str, Any]:
    from circuitlab.analysis.legibility import legibility_summary

    # the operator family: attention operands, NC-FFN operands A and B (Table 5 leaves the quantifiers out)
    summary = legibility_summary(context.legible_stats)
    return {row["surface"]: row for row in summary.to_dict("records") if row.get("family", "operator") == "operator"}


def _percent_row(context: Context, surface: str, column: str, label: str, low: float, high: float | None = None) -> Outcome:
    value = float(_legible_summary(context)[surface][column])
    return Outcome(f"{value:.1f}% {label}", percent_verdict(value, low, high), round(value, 1))


def attention_selective(context: Context) -> Outcome:
    return _percent_row(context, "attention", "selective", "SELECTIVE (combined values)", 30, 35)


def attention_constant(context: Context) -> Outcome:
    return _percent_row(context, "attention", "constant", "CONSTANT (combined values)", 64, 69)


def attention_crisp(context: Context) -> Outcome:
    return _percent_row(context, "attention", "atom_crisp", "of operand values crisp", 63, 73)


def attention_on(context: Context) -> Outcome:
    return _percent_row(context, "attention", "on_percent", "of operand values ON", 12)


def ffn_crisp(context: Context) -> Outcome:
    return _percent_row(context, "ffn", "atom_crisp", "of operand values crisp", 91)


def ffn_on(context: Context) -> Outcome:
    return _percent_row(context, "ffn", "on_percent", "of operand values ON", 32.7)


def ffn_selective(context: Context) -> Outcome:
    return _percent_row(context, "ffn", "selective_operands", "of operand channels SELECTIVE", 25)


def ffn_alive(context: Context) -> Outcome:
    # circuitlab.analysis.legibility: an operand channel is alive when its ON-fraction lies in ALIVE_RANGE
    summary = _legible_summary(context)
    ffn, attention = float(summary["ffn"]["alive"]), float(summary["attention"]["alive"])
    ours = f"{ffn:.1f}% of FFN and {attention:.1f}% of attention operand channels alive (ON for 1-99% of tokens)"
    return Outcome(ours, holds(round(ffn, 1) >= 50 and round(attention, 1) >= 50), round(ffn, 1))


def attention_depth(context: Context) -> Outcome:
    from circuitlab.analysis.legibility import legibility_by_layer

    by_layer = legibility_by_layer(context.legible_stats)
    attention = by_layer[(by_layer["surface"] == "attention") & (by_layer["family"] == "operator")]
    selective = [round(v * 100) for v in attention.sort_values("layer")["selective"]]
    middle = len(selective) // 2
    shallow, deep = sum(selective[:middle]) / max(middle, 1), sum(selective[middle:]) / max(len(selective) - middle, 1)
    ours = "SELECTIVE by layer " + ", ".join(f"{v}%" for v in selective) + f" (shallow half {shallow:.0f}%, deep half {deep:.0f}%)"
    return Outcome(ours, holds(round(deep) > round(shallow)), round(deep - shallow))


def ffn_crisp_every_layer(context: Context) -> Outcome:
    from circuitlab.analysis.legibility import legibility_by_layer

    by_layer = legibility_by_layer(context.legible_stats)
    operands = by_layer[(by_layer["surface"] == "ffn") & (by_layer["family"] == "operator")]  # A and B, as Table 5
    crisp = [round(v * 100, 1) for v in operands.sort_values("layer")["atom_crisp"]]
    return Outcome("operand crispness by layer " + ", ".join(f"{v:.1f}%" for v in crisp), holds(min(crisp) > 50), min(crisp))


def legible_share(table: Any) -> dict[str, float]:
    """Shares of the summed |attribution| (heads, FFN units, embedding) that named NC-FFN operators and bounded
    heads carry (the legible part, seed 002 section 5.5), with the largest |head| and largest unit value."""
    units = table[table["level"] == "unit"]
    components = table[table["level"] == "component"]
    heads = components[components["kind"] == "attn_head"]
    named_units = units[~units["operation"].isin(["gelu", "swiglu", "neuron", "feature"])]
    bounded_heads = heads[heads["operation"] != "standard"]
    embedding = components[components["kind"].isin(["embedding", "positional"])]
    total = heads["value"].abs().sum() + units["value"].abs().sum() + embedding["value"].abs().sum()
    return {
        "legible": float((bounded_heads["value"].abs().sum() + named_units["value"].abs().sum()) / total),
        "max_head": float(heads["value"].abs().max()) if len(heads) else 0.0,
        "max_unit": float(units["value"].max()) if len(units) else 0.0,
    }


def legible_attribution(context: Context) -> Outcome:
    table = context.legible_dla
    share = round(legible_share(table)["legible"] * 100, 1)
    ours = f"{share:.1f}% of |DLA| of {table.attrs['target']!r} after 'The turtle was' (named operators + bounded heads)"
    return Outcome(ours, holds(abs(share - 75) <= 15), share)


def attention_weak(context: Context) -> Outcome:
    share = legible_share(context.legible_dla)
    ours = f"largest |head| {share['max_head']:.2f} vs largest FFN unit {share['max_unit']:+.2f}"
    return Outcome(ours, holds(round(share["max_head"], 2) < round(share["max_unit"], 2)), round(share["max_head"], 2))


def quality_parity(context: Context) -> Outcome:
    legible, gelu = context.metrics("legible-stories"), context.metrics("gelu-stories")
    ratios = {name: math.exp(legible[f"{name}_held_out_loss"] - gelu[f"{name}_held_out_loss"]) for name in ("natural", "generated")}
    ours = "; ".join(f"{name} held-out ppl {math.exp(legible[f'{name}_held_out_loss']):.2f} vs GELU "
                     f"{math.exp(gelu[f'{name}_held_out_loss']):.2f} ({ratio:.3f}x)" for name, ratio in ratios.items())
    return Outcome(ours, holds(all(round(r, 3) <= PARITY_PPL_RATIO for r in ratios.values())), round(ratios["natural"], 3))


# --- seed 002's pressure sweep (results/legible-sweep/legibility_regimes.json) ----------------------------

SWEEP_MISSING = ("needs the pressure sweep's results (results/legible-sweep/legibility_regimes.json of "
                 "scripts/legibility_report.py: no pressure, sparsity alone, crispness alone, both)")
REGIMES = ("none", "sparsity alone", "crispness alone", "both pressures")
PRESSURED = REGIMES[1:]
# seed 002's operand ON rates per regime (percent): Table 1 (attention, Boolean head-100), Table 5 (NC-FFN)
PAPER_ON = {"attention": {"sparsity alone": 2.2, "crispness alone": 12.1, "both pressures": 0.9},
            "ffn": {"none": 0.9, "crispness alone": 32.7, "both pressures": 3.5}}


def _sweep_models(context: Context) -> dict[str, dict[str, Any]] | None:
    """The sweep's models by regime, or None when no sweep results are given."""
    record = context.result_file("legible_sweep")
    if record is None:
        return None
    models = record.get("models")
    if not isinstance(models, list) or not all(isinstance(m, dict) and "regime" in m for m in models):
        raise UserError(f"{context.legible_sweep}: 'models' must be a list of models with a 'regime'")
    return {model["regime"]: model for model in models}


def _operator_summary(model: dict[str, Any], surface: str) -> dict[str, Any]:
    """The operator family's summary row of one surface (Tables 1 and 5 leave the quantifiers out)."""
    for row in model.get("summary", []):
        if row.get("surface") == surface and row.get("family", "operator") == "operator":
            return row
    raise UserError(f"sweep model {model.get('name', '?')!r} has no {surface} operator summary")


def _sweep_regime(context: Context, regime: str) -> dict[str, Any] | Outcome:
    """The regime's model, or a "not measured" outcome saying what is missing."""
    models = _sweep_models(context)
    if models is None:
        return Outcome("-", NOT_MEASURED, None, SWEEP_MISSING)
    if regime not in models:
        return Outcome("-", NOT_MEASURED, None, f"the pressure sweep has no {regime!r} model")
    return models[regime]


def sweep_both_collapse(context: Context) -> Outcome:
    model = _sweep_regime(context, "both pressures")
    if isinstance(model, Outcome):
        return model
    attention = float(_operator_summary(model, "attention")["on_percent"])
    ffn = float(_operator_summary(model, "ffn")["on_percent"])
    ours = f"{model['name']}: operands ON {attention:.1f}% (attention), {ffn:.2f}% (FFN)"
    verdict = holds(percent_verdict(attention, 0.2, 0.9) == REPRODUCED and percent_verdict(ffn, 1.9, 3.5) == REPRODUCED)
    return Outcome(ours, verdict, round(ffn, 2))


def sweep_plain_illegible(context: Context) -> Outcome:
    model = _sweep_regime(context, "none")
    if isinstance(model, Outcome):
        return model
    ffn = _operator_summary(model, "ffn")
    crisp, selective = float(ffn["atom_crisp"]), float(ffn["selective_operands"])
    ours = f"{model['name']}: FFN op-crisp {crisp:.1f}%, SELECTIVE {selective:.1f}% of operand channels"
    verdict = holds(percent_verdict(crisp, 50) == REPRODUCED and percent_verdict(selective, 0) == REPRODUCED)
    return Outcome(ours, verdict, round(crisp, 1))


def sweep_sparsity_inert(context: Context) -> Outcome:
    plain, sparse = _sweep_regime(context, "none"), _sweep_regime(context, "sparsity alone")
    for model in (plain, sparse):
        if isinstance(model, Outcome):
            return model
    before, after = (float(_operator_summary(m, "ffn")["atom_crisp"]) for m in (plain, sparse))
    ours = f"FFN op-crisp {before:.1f}% (no pressure) -> {after:.1f}% (sparsity alone)"
    return Outcome(ours, percent_verdict(after, 51), round(after, 1),
                   "the sweep's sparsity presses the operands (Table 5's presses the operator output)")


def _on_rates(context: Context, surface: str) -> Outcome:
    models = _sweep_models(context)
    if models is None:
        return Outcome("-", NOT_MEASURED, None, SWEEP_MISSING)
    paper = PAPER_ON[surface]
    missing = [regime for regime in paper if regime not in models]
    if missing:
        return Outcome("-", NOT_MEASURED, None, f"the pressure sweep has no {', '.join(missing)} model")
    ours = {regime: float(_operator_summary(models[regime], surface)["on_percent"]) for regime in paper}
    text = "; ".join(f"{regime} {ours[regime]:.1f}% (paper {paper[regime]}%)" for regime in paper)
    verdict = holds(all(percent_verdict(ours[regime], paper[regime]) == REPRODUCED for regime in paper))
    return Outcome(text, verdict, round(ours["crispness alone"], 1))


def sweep_attention_on(context: Context) -> Outcome:
    return _on_rates(context, "attention")


def sweep_ffn_on(context: Context) -> Outcome:
    return _on_rates(context, "ffn")


def sweep_crispness_keeps_on(context: Context) -> Outcome:
    models = _sweep_models(context)
    if models is None:
        return Outcome("-", NOT_MEASURED, None, SWEEP_MISSING)
    if "crispness alone" not in models or len(models) < 2:
        return Outcome("-", NOT_MEASURED, None, "the pressure sweep needs the crispness-alone model and another regime")
    parts, highest = [], True
    for surface in ("attention", "ffn"):
        on = {regime: round(float(_operator_summary(model, surface)["on_percent"]), 1)
              for regime, model in models.items()}
        highest &= all(on["crispness alone"] > value for regime, value in on.items() if regime != "crispness alone")
        parts.append(f"{surface}: " + ", ".join(f"{regime} {value:.1f}%" for regime, value in on.items()))
    return Outcome("operands ON " + "; ".join(parts), holds(highest))


def _depth_halves(model: dict[str, Any]) -> tuple[list[float], float, float]:
    """Attention SELECTIVE (combined values, percent) by layer, and the mean of the shallow and deep halves."""
    rows = sorted((r for r in model.get("by_layer", []) if r.get("surface") == "attention"
                   and r.get("family", "operator") == "operator"), key=lambda r: r["layer"])
    if len(rows) < 2:
        raise UserError(f"sweep model {model.get('name', '?')!r} has fewer than 2 attention layers in 'by_layer'")
    selective = [round(100 * float(r["selective"]), 1) for r in rows]
    middle = len(selective) // 2
    return selective, sum(selective[:middle]) / middle, sum(selective[middle:]) / (len(selective) - middle)


def sweep_depth(context: Context) -> Outcome:
    models = _sweep_models(context)
    if models is None:
        return Outcome("-", NOT_MEASURED, None, SWEEP_MISSING)
    pressured = [regime for regime in PRESSURED if regime in models]
    if not pressured:
        return Outcome("-", NOT_MEASURED, None, "the pressure sweep has no pressured model")
    parts, rises = [], True
    for regime in pressured:
        selective, shallow, deep = _depth_halves(models[regime])
        rises &= round(deep) > round(shallow)
        parts.append(f"{regime} {'/'.join(f'{v:.0f}' for v in selective)}% (shallow {shallow:.0f}, deep {deep:.0f})")
    return Outcome("attention SELECTIVE by layer: " + "; ".join(parts), holds(rises))


def sweep_legible_share(context: Context) -> Outcome:
    model = _sweep_regime(context, "crispness alone")
    if isinstance(model, Outcome):
        return model
    attribution = model.get("attribution") or {}
    if "share_mean" not in attribution:
        return Outcome("-", NOT_MEASURED, None, f"sweep model {model['name']!r} has no logit attribution")
    share = round(100 * float(attribution["share_mean"]), 1)
    parts = attribution.get("parts_mean", {})
    detail = ", ".join(f"{name.replace('_', ' ')} {100 * float(v):.1f}%" for name, v in parts.items())
    ours = (f"{model['name']}: {share:.1f}% legible, mean over {attribution.get('n_positions', '?')} held-out "
            f"positions ({detail})")
    return Outcome(ours, holds(abs(share - 75) <= 15), share)


# --- seed 003's parity report (results/parity/parity_report.json) --------------------------------------

PARITY_MISSING = "needs the parity report (results/parity/parity_report.json of scripts/parity_report.py)"
RECONSTRUCTION_LIMIT = 0.3
ABLATION_SHARE = 0.5


def _parity_report(context: Context) -> dict[str, Any] | None:
    return context.result_file("parity_report")


def parity_reconstruction(context: Context) -> Outcome:
    report = _parity_report(context)
    if report is None:
        return Outcome("-", NOT_MEASURED, None, PARITY_MISSING)
    layers = report.get("layers")
    if not layers:
        raise UserError(f"{context.parity_report}: no 'layers' with a reconstruction error")
    errors = [float(layer["reconstruction"]) for layer in layers]
    worst = round(max(errors), 3)
    ours = (f"relative reconstruction error of the write by layer " + ", ".join(f"{e:.3f}" for e in errors)
            + f" ({report.get('tokens', '?')} held-out tokens)")
    return Outcome(ours, holds(worst < RECONSTRUCTION_LIMIT), worst)


def parity_ablation(context: Context) -> Outcome:
    report = _parity_report(context)
    if report is None:
        return Outcome("-", NOT_MEASURED, None, PARITY_MISSING)
    try:
        parity, gelu = report["parity"], report["gelu"]
        parity_cost = float(parity["loss_writes_zeroed"]) - float(parity["loss"])
        gelu_cost = float(gelu["loss_writes_zeroed"]) - float(gelu["loss"])
    except (KeyError, TypeError) as error:
        raise UserError(f"{context.parity_report}: needs parity and gelu 'loss' and 'loss_writes_zeroed'") from error
    if gelu_cost <= 0:
        return Outcome("-", NOT_MEASURED, None, "zeroing the GELU model's FFN writes did not raise its loss")
    share = round(parity_cost / gelu_cost, 3)
    ours = (f"parity {parity['loss']:.3f} -> {parity['loss_writes_zeroed']:.3f} nats/token with every bottleneck "
            f"write zeroed; GELU {gelu['loss']:.3f} -> {gelu['loss_writes_zeroed']:.3f} with every FFN write zeroed "
            f"(share {share:.3f})")
    return Outcome(ours, holds(share >= ABLATION_SHARE), share)


def parity_encoder_exact(context: Context) -> Outcome:
    report = _parity_report(context)
    if report is None:
        return Outcome("-", NOT_MEASURED, None, PARITY_MISSING)
    layers = report.get("layers") or []
    if not layers or not all("agreement" in layer and "certified" in layer for layer in layers):
        return Outcome("-", NOT_MEASURED, None, "the parity report has no encoder agreement per layer")
    agreement = min(float(layer["agreement"]) for layer in layers)
    certified = min(float(layer["certified"]) for layer in layers)
    ours = (f"lowest over layers: agreement with exhaustive search {agreement:.3f}, certified exact {certified:.3f} "
            f"(beam {report.get('design', {}).get('beam', '?')})")
    return Outcome(ours, holds(round(agreement, 3) >= 0.99), round(agreement, 3))


# --- seed 003 -------------------------------------------------------------------------------------------


def max_coherence(directions_NxD: Any) -> float:
    """Largest |cos| between two distinct rows."""
    import torch

    unit = torch.nn.functional.normalize(directions_NxD.double(), dim=-1)
    gram = (unit @ unit.T).abs()
    gram.fill_diagonal_(0)
    return float(gram.max())


def parity_coherence(context: Context) -> Outcome:
    import torch

    model = context.model("parity-stories")
    n_features = 2 ** model.config.bottleneck.n_bits
    n = min(context.sizes.coherence_directions, n_features)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randperm(n_features, generator=generator)[:n]
    with torch.no_grad():
        ours_value = max(max_coherence(model.parity_feature_directions(layer, ids)) for layer in range(model.config.n_layers))
    random_signs = torch.randint(0, 2, (n, model.config.d_model), generator=generator).double() * 2 - 1
    reference = max_coherence(random_signs)
    ours = (f"largest |cos| among {n} sampled features of each layer: {ours_value:.3f}; "
            f"{n} random +-1 vectors: {reference:.3f}")
    return Outcome(ours, holds(round(ours_value, 3) <= round(reference, 3) + 0.05), round(ours_value, 3))


def parity_training_cost(context: Context) -> Outcome:
    parity, gelu = context.metrics("parity-stories"), context.metrics("gelu-stories")
    if "tokens_seen" in parity and "tokens_seen" in gelu:  # a run may stop at its time limit: compare per token
        per_token = {name: m["train_seconds"] / m["tokens_seen"] * 1e6
                     for name, m in (("parity", parity), ("gelu", gelu))}
        ratio = per_token["parity"] / per_token["gelu"]
        ours = (f"training wall time per token, 5M parameters: parity {per_token['parity']:.1f} us "
                f"({parity['tokens_seen'] / 1e6:.1f}M tokens) vs GELU {per_token['gelu']:.1f} us "
                f"({gelu['tokens_seen'] / 1e6:.1f}M tokens) ({ratio:.2f}x)")
    else:
        ratio = parity["train_seconds"] / gelu["train_seconds"]
        ours = (f"wall time at equal tokens, 5M parameters: parity {parity['train_seconds']:.0f} s vs GELU "
                f"{gelu['train_seconds']:.0f} s ({ratio:.2f}x)")
    return Outcome(ours, NOT_MEASURED, round(ratio, 2),
                   "different scale (5M vs 1.3B parameters) and the paper's tax is compute to matched capability")


# --- the registry ---------------------------------------------------------------------------------------

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
          "at least 8 of 10 neighbours are names (penultimate layer)", max_neighbours_are_names),
    Claim("s000-dog-animals", "000", "sec. 4.2, Table 3",
          "The nearest circuits of an animal noun include other animals",
          "5 of 10 neighbours of 'dog' are other animals",
          "at least 3 of 10 neighbours are other animals (penultimate layer)", dog_neighbours_are_animals),
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
    Claim("s002-attn-selective", "002", "sec. 5.4, Fig. 2b",
          "In the end-to-end model (crispness alone), a third of the attention value channels are SELECTIVE",
          "30-35% SELECTIVE", "percentage rule", attention_selective),
    Claim("s002-attn-constant", "002", "sec. 5.4, Fig. 2b",
          "... and about two thirds are CONSTANT", "64-69% CONSTANT", "percentage rule", attention_constant),
    Claim("s002-attn-crisp", "002", "sec. 5.4",
          "The end-to-end attention operands are crisp", "63-73% crisp", "percentage rule", attention_crisp),
    Claim("s002-attn-on", "002", "sec. 5.4",
          "Under crispness alone the attention operands stay alive", "ON 12%", "percentage rule", attention_on),
    Claim("s002-attn-depth", "002", "abstract, sec. 4.2, Fig. 2a, 3 and 4",
          "Attention legibility rises with depth",
          "deep half 70-95% SELECTIVE (specialised designs); end-to-end: shallow near 0, peak 87-88% at layers 8-9",
          "the deep half's mean SELECTIVE exceeds the shallow half's", attention_depth),
    Claim("s002-ffn-crisp", "002", "sec. 5.3, Table 5",
          "Crispness alone makes the NC-FFN operands crisp", "op-crisp 91% (25% operators, as ours)", "percentage rule", ffn_crisp),
    Claim("s002-ffn-on", "002", "sec. 5.3, Table 5",
          "Crispness alone keeps the NC-FFN operators alive", "ON 32.7% (25% operators)", "percentage rule", ffn_on),
    Claim("s002-ffn-selective", "002", "sec. 5.3, Table 5",
          "Crispness alone gives the most SELECTIVE FFN operands", "SELECTIVE 25% (25% operators)",
          "percentage rule (regime read on the operands)", ffn_selective),
    Claim("s002-ffn-alive", "002", "sec. 5.3 (ON read per channel)",
          "Crispness alone keeps operand channels alive, not stuck on or off",
          "alive (no per-channel number)",
          "at least half of the FFN and of the attention operand channels are ON for 1-99% of tokens", ffn_alive),
    Claim("s002-ffn-every-depth", "002", "sec. 5.4, Fig. 3",
          "The feed-forward operands are crisp at every depth", "crisp at every depth",
          "operand crispness > 50% in every layer", ffn_crisp_every_layer),
    Claim("s002-legible-share", "002", "sec. 5.5, Fig. 5",
          "Most of a prediction's direct logit attribution is carried by named units and bounded heads",
          "about three-quarters", "within 15 points of 75%", legible_attribution),
    Claim("s002-attn-weak", "002", "sec. 5.5, Fig. 5",
          "Attention contributes less to a prediction than the largest FFN units",
          "largest |head| 0.77 vs FFN +2.14", "largest |head| below the largest FFN unit", attention_weak),
    Claim("s002-quality", "002", "abstract, sec. 5.2, Tables 4 and 7",
          "The end-to-end legible model is at the quality of a GELU baseline",
          "parity band (LAMBADA 0.25-0.26, ppl 109-116 vs 109)",
          "perplexity on both held-out sets within 10% of gelu-stories'", quality_parity),
    Claim("s002-both-collapse", "002", "sec. 4.2, Table 1; sec. 5.3, Table 5",
          "Both pressures together starve Boolean operators into a constant-off collapse",
          "ON 0.2-0.9% (attention), 1.9-3.5% (FFN)",
          "percentage rule on the both-pressures model of the sweep, on both surfaces", sweep_both_collapse),
    Claim("s002-plain-illegible", "002", "sec. 5.3, Table 5",
          "Without pressure the FFN operands are illegible", "op-crisp about 50%, SELECTIVE about 0%",
          "percentage rule on the no-pressure model of the sweep (op-crisp 50%, SELECTIVE operand channels 0%)",
          sweep_plain_illegible),
    Claim("s002-sparsity-inert", "002", "sec. 5.3, Table 5",
          "Sparsity on the operator output does not crispen the operands", "op-crisp 50% -> 51%",
          "percentage rule (51%) on the op-crisp of the sweep's sparsity-alone model", sweep_sparsity_inert),
    Claim("s002-sweep-attn-on", "002", "sec. 4.2, Table 1",
          "Operand ON rates of the attention under each pressure regime",
          "ON 2.2% (sparsity alone), 12.1% (crispness alone), 0.9% (both)",
          "percentage rule in each of the three regimes of the sweep", sweep_attention_on),
    Claim("s002-sweep-ffn-on", "002", "sec. 5.3, Table 5",
          "Operand ON rates of the NC-FFN under each pressure regime",
          "ON 0.9% (none), 32.7% (crispness alone), 3.5% (both)",
          "percentage rule in each of the three regimes of the sweep", sweep_ffn_on),
    Claim("s002-sweep-crisp-alive", "002", "sec. 4.2, Table 1; sec. 5.3, Table 5",
          "Crispness alone keeps the most operands ON, on both surfaces",
          "attention 12.1% vs 2.2% and 0.9%; FFN 32.7% vs 0.9% and 3.5%",
          "the crispness-alone model's ON rate exceeds every other regime's of the sweep, attention and FFN (as printed)",
          sweep_crispness_keeps_on),
    Claim("s002-sweep-depth", "002", "abstract, sec. 4.2, Fig. 2a",
          "Under selectivity pressure, attention SELECTIVE rises with depth",
          "deep half 70-95% SELECTIVE, shallow layers lower",
          "in every pressured regime of the sweep the deep half's mean attention SELECTIVE exceeds the shallow half's",
          sweep_depth),
    Claim("s002-sweep-legible-share", "002", "sec. 5.5, Fig. 5",
          "About three quarters of the logit attribution is legible, averaged over held-out text",
          "about three-quarters (one prediction)",
          "mean legible share of the crispness-alone model over held-out positions within 15 points of 75%",
          sweep_legible_share),
    Claim("s003-coherence", "003", "sec. 2.1, eq. 1",
          "Computed parity directions are nearly orthogonal (incoherent) by construction",
          "near-orthogonal sign patterns (no number in the available text)",
          "largest |cos| among sampled features <= that of as many random +-1 vectors + 0.05", parity_coherence),
    Claim("s003-uses-features", "003", "abstract",
          "Downstream computation uses only what passes through the sparse bottleneck (its features reconstruct the write)",
          "by construction (no number in the available text)",
          "relative reconstruction error of the FFN write below 0.3 on held-out text, in every layer",
          parity_reconstruction),
    Claim("s003-ablation", "003", "abstract",
          "The model relies on its features: removing the bottleneck's writes breaks it",
          "implied by the design (no number in the available text)",
          "zeroing every bottleneck write costs at least half of what zeroing every FFN write costs the GELU model",
          parity_ablation),
    Claim("s003-encoder", "003", "sec. 1, Fig. 1(b)",
          "A beam search over the hierarchy of the algebraic code encodes the features",
          "beam-search encoder (no accuracy number in the available text)",
          "the beam search's features agree with exhaustive search on >= 99% of sampled tokens, in every layer",
          parity_encoder_exact),
    Claim("s003-tax", "003", "abstract, sec. 1",
          "The interpretability tax of training a ParityTransformer is 8-14x a dense model's at 1.3B",
          "8-14x", "a measured compute ratio to matched capability", parity_training_cost),
    Claim("s003-probing", "003", "abstract",
          "ParityTransformer features match post-hoc SAEs on sparse probing",
          "at least as good as SAEs", "probing accuracy >= an SAE's on the same model size",
          blocked="circuitlab has no SAE baseline or probing benchmark"),
    Claim("s003-steering", "003", "abstract",
          "ParityTransformer features beat SAEs on absorption, steering and fine-grained causal interventions",
          "better than SAEs", "each metric better than an SAE's",
          blocked="circuitlab has no SAE baseline, absorption or steering benchmark"),
)


def claim_by_id(claim_id: str) -> Claim:
    for claim in CLAIMS:
        if claim.id == claim_id:
            return claim
    raise UserError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


def measure_claim(claim: Claim, context: Context, results: dict[str, dict[str, Any]] | None = None) -> ClaimRow:
    """One row: the claim's own measurement, else a results-file entry, else "not measured" with its reason."""
    results = context.results() if results is None else results
    base = dict(id=claim.id, seed=claim.seed, place=claim.place, claim=claim.claim, paper=claim.paper, rule=claim.rule)
    entry = results.get(claim.id)
    if claim.measure is not None:
        outcome = claim.measure(context)
        if outcome.verdict != NOT_MEASURED or entry is None:
            return ClaimRow(**base, ours=outcome.ours, verdict=outcome.verdict, reason=outcome.reason,
                            measured_by=claim.measured_by, value=outcome.value)
    if entry is not None:
        value = entry.get("value")
        return ClaimRow(**base, ours=str(entry["ours"]), verdict=entry["verdict"], reason=str(entry.get("reason", "")),
                        measured_by=f"{entry.get('measured_by', '')} (analyses/results/{entry['source']})".strip(),
                        value=float(value) if isinstance(value, (int, float)) else None)
    return ClaimRow(**base, ours="-", verdict=NOT_MEASURED, reason=claim.blocked, measured_by="")


def measure_claims(context: Context, ids: Iterable[str] | None = None) -> list[ClaimRow]:
    """Rows of every claim (or of `ids`), in registry order, with a progress bar."""
    from tqdm.auto import tqdm

    wanted = None if ids is None else set(ids)
    chosen = [claim for claim in CLAIMS if wanted is None or claim.id in wanted]
    if wanted is not None and len(chosen) != len(wanted):
        unknown = wanted - {claim.id for claim in chosen}
        raise UserError(f"unknown claim ids: {', '.join(sorted(unknown))}")
    results = context.results()
    return [measure_claim(claim, context, results) for claim in tqdm(chosen, desc="claims", disable=not context.progress)]


# --- the file -------------------------------------------------------------------------------------------

COLUMNS = ("id", "place", "claim", "paper", "ours", "verdict", "reason", "rule", "measured by")
SEED_TITLES = {
    "000": "Seed 000: sparsely gated linear neurons (sgatlin)",
    "002": "Seed 002: legible attention values and NC-FFN",
    "003": "Seed 003: the parity bottleneck (only the abstract, introduction and decoder are available)",
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_claims(rows: Sequence[ClaimRow], fast: bool, sizes: Sizes, command: str) -> str:
    counts = {verdict: sum(row.verdict == verdict for row in rows) for verdict in VERDICTS}
    lines = [
        "# The papers' claims, measured on the shipped models",
        "",
        f"Written by `{command}` ({'fast mode: small samples, for CI' if fast else 'full mode'}); do not edit by hand.",
        "Sizes: " + ", ".join(f"{key} {value}" for key, value in sizes.__dict__.items()) + ".",
        "",
        f"Verdicts: {counts[REPRODUCED]} reproduced, {counts[NOT_REPRODUCED]} not reproduced, "
        f"{counts[NOT_MEASURED]} not measured.",
        "",
        "## How a verdict is decided",
        "",
        VERDICT_RULES,
    ]
    for seed, title in SEED_TITLES.items():
        seed_rows = [row for row in rows if row.seed == seed]
        if not seed_rows:
            continue
        lines += ["", f"## {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        for row in seed_rows:
            measured_by = f"`{row.measured_by}`" if row.measured_by else "-"
            cells = [row.id, row.place, row.claim, row.paper, row.ours, f"**{row.verdict}**", row.reason or "-",
                     row.rule, measured_by]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^\| (s\d{3}-[\w-]+) \|")


def read_claims(path: str | Path) -> list[dict[str, str]]:
    """The rows of a claims.md as dicts keyed by COLUMNS (verdict without the bold marks)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist: write it with `python scripts/claims.py --out {path}`")
    rows = []
    for line in path.read_text().splitlines():
        if not _ROW.match(line):
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != len(COLUMNS):
            raise UserError(f"{path}: a claims row has {len(cells)} cells, expected {len(COLUMNS)}: {line[:80]}")
        row = dict(zip(COLUMNS, cells))
        row["verdict"] = row["verdict"].strip("*")
        rows.append(row)
    return rows
