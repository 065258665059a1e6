"""The parity bottleneck beside a top-k sparse autoencoder of the same m and k (parity issue, part 3): both
coded writes measured the same way on the same tokens.

The autoencoders (circuitlab.analysis.sae, one per layer) code the GELU model's FFN writes (hook_mlp_out); the
bottleneck codes the parity model's FFN writes inside the model (bottleneck.hook_in -> hook_recon). On the
held-out natural tokens of the parity report (circuitlab.analysis.parity_measure.natural_windows with the
same token count and window length), per layer:
- reconstruction: sum ||x - x_hat||^2 / sum ||x||^2 over tokens (the parity report's definition);
- loss added: the loss with the write replaced by its k-feature reconstruction minus the loss with the write
  itself. For the autoencoder: the GELU model with the layer's hook_mlp_out replaced by the SAE's
  reconstruction (spliced in), minus the GELU model's loss. For the bottleneck, which is part of its model:
  the parity model's loss minus its loss with the layer's write left uncoded (hook_mlp_out replaced by
  bottleneck.hook_in, the FFN write before the bottleneck). Also every layer at once;
- usage (circuitlab.analysis.code_usage.usage_figures): effective features, top feature share, dead share and
  the firing-frequency histogram of how many tokens each feature fires on (an autoencoder latent fires when
  its value is > 0; a bottleneck feature when it is in the token's code).
On the labelled generated stories of the held-out seed (circuitlab.analysis.code_probe), per layer: the
accuracy of a linear probe from the code to the word category, from the raw write (the SAE's input; the
bottleneck's input) to it, and the majority-class baseline; every probe on the same seeded token split.

Letters: B batch, T position, D d_model, N tokens, K code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from circuitlab.analysis.code_probe import ProbeSplit, code_matrix, labelled_tokens, majority_accuracy, probe_accuracy
from circuitlab.analysis.code_usage import usage_figures
from circuitlab.analysis.parity_measure import _autocast, _batches, _shown, natural_windows

MLP_OUT = "blocks.{}.hook_mlp_out".format
CODED_IN = "blocks.{}.bottleneck.hook_in".format


@torch.no_grad()
def write_activations(model, windows: Tensor, batch_size: int, device: torch.device) -> list[Tensor]:
    """[N, D] float32 FFN writes (hook_mlp_out) of every layer over the windows' inputs, on `device`: what the
    autoencoders train on."""
    n_layers = model.config.n_layers
    writes: list[list[Tensor]] = [[] for _ in range(n_layers)]
    for batch in _batches(windows, batch_size, "FFN writes"):
        with _autocast(device):
            _, cache = model.run_with_cache(batch[:, :-1].to(device), names_filter=lambda name: name.endswith("hook_mlp_out"))
        for layer in range(n_layers):
            writes[layer].append(cache[MLP_OUT(layer)].float().flatten(0, 1))
    return [torch.cat(parts) for parts in writes]


def _uncoded(layers: list[int]) -> list[tuple[str, Any]]:
    """Hooks that hand each layer's FFN write past its bottleneck: hook_mlp_out := bottleneck.hook_in."""
    hooks = []
    for layer in layers:
        kept: dict[str, Tensor] = {}
        hooks.append((CODED_IN(layer), lambda value, hook, kept=kept: kept.__setitem__("write", value)))
        hooks.append((MLP_OUT(layer), lambda value, hook, kept=kept: kept["write"].to(value.dtype)))
    return hooks


def _spliced(saes: list, layers: list[int]) -> list[tuple[str, Any]]:
    """Hooks that replace each layer's FFN write by its autoencoder's reconstruction."""
    return [(MLP_OUT(layer), lambda value, hook, sae=saes[layer]: sae(value)) for layer in layers]


@torch.no_grad()
def _losses(model, windows: Tensor, batch_size: int, device: torch.device, runs: dict[str, list], what: str) -> dict:
    """Mean next-token loss (nats/token) of each run's hooks over the windows ([] = the plain model)."""
    totals, count = dict.fromkeys(runs, 0.0), 0
    for batch in _batches(windows, batch_size, f"{what} losses"):
        batch = batch.to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:].reshape(-1)
        for key, hooks in runs.items():
            with _autocast(device):
                logits = model.run_with_hooks(inputs, fwd_hooks=hooks) if hooks else model(inputs)
            totals[key] += F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="sum").item()
        count += targets.numel()
    return {key: total / count for key, total in totals.items()}


