#!/usr/bin/env python
"""Execute the analysis notebooks top to bottom and save their outputs in place.

    python scripts/run_notebooks.py                         # every analyses/*.ipynb, full mode, shipped models
    python scripts/run_notebooks.py analyses/02_*.ipynb     # some of them
    python scripts/run_notebooks.py --fast --no-save        # a quick check that they run (what CI does)
    python scripts/run_notebooks.py --models-dir runs/my-models

Full mode also writes each notebook's key figures to analyses/figures/ (<name>.html, and <name>.png when
kaleido or a headless Chromium can render them) for the README. A notebook that fails is not overwritten:
its partly executed copy goes to runs/notebooks/<name>.failed.ipynb with the error, and the others still run.
Exit status: 0 when every notebook ran, 1 otherwise, 2 for bad arguments.

The kernel is the interpreter running this script (a "python3" kernelspec written to a temporary Jupyter
path, so a user-level kernelspec pointing at another Python cannot take over).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANALYSES = ROOT / "analyses"
FIGURES = ANALYSES / "figures"
FAILED = ROOT / "runs" / "notebooks"
SHIPPED_MODELS = ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories")


def notebook_paths(patterns: list[str] | None = None) -> list[Path]:
    """The notebooks to run: the given paths, or every analyses/*.ipynb in name order."""
    if not patterns:
        return sorted(ANALYSES.glob("[0-9]*.ipynb"))
    paths = []
    for pattern in patterns:
        path = Path(pattern)
        if not path.is_file() or path.suffix != ".ipynb":
            raise FileNotFoundError(f"{pattern} is not a notebook file (expected a path like analyses/01_circuit_clusters.ipynb)")
        paths.append(path.resolve())
    return paths


@contextmanager
def current_interpreter_kernel():
    """Make the kernelspec "python3" start this interpreter, whatever kernelspecs the user has installed."""
    with tempfile.TemporaryDirectory(prefix="circuitlab-kernel-") as root:
        spec = Path(root) / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python 3 ({sys.executable})",
            "language": "python",
        }))
        previous = os.environ.get("JUPYTER_PATH")
        # JUPYTER_PATH is searched before the user's and the environment's data directories
        os.environ["JUPYTER_PATH"] = root + (os.pathsep + previous if previous else "")
        try:
            yield "python3"
        finally:
            if previous is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = previous


@contextmanager
def environment(changes: Mapping[str, str | None]):
    """Set (or, for None, remove) environment variables for the kernels started inside."""
    saved = {key: os.environ.get(key) for key in changes}
    for key, value in changes.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def execute_notebook(path: Path, *, timeout: int = 1800, env: Mapping[str, str | None] | None = None):
    """Run one notebook in a fresh kernel with `env` applied, cwd = the notebook's folder; returns the
    executed notebook. Raises nbclient's CellExecutionError (carrying the executed notebook as `.notebook`)
    when a cell fails."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.read(path, as_version=4)
    with environment(env or {}), current_interpreter_kernel() as kernel_name:
        client = NotebookClient(
            notebook, timeout=timeout, kernel_name=kernel_name, resources={"metadata": {"path": str(path.parent)}},
            record_timing=False,
        )
        try:
            client.execute()
        except CellExecutionError as error:
            error.notebook = notebook
            raise
    return notebook


def write_atomic(notebook, path: Path) -> None:
    import nbformat

    from circuitlab.atomic import atomic_write

    atomic_write(path, lambda temporary: nbformat.write(notebook, str(temporary)))


def missing_models(models_dir: Path | None) -> list[str]:
    if models_dir is not None:
        return [name for name in SHIPPED_MODELS if not (models_dir / name / "model.safetensors").is_file()]
    from circuitlab.resources import models_root

    return [name for name in SHIPPED_MODELS if not (models_root() / name / "model.safetensors").is_file()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="notebook files (default: every analyses/*.ipynb)")
    parser.add_argument("--fast", action="store_true", help="small samples (CIRCUITLAB_FAST=1), as in CI")
    parser.add_argument("--no-save", action="store_true", help="run without writing outputs or figures")
    parser.add_argument("--models-dir", type=Path, default=None, help="a folder laid out like models/ (default: the shipped models)")
    parser.add_argument("--figures-dir", type=Path, default=FIGURES, help="where key figures are written (full mode)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one cell may run")
    args = parser.parse_args(argv)

    try:
        paths = notebook_paths(args.notebooks)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not paths:
        print(f"error: no notebooks found in {ANALYSES}", file=sys.stderr)
        return 2
    if args.models_dir is not None and not args.models_dir.is_dir():
        print(f"error: --models-dir {args.models_dir} is not a folder", file=sys.stderr)
        return 2
    models_dir = args.models_dir or (Path(os.environ["CIRCUITLAB_MODELS_DIR"]) if os.environ.get("CIRCUITLAB_MODELS_DIR") else None)
    absent = missing_models(models_dir.resolve() if models_dir else None)
    if absent:
        print(f"warning: models not found: {', '.join(absent)}; notebooks that need one as their main model fail, "
              "the others skip the sections that use it")

    save = not args.no_save
    env: dict[str, str | None] = {
        "CIRCUITLAB_FAST": "1" if args.fast else "0",
        "CIRCUITLAB_FIGURES_DIR": str(args.figures_dir.resolve()) if save and not args.fast else None,
        "CIRCUITLAB_MODELS_DIR": str(args.models_dir.resolve()) if args.models_dir else os.environ.get("CIRCUITLAB_MODELS_DIR"),
    }
    results = []
    for path in paths:
        print(f"running {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ...", flush=True)
        started = time.perf_counter()
        try:
            notebook = execute_notebook(path, timeout=args.timeout, env=env)
        except Exception as error:  # a failing notebook must not stop the others
            seconds = time.perf_counter() - started
            message = str(error).strip().splitlines()
            print(f"  FAILED after {seconds:.0f} s: {message[-1] if message else type(error).__name__}")
            partial = getattr(error, "notebook", None)
            if partial is not None and save:
                target = FAILED / f"{path.stem}.failed.ipynb"
                write_atomic(partial, target)
                print(f"  partly executed copy: {target}")
            results.append((path.name, "failed", seconds))
            continue
        seconds = time.perf_counter() - started
        if save and not args.fast:
            write_atomic(notebook, path)
        results.append((path.name, "ok", seconds))
        print(f"  ok in {seconds:.0f} s" + (" (outputs saved)" if save and not args.fast else ""))

    print("\nnotebook                                   status   seconds")
    for name, status, seconds in results:
        print(f"{name:<42} {status:<8} {seconds:7.0f}")
    if save and not args.fast:
        figures = sorted(p.name for p in args.figures_dir.glob("*.png")) if args.figures_dir.is_dir() else []
        print(f"\n{len(figures)} PNG figures in {args.figures_dir}")
    return 0 if all(status == "ok" for _, status, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
