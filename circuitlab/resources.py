"""Where the data circuitlab ships lives: in the installed package (the wheel carries it as package data) or,
in a clone, in the source tree. Each can be pointed elsewhere by an environment variable.

    models_root()    $CIRCUITLAB_MODELS,  circuitlab/models (installed),  models/ (source tree)
    results_root()   $CIRCUITLAB_RESULTS, circuitlab/results (installed), results/ (source tree)
    natural_root()   $CIRCUITLAB_NATURAL, circuitlab/natural (installed), data/natural/ (source tree)
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SOURCE_TREE = PACKAGE.parent


def _root(env_var: str, installed: str, source: str) -> Path:
    if env_var in os.environ:
        return Path(os.environ[env_var])
    shipped = PACKAGE / installed
    if shipped.is_dir():
        return shipped
    return SOURCE_TREE / source


def models_root() -> Path:
    """The folder of the shipped model folders."""
    return _root("CIRCUITLAB_MODELS", "models", "models")


def results_root() -> Path:
    """The folder of the committed results (reports of the runs that test the papers' claims)."""
    return _root("CIRCUITLAB_RESULTS", "results", "results")


def natural_root() -> Path:
    """The folder of the natural children's stories (prompts.jsonl and stories/)."""
    return _root("CIRCUITLAB_NATURAL", "natural", "data/natural")
