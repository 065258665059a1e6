"""Analyses: causal patching (NIE), direct logit attribution, legibility metrics, circuit databases.

These modules need only torch at import; pandas and plotly load inside the functions that build tables and
figures, and heavier libraries (faiss, umap) only where they are used.
"""

from circuitlab.analysis.attribution import (
    direct_logit_attribution,
    dla_figures,
    dla_layer_figure,
    dla_overview_figure,
)
from circuitlab.analysis.legibility import (
    NoBoundedChannelsError,
    bounded_channel_groups,
    channel_statistics,
    classify_regime,
    head_selectivity_heatmap,
    held_out_windows,
    legibility_by_head,
    legibility_by_layer,
    legibility_stats,
    legibility_summary,
    legibility_table,
    max_activating_contexts,
    name_channels,
    rank_firing_tokens,
    regimes_by_layer_figure,
)
from circuitlab.analysis.patching import (
    Patch,
    PatchPair,
    as_patch_pair,
    natural_code_hooks,
    nie_grid,
    nie_heatmap,
    nie_summary,
    run_interventions,
)
