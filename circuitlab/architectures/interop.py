"""Interop with the seed authors' public sgatlin code (JAX/Flax, MIT licence).

`from_official_sgatlin` maps their flattened Flax parameter names (docs/designs/sgatlin.md) onto a
CircuitTransformer; every size is inferred from the shapes. Their model: tied embeddings, pre-RMSNorm,
QK-RMSNorm, RoPE (half-split), no biases.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from circuitlab.config import ModelConfig
from circuitlab.errors import UserError


class OfficialFormatError(UserError):
    """A parameter set that does not look like the seed authors' sgatlin model."""


def _read_source(source: str | os.PathLike | Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise OfficialFormatError(f"{path} does not exist")
        try:
            archive = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as error:
            raise OfficialFormatError(f"{path} is not a readable .npz archive ({error})") from error
        items = {key: archive[key] for key in archive.files}
    else:
        items = dict(source)
    params, config = {}, {}
    for key, value in items.items():
        if key.startswith("config/"):
            config[key[len("config/"):]] = np.asarray(value).item()
        elif key.startswith("intermediate/"):
            continue
        else:
            params[key[len("param/"):] if key.startswith("param/") else key] = np.asarray(value)
    return params, config


def from_official_sgatlin(source: str | os.PathLike | Mapping[str, Any], knn: int | None = None) -> Any:
    """Build a float32 CircuitTransformer from the seed authors' sgatlin parameters.

    source: an .npz with keys "param/<flattened Flax name>" (and optionally "config/knn"), or a mapping
    from flattened names (with or without the "param/" prefix) to arrays. knn (k) cannot be read from the
    shapes: pass it, or keep it in the archive as config/knn.
    """
    from circuitlab.architectures.transformer import CircuitTransformer

    params, stored_config = _read_source(source)

    def get(name: str) -> torch.Tensor:
        if name not in params:
            raise OfficialFormatError(f"missing parameter {name!r} (have e.g. {sorted(params)[:4]})")
        return torch.from_numpy(np.array(params[name], dtype=np.float32))

    block_ids = sorted({int(m.group(1)) for key in params if (m := re.match(r"blocks_(\d+)/", key))})
    if not block_ids or block_ids != list(range(len(block_ids))):
        raise OfficialFormatError(f"expected parameters blocks_0/... blocks_(L-1)/..., found blocks {block_ids}")
    k = knn if knn is not None else stored_config.get("knn")
    if k is None:
        raise OfficialFormatError("the number of gates k is not in the parameters: pass knn=... (e.g. knn=8)")

    embedding = get("embedder/embedding")
    d_vocab, d_model = embedding.shape
    query_kernel = get("blocks_0/attention/query_projection/kernel")
    _, n_heads, d_head = query_kernel.shape
    router_key = get("blocks_0/ffw/router/DenseGeneral_0/kernel")
    d_key, _, n_channels, n_keys = router_key.shape
    experts = get("blocks_0/ffw/experts")
    d_ffw = experts.shape[2]
    if d_ffw != n_keys * n_keys:
        raise OfficialFormatError(f"experts hold {d_ffw} neurons per channel but the router has {n_keys}^2 keys")

    config = ModelConfig(
        d_vocab=d_vocab, d_model=d_model, n_layers=len(block_ids), n_heads=n_heads, d_head=d_head,
        n_ctx=max(int(stored_config.get("T", 0)), 2048), positional="rope", norm="rmsnorm", tied_embeddings=True,
        attention=dict(value_mode="standard", n_special=0, qk_norm=True),
        feedforward=dict(type="sgatlin", d_ffw=d_ffw, n_channels=n_channels, k=int(k), d_key=d_key),
        name="official-sgatlin",
    )
    model = CircuitTransformer(config)
    state = {"W_E": embedding, "ln_final.w": get("output_norm/scale")}
    for layer in block_ids:
        prefix, target = f"blocks_{layer}", f"blocks.{layer}"
        state[f"{target}.ln1.w"] = get(f"{prefix}/attention_norm/scale")
        state[f"{target}.ln2.w"] = get(f"{prefix}/feedforward_norm/scale")
        for ours, theirs in (("W_Q", "query"), ("W_K", "key"), ("W_V", "value")):
            state[f"{target}.attn.{ours}"] = get(f"{prefix}/attention/{theirs}_projection/kernel").permute(1, 0, 2)
        state[f"{target}.attn.W_O"] = get(f"{prefix}/attention/output_projection/kernel")
        state[f"{target}.attn.q_norm.w"] = get(f"{prefix}/attention/query_norm/scale")
        state[f"{target}.attn.k_norm.w"] = get(f"{prefix}/attention/key_norm/scale")
        state[f"{target}.mlp.W_query"] = get(f"{prefix}/ffw/router/Dense_0/kernel")
        state[f"{target}.mlp.W_key"] = get(f"{prefix}/ffw/router/DenseGeneral_0/kernel")
        state[f"{target}.mlp.experts"] = get(f"{prefix}/ffw/experts")
    expected = model.state_dict()
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise OfficialFormatError(f"{name}: shape {tuple(tensor.shape)} != expected {tuple(expected[name].shape)}")
    missing = sorted(set(expected) - set(state))
    if missing:
        raise OfficialFormatError(f"no source for {missing}")
    model.load_state_dict(state)
    return model.float()
