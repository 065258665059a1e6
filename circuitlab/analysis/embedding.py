"""UMAP maps of circuits (seed 000, section 4.1, figures 5 and 9).

The codes of the circuits of the most frequent tokens (default 100) of a layer are embedded in 2-D with
UMAP under the cosine distance. UMAP's first step is a k-nearest-neighbour graph; the circuit database
already answers nearest-neighbour queries, so its graph (exact blocked sparse products, or the FAISS sketch index
with exact re-ranking) is handed to UMAP as `precomputed_knn` and UMAP goes straight to the layout.
`knn_speedup` measures what that saves against UMAP computing its own neighbours.

umap-learn compiles itself with numba on first use (about 10 s on 2 cores), so embeddings are cached
on disk, keyed by the database's content, the layer and every parameter.

Defaults, chosen on sgatlin-stories' demo database (4,000 circuits of the 100 most frequent tokens a layer):
30 neighbours, not UMAP's 15, because at 15 the kNN graph of layer 0 falls into 5 pieces (2 at 30, 1 at 50)
and UMAP throws the small pieces far from the rest; the initial layout from a truncated SVD of the codes
("pca"), not the spectral one, which fails with a warning on a graph in pieces and then starts at random;
min_dist 0.5, which spreads the crowded centre; 200 optimisation epochs, UMAP's own count above 10,000
points (it takes 500 below), which halves the time a layer takes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Float, Int

from circuitlab.atomic import atomic_write
from circuitlab.errors import UserError

Reducer = Callable[..., Float[np.ndarray, "points 2"]]

N_NEIGHBORS = 30
MIN_DIST = 0.5
INIT = "pca"
N_EPOCHS = 200


def default_cache_dir() -> Path:
    """$CIRCUITLAB_CACHE/embeddings, else ~/.cache/circuitlab/embeddings."""
    root = os.environ.get("CIRCUITLAB_CACHE") or Path.home() / ".cache" / "circuitlab"
    return Path(root) / "embeddings"


def frequent_token_circuits(db, n_tokens: int = 100, max_points: int | None = 20000, seed: int = 0) -> Int[np.ndarray, " P"]:
    """Circuit ids of every occurrence of the `n_tokens` most frequent tokens (ties by smaller token id);
    a seeded uniform subsample of `max_points` when there are more."""
    token_ids = db.metadata["token_id"].to_numpy()
    values, counts = np.unique(token_ids, return_counts=True)
    order = np.lexsort((values, -counts))[:n_tokens]
    chosen = np.flatnonzero(np.isin(token_ids, values[order]))
    if max_points is not None and chosen.size > max_points:
        chosen = np.sort(np.random.default_rng(seed).choice(chosen, max_points, replace=False))
    return chosen


def database_knn(
    db, layer: int, circuit_ids: Int[np.ndarray, " P"], n_neighbors: int = 15, exact: bool | None = None
) -> tuple[Int[np.ndarray, "P n_neighbors"], Float[np.ndarray, "P n_neighbors"]]:
    """UMAP's precomputed_knn from the database: positions into `circuit_ids`, each point first (distance 0),
    then its n_neighbors - 1 nearest other points by cosine distance.

    exact=None picks exact search up to 50k points, the FAISS sketch index above.
    """
    circuit_ids = np.asarray(circuit_ids, dtype=np.int64)
    if circuit_ids.size <= n_neighbors:
        raise UserError(f"a map needs more than n_neighbors={n_neighbors} points; got {circuit_ids.size}")
    exact = circuit_ids.size <= 50_000 if exact is None else exact
    neighbour_ids, distances = db.neighbours(layer, circuit_ids, n_neighbors - 1, within=circuit_ids, exact=exact)
    position = np.full(len(db), -1, dtype=np.int64)
    position[circuit_ids] = np.arange(circuit_ids.size)
    local = np.where(neighbour_ids >= 0, position[np.maximum(neighbour_ids, 0)], -1)
    indices = np.concatenate([np.arange(circuit_ids.size)[:, None], local], axis=1)
    distances = np.concatenate([np.zeros((circuit_ids.size, 1)), distances], axis=1)
    distances[indices < 0] = np.inf
    return indices, distances.astype(np.float32)


def umap_reducer(
    n_neighbors: int = N_NEIGHBORS, min_dist: float = MIN_DIST, seed: int = 0, init: str = INIT, n_epochs: int | None = N_EPOCHS
) -> Reducer:
    """A reducer(codes_csr, knn=None) -> [P, 2] running umap-learn with the cosine metric."""

    def reduce(codes_csr, knn: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        import umap

        options: dict[str, Any] = dict(
            n_neighbors=n_neighbors, min_dist=min_dist, metric="cosine", random_state=seed, n_components=2,
            init=init, n_epochs=n_epochs,
        )
        if knn is not None:
            # Without force_approximation_algorithm UMAP computes all pairwise distances below 4096 points
            # and ignores the graph it was given.
            options.update(precomputed_knn=(knn[0], knn[1], None), force_approximation_algorithm=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precomputed_knn.*")
            warnings.filterwarnings("ignore", message=".*n_jobs value.*")
            return umap.UMAP(**options).fit_transform(codes_csr).astype(np.float32)

    return reduce


def _cache_key(db, layer: int, circuit_ids: np.ndarray, parameters: dict) -> str:
    digest = hashlib.sha256()
    digest.update(db.fingerprint().encode())
    digest.update(json.dumps({"layer": layer, **parameters}, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(circuit_ids).tobytes())
    return digest.hexdigest()[:32]


def embed_layer(
    db,
    layer: int,
    *,
    n_tokens: int = 100,
    n_neighbors: int = N_NEIGHBORS,
    min_dist: float = MIN_DIST,
    seed: int = 0,
    max_points: int | None = 20000,
    knn: str = "database",
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    reducer: Reducer | None = None,
):
    """2-D UMAP coordinates of the circuits of the `n_tokens` most frequent tokens at `layer`.

    knn: "database" hands UMAP the database's nearest-neighbour graph; "umap" lets UMAP compute its own.
    reducer: the embedding function (default umap-learn with the cosine metric); a custom one is called as
    reducer(codes_csr, knn=(indices, distances) or None), and its results are not cached.
    Returns a DataFrame: circuit_id, layer, x, y, token_id, token, category, context (the excerpt with the
    token marked), position, sequence_id.
    """
    import pandas as pd

    from circuitlab.analysis.circuitdb import mark_token

    layer = db.require_layer(layer)
    if knn not in ("database", "umap"):
        raise UserError(f"knn must be 'database' or 'umap', got {knn!r}")
    circuit_ids = frequent_token_circuits(db, n_tokens, max_points, seed)
    parameters = dict(n_tokens=n_tokens, n_neighbors=n_neighbors, min_dist=min_dist, seed=seed, knn=knn, init=INIT,
                      n_epochs=N_EPOCHS)
    cache_path = None
    if use_cache and reducer is None:
        cache_path = Path(cache_dir or default_cache_dir()) / f"{_cache_key(db, layer, circuit_ids, parameters)}.parquet"
        if cache_path.exists():
            return pd.read_parquet(cache_path)
    reduce = reducer or umap_reducer(n_neighbors, min_dist, seed)
    graph = database_knn(db, layer, circuit_ids, n_neighbors) if knn == "database" else None
    coordinates = np.asarray(reduce(db.codes[layer].rows(circuit_ids).to_csr(), knn=graph))
    if coordinates.shape != (circuit_ids.size, 2):
        raise ValueError(f"the reducer returned shape {coordinates.shape}, expected ({circuit_ids.size}, 2)")
    rows = db.metadata.iloc[circuit_ids].reset_index(drop=True)
    frame = pd.DataFrame(
        {
            "circuit_id": circuit_ids,
            "layer": layer,
            "x": coordinates[:, 0],
            "y": coordinates[:, 1],
            "token_id": rows["token_id"].to_numpy(),
            "token": rows["token"].astype(str).to_numpy(),
            "category": rows["category"].to_numpy(),
            "context": [mark_token(str(c), s, e) for c, s, e in zip(rows["context"], rows["token_start"], rows["token_end"])],
            "position": rows["position"].to_numpy(),
            "sequence_id": rows["sequence_id"].to_numpy(),
        }
    )
    if cache_path is not None:
        atomic_write(cache_path, lambda temporary: frame.to_parquet(temporary, index=False))
    return frame


def embed(db, layers: Sequence[int] | None = None, **options: Any):
    """`embed_layer` for several layers (default all), concatenated (figure 9)."""
    import pandas as pd

    from tqdm.auto import tqdm

    frames = [embed_layer(db, layer, **options) for layer in tqdm(db.layers if layers is None else layers, desc="UMAP")]
    return pd.concat(frames, ignore_index=True)


def knn_speedup(
    db, layer: int, *, n_tokens: int = 100, n_neighbors: int = N_NEIGHBORS, min_dist: float = MIN_DIST, seed: int = 0,
    max_points: int | None = 20000, warm_up: bool = True,
) -> dict:
    """Time UMAP with the database's kNN graph against UMAP computing its own (same points, same seed).

    A small UMAP run first takes numba's compilation out of both timings (warm_up=True).
    Returns seconds for: the database graph, UMAP given that graph, UMAP on its own; and the speed-up.
    """
    circuit_ids = frequent_token_circuits(db, n_tokens, max_points, seed)
    codes = db.codes[db.require_layer(layer)].rows(circuit_ids).to_csr()
    reduce = umap_reducer(n_neighbors, min_dist, seed)
    if warm_up:
        warm_ids = circuit_ids[: min(circuit_ids.size, 300)]
        warm_codes = db.codes[layer].rows(warm_ids).to_csr()
        reduce(warm_codes, knn=database_knn(db, layer, warm_ids, n_neighbors))
        reduce(warm_codes)
    started = time.perf_counter()
    graph = database_knn(db, layer, circuit_ids, n_neighbors)
    graph_seconds = time.perf_counter() - started
    started = time.perf_counter()
    reduce(codes, knn=graph)
    layout_seconds = time.perf_counter() - started
    started = time.perf_counter()
    reduce(codes)
    own_seconds = time.perf_counter() - started
    return {
        "layer": layer,
        "points": int(circuit_ids.size),
        "database_knn_seconds": graph_seconds,
        "umap_with_database_knn_seconds": layout_seconds,
        "umap_own_knn_seconds": own_seconds,
        "speedup": own_seconds / (graph_seconds + layout_seconds),
    }


def embedding_figure(coordinates, color: str = "category", title: str | None = None):
    """Scatter of UMAP coordinates, one panel per layer (figure 5 for one layer, figure 9 for several);
    colour by "category" or "token"; hover shows the token and its context excerpt."""
    import plotly.express as px

    if color not in ("category", "token"):
        raise UserError(f"color must be 'category' or 'token', got {color!r}")
    frame = coordinates.copy()
    frame[color] = frame[color].fillna("(none)").astype(str)
    layers = sorted(frame["layer"].unique())
    from circuitlab.figures import color_map

    figure = px.scatter(
        frame, x="x", y="y", color=color, color_discrete_map=color_map(frame[color]),
        category_orders={color: sorted(frame[color].unique())}, facet_col="layer" if len(layers) > 1 else None,
        facet_col_wrap=2 if len(layers) > 1 else 0, hover_data={"token": True, "context": True, "x": False, "y": False},
        title=title or (f"Circuits of the most frequent tokens, layer {layers[0]}" if len(layers) == 1 else "Circuits of the most frequent tokens"),
        width=900 if len(layers) == 1 else 1300, height=750 if len(layers) <= 2 else 1200, render_mode="webgl",
    )
    figure.update_traces(marker={"size": 4, "opacity": 0.75})
    figure.update_xaxes(showticklabels=False, title_text="")
    figure.update_yaxes(showticklabels=False, title_text="")
    return figure
