"""Every analysis of one model, cached in a run folder, for the dashboard to read.

- circuitlab.demo.runfolder: run folders, run names and the manifest
- circuitlab.demo.pipeline: the cached artifact pipeline (steps, fingerprints, `run_pipeline`)
- circuitlab.demo.readers: artifacts read back as tables and figures
- circuitlab.demo.inputs: the dashboard's text-input handlers (no Streamlit needed)

The `circuitlab demo` and `circuitlab dashboard` commands live in circuitlab.cli.demo.
"""

from circuitlab.demo.inputs import (
    Checked, attribute_prompt, check_text, custom_patch_pair, lookup_circuits, run_custom_patch, single_token,
)
from circuitlab.demo.pipeline import (
    ARTIFACTS, DLA_PROMPTS, PipelineReport, Sizes, Step, corpus_windows, pipeline_steps, run_pipeline,
)
from circuitlab.demo.readers import (
    DLA_ATTRS, dla_tables, load_usage_reports, nie_for_parquet, nie_from_parquet, read_train_log, train_log_figure,
)
from circuitlab.demo.runfolder import (
    DEFAULT_MODEL, DEFAULT_RUNS, RUN_FORMAT, RUN_FORMAT_VERSION, RUN_MANIFEST, ModelIdentity, RunFolder,
    RunFolderError, check_run_name, list_runs, model_identity, run_folder_path, run_name_for,
)

__all__ = [
    "ARTIFACTS", "Checked", "DEFAULT_MODEL", "DEFAULT_RUNS", "DLA_ATTRS", "DLA_PROMPTS", "ModelIdentity",
    "PipelineReport", "RUN_FORMAT", "RUN_FORMAT_VERSION", "RUN_MANIFEST", "RunFolder", "RunFolderError", "Sizes",
    "Step", "attribute_prompt", "check_run_name", "check_text", "corpus_windows", "custom_patch_pair",
    "dla_tables", "list_runs", "load_usage_reports", "lookup_circuits", "model_identity", "nie_for_parquet",
    "nie_from_parquet", "pipeline_steps", "read_train_log", "run_custom_patch", "run_folder_path", "run_name_for",
    "run_pipeline", "single_token", "train_log_figure",
]
