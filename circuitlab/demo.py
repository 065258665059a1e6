"""`circuitlab demo` and `circuitlab dashboard`: every analysis of a model, cached in a run folder, and the
Streamlit dashboard that reads it.

    circuitlab demo [MODEL] [--runs runs] [--name NAME] [--fast] [--no-serve] [--host 127.0.0.1] [--port 8501]
    circuitlab dashboard [--run runs/<name>] [--host 127.0.0.1] [--port 8501]

A run folder holds one model's artifacts (what each is: ARTIFACTS below) and `manifest.json`:

    {"format": "circuitlab.run", "format_version": 1, "model": <name or folder as given>,
     "model_folder": <resolved folder>, "config_hash": ..., "weights_sha256": ..., "tokenizer_hash": ...,
     "artifacts": {<key>: {"path": ..., "files": [...], "params": {...}, "fingerprint": ...,
                           "seconds": ..., "skipped": <reason, when the analysis does not apply>}}}

Every file is written atomically (temporary file + os.replace) and the manifest entry is written after its
files, so an interrupted demo leaves only complete artifacts behind. An artifact is reused when its
fingerprint matches: a hash of its parameters, of the fingerprints of the artifacts it is computed from,
and of the model's identity (config hash, weights sha256, tokenizer hash). Retraining a model, changing a
sample size or deleting a file recomputes exactly what depends on the change.

The dashboard's text inputs go through the handlers at the end of this module (`check_text`,
`lookup_circuits`, `attribute_prompt`, `custom_patch_pair`): odd input (empty, longer than the context,
characters that are not valid Unicode) comes back as a message, never as an exception.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.util
import ipaddress
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from circuitlab.analysis.circuitdb import sha256_file
from circuitlab.atomic import atomic_write

if TYPE_CHECKING:
    import pandas

RUN_FORMAT = "circuitlab.run"
RUN_FORMAT_VERSION = 1
RUN_MANIFEST = "manifest.json"
DEFAULT_MODEL = "sgatlin-stories"
DEFAULT_RUNS = "runs"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501
APP_PATH = Path(__file__).resolve().parents[1] / "apps" / "app.py"

# Prompts whose predictions the demo attributes (DLA); they read like the generated stories.
DLA_PROMPTS = (
    "The turtle was",
    "Once upon a time, there was a little girl named Lily. She",
    "Tom had a red ball. He gave the ball to his",
    "The sun was hot, so the children went to the",
)

# key -> (what it is, its files): the run-folder contract the dashboard reads
ARTIFACTS: dict[str, tuple[str, str]] = {
    "card": ("model card and training log", "card.md, train_log.jsonl"),
    "corpus": ("held-out story corpus", "corpus.jsonl"),
    "circuitdb": ("circuit database", "circuitdb/"),
    "semantic": ("semantic neighbour score", "semantic.parquet"),
    "umap": ("UMAP maps of circuits", "umap_L{layer}.parquet"),
    "usage": ("neuron usage, Gini and co-activation", "usage.json, usage_L{layer}.npz"),
    "nie": ("NIE grid over the fact pairs", "nie.parquet"),
    "legibility": ("legibility of bounded channels", "legibility_channels.parquet, legibility_summary.parquet"),
    "dla": ("direct logit attribution of the demo prompts", "dla.parquet"),
}

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


class RunFolderError(ValueError):
    """A run folder (or run name) that cannot be used as asked."""


# ------------------------------------------------------------------------------------------ run names


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


def list_runs(runs_root: str | os.PathLike) -> list[str]:
    """Names of the run folders (folders with a manifest) directly under `runs_root`."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _RUN_NAME.fullmatch(p.name) and (p / RUN_MANIFEST).is_file())


# ------------------------------------------------------------------------------------- atomic writes


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


def _normalise(data: Any) -> Any:
    """JSON round-trip (tuples -> lists, keys -> strings) so recorded and requested params compare equal."""
    return json.loads(json.dumps(data, sort_keys=True))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]


