"""Analyses: causal patching (NIE), direct logit attribution, legibility metrics, circuit databases.

Every name below imports on first use (`import circuitlab.analysis.pairs` loads no torch); the modules
need only torch at import; pandas and plotly load inside the functions that build tables and figures, and
heavier libraries (faiss, umap) only where they are used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "direct_logit_attribution": "circuitlab.analysis.attribution",
    "dla_figures": "circuitlab.analysis.attribution",
    "dla_layer_figure": "circuitlab.analysis.attribution",
    "dla_overview_figure": "circuitlab.analysis.attribution",
    "NoBoundedChannelsError": "circuitlab.analysis.legibility",
    "bounded_channel_groups": "circuitlab.analysis.legibility",
    "channel_statistics": "circuitlab.analysis.legibility",
    "classify_regime": "circuitlab.analysis.legibility",
    "head_selectivity_heatmap": "circuitlab.analysis.legibility_figures",
    "held_out_windows": "circuitlab.analysis.legibility",
    "legibility_by_head": "circuitlab.analysis.legibility",
    "legibility_by_layer": "circuitlab.analysis.legibility",
    "legibility_stats": "circuitlab.analysis.legibility",
    "legibility_summary": "circuitlab.analysis.legibility",
    "legibility_table": "circuitlab.analysis.legibility",
    "max_activating_contexts": "circuitlab.analysis.channel_names",
    "name_channels": "circuitlab.analysis.channel_names",
    "rank_firing_tokens": "circuitlab.analysis.channel_names",
    "regimes_by_layer_figure": "circuitlab.analysis.legibility_figures",
    "Patch": "circuitlab.analysis.patching",
    "PatchPair": "circuitlab.analysis.patching",
    "as_patch_pair": "circuitlab.analysis.patching",
    "natural_code_hooks": "circuitlab.analysis.patching",
    "nie_grid": "circuitlab.analysis.patching",
    "nie_heatmap": "circuitlab.analysis.patching",
    "nie_summary": "circuitlab.analysis.patching",
    "no_counted_pairs": "circuitlab.analysis.patching",
    "positions_for": "circuitlab.analysis.patching",
    "excluded_report": "circuitlab.analysis.patching",
    "run_interventions": "circuitlab.analysis.patching",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab.analysis' has no attribute {name!r}")


__all__ = sorted(_LAZY)
