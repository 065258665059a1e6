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

Modules: `rows` (claims, outcomes, rows and the verdict rules), `context` (the models and the analyses rows
share), `nulls` (the per-unit measurements and their null databases), `seed000` (with `seed000_natural`: its
rows on natural text, the facts mined by `natural_facts`), `seed002` (with `seed002_sweep`: the pressure
sweeps, and `seed002_null` on `selectivity`: SELECTIVE read against a pressure-free control) and `seed003`
(each seed's measuring functions and its rows), `registry` (every claim in order, and measuring them) and
`markdown` (writing and reading analyses/claims.md). Every public name is exported here, and a row names its
measuring function by this package (`circuitlab.claims.parity_ablation`).

The names below import on first use, so importing one submodule loads no other.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "MODELS": "circuitlab.claims.context",
    "Context": "circuitlab.claims.context",
    "Sizes": "circuitlab.claims.context",
    "known_fact_pairs": "circuitlab.claims.context",
    "COLUMNS": "circuitlab.claims.markdown",
    "SEED_TITLES": "circuitlab.claims.markdown",
    "read_claims": "circuitlab.claims.markdown",
    "read_claims_json": "circuitlab.claims.markdown",
    "claims_json": "circuitlab.claims.markdown",
    "verdict_counts": "circuitlab.claims.markdown",
    "counts_text": "circuitlab.claims.markdown",
    "render_claims": "circuitlab.claims.markdown",
    "CLAIMS": "circuitlab.claims.registry",
    "claim_by_id": "circuitlab.claims.registry",
    "measure_claim": "circuitlab.claims.registry",
    "measure_claims": "circuitlab.claims.registry",
    "CLUSTER_LIFT": "circuitlab.claims.rows",
    "NOT_MEASURED": "circuitlab.claims.rows",
    "CONTRADICTED": "circuitlab.claims.rows",
    "INCONCLUSIVE": "circuitlab.claims.rows",
    "NOT_AT_SCALE": "circuitlab.claims.rows",
    "PAPER": "circuitlab.claims.rows",
    "JSON_FIELDS": "circuitlab.claims.rows",
    "PARITY_PPL_RATIO": "circuitlab.claims.rows",
    "PERCENT_TOLERANCE": "circuitlab.claims.rows",
    "REPRODUCED": "circuitlab.claims.rows",
    "Judgement": "circuitlab.claims.rows",
    "judge": "circuitlab.claims.rows",
    "judged": "circuitlab.claims.rows",
    "no_interval": "circuitlab.claims.rows",
    "percent_range": "circuitlab.claims.rows",
    "binomial_outcome": "circuitlab.claims.rows",
    "combine": "circuitlab.claims.rows",
    "decide": "circuitlab.claims.rows",
    "scale_judgement": "circuitlab.claims.rows",
    "VERDICT_RULES": "circuitlab.claims.rows",
    "VERDICTS": "circuitlab.claims.rows",
    "Claim": "circuitlab.claims.rows",
    "ClaimRow": "circuitlab.claims.rows",
    "Measure": "circuitlab.claims.rows",
    "Outcome": "circuitlab.claims.rows",
    "TABLE_3_QUERY": "circuitlab.claims.seed000",
    "category_enrichment": "circuitlab.claims.seed000",
    "dog_neighbours_are_animals": "circuitlab.claims.seed000",
    "equal_token_losses": "circuitlab.claims.seed000",
    "ladder_nonlinearity": "circuitlab.claims.seed000",
    "ladder_peer": "circuitlab.claims.seed000",
    "peer_router_swap": "circuitlab.claims.seed000",
    "ladder_sgatlin_vs_dense": "circuitlab.claims.seed000",
    "ladder_verdict": "circuitlab.claims.seed000",
    "max_neighbours_are_names": "circuitlab.claims.seed000",
    "names_near_pronouns": "circuitlab.claims.seed000",
    "neurons_used": "circuitlab.claims.seed000",
    "nie_all_layers": "circuitlab.claims.seed000",
    "nie_moderate": "circuitlab.claims.seed000",
    "nie_noun_vs_final": "circuitlab.claims.seed000",
    "nie_strongest_layer": "circuitlab.claims.seed000",
    "semantic_clusters": "circuitlab.claims.seed000",
    "semantic_clusters_natural": "circuitlab.claims.seed000",
    "names_near_pronouns_natural": "circuitlab.claims.seed000",
    "subkey_coactivation": "circuitlab.claims.seed000",
    "table_3_neighbours": "circuitlab.claims.seed000",
    "usage_gini": "circuitlab.claims.seed000",
    "nie_noun_vs_final_natural": "circuitlab.claims.seed000_natural",
    "nie_strongest_layer_natural": "circuitlab.claims.seed000_natural",
    "nie_all_layers_natural": "circuitlab.claims.seed000_natural",
    "nie_moderate_natural": "circuitlab.claims.seed000_natural",
    "neurons_used_natural": "circuitlab.claims.seed000_natural",
    "usage_gini_natural": "circuitlab.claims.seed000_natural",
    "subkey_coactivation_natural": "circuitlab.claims.seed000_natural",
    "natural_claims": "circuitlab.claims.seed000_natural",
    "mine_facts": "circuitlab.claims.natural_facts",
    "natural_facts": "circuitlab.claims.natural_facts",
    "natural_fact_pairs": "circuitlab.claims.natural_facts",
    "count_patterns": "circuitlab.claims.natural_facts",
    "PAPER_ON": "circuitlab.claims.seed002",
    "PRESSURED": "circuitlab.claims.seed002",
    "REGIMES": "circuitlab.claims.seed002",
    "SWEEP_MISSING": "circuitlab.claims.seed002",
    "attention_constant": "circuitlab.claims.seed002",
    "attention_crisp": "circuitlab.claims.seed002",
    "attention_depth": "circuitlab.claims.seed002",
    "attention_on": "circuitlab.claims.seed002",
    "attention_selective": "circuitlab.claims.seed002",
    "attention_weak": "circuitlab.claims.seed002",
    "ffn_alive": "circuitlab.claims.seed002",
    "ffn_crisp": "circuitlab.claims.seed002",
    "ffn_crisp_every_layer": "circuitlab.claims.seed002",
    "ffn_on": "circuitlab.claims.seed002",
    "ffn_selective": "circuitlab.claims.seed002",
    "legible_attribution": "circuitlab.claims.seed002",
    "legible_share": "circuitlab.claims.seed002",
    "quality_parity": "circuitlab.claims.seed002",
    "sweep_attention_on": "circuitlab.claims.seed002",
    "sweep_both_collapse": "circuitlab.claims.seed002",
    "sweep_crispness_keeps_on": "circuitlab.claims.seed002",
    "sweep_depth": "circuitlab.claims.seed002",
    "paper_attention_selective": "circuitlab.claims.seed002",
    "paper_attention_constant": "circuitlab.claims.seed002",
    "paper_attention_crisp": "circuitlab.claims.seed002",
    "paper_attention_on": "circuitlab.claims.seed002",
    "paper_ffn_crisp": "circuitlab.claims.seed002",
    "paper_ffn_on": "circuitlab.claims.seed002",
    "paper_ffn_selective": "circuitlab.claims.seed002",
    "paper_ffn_alive": "circuitlab.claims.seed002",
    "paper_attention_depth": "circuitlab.claims.seed002",
    "paper_ffn_crisp_every_layer": "circuitlab.claims.seed002",
    "paper_quality": "circuitlab.claims.seed002",
    "paper_legible_share": "circuitlab.claims.seed002",
    "paper_attention_weak": "circuitlab.claims.seed002",
    "sweep_both_collapse_centred": "circuitlab.claims.seed002",
    "sweep_plain_illegible_centred": "circuitlab.claims.seed002",
    "sweep_sparsity_inert_centred": "circuitlab.claims.seed002",
    "sweep_attention_on_centred": "circuitlab.claims.seed002",
    "sweep_ffn_on_centred": "circuitlab.claims.seed002",
    "sweep_crispness_keeps_on_centred": "circuitlab.claims.seed002",
    "sweep_depth_centred": "circuitlab.claims.seed002",
    "sweep_legible_share_centred": "circuitlab.claims.seed002",
    "sweep_ffn_on": "circuitlab.claims.seed002",
    "sweep_legible_share": "circuitlab.claims.seed002",
    "sweep_plain_illegible": "circuitlab.claims.seed002",
    "sweep_sparsity_inert": "circuitlab.claims.seed002",
    "attention_selective_beyond_null": "circuitlab.claims.seed002_null",
    "ffn_selective_beyond_null": "circuitlab.claims.seed002_null",
    "attention_sparse_detectors": "circuitlab.claims.seed002_null",
    "ffn_sparse_detectors": "circuitlab.claims.seed002_null",
    "sweep_sparse_detectors": "circuitlab.claims.seed002_null",
    "paper_attention_sparse": "circuitlab.claims.seed002_null",
    "paper_ffn_sparse": "circuitlab.claims.seed002_null",
    "paper_attention_beyond_null": "circuitlab.claims.seed002_null",
    "paper_ffn_beyond_null": "circuitlab.claims.seed002_null",
    "control_values": "circuitlab.claims.selectivity",
    "pressure_free_stats": "circuitlab.claims.selectivity",
    "crispness_cut": "circuitlab.claims.selectivity",
    "selective_beyond": "circuitlab.claims.selectivity",
    "sparse_detectors": "circuitlab.claims.selectivity",
    "control_selective": "circuitlab.claims.selectivity",
    "ABLATION_SHARE": "circuitlab.claims.seed003",
    "PARITY_MISSING": "circuitlab.claims.seed003",
    "RECONSTRUCTION_LIMIT": "circuitlab.claims.seed003",
    "max_coherence": "circuitlab.claims.seed003",
    "parity_ablation": "circuitlab.claims.seed003",
    "parity_coherence": "circuitlab.claims.seed003",
    "linear_code_coherence": "circuitlab.claims.seed003",
    "parity_encoder_exact": "circuitlab.claims.seed003",
    "parity_reconstruction": "circuitlab.claims.seed003",
    "parity_training_cost": "circuitlab.claims.seed003",
    "parity_probing": "circuitlab.claims.seed003",
    "PROBE_MARGIN": "circuitlab.claims.seed003",
    "SAE_MISSING": "circuitlab.claims.seed003",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab.claims' has no attribute {name!r}")


__all__ = sorted(_LAZY)
