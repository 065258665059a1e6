"""What every dashboard page shares: the run folder being shown, cached loaders, and the messages for
missing artifacts and odd input.

The run folder comes from `--run` after streamlit's `--` (what `circuitlab dashboard` passes), else the
CIRCUITLAB_RUN environment variable, else runs/sgatlin-stories. The sidebar offers the other run folders
beside it; names are checked with circuitlab.demo.run_folder_path, so the choice cannot leave the runs folder.
Models and circuit databases are loaded once per process (st.cache_resource), tables once per file
version (st.cache_data keyed by path and modification time).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from circuitlab.demo.pipeline import ARTIFACTS
from circuitlab.demo.runfolder import DEFAULT_MODEL, DEFAULT_RUNS, RunFolder, RunFolderError, list_runs, run_folder_path

APP_TITLE = "circuitlab dashboard"
RUN_KEY = "run_path"


def initial_run_path(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--run", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    chosen = args.run or os.environ.get("CIRCUITLAB_RUN") or str(Path(DEFAULT_RUNS) / DEFAULT_MODEL)
    return Path(chosen)


def sidebar_run_picker() -> None:
    """The run folder selector (only folders beside the current one, by checked name)."""
    current = Path(st.session_state.setdefault(RUN_KEY, str(initial_run_path())))
    names = list_runs(current.parent)
    if current.name not in names and (current / "manifest.json").is_file():
        names = sorted([*names, current.name])
    if len(names) > 1:
        choice = st.sidebar.selectbox("Run folder", names, index=names.index(current.name) if current.name in names else 0)
        if choice != current.name:
            try:
                st.session_state[RUN_KEY] = str(run_folder_path(current.parent, choice))
            except RunFolderError as error:
                st.sidebar.error(str(error))
    st.sidebar.caption(f"run folder: `{display_path(Path(st.session_state[RUN_KEY]))}`")


def run_model_config() -> Any:
    """The ModelConfig of the current run's model, or None when the run or its model cannot be read."""
    from circuitlab.config import ModelConfig

    path = Path(st.session_state.setdefault(RUN_KEY, str(initial_run_path())))
    try:
        return ModelConfig.from_json(RunFolder.open(path).model_folder() / "config.json")
    except Exception:  # noqa: BLE001 - no run yet, a damaged one, a moved model: the pages say what is missing
        return None


