"""Every analysis of one model, cached in a run folder, for the dashboard to read.

- circuitlab.demo.runfolder: run folders, run names and the manifest
- circuitlab.demo.pipeline: the cached artifact pipeline (steps, fingerprints, `run_pipeline`)
- circuitlab.demo.readers: artifacts read back as tables and figures
- circuitlab.demo.inputs: the dashboard's text-input handlers (no Streamlit needed)

The `circuitlab demo` and `circuitlab dashboard` commands live in circuitlab.cli.demo.

The names below import on first use, so importing one submodule loads no other.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Checked": "circuitlab.demo.inputs",
    "attribute_prompt": "circuitlab.demo.inputs",
    "check_text": "circuitlab.demo.inputs",
    "custom_patch_pair": "circuitlab.demo.inputs",
    "lookup_circuits": "circuitlab.demo.inputs",
    "run_custom_patch": "circuitlab.demo.inputs",
    "single_token": "circuitlab.demo.inputs",
    "ARTIFACTS": "circuitlab.demo.pipeline",
    "DLA_PROMPTS": "circuitlab.demo.pipeline",
    "PipelineReport": "circuitlab.demo.pipeline",
    "Sizes": "circuitlab.demo.pipeline",
    "Step": "circuitlab.demo.pipeline",
    "corpus_windows": "circuitlab.demo.pipeline",
    "pipeline_steps": "circuitlab.demo.pipeline",
    "run_pipeline": "circuitlab.demo.pipeline",
    "DLA_ATTRS": "circuitlab.demo.readers",
    "dla_tables": "circuitlab.demo.readers",
    "load_usage_reports": "circuitlab.demo.readers",
    "nie_for_parquet": "circuitlab.demo.readers",
    "nie_from_parquet": "circuitlab.demo.readers",
    "read_train_log": "circuitlab.demo.readers",
    "train_log_figure": "circuitlab.demo.readers",
    "DEFAULT_MODEL": "circuitlab.demo.runfolder",
    "DEFAULT_RUNS": "circuitlab.demo.runfolder",
    "RUN_FORMAT": "circuitlab.demo.runfolder",
    "RUN_FORMAT_VERSION": "circuitlab.demo.runfolder",
    "RUN_MANIFEST": "circuitlab.demo.runfolder",
    "ModelIdentity": "circuitlab.demo.runfolder",
    "RunFolder": "circuitlab.demo.runfolder",
    "RunFolderError": "circuitlab.demo.runfolder",
    "check_run_name": "circuitlab.demo.runfolder",
    "list_runs": "circuitlab.demo.runfolder",
    "model_identity": "circuitlab.demo.runfolder",
    "run_folder_path": "circuitlab.demo.runfolder",
    "run_name_for": "circuitlab.demo.runfolder",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab.demo' has no attribute {name!r}")


__all__ = sorted(_LAZY)
