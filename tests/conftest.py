"""Session fixtures: tiny models trained once per test session with `circuitlab train`, for tests that need a
model which has learned the story corpus (analyses, patching, the dashboard).

    def test_something(tiny_trained):                 # Path of a trained tiny-sgatlin model folder
        model = load_model(tiny_trained)

    def test_other(tiny_trained_models):              # lazy mapping: a model is trained on first access
        folder = tiny_trained_models["tiny-legible"]  # keys: tiny-sgatlin, tiny-gelu, tiny-legible, tiny-parity

All of them share one generated corpus and one BPE tokenizer (3000 stories, vocabulary 2048, so every fact
noun and adjective is a single token) and are deterministic (seed 0, one CPU thread). Each folder is a model
folder (config.json, model.safetensors, tokenizer.json) plus train_log.jsonl, metrics.json and card.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="run the slow end-to-end tests (notebooks, demo, dashboard, wheel, torchrun, browser) "
                          "instead of the fast suite")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast suite by default; with --slow, only the tests marked slow. Together they are the whole suite."""
    wanted = config.getoption("--slow")
    kept, deselected = [], []
    for item in items:
        (kept if (item.get_closest_marker("slow") is not None) == wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


# optimizer steps per fixture model: each trains in about 20-40 s on one CPU core
TINY_FIXTURE_STEPS = {"tiny-sgatlin": 300, "tiny-gelu": 200, "tiny-legible": 200, "tiny-parity": 150}


def train_tiny_model(preset: str, out: Path, data_dir: Path, steps: int) -> Path:
    """Train `preset` with the tiny training defaults in-process (one thread, restored afterwards)."""
    from circuitlab.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        status = main(["train", "--preset", preset, "--out", str(out), "--data-dir", str(data_dir),
                       "--steps", str(steps), "--threads", "1", "--quiet"])
    finally:
        torch.set_num_threads(threads)
    if status != 0:
        raise RuntimeError(f"training the {preset} fixture failed with exit status {status}")
    return out


class TinyModels(Mapping):
    """Trained tiny model folders by preset name, each trained the first time it is asked for."""

    def __init__(self, root: Path):
        self.root = root
        self.folders: dict[str, Path] = {}

    def __getitem__(self, preset: str) -> Path:
        if preset not in TINY_FIXTURE_STEPS:
            raise KeyError(f"no tiny fixture model {preset!r}; available: {sorted(TINY_FIXTURE_STEPS)}")
        if preset not in self.folders:
            self.folders[preset] = train_tiny_model(
                preset, self.root / preset, self.root / "data", TINY_FIXTURE_STEPS[preset]
            )
        return self.folders[preset]

    def __iter__(self) -> Iterator[str]:
        return iter(TINY_FIXTURE_STEPS)

    def __len__(self) -> int:
        return len(TINY_FIXTURE_STEPS)


@pytest.fixture(scope="session")
def tiny_trained_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return TinyModels(tmp_path_factory.mktemp("tiny_models"))


@pytest.fixture(scope="session")
def tiny_trained(tiny_trained_models: TinyModels) -> Path:
    """Folder of a tiny-sgatlin model trained for 300 steps on the story corpus."""
    return tiny_trained_models["tiny-sgatlin"]


@pytest.fixture(autouse=True)
def _autograd_stays_enabled():
    """A test (or the code it calls) must not leave autograd disabled for the tests after it."""
    yield
    leaked = not torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    assert not leaked, "autograd was left disabled globally; use `with torch.no_grad():` instead"


@pytest.fixture(autouse=True)
def _main_module_is_restored():
    """Streamlit's AppTest runs app scripts as __main__; put pytest's __main__ back, or processes that
    multiprocessing spawns later would try to re-import the app script."""
    import sys

    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    yield
    sys.modules["__main__"] = main
    if main_file is not None and getattr(main, "__file__", None) != main_file:
        main.__file__ = main_file