def display_path(path: Path) -> str:
    """The path relative to the working directory when it lies below it (shorter, and no machine paths)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def require_run() -> RunFolder:
    """The run folder shown (after the sidebar's run picker), or an explanation and a stop.

    Every page calls this first, so the picker is drawn once per page run, also when a page script is run
    on its own (AppTest.from_file on a view).
    """
    sidebar_run_picker()
    path = Path(st.session_state[RUN_KEY])
    try:
        return RunFolder.open(path)
    except RunFolderError as error:
        st.error(f"{error}")
        st.markdown("Make the default run folder with:")
        st.code(f"circuitlab demo {DEFAULT_MODEL} --no-serve", language="bash")
        st.stop()


def need(run: RunFolder, key: str) -> bool:
    """True when the artifact exists; otherwise say what is missing (or why it does not apply) and how to make it."""
    if run.has(key):
        return True
    what, files = ARTIFACTS[key]
    reason = run.skipped(key)
    if reason:
        st.info(f"The {what} does not apply to this model: {reason}.")
        return False
    st.warning(f"This run folder has no {what} (`{files}` in `{run.path}`). Make it with:")
    st.code(run.demo_command(), language="bash")
    return False


def load_artifact(run: RunFolder, key: str, read: Callable[[], Any]) -> Any:
    """`read()` an artifact that `need` found; a damaged or outdated file becomes a message and None."""
    try:
        return read()
    except Exception as error:  # any unreadable artifact file is the same problem to the user: remake it
        what, files = ARTIFACTS[key]
        st.error(f"The {what} in `{run.path}` cannot be read ({type(error).__name__}: {error}). Remake it with:")
        st.code(run.demo_command(), language="bash")
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@st.cache_data(show_spinner=False, max_entries=64)
def _read_parquet(path: str, mtime: float) -> Any:
    import pandas as pd

    return pd.read_parquet(path)


def read_parquet(path: Path) -> Any:
    return _read_parquet(str(path), _mtime(path))


@st.cache_resource(show_spinner="loading the model ...", max_entries=4)
def _load_model(folder: str, weights_sha256: str | None) -> Any:
    from circuitlab.architectures.transformer import load_model

    return load_model(folder)


def model_of(run: RunFolder, stop: bool = True) -> Any:
    """The run's model (loaded once); on failure an error message and, with stop, a stop."""
    try:
        folder = run.model_folder()
        model = _load_model(str(folder), run.manifest.get("weights_sha256"))
    except Exception as error:  # a missing or broken model folder must read as a message on the page
        st.error(f"Cannot load the model of this run ({type(error).__name__}: {error}).")
        if stop:
            st.stop()
        return None
    if run.manifest.get("config_hash") and model.config.hash() != run.manifest["config_hash"]:
        st.warning(
            "The model folder changed since this run folder was made (config hash differs); the artifacts may "
            f"not match it. Remake them with `{run.demo_command()}`."
        )
    return model


@st.cache_resource(show_spinner="opening the circuit database ...", max_entries=4)
def _load_db(folder: str, manifest_mtime: float, model_folder: str, weights_sha256: str | None) -> Any:
    from circuitlab.analysis.circuitdb import CircuitDB

    model = _load_model(model_folder, weights_sha256)
    return CircuitDB.open(folder, model=model)  # the manifest only; each shard is checked when first read


def db_of(run: RunFolder) -> Any:
    folder = run.file("circuitdb")
    try:
        return _load_db(str(folder), _mtime(folder / "manifest.json"), str(run.model_folder()), run.manifest.get("weights_sha256"))
    except Exception as error:  # a damaged database or model must read as a message on the page
        st.error(f"Cannot open the circuit database ({type(error).__name__}: {error}). Remake it with `{run.demo_command()}`.")
        st.stop()


def guarded(action: Callable[[], Any], what: str) -> Any:
    """Run `action`; an unexpected failure becomes a message with the details folded away, not a traceback."""
    try:
        return action()
    except Exception as error:  # the last line of defence between a bug and the user's page
        st.error(f"{what} failed: {type(error).__name__}: {error}")
        with st.expander("details"):
            st.code("".join(traceback.format_exception(error)), language="text")
        return None


def layer_choice(label: str, layers: list[int], default: int | None = None, key: str | None = None) -> int:
    index = layers.index(default) if default in layers else 0
    return int(st.selectbox(label, layers, index=index, format_func=lambda l: f"layer {l}", key=key))


def penultimate(layers: list[int]) -> int | None:
    """Seed 000 shows the penultimate layer's circuits (Figure 6, Table 3)."""
    return layers[-2] if len(layers) > 1 else (layers[0] if layers else None)


@st.cache_data(show_spinner=False, max_entries=16)
def _read_report(kind: str, path: str, mtime: float, _load: Callable[[str], dict]) -> dict:
    return _load(path)


def results_report(label: str, default: Path, env_var: str, key: str, load: Callable[[str], dict], hint: str,
                   commands: str, errors: tuple[type[BaseException], ...]) -> dict:
    """A results JSON named in a text box (first $env_var, else `default`), read by `load` once per file version.
    When the file is absent the page stops with `hint` and the `commands` that write it (`{path}` is filled in);
    when `load` raises one of `errors` it stops with the reason."""
    value = os.environ.get(env_var) or str(default)
    path = Path(st.text_input("Report JSON", value=st.session_state.setdefault(key, value)))
    st.session_state[key] = str(path)
    if not path.is_file():
        st.info(f"No {label} at `{display_path(path)}` yet. {hint}")
        st.code(commands.format(path=display_path(path)), language="bash")
        st.stop()
    try:
        return _read_report(key, str(path), path.stat().st_mtime, load)
    except errors as error:  # unreadable, not JSON, or not this kind of report
        st.error(f"`{display_path(path)}` cannot be read as a {label} ({type(error).__name__}: {error}).")
        st.stop()
