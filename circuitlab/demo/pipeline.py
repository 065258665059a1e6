"""The demo's cached artifact pipeline: steps, their fingerprints, and the run that makes what is stale.

An artifact is reused when its fingerprint matches: a hash of its parameters, of the fingerprints of the
artifacts it is computed from, and of the model's identity (config hash, weights sha256, tokenizer hash).
Retraining a model, changing a sample size or deleting a file recomputes exactly what depends on the change.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from circuitlab.atomic import atomic_write
from circuitlab.errors import UserError
from circuitlab.demo.readers import DLA_ATTRS, nie_for_parquet
from circuitlab.demo.runfolder import (
    ModelIdentity, RunFolder, fingerprint_of, normalise, sha256_file, write_json_atomic, write_npz_atomic,
    write_parquet_atomic,
)


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
    "corpus": ("held-out corpus: generated stories, or the user's text (--corpus)", "corpus.jsonl"),
    "circuitdb": ("circuit database", "circuitdb/"),
    "semantic": ("semantic neighbour score", "semantic.parquet"),
    "umap": ("UMAP maps of circuits", "umap_L{layer}.parquet"),
    "usage": ("neuron usage, Gini and co-activation", "usage.json, usage_L{layer}.npz"),
    "nie": ("NIE grid over the fact pairs, or the user's pairs (--pairs)", "nie.parquet"),
    "legibility": ("legibility of bounded channels", "legibility_channels.parquet, legibility_summary.parquet"),
    "dla": ("direct logit attribution of the demo prompts", "dla.parquet"),
}


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


@dataclass(frozen=True)
class DemoInputs:
    """The user's own corpus (a text/JSONL file or a folder of them) and patching pairs file, when given."""

    corpus: str | None = None
    pairs: str | None = None

    @classmethod
    def from_paths(cls, corpus: str | None, pairs: str | None) -> DemoInputs:
        """Checked at once (before a model loads): each path must exist."""
        for option, path in (("--corpus", corpus), ("--pairs", pairs)):
            if path is not None and not Path(path).exists():
                raise UserError(f"{option} {path} does not exist")
        if pairs is not None:
            from circuitlab.analysis.pairs import read_pairs

            read_pairs(pairs)  # a malformed file fails now, not after the circuit database is built
        return cls(corpus=str(Path(corpus).resolve()) if corpus else None, pairs=str(Path(pairs).resolve()) if pairs else None)

    def corpus_params(self, sizes: Sizes) -> dict:
        if self.corpus is None:
            return {"stories": sizes.stories, "seed": "held-out"}
        return {"source": self.corpus, "sha256": _tree_sha256(Path(self.corpus)), "documents": sizes.stories}

    def nie_params(self, sizes: Sizes) -> dict:
        if self.pairs is None:
            return {"pairs": sizes.nie_pairs, "seed": 0}
        return {"source": self.pairs, "sha256": sha256_file(self.pairs)}


def _tree_sha256(path: Path) -> str:
    """One digest over a file, or over every file of a folder (names and bytes, in name order)."""
    import hashlib

    files = {path.name: path} if path.is_file() else {
        str(file.relative_to(path)): file for file in sorted(path.rglob("*")) if file.is_file()
    }
    digest = hashlib.sha256()
    for name, file in files.items():
        digest.update(f"{name}\0{sha256_file(file)}\0".encode())
    return digest.hexdigest()


@dataclass
class PipelineContext:
    model: Any
    run: RunFolder
    sizes: Sizes
    progress: bool = True
    inputs: DemoInputs = field(default_factory=DemoInputs)
    _cache: dict = field(default_factory=dict)

    def stories(self) -> list:
        """The corpus: labelled stories (generated), or plain strings (the user's own text)."""
        if "stories" not in self._cache:
            self._cache["stories"] = read_demo_corpus(self.run.file("corpus.jsonl"))
        return self._cache["stories"]

    def texts(self) -> list[str]:
        return [getattr(story, "text", story) for story in self.stories()]

    def db(self) -> Any:
        if "db" not in self._cache:
            from circuitlab.analysis.circuitdb import CircuitDB

            self._cache["db"] = CircuitDB.load(self.run.file("circuitdb"), model=self.model)
        return self._cache["db"]