@torch.no_grad()
def _code_figures(model, windows: Tensor, batch_size: int, device: torch.device, code_of, written: str, what: str) -> list[dict]:
    """Per layer: reconstruction and usage of the code `code_of(layer, cache)` -> (indices, fired, x, x_hat)."""
    n_layers = model.config.n_layers
    stats = [dict(error=0.0, norm=0.0, counts=None, tokens=0) for _ in range(n_layers)]
    for batch in _batches(windows, batch_size, what):
        with _autocast(device):
            _, cache = model.run_with_cache(batch[:, :-1].to(device), names_filter=lambda name: name.endswith(written))
        for layer in range(n_layers):
            indices_NxK, fired_NxK, x_NxD, x_hat_NxD, n_features = code_of(layer, cache)
            entry = stats[layer]
            entry["error"] += (x_NxD - x_hat_NxD).pow(2).sum().item()
            entry["norm"] += x_NxD.pow(2).sum().item()
            counts = torch.bincount(indices_NxK[fired_NxK].long(), minlength=n_features).cpu()
            entry["counts"] = counts if entry["counts"] is None else entry["counts"] + counts
            entry["tokens"] += x_NxD.shape[0]
    return [{"reconstruction": entry["error"] / max(entry["norm"], 1e-30), **usage_figures(entry["counts"], entry["tokens"])}
            for entry in stats]


def measure_sae(gelu, saes: list, windows: Tensor, batch_size: int, device: torch.device) -> tuple[list[dict], dict]:
    """(per-layer figures of the autoencoders on the GELU model's writes, the GELU model's losses)."""
    def code_of(layer, cache):
        x = cache[MLP_OUT(layer)].float().flatten(0, 1)
        indices, values = saes[layer].encode(x)
        return indices, values > 0, x, saes[layer].decode(indices, values), saes[layer].n_latents

    layers = _code_figures(gelu, windows, batch_size, device, code_of, "hook_mlp_out", "autoencoders")
    n_layers = gelu.config.n_layers
    runs = {"loss": [], "loss_spliced": _spliced(saes, list(range(n_layers))),
            **{f"layer_{layer}": _spliced(saes, [layer]) for layer in range(n_layers)}}
    losses = _losses(gelu, windows, batch_size, device, runs, "GELU + autoencoders")
    for layer, row in enumerate(layers):
        row["loss_added"] = losses.pop(f"layer_{layer}") - losses["loss"]
    losses["loss_added"] = losses["loss_spliced"] - losses["loss"]
    return layers, losses


def measure_bottleneck(parity, windows: Tensor, batch_size: int, device: torch.device) -> tuple[list[dict], dict]:
    """(per-layer figures of the parity model's bottlenecks, the parity model's losses coded and uncoded)."""
    def code_of(layer, cache):
        code = parity.blocks[layer].ffn_code_layer.sparse_code(cache).flatten()
        x = cache[CODED_IN(layer)].float().flatten(0, 1)
        x_hat = cache[f"blocks.{layer}.bottleneck.hook_recon"].float().flatten(0, 1)
        return code.indices, torch.ones_like(code.indices, dtype=torch.bool), x, x_hat, code.size

    layers = _code_figures(parity, windows, batch_size, device, code_of, ("hook_in", "hook_recon", "hook_code_indices",
                                                                          "hook_code_values"), "bottlenecks")
    n_layers = parity.config.n_layers
    runs = {"loss": [], "loss_uncoded": _uncoded(list(range(n_layers))),
            **{f"layer_{layer}": _uncoded([layer]) for layer in range(n_layers)}}
    losses = _losses(parity, windows, batch_size, device, runs, "parity, coded and uncoded")
    for layer, row in enumerate(layers):
        row["loss_added"] = losses["loss"] - losses.pop(f"layer_{layer}")
    losses["loss_added"] = losses["loss"] - losses["loss_uncoded"]
    return layers, losses


