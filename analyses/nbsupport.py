"""Set-up shared by the analysis notebooks: sample sizes, which models to read, cached circuit databases,
and figures that also land in analyses/figures/ for the README.

The notebooks call circuitlab's analyses directly; this module only decides *how much* to run and *where*
things come from and go, so that every notebook reads the same environment:

    CIRCUITLAB_FAST=1        small samples (CI): each notebook runs in well under a minute on 2 CPU cores,
                             and a 2-D SVD of the codes stands in for UMAP (umap-learn spends about a
                             minute compiling itself with numba on first use)
    CIRCUITLAB_MODELS_DIR    a folder laid out like models/ (<name>/config.json, model.safetensors,
                             tokenizer.json); default: the shipped models (models/, or $CIRCUITLAB_MODELS)
    CIRCUITLAB_MODEL         run a notebook's main analyses on this model (a name or a folder) instead
    CIRCUITLAB_CACHE         where circuit databases and UMAP embeddings are cached (~/.cache/circuitlab)
    CIRCUITLAB_FIGURES_DIR   when set (scripts/run_notebooks.py sets it), key figures are also written there
                             as HTML and, where a renderer exists (kaleido, else headless Chromium), as PNG
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SHIPPED_MODELS = ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories")
DB_CACHE_VERSION = 1

# tqdm.auto wants ipywidgets for notebook bars; without them the text bar is fine and the warning is noise
warnings.filterwarnings("ignore", message="IProgress not found")


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


FAST = env_flag("CIRCUITLAB_FAST")


@dataclass(frozen=True)
class Sizes:
    """How much data each analysis sees. Full sizes follow the papers where they say (seed 000: UMAP of the
    100 most frequent tokens; seed 002: 12 batches of 8 x 256 held-out tokens)."""

    db_stories: int  # held-out stories in a circuit database (about 70 tokens each)
    umap_tokens: int
    umap_points: int  # per layer
    search_k: int
    semantic_queries: int
    semantic_shuffles: int
    nie_pairs: int
    legibility_stories: int
    legibility_seq_len: int
    name_channels: int  # SELECTIVE channels named by their firing tokens
    min_token_count: int  # a token must be seen this often before a channel is named after it

    @classmethod
    def full(cls) -> Sizes:
        return cls(db_stories=400, umap_tokens=100, umap_points=4000, search_k=10, semantic_queries=2000,
                   semantic_shuffles=20, nie_pairs=128, legibility_stories=400, legibility_seq_len=256,
                   name_channels=12, min_token_count=5)

    @classmethod
    def fast(cls) -> Sizes:
        return cls(db_stories=24, umap_tokens=20, umap_points=300, search_k=10, semantic_queries=150,
                   semantic_shuffles=3, nie_pairs=6, legibility_stories=24, legibility_seq_len=64,
                   name_channels=4, min_token_count=2)


SIZES = Sizes.fast() if FAST else Sizes.full()


def banner() -> None:
    """Print the mode and sizes this run uses (the first output of every notebook)."""
    mode = "FAST (CI smoke run: small samples, SVD instead of UMAP)" if FAST else "full"
    print(f"mode: {mode}")
    print("sizes: " + ", ".join(f"{key}={value}" for key, value in asdict(SIZES).items()))


# ------------------------------------------------------------------------------------------------ models


def main_model_spec(default: str) -> str:
    """The notebook's main model: $CIRCUITLAB_MODEL when set, else `default`."""
    return os.environ.get("CIRCUITLAB_MODEL") or default


