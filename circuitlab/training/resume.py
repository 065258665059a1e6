"""Training checkpoints: write one atomically, find the newest, read one back and check it fits the run.

A checkpoint (`<out>/checkpoints/step_<8-digit step>/`) holds, never pickled:
    config.json, model.safetensors, tokenizer.json   a loadable model folder (float32 weights)
    optimizer.safetensors   AdamW moments and step counts, keyed `<param name>/<exp_avg|exp_avg_sq|step>`
    rng.safetensors         torch CPU (and CUDA) generator states
    trainer_state.json      step, tokens seen, elapsed time, optimizer hyper-parameters, guard state,
                            train config, data fingerprint, Python/NumPy RNG states
Each folder is written under a temporary name and renamed into place (atomic on POSIX), and
`checkpoints/latest.json` (replaced atomically) names the newest; a kill at any moment leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from circuitlab.errors import UserError
from circuitlab.atomic import atomic_write_text

CHECKPOINT_FORMAT = "circuitlab-train-checkpoint"
CHECKPOINT_VERSION = 1
TEMPORARY_PREFIX = ".tmp-"
REQUIRED_FIELDS = ("step", "train_seconds", "param_groups", "guard", "train_config", "model_config_hash", "data", "rng")


class CheckpointMismatchError(UserError):
    """A checkpoint that cannot continue this run (other settings, other data, unreadable files)."""


class StateHolder:
    """What `save_model` reads from a model: a state dict, a config and a tokenizer."""

    def __init__(self, state: dict[str, Tensor], config: Any, tokenizer: Any):
        self._state, self.config, self.tokenizer = state, config, tokenizer

    def state_dict(self) -> dict[str, Tensor]:
        return self._state


def _fsync_folder(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def _rng_states(device: torch.device) -> tuple[dict[str, Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":  # this rank's device only: touching the others would open contexts there
        tensors["torch_cuda"] = torch.cuda.get_rng_state(device)
    python_rng = random.getstate()
    numpy_rng = np.random.get_state()
    plain = {
        "python": [python_rng[0], list(python_rng[1]), python_rng[2]],
        "numpy": [numpy_rng[0], numpy_rng[1].tolist(), *[float(x) if isinstance(x, float) else int(x) for x in numpy_rng[2:]]],
    }
    return tensors, plain


def write_checkpoint(
    final: Path, model: StateHolder, optim_state: dict[str, Any], state: dict[str, Any], device: torch.device
) -> Path:
    """Write `final` (unless it is already complete) under a temporary name, then rename it into place.

    state: the trainer's own fields (step, tokens seen, seconds, guard, train config, model config hash,
    data); the format, optimizer hyper-parameters and RNG states are added here."""
    from circuitlab.architectures.weights import save_model, save_tensors

    if (final / "trainer_state.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.parent / f"{TEMPORARY_PREFIX}{final.name}-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    save_model(model, temporary)
    moments = {}
    for param_name, param_state in optim_state["state"].items():
        for key, value in param_state.items():
            moments[f"{param_name}/{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    save_tensors(moments, temporary / "optimizer.safetensors")
    rng_tensors, rng_plain = _rng_states(device)
    save_tensors(rng_tensors, temporary / "rng.safetensors")
    record = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **state,
              "param_groups": optim_state["param_groups"], "rng": rng_plain}
    # inside a folder that is not yet visible: the rename below is what makes the whole folder atomic
    (temporary / "trainer_state.json").write_text(json.dumps(record, indent=1) + "\n")
    _fsync_folder(temporary)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(temporary, final)
    return final


def point_latest_at(final: Path, step: int, keep: int) -> None:
    """Make `latest.json` name `final`, then delete all but the newest `keep` checkpoints."""
    root = final.parent
    atomic_write_text(root / "latest.json", json.dumps({"folder": final.name, "step": step}) + "\n")
    older = sorted(p for p in root.glob("step_*") if p != final)
    for old in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)


def remove_temporaries(out_dir: str | os.PathLike) -> None:
    """Delete half-written checkpoint folders a killed run left behind."""
    for stale in (Path(out_dir) / "checkpoints").glob(f"{TEMPORARY_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)


def find_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    from circuitlab.architectures.weights import is_plain_name

    root = Path(out_dir) / "checkpoints"
    latest = root / "latest.json"
    if latest.exists():
        try:
            name = json.loads(latest.read_text())["folder"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
            raise CheckpointMismatchError(f"{latest} is not a valid checkpoint pointer ({error})") from error
        if not isinstance(name, str) or not is_plain_name(name):
            # the pointer only ever names a folder beside it; anything else would read a checkpoint from elsewhere
            raise CheckpointMismatchError(
                f"{latest} points to {name!r}, which is not a checkpoint folder inside {root}; delete {latest} to "
                "resume from the newest step_* folder"
            )
        folder = root / name
        if (folder / "trainer_state.json").exists():
            return folder
    complete = sorted(p for p in root.glob("step_*") if (p / "trainer_state.json").exists()) if root.is_dir() else []
    return complete[-1] if complete else None


def read_checkpoint(folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, dict[str, Tensor]]]:
    """(trainer_state.json, {file name: tensors}) of a checkpoint, or CheckpointMismatchError naming the damage."""
    from circuitlab.architectures.weights import CheckpointError, load_tensors

    folder = Path(folder)
    state_path = folder / "trainer_state.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError) as error:  # JSON and UTF-8 decoding errors are ValueErrors
        raise CheckpointMismatchError(f"{state_path} cannot be read ({error}); the checkpoint is damaged") from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(f"{state_path} is not a circuitlab training checkpoint")
    missing = sorted(set(REQUIRED_FIELDS) - set(state))
    if missing:
        raise CheckpointMismatchError(f"{state_path} lacks {', '.join(missing)}; the checkpoint is damaged")
    tensors = {}
    for file in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
        try:
            tensors[file] = load_tensors(folder / file)[0]
        except CheckpointError as error:
            raise CheckpointMismatchError(
                f"{error}. The checkpoint is damaged: delete {folder} to resume from the one before it, or "
                "start a new run"
            ) from error
    return state, tensors


def check_compatible(
    state: dict[str, Any],
    folder: Path,
    current: dict[str, Any],
    resumable_changes: Collection[str],
    model_hash: str,
    data_hash: str,
    n_windows: int,
) -> None:
    """Refuse a checkpoint made with other training settings, another model config or other data."""
    saved = state["train_config"]
    differing = sorted(k for k in current if k not in resumable_changes and saved.get(k) != current[k])
    if differing:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {current[k]!r}" for k in differing)
        raise CheckpointMismatchError(
            f"cannot resume from {folder}: training settings differ ({details}); resume with the "
            "settings of the original run, or start a new run in another --out folder"
        )
    if state["model_config_hash"] != model_hash:
        raise CheckpointMismatchError(
            f"cannot resume from {folder}: its model config differs from the one asked for now "
            "(another preset, --config or selectivity setting?)"
        )
    if state["data"]["fingerprint"] != data_hash:
        raise CheckpointMismatchError(
            f"cannot resume from {folder}: the training data differs from the checkpoint's "
            f"({state['data']['n_windows']} windows then, {n_windows} now); use the same "
            "corpus, tokenizer, --n-stories and --seq-len"
        )


def optimizer_state(state: dict[str, Any], tensors: dict[str, dict[str, Tensor]]) -> dict[str, Any]:
    """The optimizer state dict (full, unsharded) stored in a checkpoint."""
    optim_state: dict[str, Any] = {"state": {}, "param_groups": state["param_groups"]}
    for key, value in tensors["optimizer.safetensors"].items():
        param_name, slot = key.rsplit("/", 1)
        optim_state["state"].setdefault(param_name, {})[slot] = value
    return optim_state


def restore_rng(state: dict[str, Any], rng_tensors: dict[str, Tensor], device: torch.device) -> None:
    torch.set_rng_state(rng_tensors["torch_cpu"])
    if "torch_cuda" in rng_tensors and device.type == "cuda":
        torch.cuda.set_rng_state(rng_tensors["torch_cuda"], device)
    python_rng = state["rng"]["python"]
    random.setstate((python_rng[0], tuple(python_rng[1]), python_rng[2]))
    numpy_rng = state["rng"]["numpy"]
    np.random.set_state((numpy_rng[0], np.asarray(numpy_rng[1], dtype=np.uint32), *numpy_rng[2:]))


def truncate_log(path: Path, step: int) -> list[dict[str, Any]]:
    """Drop the lines of a training log past `step` (a killed run may have logged steps it never
    checkpointed, and its last line may be cut short); the records kept."""
    if not path.exists():
        return []
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut short by the kill
        if record.get("step", 0) > step:
            break
        kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))
    return [json.loads(line) for line in kept]
