"""The built wheel, installed into a fresh environment outside the source tree: the shipped models load by name,
`circuitlab dla` runs on the trained model (not a random preset), and the dashboard runs from the installed
package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREE = ("circuitlab", "apps", "models", "results", "data/natural", "pyproject.toml", "setup.py", "README.md")
# what the design card names: `pip install circuitlab` brings each (torch is installed first, pinned, by the set-up)
DEPENDENCIES = ("torch", "transformer-lens", "umap-learn", "scikit-learn", "faiss-cpu", "pandas", "plotly", "streamlit")


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the fresh environment's python, an environment for running it away from the source tree)."""
    pytest.importorskip("setuptools", reason="building the wheel without network needs setuptools installed")
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"  # a copy, so the build leaves nothing in the working tree
    source.mkdir()
    for name in TREE:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, source / name)
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, cwd=base, timeout=600)
    [wheel] = wheels.glob("circuitlab-*.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = {line.split(":", 1)[1].split(";")[0].strip().split(">")[0].split("=")[0].split("<")[0].strip().lower()
                for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert set(DEPENDENCIES) <= requires, sorted(set(DEPENDENCIES) - requires)
    env_dir = base / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # torch and the other dependencies come from the interpreter running the tests (not reinstalled): its
    # site-packages go on the fresh environment's path, after the environment's own (.pth files there, such as
    # an editable install of the source tree, are not processed this way)
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (_site_packages(env_dir) / "_test_dependencies.pth").write_text("\n".join(here) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--ignore-installed", "-q", str(wheel)],
                   check=True, cwd=base, timeout=600)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "CIRCUITLAB_MODELS")}
    env["HOME"] = str(base)
    return python, env


def _run(python: Path, env: dict, code: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                            cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_the_installed_wheel_works_outside_the_tree(installed, tmp_path):
    python, env = installed
    # the package comes from the fresh environment, not from the source tree
    where = _run(python, env, "import circuitlab; print(circuitlab.__file__)", tmp_path).stdout.strip()
    assert str(ROOT) not in where and "site-packages" in where

    # load_model finds the shipped model in the installed package: its trained vocabulary, not the preset's
    shipped = json.loads((ROOT / "models" / "sgatlin-stories" / "config.json").read_text())
    loaded = _run(python, env, """
        from circuitlab import load_model
        model = load_model("sgatlin-stories")
        print(model.cfg.d_vocab, model.tokenizer is not None)
    """, tmp_path).stdout.split()
    assert loaded == [str(shipped["d_vocab"]), "True"]

    # the console script runs dla on the trained model
    script = python.parent / "circuitlab"
    dla = subprocess.run([str(script), "dla", "sgatlin-stories", "The turtle was", "--out", str(tmp_path / "dla.csv")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert dla.returncode == 0, dla.stderr
    import pandas as pd

    table = pd.read_csv(tmp_path / "dla.csv")
    assert len(table) > 0 and set(table.columns) >= {"component", "value"}

    # the dashboard runs from the installed package: a demo run folder, then the app's pages
    from demo_fixtures import make_tiny_models

    model = make_tiny_models(tmp_path / "models")["tiny-gelu"]
    demo = subprocess.run([str(script), "demo", str(model), "--runs", str(tmp_path / "runs"), "--fast", "--no-serve",
                           "--quiet"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert demo.returncode == 0, demo.stderr
    pages = _run(python, env, f"""
        from pathlib import Path
        import circuitlab
        from streamlit.testing.v1 import AppTest
        from circuitlab.cli.demo import app_path
        assert app_path() == Path(circuitlab.__file__).parent / "apps" / "app.py", app_path()
        app = AppTest.from_file(str(app_path()), default_timeout=120)
        app.session_state["run_path"] = {str(tmp_path / "runs" / "tiny-gelu")!r}
        app.run()
        assert not app.exception, [e.value for e in app.exception]
        for page in ("views/lookup.py", "views/attribution.py"):
            app.switch_page(page)
            app.run()
            assert not app.exception, [e.value for e in app.exception]
            print(app.title[0].value)
    """, tmp_path).stdout.split("\n")
    assert pages[:2] == ["Circuit lookup", "Attribution"]


@pytest.mark.slow
def test_the_wheel_carries_the_natural_stories_and_the_reports_its_pages_read(installed, tmp_path):
    python, env = installed
    counts = _run(python, env, """
        from circuitlab.data.natural import load_natural_stories
        from circuitlab.resources import natural_root, results_root
        corpus = load_natural_stories()
        print(len(corpus.stories), "site-packages" in str(natural_root()), (results_root() / "parity" / "parity_report.json").is_file(),
              (results_root() / "legible-sweep" / "legibility_regimes.json").is_file())
    """, tmp_path).stdout.split()
    shipped = sum(1 for path in (ROOT / "data" / "natural" / "stories").glob("*.txt")
                  for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("### "))
    assert counts == [str(shipped), "True", "True", "True"]
    # the own-data path of docs/getting-started.md, outside the tree: train on the user's text (and the shipped
    # natural stories), then query and patch
    texts = tmp_path / "my_texts"
    texts.mkdir()
    (texts / "a.txt").write_text("\n\n".join(f"The turtle was slow and the rabbit was fast, said Ana {i}." for i in range(400)))
    script = python.parent / "circuitlab"
    trained = subprocess.run([str(script), "train", "--preset", "tiny-gelu", "--text", str(texts), "--out",
                              str(tmp_path / "runs" / "mymodel"), "--steps", "3", "--seq-len", "32",
                              "--held-out-fraction", "0.1", "--quiet"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert trained.returncode == 0, trained.stderr
    natural = subprocess.run([str(script), "train", "--preset", "tiny-gelu", "--natural", "--n-stories", "50",
                              "--out", str(tmp_path / "runs" / "natural"), "--steps", "2", "--seq-len", "32", "--quiet"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert natural.returncode == 0, natural.stderr