@torch.no_grad()
def probe_features(model, tokens, batch_size: int, device: torch.device, code_of,
                   written: tuple[str, ...]) -> list[tuple[Any, np.ndarray]]:
    """Per layer (code as a CSR matrix [N, M], raw write [N, D]) of every labelled token, in the labels' order;
    `code_of(layer, cache)` -> ((indices, values, m) of the batch's tokens, raw write [B*T, D]) from a cache
    of the hooks whose names end in `written`."""
    from scipy.sparse import vstack

    n_layers = model.config.n_layers
    codes: list[list] = [[] for _ in range(n_layers)]
    raws: list[list] = [[] for _ in range(n_layers)]
    for start in range(0, tokens.windows_SxT.shape[0], batch_size):
        windows = tokens.windows_SxT[start : start + batch_size]
        valid = tokens.valid_SxT[start : start + batch_size].flatten()
        with _autocast(device):
            _, cache = model.run_with_cache(windows.to(device), names_filter=lambda name: name.endswith(written))
        for layer in range(n_layers):
            (indices, values, size), raw = code_of(layer, cache)
            valid_on = valid.to(indices.device)
            codes[layer].append(code_matrix(indices[valid_on], values[valid_on], size))
            raws[layer].append(raw[valid_on].float().cpu().numpy())
    return [(vstack(codes[layer]).tocsr(), np.concatenate(raws[layer])) for layer in range(n_layers)]


def probe_layers(gelu, saes: list, parity, tokens, split: ProbeSplit, batch_size: int, device: torch.device,
                 max_iter: int) -> tuple[list[dict], list[dict]]:
    """Per layer {probe, raw_probe} accuracies for the autoencoders (on the GELU model) and the bottleneck."""
    def sae_code(layer, cache):
        raw = cache[MLP_OUT(layer)].float().flatten(0, 1)
        indices, values = saes[layer].encode(raw)
        return (indices, values, saes[layer].n_latents), raw

    def parity_code(layer, cache):
        code = parity.blocks[layer].ffn_code_layer.sparse_code(cache).flatten()
        return (code.indices, code.values, code.size), cache[CODED_IN(layer)].float().flatten(0, 1)

    results = []
    for model, code_of, written in ((gelu, sae_code, ("hook_mlp_out",)),
                                    (parity, parity_code, ("hook_in", "hook_code_indices", "hook_code_values"))):
        features = probe_features(model, tokens, batch_size, device, code_of, written)
        results.append([{"probe": probe_accuracy(code, tokens.labels_N, split, max_iter),
                         "raw_probe": probe_accuracy(raw, tokens.labels_N, split, max_iter)} for code, raw in features])
    return results[0], results[1]


def compare(parity, gelu, saes: list, *, parity_dir: str, gelu_dir: str, sae_dir: str | Path, natural: Path,
            n_tokens: int, seq_len: int, batch_size: int, device: torch.device, probe_stories: int, probe_seed: int = 0,
            test_share: float = 0.2, max_iter: int = 1000, sae_records: list[dict] | None = None) -> dict:
    """The comparison (see the module docstring) of loaded models and autoencoders (on `device`)."""
    from circuitlab.errors import UserError

    if gelu.config.n_layers != parity.config.n_layers or len(saes) != gelu.config.n_layers:
        raise UserError(f"the parity model has {parity.config.n_layers} layers, the GELU model {gelu.config.n_layers} "
                        f"and there are {len(saes)} autoencoders; the comparison needs one per layer of both")
    windows = natural_windows(parity, natural, n_tokens, seq_len)
    sae_layers, gelu_losses = measure_sae(gelu, saes, windows, batch_size, device)
    parity_layers, parity_losses = measure_bottleneck(parity, windows, batch_size, device)
    tokens = labelled_tokens(parity.tokenizer, probe_stories, parity.config.n_ctx)
    split = ProbeSplit.of(tokens.n_tokens, probe_seed, test_share)
    sae_probes, parity_probes = probe_layers(gelu, saes, parity, tokens, split, batch_size, device, max_iter)
    layers = [{"layer": layer, "sae": {**sae_layers[layer], **sae_probes[layer]},
               "parity": {**parity_layers[layer], **parity_probes[layer]}} for layer in range(len(saes))]
    return {
        "kind": "sae_comparison",
        "tokens": int(windows.shape[0] * (windows.shape[1] - 1)),
        "seq_len": int(windows.shape[1] - 1),
        "natural": _shown(natural),
        "parity": {"model": parity_dir, "design": parity.config.bottleneck.model_dump(mode="json"), **parity_losses},
        "gelu": {"model": gelu_dir, **gelu_losses},
        "sae": {"folder": _shown(Path(sae_dir)), "config": saes[0].config.model_dump(),
                "training": [record.get("training") for record in sae_records or [{} for _ in saes]]},
        "probe": {"stories": probe_stories, "seed": probe_seed, "test_share": test_share, "max_iter": max_iter,
                  "train_tokens": int(split.train.size), "test_tokens": int(split.test.size),
                  "classes": sorted(set(tokens.labels_N.astype(str))),
                  "majority": majority_accuracy(tokens.labels_N, split)},
        "layers": layers,
    }