def _needs_tokenizer(model: Any) -> str | None:
    return None if getattr(model, "tokenizer", None) is not None else "the model has no tokenizer.json"


def _labels_apply(inputs: DemoInputs) -> str | None:
    if inputs.corpus is not None:
        return "the semantic score compares word-category labels, and text given with --corpus has none"
    return None


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


def _nie_applies(model: Any, inputs: DemoInputs) -> str | None:
    from circuitlab.data.facts import single_token_facts

    if getattr(model, "tokenizer", None) is None:
        return "the model has no tokenizer.json"
    if inputs.pairs is not None:
        return None
    usable = single_token_facts(model.tokenizer)
    if len(usable) < 2:
        return (f"only {len(usable)} fact nouns/adjectives are single tokens under this tokenizer; patching needs 2: "
                "give your own pairs with --pairs FILE")
    return None


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

    if ctx.inputs.corpus is not None:
        from circuitlab.data.loaders import load_documents

        documents = [text for text in load_documents(ctx.inputs.corpus) if text.strip()][: ctx.sizes.stories]
        if not documents:
            raise UserError(f"--corpus {ctx.inputs.corpus} holds no text")
        lines = "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in documents)
        atomic_write(ctx.run.file("corpus.jsonl"), lambda tmp: Path(tmp).write_text(lines, encoding="utf-8"))
        return ["corpus.jsonl"], {"documents": len(documents)}
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
        # the database names its model, so `circuitlab db query RUN/circuitdb "text"` needs no --model
        db.model_source = str(ctx.run.model_folder())
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
    summary = {"layers": [normalise(report.summary()) for report in reports.values()]}
    write_json_atomic(ctx.run.file("usage.json"), summary)
    return ["usage.json", *files], None