def find_model_folder(spec: str) -> tuple[Path | None, str]:
    """(folder, '') for a model name or folder, or (None, why it was not found)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path, ""
    models_dir = os.environ.get("CIRCUITLAB_MODELS_DIR")
    if models_dir:
        candidate = Path(models_dir).expanduser() / spec
        if candidate.is_dir():
            return candidate, ""
        return None, f"{candidate} does not exist (CIRCUITLAB_MODELS_DIR={models_dir})"
    from circuitlab.architectures.weights import CheckpointError, resolve_model_folder

    try:
        return resolve_model_folder(spec), ""
    except CheckpointError as error:
        return None, str(error)


def load(spec: str, *, required: bool = True) -> Any:
    """Load a model (eval mode, CPU) and print what it is; None (with the reason) if optional and absent."""
    from circuitlab import load_model

    folder, why = find_model_folder(spec)
    if folder is None:
        message = (
            f"model {spec!r} not found: {why}. Train it (circuitlab train --preset {spec} --out models/{spec}) "
            "or point CIRCUITLAB_MODELS_DIR at a folder that holds it."
        )
        if required:
            raise FileNotFoundError(message)
        print(f"skipping {spec}: {message}")
        return None
    from circuitlab.architectures.weights import CheckpointError

    try:
        model = load_model(folder).eval()
    except CheckpointError as error:
        if required:
            raise
        print(f"skipping {spec}: {error}")
        return None
    model.source_folder = folder
    print(describe(model, spec))
    return model


def describe(model: Any, spec: str = "") -> str:
    """One line: what the model is, where it came from, and how well it was trained (when recorded)."""
    config = model.config
    ffn = config.feedforward.describe() + (f" + {config.bottleneck.design} bottleneck" if config.bottleneck else "")
    attention = config.attention.describe(config.n_heads)
    parameters = sum(p.numel() for p in model.parameters())
    line = (
        f"{spec or config.name}: {config.name or '(unnamed config)'}, {config.n_layers} layers x d_model "
        f"{config.d_model}, {config.n_heads} heads ({attention}), FFN {ffn}, {parameters / 1e6:.2f}M parameters"
    )
    folder = getattr(model, "source_folder", None)
    metrics = Path(folder) / "metrics.json" if folder else None
    if metrics is not None and metrics.is_file():
        try:
            record = json.loads(metrics.read_text())
        except json.JSONDecodeError:
            record = {}
        trained = [f"{key} {record[key]:.4g}" if isinstance(record[key], float) else f"{key} {record[key]}"
                   for key in ("steps", "held_out_loss", "held_out_ppl", "fact_accuracy") if key in record]
        if trained:
            line += "; trained: " + ", ".join(trained)
    if spec in SHIPPED_MODELS and config.name and config.name != spec:
        line += (
            f"\n  NOTE: this folder holds a {config.name} model standing in for {spec}; the numbers below test "
            "that the notebook runs, they are not a reproduction"
        )
    return line


def is_same(spec: str, model: Any) -> bool:
    """Whether `spec` names the folder `model` was loaded from (so a comparison does not repeat it)."""
    folder, _ = find_model_folder(spec)
    source = getattr(model, "source_folder", None)
    return folder is not None and source is not None and Path(folder).resolve() == Path(source).resolve()


# ---------------------------------------------------------------------------------------------- caching


def cache_root() -> Path:
    return Path(os.environ.get("CIRCUITLAB_CACHE") or Path.home() / ".cache" / "circuitlab")


def weights_digest(model: Any) -> str:
    """sha256 over the model's parameters and buffers (so a retrained model never reuses a stale cache)."""
    digest = hashlib.sha256(model.config.hash().encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "hash"):
        digest.update(tokenizer.hash().encode())
    return digest.hexdigest()


def circuit_db(model: Any, n_stories: int | None = None, progress: bool = False) -> Any:
    """A circuit database over the first `n_stories` held-out stories, every layer, exact search only;
    built once per model and size and cached under $CIRCUITLAB_CACHE/notebook-circuitdb."""
    from circuitlab.analysis.circuitdb import CircuitDB, CircuitDBError
    from circuitlab.data import held_out_stories

    n_stories = n_stories or SIZES.db_stories
    key = hashlib.sha256(
        json.dumps({"weights": weights_digest(model), "stories": n_stories, "version": DB_CACHE_VERSION}).encode()
    ).hexdigest()[:24]
    folder = cache_root() / "notebook-circuitdb" / key
    if (folder / "manifest.json").exists():
        try:
            db = CircuitDB.load(folder, model=model)
            print(f"circuit database: {len(db)} circuits x {len(db.layers)} layers (cached)")
            return db
        except (CircuitDBError, FileNotFoundError) as error:
            print(f"cached circuit database unusable ({error}); rebuilding")
            shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    db = CircuitDB.build(model, held_out_stories(n_stories), layers=None, index=None, progress=progress)
    db.save(folder)
    print(
        f"circuit database: {len(db)} circuits x {len(db.layers)} layers from {n_stories} held-out stories "
        f"({time.perf_counter() - started:.1f} s)"
    )
    return db


def svd_reducer(codes_csr: Any, knn: Any = None) -> Any:
    """Fast mode's stand-in for UMAP: the top-2 singular directions of the L2-normalised codes (cosine
    geometry, linear, deterministic). It shows the same points and labels; it is not a UMAP layout."""
    import numpy as np
    from scipy.sparse import diags
    from scipy.sparse.linalg import svds

    codes = codes_csr.astype(np.float64)
    norms = np.sqrt(np.asarray(codes.multiply(codes).sum(axis=1)).ravel())
    normalised = diags(1.0 / np.maximum(norms, 1e-12)) @ codes
    if min(normalised.shape) <= 2:
        raise ValueError(f"an SVD map needs more than 2 points and dimensions, got {normalised.shape}")
    left, singular, _ = svds(normalised, k=2, random_state=0)
    order = np.argsort(singular)[::-1]
    return (left[:, order] * singular[order]).astype(np.float32)