# ------------------------------------------------------------------------------------------ the run folder


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
    from circuitlab.architectures.checkpoint import WEIGHTS_FILE

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

    # --- the model the artifacts belong to --------------------------------------------------------------

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
        from circuitlab.architectures.checkpoint import resolve_model_folder

        recorded = self.manifest.get("model_folder")
        if recorded and Path(recorded).is_dir():
            return Path(recorded)
        if not self.model_spec:
            raise RunFolderError(f"{self.path / RUN_MANIFEST} does not name its model; rerun `circuitlab demo`")
        return resolve_model_folder(self.model_spec)

    # --- artifacts --------------------------------------------------------------------------------------

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
            "params": _normalise(params),
            "fingerprint": fingerprint,
            "seconds": round(float(seconds), 3),
            "created": _dt.datetime.now().isoformat(timespec="seconds"),
        }
        if skipped:
            entry["skipped"] = skipped
        if extra:
            entry.update(_normalise(extra))
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
        if self.manifest.get("fast"):
            parts.append("--fast")
        return " ".join(parts)


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(str(text))


# -------------------------------------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class Sizes:
    """Sample sizes of the demo (full, or --fast for tests and CI)."""

    stories: int = 400
    umap_tokens: int = 100
    umap_points: int = 4000
    semantic_queries: int = 2000
    semantic_shuffles: int = 20
    nie_pairs: int = 64
    legibility_seq_len: int = 256
    collect_batch: int = 16

    @classmethod
    def fast(cls) -> Sizes:
        return cls(stories=40, umap_tokens=30, umap_points=600, semantic_queries=200, semantic_shuffles=5,
                   nie_pairs=6, legibility_seq_len=64, collect_batch=16)


@dataclass
class Step:
    """One artifact: how to make it, from which other artifacts, with which parameters."""

    key: str
    describe: str
    params: dict
    inputs: tuple[str, ...]
    make: Callable[[PipelineContext], tuple[list[str], dict | None]]  # -> (files written, extra manifest fields)
    applies: Callable[[Any], str | None] = lambda model: None  # -> reason it does not apply, or None
    version: int = 1  # raise when the artifact's file layout changes, so old run folders are remade


@dataclass
class PipelineContext:
    model: Any
    run: RunFolder
    sizes: Sizes
    progress: bool = True
    _cache: dict = field(default_factory=dict)

    def stories(self) -> list:
        if "stories" not in self._cache:
            from circuitlab.data.stories import read_corpus

            self._cache["stories"] = read_corpus(self.run.file("corpus.jsonl"))
        return self._cache["stories"]

    def db(self) -> Any:
        if "db" not in self._cache:
            from circuitlab.analysis.circuitdb import CircuitDB

            self._cache["db"] = CircuitDB.load(self.run.file("circuitdb"), model=self.model)
        return self._cache["db"]


def _needs_tokenizer(model: Any) -> str | None:
    return None if getattr(model, "tokenizer", None) is not None else "the model has no tokenizer.json"


def _usage_applies(model: Any) -> str | None:
    dense = [block.ffn_description() for block in model.blocks if not block.ffn_code_layer.sparse_by_construction]
    if dense:
        return (
            f"neuron usage is defined for sparse codes (sgatlin gates, parity features); this model's "
            f"{dense[0]} FFN has dense activations"
        )
    return None


def _legibility_applies(model: Any) -> str | None:
    from circuitlab.analysis.legibility import NoBoundedChannelsError, bounded_channel_groups

    try:
        groups = bounded_channel_groups(model)
    except NoBoundedChannelsError:
        groups = []
    if not groups:
        return "legibility metrics need bounded value channels (membership/Boolean heads or an NC-FFN); this model has none"
    return None


def _nie_applies(model: Any) -> str | None:
    from circuitlab.data.facts import single_token_facts

    if getattr(model, "tokenizer", None) is None:
        return "the model has no tokenizer.json"
    usable = single_token_facts(model.tokenizer)
    if len(usable) < 2:
        return f"only {len(usable)} fact nouns/adjectives are single tokens under this tokenizer; patching needs 2"
    return None


# --- the makers --------------------------------------------------------------------------------------------


