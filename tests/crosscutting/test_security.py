"""Issue 8, security: nothing unpickles a file a user may have downloaded, the dashboard binds to this machine
unless told otherwise, and names never lead out of the folder they are joined to ('..', separators).

The pickle invariant is checked two ways: a scan of the source (no call that can unpickle exists) and real
pickle payloads planted where a downloaded model, checkpoint or database keeps its files (loading them runs
no code: the payload's marker file never appears).
"""

from __future__ import annotations

import ast
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitlab import CircuitTransformer, ModelConfig, load_model
from circuitlab.architectures.weights import CheckpointError, is_plain_name, resolve_model_folder

REPO = Path(__file__).resolve().parents[2]
SCANNED = [REPO / "circuitlab", REPO / "apps", REPO / "scripts", REPO / "benchmarks"]

# modules whose loaders unpickle; importing one at all is a finding
PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal", "pickletools"}
# dotted call names that unpickle (matched on the last two parts, so `np.load` and `numpy.load` both count)
PICKLE_CALLS = {("torch", "load"), ("jit", "load"), ("pandas", "read_pickle"), ("pd", "read_pickle"),
                ("DataFrame", "to_pickle"), ("np", "loads"), ("numpy", "loads")}


def _dotted(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def pickle_findings(source: str, filename: str = "<source>") -> list[str]:
    """Every construct in `source` that can unpickle data: imports of pickle-family modules, calls such as
    torch.load or read_pickle, `allow_pickle=` anything but False, `weights_only=` anything but True."""
    findings = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            findings += [f"{filename}:{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PICKLE_MODULES:
            findings.append(f"{filename}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and any(a.name in ("read_pickle", "load_pickle") for a in node.names):
            findings.append(f"{filename}:{node.lineno}: from {node.module} import {[a.name for a in node.names]}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if tuple(name[-2:]) in PICKLE_CALLS or (name and name[-1] in ("read_pickle", "load_pickle")):
                findings.append(f"{filename}:{node.lineno}: {'.'.join(name)}(...)")
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "allow_pickle" and not (isinstance(value, ast.Constant) and value.value is False):
                    findings.append(f"{filename}:{node.lineno}: allow_pickle={ast.unparse(value)}")
                if keyword.arg == "weights_only" and not (isinstance(value, ast.Constant) and value.value is True):
                    findings.append(f"{filename}:{node.lineno}: weights_only={ast.unparse(value)}")
    return findings


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle\npickle.loads(b'')",
        "from joblib import load",
        "import torch\ntorch.load('model.pt')",
        "import torch\nmodel = torch.jit.load('model.pt')",
        "import pandas as pd\npd.read_pickle('table.pkl')",
        "import numpy as np\nnp.load('codes.npy', allow_pickle=True)",
        "import numpy as np\nflag = True\nnp.load('codes.npy', allow_pickle=flag)",
        "import torch\ntorch.serialization.load('x', weights_only=False)",
        "import dill",
        "from pandas import read_pickle",
    ],
)
def test_the_scanner_finds_every_kind_of_unpickling(snippet):
    assert pickle_findings(snippet), snippet


def test_the_scanner_passes_safe_loaders():
    safe = (
        "import numpy as np\nfrom safetensors.torch import load_file\nimport pandas as pd\nimport json\n"
        "np.load('a.npy', allow_pickle=False)\nnp.load('a.npy', mmap_mode='r')\nload_file('m.safetensors')\n"
        "pd.read_parquet('t.parquet')\njson.loads('{}')\n"
        "'''torch.load and pickle are never used'''  # pickle.loads in a comment\n"
    )
    assert pickle_findings(safe) == []


def test_nothing_in_the_package_apps_or_scripts_can_unpickle():
    files = sorted(p for root in SCANNED if root.is_dir() for p in root.rglob("*.py"))
    assert len(files) > 40  # the scan really covers the package
    findings = [f for path in files for f in pickle_findings(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert findings == [], "code that can unpickle a downloaded file:\n" + "\n".join(findings)


class _Payload:
    """Unpickling this creates `marker`: proof that a loader ran code from a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def plant_pickles(folder: Path, marker: Path, names: list[str]) -> None:
    for name in names:
        with open(folder / name, "wb") as handle:
            pickle.dump(_Payload(marker), handle)


def test_model_folders_with_pickles_beside_the_weights_load_without_running_them(tmp_path):
    marker = tmp_path / "payload-ran"
    model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    model.save(tmp_path / "m")
    plant_pickles(tmp_path / "m", marker, ["pytorch_model.bin", "model.pt", "training_args.pkl"])
    loaded = load_model(tmp_path / "m")
    assert not marker.exists()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_model(tmp_path / "m")
    assert not marker.exists()


def test_a_database_array_that_is_a_pickle_is_refused_without_running_it(tmp_path):
    from circuitlab.analysis.circuitdb import CircuitDB, CorruptDatabaseError, sha256_file
    from circuitlab.analysis.codeindex import structured_synthetic_codes

    marker = tmp_path / "payload-ran"
    folder = CircuitDB.from_codes({0: structured_synthetic_codes(200, seed=0)}).save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    victim = folder / manifest["data_dir"] / "layer0.indices.npy"
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload(marker)
    np.save(victim, payload, allow_pickle=True)  # an object array: .npy stores it as a pickle
    # the manifest agrees with the file, as in a database shared by someone who meant harm
    manifest["files"]["layer0.indices.npy"] = {"sha256": sha256_file(victim), "bytes": victim.stat().st_size}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(Exception) as error:
        CircuitDB.load(folder, mmap=False)
    assert not marker.exists()
    assert isinstance(error.value, CorruptDatabaseError) and "layer0.indices.npy" in str(error.value), error.value


def test_a_training_checkpoint_is_read_without_unpickling(tmp_path):
    from circuitlab.training.settings import TrainConfig
    from circuitlab.training.trainer import Trainer

    marker = tmp_path / "payload-ran"
    windows = torch.randint(0, 512, (24, 17), generator=torch.Generator().manual_seed(0))

    def trainer() -> Trainer:
        model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
        model.reset_parameters(seed=0)
        config = TrainConfig(steps=4, batch_size=4, seq_len=16, warmup=1, eval_every=0, ckpt_every=2)
        return Trainer(model, config, windows[:20], windows[20:], tmp_path / "run", progress=False)

    trainer().fit(stop_at=2)
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000002"
    plant_pickles(checkpoint, marker, ["optimizer.pt", "rng_state.pth", "scheduler.pkl"])
    resumed = trainer()
    assert resumed.fit(resume=True).step == 4
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ localhost


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subparsers(sub))


def test_every_verb_that_serves_binds_to_loopback_by_default(tmp_path):
    import ipaddress

    from circuitlab.cli import build_parser
    from circuitlab.cli.demo import dashboard_command

    serving = {}
    for name, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if "--host" in action.option_strings or "--address" in action.option_strings or action.dest in ("host", "address"):
                serving[name] = action.default
    assert {"demo", "dashboard"} <= set(serving)
    for name, default in serving.items():
        assert default == "localhost" or ipaddress.ip_address(default).is_loopback, (name, default)
    command = dashboard_command(tmp_path)
    assert command[command.index("--server.address") + 1] == serving["dashboard"]


# ------------------------------------------------------------------------------ names that escape


def test_a_shipped_model_name_cannot_reach_outside_the_models_folder(tmp_path, monkeypatch):
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    CircuitTransformer(ModelConfig.preset("tiny-gelu")).save(tmp_path / "private")
    monkeypatch.setenv("CIRCUITLAB_MODELS", str(models))
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")  # none of the names below is a folder from here
    assert resolve_model_folder("tiny") == models / "tiny"
    for name in ("../private", "tiny/../../private", str(Path("tiny") / ".." / ".." / "private"), "../models/tiny"):
        assert (models / name).is_dir()  # joined to the models folder, each would lead out of it
        with pytest.raises(CheckpointError, match="no model folder"):
            resolve_model_folder(name)
    assert not any(is_plain_name(name) for name in ("..", ".", ".hidden", "a/b", "a\\b", ""))
    with pytest.raises(CheckpointError, match="no model folder"):
        load_model("../private")
    monkeypatch.chdir(tmp_path)  # a path the user typed is still a path: it names a folder from where they are
    assert load_model("private").config == ModelConfig.preset("tiny-gelu")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=20))
def test_any_name_accepted_as_plain_is_one_folder_below(tmp_path, name):
    if not is_plain_name(name) or "\x00" in name:
        return
    root = tmp_path.resolve()
    assert (root / name).resolve().parent == root


def test_the_checkpoint_pointer_cannot_lead_out_of_the_run(tmp_path):
    from circuitlab.training.resume import CheckpointMismatchError, find_checkpoint

    root = tmp_path / "run" / "checkpoints"
    (root / "step_00000002").mkdir(parents=True)
    (root / "step_00000002" / "trainer_state.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "trainer_state.json").write_text("{}")
    (root / "latest.json").write_text(json.dumps({"folder": "step_00000002", "step": 2}))
    assert find_checkpoint(tmp_path / "run") == root / "step_00000002"
    for pointer in ("../../elsewhere", str(elsewhere), "..", "step_00000002/../../../elsewhere"):
        (root / "latest.json").write_text(json.dumps({"folder": pointer, "step": 2}))
        with pytest.raises(CheckpointMismatchError, match="not a checkpoint folder inside"):
            find_checkpoint(tmp_path / "run")


def test_a_database_manifest_cannot_point_its_data_outside_the_folder(tmp_path):
    from circuitlab.analysis.circuitdb import CircuitDB, CircuitDBError
    from circuitlab.analysis.codeindex import structured_synthetic_codes

    folder = CircuitDB.from_codes({0: structured_synthetic_codes(100, seed=0)}).save(tmp_path / "db")
    manifest = json.loads((folder / "manifest.json").read_text())
    shutil.move(folder / manifest["data_dir"], tmp_path / "outside")
    manifest["data_dir"] = "../outside"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CircuitDBError, match="data_dir"):
        CircuitDB.load(folder)



# ------------------------------------------------------------------------------------- dependencies

# pyarrow before 14.0.1 runs pickled code from a Parquet or Arrow file's extension-type metadata
# (CVE-2023-47248); circuit databases, run folders and embedding caches are Parquet files a user may download
SAFE_PYARROW = (14, 0, 1)


def _version(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_installed_pyarrow_does_not_unpickle_parquet_metadata():
    import pyarrow

    assert _version(pyarrow.__version__) >= SAFE_PYARROW, pyarrow.__version__


def test_the_declared_pyarrow_requirement_excludes_vulnerable_releases():
    import re
    import tomllib

    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if re.match(r"pyarrow\b", d)]
    lower = re.search(r">=\s*([\d.]+)", spec)
    assert lower is not None and _version(lower.group(1)) + (0,) * (3 - len(_version(lower.group(1)))) >= SAFE_PYARROW, spec