def embed_layer(db: Any, layer: int, **options: Any) -> Any:
    """circuitlab.analysis.embedding.embed_layer with the notebook's sizes (UMAP; SVD in fast mode)."""
    from circuitlab.analysis.embedding import embed_layer as embed

    options.setdefault("n_tokens", SIZES.umap_tokens)
    options.setdefault("max_points", SIZES.umap_points)
    if FAST:
        options.setdefault("reducer", svd_reducer)
    return embed(db, layer, **options)


# ---------------------------------------------------------------------------------------------- display


def markdown(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def comparison_table(rows: list[tuple[str, str, str, str]]) -> str:
    """Markdown table: quantity | paper | ours | reading (each cell already formatted)."""
    lines = ["| quantity | paper | ours | reading |", "|---|---|---|---|"]
    for quantity, paper, ours, reading in rows:
        cells = [str(cell).replace("|", "\\|").replace("\n", " ") for cell in (quantity, paper, ours, reading)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


CLAIMS_FILE = Path(__file__).resolve().parent / "claims.json"


def claims_verdicts(ids: list[str], path: Path | None = None) -> None:
    """Show the rows `ids` of analyses/claims.json (the papers' claims measured on the shipped models by
    scripts/claims.py; the same rows as claims.md), each followed by its deviation rows (`id-...`), as a markdown
    table: claim, config, paper, ours, estimate with its 95% interval, nulls, verdict. These verdicts, not the
    notebook's own readings, are what the README quotes."""
    from circuitlab.claims import read_claims_json

    path = CLAIMS_FILE if path is None else Path(path)
    if not path.is_file():
        print(f"{path.name} is missing: write it with `python scripts/claims.py` (or --fast)")
        return
    rows = {row["id"]: row for row in read_claims_json(path)}
    missing = [claim_id for claim_id in ids if claim_id not in rows]
    if missing:
        raise KeyError(f"{path.name} has no rows {missing}: rewrite it with `python scripts/claims.py`")
    chosen = [claim_id for base in ids for claim_id in [base] + [i for i in rows if i.startswith(f"{base}-")]]

    def number(value) -> str:
        return "-" if value is None else f"{value:.4g}"

    lines = ["| claim | config | paper | ours (shipped models) | estimate [95% interval] | nulls | verdict |",
             "|---|---|---|---|---|---|---|"]
    for claim_id in dict.fromkeys(chosen):
        row = rows[claim_id]
        verdict = row["verdict"] + (f" ({row['reason']})" if row["reason"] not in ("", "-") else "")
        interval = number(row["estimate"]) + ("" if row["ci95"] is None else
                                              f" [{number(row['ci95'][0])}, {number(row['ci95'][1])}]")
        nulls = "-" if not row["null"] else "; ".join(f"{k} {number(v)}" for k, v in row["null"].items())
        cells = [f"{row['claim']} ({row['place']})", row["config"], row["paper"], row["ours"], interval, nulls,
                 f"**{verdict}**"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    markdown("**Verdicts from analyses/claims.md** (analyses/claims.json; rules stated in claims.md)\n\n" + "\n".join(lines))


def figures_dir() -> Path | None:
    folder = os.environ.get("CIRCUITLAB_FIGURES_DIR")
    return Path(folder) if folder else None


def show(figure: Any, name: str | None = None) -> None:
    """Display a plotly figure; when CIRCUITLAB_FIGURES_DIR is set and `name` given, also write
    <name>.html and <name>.png there, and embed the PNG in the output so that viewers without JavaScript
    (GitHub, nbviewer) show a static image while Jupyter shows the interactive figure."""
    import plotly.io as pio
    from IPython.display import display

    bundle: dict[str, Any] = {
        "application/vnd.plotly.v1+json": json.loads(pio.to_json(figure, validate=False)),
        "text/plain": f"<plotly figure: {figure.layout.title.text or name or 'untitled'}>",
    }
    folder = figures_dir()
    if folder is not None and name:
        folder.mkdir(parents=True, exist_ok=True)
        figure.write_html(folder / f"{name}.html", include_plotlyjs="cdn", full_html=True)
        png = save_png(figure, folder / f"{name}.png")
        if png is not None:
            bundle["image/png"] = base64.b64encode(png.read_bytes()).decode("ascii")
        else:
            print(f"no PNG renderer (kaleido or chromium) found: {name} saved as HTML only")
    display(bundle, raw=True)


def save_png(figure: Any, path: Path) -> Path | None:
    """Write a PNG of a plotly figure (circuitlab.figures.write_png); None when no renderer is available."""
    from circuitlab.figures import write_png

    return write_png(figure, path)