def _make_card(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    folder = ctx.run.model_folder()
    files, absent = [], []
    for name in ("card.md", "train_log.jsonl"):
        source = folder / name
        if source.is_file():
            atomic_write(ctx.run.file(name), lambda tmp, source=source: shutil.copyfile(source, tmp))
            files.append(name)
        else:
            absent.append(name)
    return files, {"absent": absent}


def _card_params(folder: Path) -> dict:
    return {
        name: (sha256_file(folder / name) if (folder / name).is_file() else None) for name in ("card.md", "train_log.jsonl")
    }


def _make_corpus(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.data.stories import HELD_OUT_SEED, write_corpus

    # write_corpus writes a .partial file and renames it, so the corpus is never half-written
    write_corpus(ctx.run.file("corpus.jsonl"), ctx.sizes.stories, seed=HELD_OUT_SEED, show_progress=ctx.progress)
    return ["corpus.jsonl"], None


def _make_circuitdb(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.circuitdb import CircuitDB

    with tempfile.TemporaryDirectory(prefix="circuitdb-", dir=ctx.run.path) as workdir:
        db = CircuitDB.build(
            ctx.model, ctx.stories(), layers=None, batch_size=ctx.sizes.collect_batch, workdir=workdir,
            progress=ctx.progress,
        )
        # CircuitDB.save is atomic on its own: a crash leaves the previous database readable
        db.save(ctx.run.file("circuitdb"))
        del db
    ctx._cache.pop("db", None)
    return ["circuitdb/manifest.json"], None


def _make_semantic(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    db = ctx.db()
    table = db.semantic_scores(n_queries=ctx.sizes.semantic_queries, n_shuffles=ctx.sizes.semantic_shuffles)
    write_parquet_atomic(ctx.run.file("semantic.parquet"), table)
    return ["semantic.parquet"], None


def _make_umap(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from tqdm.auto import tqdm

    from circuitlab.analysis.embedding import embed_layer

    db = ctx.db()
    files = []
    for layer in tqdm(db.layers, desc="UMAP", disable=not ctx.progress, leave=False):
        frame = embed_layer(
            db, layer, n_tokens=ctx.sizes.umap_tokens, max_points=ctx.sizes.umap_points, use_cache=False,
        )
        frame["category"] = frame["category"].astype(object)
        name = f"umap_L{layer}.parquet"
        write_parquet_atomic(ctx.run.file(name), frame)
        files.append(name)
    return files, None


def _make_usage(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.usage import database_usage

    reports = database_usage(ctx.db())
    files = []
    for layer, report in reports.items():
        name = f"usage_L{layer}.npz"
        arrays = dict(
            counts=report.counts, frequency=report.frequency, coactivation_neurons=report.coactivation_neurons,
            coactivation=report.coactivation,
        )
        if report.shared_subkey is not None:
            arrays["shared_subkey"] = report.shared_subkey
        write_npz_atomic(ctx.run.file(name), **arrays)
        files.append(name)
    summary = {"layers": [_normalise(report.summary()) for report in reports.values()]}
    write_json_atomic(ctx.run.file("usage.json"), summary)
    return ["usage.json", *files], None


def _make_nie(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.patching import nie_grid
    from circuitlab.data.facts import build_fact_pairs, single_token_facts

    usable = len(single_token_facts(ctx.model.tokenizer))
    n_pairs = min(ctx.sizes.nie_pairs, usable * (usable - 1))
    pairs = build_fact_pairs(ctx.model.tokenizer, seed=0, n_pairs=n_pairs)
    table = nie_grid(ctx.model, pairs, progress=ctx.progress)
    write_parquet_atomic(ctx.run.file("nie.parquet"), nie_for_parquet(table))
    return ["nie.parquet"], {"n_pairs": len(pairs)}


def _make_legibility(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.legibility import legibility_stats, legibility_summary, name_channels

    tokens = corpus_windows(ctx.model, [story.text for story in ctx.stories()], ctx.sizes.legibility_seq_len)
    stats = legibility_stats(ctx.model, tokens, progress=ctx.progress)
    designs = dict(stats.attrs.get("designs", {}))
    combined = stats[stats["combined"]]
    named = name_channels(ctx.model, tokens, combined, progress=ctx.progress)
    channels = stats.merge(
        named[["hook", "role", "head", "channel", "fires", "fire_rate", "top_tokens", "label"]],
        on=["hook", "role", "head", "channel"], how="left",
    )
    write_parquet_atomic(ctx.run.file("legibility_channels.parquet"), channels)
    summary = legibility_summary(stats, ctx.model.config.name or "")
    write_parquet_atomic(ctx.run.file("legibility_summary.parquet"), summary)
    return ["legibility_channels.parquet", "legibility_summary.parquet"], {"designs": designs}


def _make_dla(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    import pandas as pd

    from circuitlab.analysis.attribution import direct_logit_attribution

    frames = []
    for prompt in DLA_PROMPTS:
        table = direct_logit_attribution(ctx.model, prompt)
        table.insert(0, "prompt", prompt)
        for name in DLA_ATTRS:
            table[name] = table.attrs[name]
        frames.append(table)
    write_parquet_atomic(ctx.run.file("dla.parquet"), pd.concat(frames, ignore_index=True))
    return ["dla.parquet"], None


def corpus_windows(model: Any, texts: Sequence[str], seq_len: int) -> Any:
    """The corpus as [windows, seq_len] token rows (shorter windows when the corpus is small)."""
    from circuitlab.analysis.legibility import held_out_windows

    n_tokens = sum(len(model.tokenizer.encode(text)) + 1 for text in texts)
    seq_len = max(1, min(seq_len, model.config.n_ctx, n_tokens))
    return held_out_windows(model, texts, seq_len=seq_len)


def pipeline_steps(model_folder: Path, sizes: Sizes) -> list[Step]:
    """The demo's artifacts in the order they are made."""
    return [
        Step("card", "model card and training log", _card_params(model_folder), (), _make_card),
        Step("corpus", "held-out story corpus", {"stories": sizes.stories, "seed": "held-out"}, (), _make_corpus),
        Step("circuitdb", "circuit database (all layers)", {"batch_size": sizes.collect_batch, "index": "auto"},
             ("corpus",), _make_circuitdb, _needs_tokenizer),
        Step("semantic", "semantic neighbour score", {"queries": sizes.semantic_queries, "shuffles": sizes.semantic_shuffles, "k": 10},
             ("circuitdb",), _make_semantic, _needs_tokenizer),
        Step("umap", "UMAP maps per layer", {"tokens": sizes.umap_tokens, "points": sizes.umap_points, "n_neighbors": 15, "seed": 0},
             ("circuitdb",), _make_umap, _needs_tokenizer),
        Step("usage", "neuron usage, Gini, co-activation", {"n_coactivation": 128}, ("circuitdb",), _make_usage,
             lambda model: _needs_tokenizer(model) or _usage_applies(model)),
        Step("nie", "NIE over the fact pairs", {"pairs": sizes.nie_pairs, "seed": 0}, (), _make_nie, _nie_applies),
        Step("legibility", "legibility of bounded channels", {"seq_len": sizes.legibility_seq_len}, ("corpus",),
             _make_legibility, lambda model: _needs_tokenizer(model) or _legibility_applies(model)),
        Step("dla", "direct logit attribution of a few prompts", {"prompts": list(DLA_PROMPTS)}, (), _make_dla,
             _needs_tokenizer),
    ]


@dataclass
class PipelineReport:
    """What a demo run did per artifact: 'computed', 'cached' or 'skipped', and seconds spent."""

    actions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    total_seconds: float = 0.0

    @property
    def computed(self) -> list[str]:
        return [key for key, action in self.actions.items() if action == "computed"]


def run_pipeline(
    model: Any,
    run: RunFolder,
    identity: ModelIdentity,
    sizes: Sizes,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> PipelineReport:
    """Make every artifact of `run` that is missing or stale; reuse the rest."""
    from tqdm.auto import tqdm

    started = time.perf_counter()
    if run.bind_model(identity):
        log(f"{run.path}: the model changed since this run folder was made; recomputing every artifact")
    run.manifest["fast"] = sizes == Sizes.fast()
    run.save()
    steps = pipeline_steps(Path(identity.folder), sizes)
    ctx = PipelineContext(model=model, run=run, sizes=sizes, progress=progress)
    fingerprints: dict[str, str] = {}
    report = PipelineReport()
    bar = tqdm(steps, desc="demo", unit="artifact", disable=not progress, dynamic_ncols=True)
    for step in bar:
        bar.set_postfix_str(step.key)
        params = dict(step.params, inputs={key: fingerprints.get(key) for key in step.inputs})
        fingerprint = _digest({"key": step.key, "version": step.version, "params": _normalise(params), "model": identity.key()})
        fingerprints[step.key] = fingerprint
        if run.is_fresh(step.key, fingerprint):
            report.actions[step.key] = "skipped" if run.skipped(step.key) else "cached"
            report.seconds[step.key] = 0.0
            continue
        reason = step.applies(model)
        if reason is None:
            missing_inputs = [key for key in step.inputs if not run.has(key)]
            if missing_inputs:
                reason = f"it needs {', '.join(missing_inputs)}, which could not be made for this model"
        step_started = time.perf_counter()
        if reason is not None:
            run.record(step.key, files=[], params=params, fingerprint=fingerprint, seconds=0.0, skipped=reason)
            report.actions[step.key] = "skipped"
            report.seconds[step.key] = 0.0
            tqdm.write(f"  {step.key}: not applicable ({reason})") if progress else None
            continue
        files, extra = step.make(ctx)
        seconds = time.perf_counter() - step_started
        run.record(step.key, files=files, params=params, fingerprint=fingerprint, seconds=seconds, extra=extra)
        report.actions[step.key] = "computed"
        report.seconds[step.key] = seconds
        if progress:
            tqdm.write(f"  {step.key}: {step.describe} ({seconds:.1f} s)")
    report.total_seconds = time.perf_counter() - started
    run.manifest["last_demo_seconds"] = round(report.total_seconds, 2)
    run.save()
    return report


# ------------------------------------------------------------------------------------ reading artifacts


def nie_for_parquet(table: pandas.DataFrame) -> pandas.DataFrame:
    """Layers and positions mix ints and names ('all', 'noun'); Parquet needs one type per column: strings."""
    out = table.copy()
    for column in ("layer", "position"):
        out[column] = out[column].astype(str)
    return out


def nie_from_parquet(table: pandas.DataFrame) -> pandas.DataFrame:
    """Undo `nie_for_parquet`: numeric layers and positions back to ints (so layer 10 sorts after 9)."""
    out = table.copy()
    for column in ("layer", "position"):
        out[column] = [int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v for v in out[column]]
        out[column] = out[column].astype(object)
    return out


DLA_ATTRS = ("target", "target_id", "logit", "position")


def dla_tables(table: pandas.DataFrame) -> dict[str, pandas.DataFrame]:
    """dla.parquet split back into one attribution table per prompt, with the attrs the DLA figures read."""
    tables = {}
    for prompt, rows in table.groupby("prompt", sort=False):
        rows = rows.drop(columns=["prompt", *DLA_ATTRS]).reset_index(drop=True)
        # Parquet returns list cells as arrays; the figures' hover text expects lists
        rows["promote_tokens"] = [list(v) if v is not None and not isinstance(v, float) else None for v in rows["promote_tokens"]]
        first = table[table["prompt"] == prompt].iloc[0]
        rows.attrs.update(
            target=str(first["target"]), target_id=int(first["target_id"]), logit=float(first["logit"]),
            position=int(first["position"]), baseline_id=None, baseline=None,
        )
        tables[str(prompt)] = rows
    return tables


def load_usage_reports(run: RunFolder) -> dict:
    """The usage artifact as {layer: circuitlab.analysis.usage.UsageReport}."""
    import numpy as np

    from circuitlab.analysis.usage import UsageReport

    summary = json.loads(run.file("usage.json").read_text(encoding="utf-8"))
    reports = {}
    for row in summary["layers"]:
        layer = int(row["layer"])
        with np.load(run.file(f"usage_L{layer}.npz"), allow_pickle=False) as arrays:
            reports[layer] = UsageReport(
                layer=layer, size=int(row["neurons"]), n_tokens=int(row["tokens"]), n_unique_tokens=int(row["unique_tokens"]),
                fraction_used=float(row["fraction_used"]), gini=float(row["gini"]),
                counts=arrays["counts"], frequency=arrays["frequency"],
                coactivation_neurons=arrays["coactivation_neurons"], coactivation=arrays["coactivation"],
                shared_subkey=arrays["shared_subkey"] if "shared_subkey" in arrays.files else None,
                shared_subkey_coactivation=row.get("coactivation_shared_subkey"),
                other_pair_coactivation=row.get("coactivation_other_pairs"),
            )
    return reports


def read_train_log(path: Path) -> pandas.DataFrame:
    """train_log.jsonl as a DataFrame (malformed lines are skipped: a killed run may leave half a line)."""
    import pandas as pd

    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return pd.DataFrame(records)


def train_log_figure(log: pandas.DataFrame) -> Any:
    """Training loss (and running loss, held-out loss where evaluated) against step."""
    import plotly.graph_objects as go

    figure = go.Figure()
    x = log["step"] if "step" in log else log.index
    for column, name, mode in (("loss", "train loss", "lines"), ("running_loss", "running loss", "lines"),
                               ("eval_loss", "held-out loss", "lines+markers")):
        if column in log:
            rows = log[column].notna()
            figure.add_trace(go.Scatter(x=x[rows], y=log.loc[rows, column], name=name, mode=mode))
    figure.update_layout(title="Training curve", xaxis_title="step", yaxis_title="cross-entropy (nats)", height=420)
    return figure


# --------------------------------------------------------------------------------- dashboard input handlers


MAX_TEXT_CHARACTERS = 20_000


@dataclass
class Checked:
    """A checked text input: token ids when usable, else a message saying what to change."""

    token_ids: list[int] | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.message is None


def check_text(model: Any, text: Any, what: str = "text", reserve: int = 0) -> Checked:
    """Turn user text into token ids for `model`, or say why it cannot be used (`reserve`: context positions
    kept free for tokens added in front)."""
    if not isinstance(text, str):
        return Checked(message=f"the {what} must be text")
    if not text.strip():
        return Checked(message=f"the {what} is empty: type a sentence")
    if len(text) > MAX_TEXT_CHARACTERS:
        return Checked(message=f"the {what} has {len(text):,} characters; the limit is {MAX_TEXT_CHARACTERS:,}: shorten it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return Checked(message=f"the {what} contains characters that are not valid Unicode (lone surrogates): retype it")
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return Checked(message="this model has no tokenizer, so it cannot read typed text")
    token_ids = list(tokenizer.encode(text))
    if not token_ids:
        return Checked(message=f"the {what} gives no tokens: type a sentence")
    n_ctx = model.config.n_ctx - reserve
    if len(token_ids) > n_ctx:
        return Checked(
            message=f"the {what} is {len(token_ids)} tokens, longer than the {n_ctx} tokens the model's context leaves: "
            f"shorten it (the first {n_ctx} tokens end at character {_char_limit(tokenizer, text, n_ctx)})"
        )
    return Checked(token_ids=token_ids)


def _char_limit(tokenizer: Any, text: str, n_tokens: int) -> int:
    if hasattr(tokenizer, "encode_with_offsets"):
        _, offsets = tokenizer.encode_with_offsets(text)
        if len(offsets) >= n_tokens:
            return int(offsets[n_tokens - 1][1])
    return len(text)


def single_token(model: Any, word: Any, what: str) -> tuple[int | None, str | None]:
    """The id of a one-token answer word: ' word' (as it follows a space) or, failing that, 'word' as typed."""
    if not isinstance(word, str) or not word.strip():
        return None, f"the {what} is empty: type one word"
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return None, f"the {what} contains characters that are not valid Unicode: retype it"
    tokenizer = model.tokenizer
    stripped = word.strip()
    for candidate in (" " + stripped, stripped, word):
        ids = tokenizer.encode(candidate)
        if len(ids) == 1:
            return int(ids[0]), None
    pieces = [tokenizer.token_str(i) for i in tokenizer.encode(" " + stripped)][:12]
    return None, (
        f"the {what} {stripped!r} is {len(pieces)} tokens under this tokenizer ({' | '.join(map(repr, pieces))}); "
        "answers must be single tokens: pick another word"
    )


def lookup_circuits(db: Any, model: Any, text: Any, layer: int, k: int = 10) -> tuple[pandas.DataFrame | None, str | None]:
    """Nearest stored circuits of every token of `text` at `layer` (seed 000, Table 3), or a message."""
    checked = check_text(model, text)
    if not checked.ok:
        return None, checked.message
    if layer not in db.layers:
        return None, f"layer {layer} is not in the circuit database (it has layers {db.layers})"
    if len(db) == 0:
        return None, "the circuit database is empty: rebuild it with `circuitlab demo`"
    return db.search(text, layer=layer, k=max(1, min(int(k), len(db)))), None


def attribute_prompt(
    model: Any, text: Any, target: Any = "", position: int = -1
) -> tuple[pandas.DataFrame | None, str | None]:
    """Direct logit attribution of the prediction at `position` of `text` (target blank = the top prediction)."""
    from circuitlab.analysis.attribution import direct_logit_attribution

    checked = check_text(model, text, "prompt")
    if not checked.ok:
        return None, checked.message
    target_id = None
    if isinstance(target, str) and target.strip():
        target_id, message = single_token(model, target, "target")
        if message:
            return None, message
    n_tokens = len(checked.token_ids)
    if not -n_tokens <= position < n_tokens:
        return None, f"position {position} is outside the prompt of {n_tokens} tokens"
    table = direct_logit_attribution(model, checked.token_ids, target=target_id, position=position)
    return table, None


def custom_patch_pair(
    model: Any, clean: Any, patch: Any, clean_answer: Any, patch_answer: Any
) -> tuple[Any, list, str | None]:
    """A PatchPair from typed prompts and answers, the positions to patch, or a message.

    Like the fact pairs (circuitlab.data.facts), each prompt starts with the end-of-text token, which is what
    precedes a story in training, so position 0 is that token.
    """
    from circuitlab.analysis.patching import PatchPair

    checked_clean = check_text(model, clean, "clean prompt", reserve=1)
    if not checked_clean.ok:
        return None, [], checked_clean.message
    checked_patch = check_text(model, patch, "counterfactual prompt", reserve=1)
    if not checked_patch.ok:
        return None, [], checked_patch.message
    clean_id, message = single_token(model, clean_answer, "clean answer")
    if message:
        return None, [], message
    patch_id, message = single_token(model, patch_answer, "counterfactual answer")
    if message:
        return None, [], message
    if clean_id == patch_id:
        return None, [], "the two answers are the same token: the logit difference would be 0; pick different answers"
    start = [model.tokenizer.eos_id]
    clean_ids, patch_ids = start + checked_clean.token_ids, start + checked_patch.token_ids
    pair = PatchPair(clean_tokens=tuple(clean_ids), patch_tokens=tuple(patch_ids), clean_answer_id=clean_id,
                     patch_answer_id=patch_id, name="your pair")
    if len(clean_ids) == len(patch_ids):
        positions: list = list(range(len(clean_ids))) + ["all"]
    else:
        positions = ["final"]
    return pair, positions, None


def run_custom_patch(model: Any, pair: Any, positions: list) -> tuple[pandas.DataFrame | None, str | None]:
    """NIE of every layer (and all at once) x position for one typed pair, or a message when it is undefined."""
    from circuitlab.analysis.patching import nie_grid

    table = nie_grid(model, [pair], positions=positions, progress=False)
    m_clean, m_patch = float(table["m_clean"].iloc[0]), float(table["m_patch"].iloc[0])
    if math.isclose(m_clean, m_patch, rel_tol=0.0, abs_tol=1e-9):
        return table, (
            f"the model gives the same logit difference on both prompts (m = {m_clean:.4g}), so NIE is undefined: "
            "choose prompts whose answers differ"
        )
    return table, None


# --------------------------------------------------------------------------------------------- the CLI


def _check_host(host: str) -> str:
    if not isinstance(host, str) or not host or len(host) > 253 or not re.fullmatch(r"[A-Za-z0-9.:\-\[\]]+", host):
        raise ValueError(f"--host {host!r} is not a host name or IP address (default {DEFAULT_HOST}, localhost only)")
    return host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def dashboard_command(run_path: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[str]:
    """The streamlit command line that serves the dashboard on `run_path`."""
    _check_host(host)
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"--port {port} must lie in 1..65535")
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH),
        "--server.address", host, "--server.port", str(int(port)), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal", "--", "--run", str(run_path),
    ]


def serve(run_path: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
    """Serve the dashboard until interrupted."""
    import subprocess

    if importlib.util.find_spec("streamlit") is None:
        raise ValueError("the dashboard needs streamlit: pip install 'circuitlab[apps]' (or use --no-serve)")
    if not APP_PATH.is_file():
        raise FileNotFoundError(f"{APP_PATH} not found: the dashboard ships in the source tree's apps/ folder")
    command = dashboard_command(run_path, host, port)
    if not is_loopback(host):
        print(f"warning: serving on {host}: the dashboard is reachable from other machines", file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"dashboard for {run_path} at http://{shown}:{port}  (Ctrl-C stops it)")
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130


def _load_for_demo(spec: str) -> tuple[Any, Path]:
    from circuitlab.architectures.checkpoint import load_model, resolve_model_folder

    folder = resolve_model_folder(spec)
    return load_model(folder), folder


def demo(args: argparse.Namespace) -> int:
    import torch

    with torch.no_grad():  # scoped: demo() also runs inside other programs (tests, notebooks)
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    if args.name:
        check_run_name(args.name)  # before the model loads: a bad name fails at once
    model, folder = _load_for_demo(args.model)
    name = args.name or run_name_for(args.model, folder)
    run_path = run_folder_path(args.runs, name)
    run_path.mkdir(parents=True, exist_ok=True)
    run = RunFolder(run_path)
    identity = model_identity(model, args.model, folder)
    sizes = Sizes.fast() if args.fast else Sizes()
    print(f"circuitlab demo: {args.model} -> {run_path}{' (fast)' if args.fast else ''}")
    report = run_pipeline(model, run, identity, sizes, progress=not args.quiet)
    made = ", ".join(report.computed) or "nothing (every artifact was cached)"
    print(f"made {made} in {report.total_seconds:.1f} s; run folder {run_path}")
    if args.no_serve:
        return 0
    return serve(run_path, args.host, args.port)


def dashboard(args: argparse.Namespace) -> int:
    run_path = Path(args.run)
    RunFolder.open(run_path)
    return serve(run_path, args.host, args.port)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run every analysis of a model into a run folder (cached), then open the dashboard",
        description="Sample a held-out corpus, collect circuits, build the circuit database, UMAP maps, neuron "
        "usage, NIE on the fact pairs, legibility where it applies and DLA of a few prompts, caching every "
        "artifact under RUNS/<name>; then serve the dashboard on localhost.",
    )
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                        help=f"shipped model name or model folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"folder holding run folders (default: {DEFAULT_RUNS})")
    parser.add_argument("--name", default=None, help="run folder name (default: the model's name)")
    parser.add_argument("--fast", action="store_true", help="small samples (tests and CI)")
    parser.add_argument("--no-serve", action="store_true", help="stop after making the artifacts")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--host", type=_check_host, default=DEFAULT_HOST,
                        help=f"address the dashboard binds to (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"dashboard port (default: {DEFAULT_PORT})")
    parser.set_defaults(func=demo)

    board = subparsers.add_parser("dashboard", help="serve the dashboard on an existing run folder")
    board.add_argument("--run", default=str(Path(DEFAULT_RUNS) / DEFAULT_MODEL),
                       help=f"run folder made by `circuitlab demo` (default: {Path(DEFAULT_RUNS) / DEFAULT_MODEL})")
    board.add_argument("--host", type=_check_host, default=DEFAULT_HOST,
                       help=f"address to bind (default: {DEFAULT_HOST}, this machine only)")
    board.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    board.set_defaults(func=dashboard)


__all__ = [
    "RunFolder", "RunFolderError", "Sizes", "check_run_name", "run_folder_path", "run_pipeline", "check_text",
    "lookup_circuits", "attribute_prompt", "custom_patch_pair", "run_custom_patch", "dashboard_command",
    "register",
]