def _make_nie(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.patching import POSITION_ROLES, as_patch_pair, nie_grid, no_counted_pairs, positions_for
    from circuitlab.data.facts import build_fact_pairs, single_token_facts
    from circuitlab.analysis.pairs import load_pairs

    if ctx.inputs.pairs is not None:
        pairs = load_pairs(ctx.model, ctx.inputs.pairs)
        # the roles every pair names beyond the usual ones are patched too
        shared = set.intersection(*(set(pair.roles) for pair in pairs)) - set(POSITION_ROLES)
        positions, note = positions_for(pairs, [*POSITION_ROLES, *sorted(shared)])
    else:
        usable = len(single_token_facts(ctx.model.tokenizer))
        n_pairs = min(ctx.sizes.nie_pairs, usable * (usable - 1))
        pairs = [as_patch_pair(pair, index, model=ctx.model)
                 for index, pair in enumerate(build_fact_pairs(ctx.model.tokenizer, seed=0, n_pairs=n_pairs))]
        positions, note = positions_for(pairs)
    table = nie_grid(ctx.model, pairs, positions=positions, progress=ctx.progress)
    write_parquet_atomic(ctx.run.file("nie.parquet"), nie_for_parquet(table))
    notes = [text for text in (note, no_counted_pairs(table)) if text]
    return ["nie.parquet"], {"n_pairs": len(pairs), "notes": notes}


def _make_legibility(ctx: PipelineContext) -> tuple[list[str], dict | None]:
    from circuitlab.analysis.channel_names import name_channels
    from circuitlab.analysis.legibility import legibility_stats, legibility_summary

    tokens = corpus_windows(ctx.model, ctx.texts(), ctx.sizes.legibility_seq_len)
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


def pipeline_steps(model_folder: Path, sizes: Sizes, inputs: DemoInputs | None = None) -> list[Step]:
    """The demo's artifacts in the order they are made."""
    from circuitlab.analysis.embedding import INIT, MIN_DIST, N_EPOCHS, N_NEIGHBORS

    inputs = inputs or DemoInputs()
    umap_layout = {"n_neighbors": N_NEIGHBORS, "min_dist": MIN_DIST, "init": INIT, "n_epochs": N_EPOCHS}
    return [
        Step("card", "model card and training log", _card_params(model_folder), (), _make_card),
        Step("corpus", "held-out corpus", inputs.corpus_params(sizes), (), _make_corpus),
        Step("circuitdb", "circuit database (all layers)", {"batch_size": sizes.collect_batch, "index": "auto"},
             ("corpus",), _make_circuitdb, _needs_tokenizer),
        Step("semantic", "semantic neighbour score", {"queries": sizes.semantic_queries, "shuffles": sizes.semantic_shuffles, "k": 10},
             ("circuitdb",), _make_semantic, lambda model: _needs_tokenizer(model) or _labels_apply(inputs)),
        Step("umap", "UMAP maps per layer", {"tokens": sizes.umap_tokens, "points": sizes.umap_points, "layout": umap_layout, "seed": 0},
             ("circuitdb",), _make_umap, _needs_tokenizer),
        Step("usage", "neuron usage, Gini, co-activation", {"n_coactivation": 128}, ("circuitdb",), _make_usage,
             lambda model: _needs_tokenizer(model) or _usage_applies(model)),
        Step("nie", "NIE over the patching pairs", inputs.nie_params(sizes), (), _make_nie,
             lambda model: _nie_applies(model, inputs)),
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
    notes: list[str] = field(default_factory=list)  # "<artifact>: <what the user should know about it>"

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
    inputs: DemoInputs | None = None,
) -> PipelineReport:
    """Make every artifact of `run` that is missing or stale; reuse the rest. `inputs`: the user's own corpus
    and patching pairs (default: generated stories and the fact pairs)."""
    from tqdm.auto import tqdm

    started = time.perf_counter()
    if run.bind_model(identity):
        log(f"{run.path}: the model changed since this run folder was made; recomputing every artifact")
    inputs = inputs or DemoInputs()
    run.manifest["fast"] = sizes == Sizes.fast()
    run.manifest["corpus"], run.manifest["pairs"] = inputs.corpus, inputs.pairs
    run.save()
    steps = pipeline_steps(Path(identity.folder), sizes, inputs)
    ctx = PipelineContext(model=model, run=run, sizes=sizes, progress=progress, inputs=inputs)
    fingerprints: dict[str, str] = {}
    report = PipelineReport()
    bar = tqdm(steps, desc="demo", unit="artifact", disable=not progress, dynamic_ncols=True)
    for step in bar:
        bar.set_postfix_str(step.key)
        params = dict(step.params, inputs={key: fingerprints.get(key) for key in step.inputs})
        fingerprint = fingerprint_of({"key": step.key, "version": step.version, "params": normalise(params), "model": identity.key()})
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
        for note in (extra or {}).get("notes", ()):  # what the user should know about this artifact, even when quiet
            report.notes.append(f"{step.key}: {note}")
            (tqdm.write if progress else log)(f"  {step.key}: {note}")
    report.total_seconds = time.perf_counter() - started
    run.manifest["last_demo_seconds"] = round(report.total_seconds, 2)
    run.save()
    return report


def read_demo_corpus(path: Path) -> list:
    """corpus.jsonl of a run folder: labelled stories when its lines carry labels (generated), else the texts."""
    from circuitlab.data._io import read_utf8
    from circuitlab.data.stories import read_corpus

    lines = [line for line in read_utf8(path).splitlines() if line.strip()]
    if lines and "spans" in json.loads(lines[0]):  # the demo writes one kind per file: labelled or plain
        return read_corpus(path)
    return [json.loads(line)["text"] for line in lines]
