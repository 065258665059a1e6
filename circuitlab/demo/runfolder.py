"""Run folders: where `circuitlab demo` keeps one model's analyses, and the names they may take.

A run folder holds one model's artifacts (what each is: circuitlab.demo.pipeline.ARTIFACTS) and `manifest.json`:

    {"format": "circuitlab.run", "format_version": 1, "model": <name or folder as given>,
     "model_folder": <resolved folder>, "config_hash": ..., "weights_sha256": ..., "tokenizer_hash": ...,
     "artifacts": {<key>: {"path": ..., "files": [...], "params": {...}, "fingerprint": ...,
                           "seconds": ..., "skipped": <reason, when the analysis does not apply>}}}

Every file is written atomically and the manifest entry is written after its files, so an interrupted demo
leaves only complete artifacts behind. A run folder is never a model folder: the demo refuses to write its
artifacts beside a model's weights (it would overwrite the model's card and training log).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from circuitlab.atomic import atomic_write
from circuitlab.errors import UserError

if TYPE_CHECKING:
    import pandas

RUN_FORMAT = "circuitlab.run"
RUN_FORMAT_VERSION = 1
RUN_MANIFEST = "manifest.json"
DEFAULT_MODEL = "sgatlin-stories"
DEFAULT_RUNS = "runs"
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


class RunFolderError(UserError):
    """A run folder (or run name) that cannot be used as asked."""


def check_run_name(name: str) -> str:
    """A run folder name: letters, digits and . _ + -, starting with a letter or digit, no '..'.

    Names become folders under the runs root; anything that could leave it (path separators, '..',
    absolute paths, hidden names) is refused rather than rewritten, so the folder is the one the user named.
    """
    if not isinstance(name, str) or not name:
        raise RunFolderError("a run name must be a non-empty string")
    if "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        raise RunFolderError(f"run name {name!r} contains a path separator; give a plain name such as 'sgatlin-stories'")
    if ".." in name:
        raise RunFolderError(f"run name {name!r} contains '..'; give a plain name such as 'sgatlin-stories'")
    if not _RUN_NAME.fullmatch(name):
        raise RunFolderError(
            f"run name {name!r} is not allowed: use 1-100 letters, digits, '.', '_', '+' or '-', starting with a "
            "letter or digit"
        )
    return name


def run_folder_path(runs_root: str | os.PathLike, name: str) -> Path:
    """runs_root/name, after checking the name and that the folder (symlinks resolved) stays inside the root."""
    root = Path(runs_root).resolve()
    folder = (root / check_run_name(name)).resolve()
    if folder.parent != root:
        raise RunFolderError(f"run folder {name!r} resolves to {folder}, outside the runs folder {root}; refusing to use it")
    return folder


def run_name_for(model_spec: str, model_folder: Path) -> str:
    """The run name of a model: its shipped name, or its folder's name."""
    name = Path(model_folder).resolve().name or str(model_spec)
    try:
        return check_run_name(name)
    except RunFolderError as error:
        raise RunFolderError(f"{error}; the model folder's name cannot name its run folder: choose one with --name") from None


def is_model_folder(path: str | os.PathLike) -> bool:
    """A folder holding a model's config or weights (a run folder must never be one)."""
    from circuitlab.architectures.weights import CONFIG_FILE, WEIGHTS_FILE

    path = Path(path)
    return (path / CONFIG_FILE).is_file() or (path / WEIGHTS_FILE).is_file()


def demo_run_folder(runs_root: str | os.PathLike, model_spec: str, model_folder: Path, name: str | None = None) -> Path:
    """The run folder of a demo: RUNS/<name> (default: the model's name), never the model's own folder.

    `circuitlab train --out runs/mymodel` puts a model where `circuitlab demo runs/mymodel` would put its run
    folder by default; the run then goes to runs/mymodel-demo. A name the user chose that lands on a model
    folder is refused.
    """
    chosen = name is not None
    name = name if chosen else run_name_for(model_spec, model_folder)
    folder = run_folder_path(runs_root, name)
    if folder == Path(model_folder).resolve() or is_model_folder(folder):
        if chosen:
            raise RunFolderError(
                f"run folder {folder} holds a model; the demo never writes into a model folder: choose another --name"
            )
        folder = run_folder_path(runs_root, check_run_name(f"{name}-demo"))
        if is_model_folder(folder):
            raise RunFolderError(f"run folder {folder} holds a model; choose a run folder name with --name")
    return folder


def list_runs(runs_root: str | os.PathLike) -> list[str]:
    """Names of the run folders (folders with a manifest) directly under `runs_root`."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _RUN_NAME.fullmatch(p.name) and (p / RUN_MANIFEST).is_file())


def write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=True) + "\n")


def write_parquet_atomic(path: Path, table: pandas.DataFrame) -> None:
    atomic_write(path, lambda tmp: table.to_parquet(tmp, index=False))


def write_npz_atomic(path: Path, **arrays: Any) -> None:
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    atomic_write(path, write)


def normalise(data: Any) -> Any:
    """JSON round-trip (tuples -> lists, keys -> strings) so recorded and requested params compare equal."""
    return json.loads(json.dumps(data, sort_keys=True))


def fingerprint_of(data: Any) -> str:
    """A short sha256 of JSON-able data: equal data, equal fingerprints."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ModelIdentity:
    """What makes two models the same for the run folder's caches."""

    spec: str
    folder: str
    config_hash: str
    weights_sha256: str | None
    tokenizer_hash: str | None

    def key(self) -> dict:
        return {"config_hash": self.config_hash, "weights_sha256": self.weights_sha256, "tokenizer_hash": self.tokenizer_hash}


