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
share), `seed000`, `seed002` and `seed003` (each seed's measuring functions and its rows), `registry` (every
claim in order, and measuring them) and `markdown` (writing and reading analyses/claims.md). Every public name
is exported here, and a row names its measuring function by this package (`circuitlab.claims.parity_ablation`).
"""

from circuitlab.claims.context import MODELS, Context, Sizes, known_fact_pairs
from circuitlab.claims.markdown import COLUMNS, SEED_TITLES, read_claims, render_claims
from circuitlab.claims.registry import CLAIMS, claim_by_id, measure_claim, measure_claims
from circuitlab.claims.rows import (
    CLUSTER_LIFT,
    NOT_MEASURED,
    NOT_REPRODUCED,
    PARITY_PPL_RATIO,
    PERCENT_TOLERANCE,
    REPRODUCED,
    VERDICT_RULES,
    VERDICTS,
    Claim,
    ClaimRow,
    Measure,
    Outcome,
    holds,
    percent_verdict,
)
from circuitlab.claims.seed000 import (
    TABLE_3_QUERY,
    category_enrichment,
    dog_neighbours_are_animals,
    equal_token_losses,
    ladder_nonlinearity,
    ladder_peer,
    ladder_sgatlin_vs_dense,
    ladder_verdict,
    max_neighbours_are_names,
    names_near_pronouns,
    neurons_used,
    nie_all_layers,
    nie_moderate,
    nie_noun_vs_final,
    nie_strongest_layer,
    semantic_clusters,
    subkey_coactivation,
    table_3_neighbours,
    usage_gini,
)
from circuitlab.claims.seed002 import (
    PAPER_ON,
    PRESSURED,
    REGIMES,
    SWEEP_MISSING,
    attention_constant,
    attention_crisp,
    attention_depth,
    attention_on,
    attention_selective,
    attention_weak,
    ffn_alive,
    ffn_crisp,
    ffn_crisp_every_layer,
    ffn_on,
    ffn_selective,
    legible_attribution,
    legible_share,
    quality_parity,
    sweep_attention_on,
    sweep_both_collapse,
    sweep_crispness_keeps_on,
    sweep_depth,
    sweep_ffn_on,
    sweep_legible_share,
    sweep_plain_illegible,
    sweep_sparsity_inert,
)
from circuitlab.claims.seed003 import (
    ABLATION_SHARE,
    PARITY_MISSING,
    RECONSTRUCTION_LIMIT,
    max_coherence,
    parity_ablation,
    parity_coherence,
    parity_encoder_exact,
    parity_reconstruction,
    parity_training_cost,
)