def model_identity(model: Any, spec: str, folder: Path) -> ModelIdentity:
    from circuitlab.architectures.weights import WEIGHTS_FILE

    weights = Path(folder) / WEIGHTS_FILE
    tokenizer = getattr(model, "tokenizer", None)
    return ModelIdentity(
        spec=str(spec),
        folder=str(Path(folder).resolve()),
        config_hash=model.config.hash(),
        weights_sha256=sha256_file(weights) if weights.exists() else None,
        tokenizer_hash=tokenizer.hash() if tokenizer is not None and hasattr(tokenizer, "hash") else None,
    )


class RunFolder:
    """A run folder: artifacts plus `manifest.json` recording what made each (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if is_model_folder(self.path):
            raise RunFolderError(
                f"{self.path} is a model folder (it holds config.json or model.safetensors); a run folder is kept "
                "apart from models so the demo never overwrites a model's card or log: choose another folder"
            )
        self.manifest = self._read()

    @classmethod
    def open(cls, path: str | os.PathLike) -> RunFolder:
        """An existing run folder (one with a manifest); RunFolderError otherwise."""
        path = Path(path)
        if not path.is_dir():
            raise RunFolderError(f"no run folder at {path}: make one with `circuitlab demo --no-serve`")
        if not (path / RUN_MANIFEST).is_file():
            raise RunFolderError(f"{path} has no {RUN_MANIFEST}, so it is not a run folder: make one with `circuitlab demo --no-serve`")
        return cls(path)

    def _read(self) -> dict:
        path = self.path / RUN_MANIFEST
        empty = {"format": RUN_FORMAT, "format_version": RUN_FORMAT_VERSION, "artifacts": {}}
        if not path.exists():
            return empty
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RunFolderError(f"{path} is not readable JSON ({error}); delete it and rerun `circuitlab demo`") from None
        if not isinstance(manifest, dict) or manifest.get("format") != RUN_FORMAT:
            raise RunFolderError(f"{path} is not a circuitlab run manifest; choose another folder or delete it")
        if manifest.get("format_version") != RUN_FORMAT_VERSION:
            raise RunFolderError(
                f"{path} has run format version {manifest.get('format_version')}, this circuitlab writes "
                f"{RUN_FORMAT_VERSION}; delete the folder and rerun `circuitlab demo`"
            )
        manifest.setdefault("artifacts", {})
        return manifest

    def save(self) -> None:
        self.manifest["updated"] = _dt.datetime.now().isoformat(timespec="seconds")
        write_json_atomic(self.path / RUN_MANIFEST, self.manifest)

    def bind_model(self, identity: ModelIdentity) -> bool:
        """Record the model; forget every artifact when it differs from the one recorded. True if it changed."""
        recorded = {key: self.manifest.get(key) for key in identity.key()}
        changed = bool(self.manifest["artifacts"]) and recorded != identity.key()
        if changed:
            self.manifest["artifacts"] = {}
        self.manifest.update(model=identity.spec, model_folder=identity.folder, **identity.key())
        self.manifest.setdefault("created", _dt.datetime.now().isoformat(timespec="seconds"))
        self.save()
        return changed

    @property
    def model_spec(self) -> str | None:
        return self.manifest.get("model")

    def model_folder(self) -> Path:
        """The model folder the run was made with (by recorded path, else by recorded name)."""
        from circuitlab.architectures.weights import resolve_model_folder

        recorded = self.manifest.get("model_folder")
        if recorded and Path(recorded).is_dir():
            return Path(recorded)
        if not self.model_spec:
            raise RunFolderError(f"{self.path / RUN_MANIFEST} does not name its model; rerun `circuitlab demo`")
        return resolve_model_folder(self.model_spec)

    def entry(self, key: str) -> dict | None:
        return self.manifest["artifacts"].get(key)

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, key: str) -> bool:
        """The artifact was made, applies to this model, and its files are all present."""
        entry = self.entry(key)
        return bool(entry) and not entry.get("skipped") and all((self.path / f).exists() for f in entry.get("files", []))

    def skipped(self, key: str) -> str | None:
        entry = self.entry(key)
        return entry.get("skipped") if entry else None

    def is_fresh(self, key: str, fingerprint: str) -> bool:
        entry = self.entry(key)
        if not entry or entry.get("fingerprint") != fingerprint:
            return False
        return all((self.path / name).exists() for name in entry.get("files", []))

    def record(self, key: str, *, files: Sequence[str], params: dict, fingerprint: str, seconds: float,
               skipped: str | None = None, extra: dict | None = None) -> None:
        entry = {
            "path": files[0] if files else None,
            "files": list(files),
            "params": normalise(params),
            "fingerprint": fingerprint,
            "seconds": round(float(seconds), 3),
            "created": _dt.datetime.now().isoformat(timespec="seconds"),
        }
        if skipped:
            entry["skipped"] = skipped
        if extra:
            entry.update(normalise(extra))
        self.manifest["artifacts"][key] = entry
        self.save()

    def demo_command(self) -> str:
        """The command that (re)makes this run folder's artifacts."""
        model = self.model_spec or DEFAULT_MODEL
        root = self.path.parent
        runs = os.path.relpath(root) if not os.path.relpath(root).startswith("..") else str(root)
        parts = ["circuitlab", "demo", _shell_word(model), "--no-serve"]
        if runs != DEFAULT_RUNS:
            parts += ["--runs", _shell_word(runs)]
        if self.path.name != Path(model).name:
            parts += ["--name", self.path.name]
        for option in ("corpus", "pairs"):  # the user's own inputs, when the run was made with them
            if self.manifest.get(option):
                parts += [f"--{option}", _shell_word(self.manifest[option])]
        if self.manifest.get("fast"):
            parts.append("--fast")
        return " ".join(parts)


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(str(text))


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
