"""Measuring a parity model's bottleneck on held-out natural text: the figures of the parity report
(`circuitlab report parity`; circuitlab.analysis.parity_report reads, judges and tabulates them).

On windows of the natural stories' held-out split (stories never trained on), per layer:
- reconstruction: ||x - x_hat||^2 / ||x||^2 of the FFN write x (sums over tokens, as the training term), with
  the configured encoder and, on the sampled tokens, with the exhaustive one;
- agreement: share of the fast encoder's top-k (first round, the configured beam) that is in the exhaustive
  top-k, and the share of tokens whose result is certified exact; the same at a few other beams;
- write / residual: mean over tokens of ||hook_mlp_out|| / ||hook_resid_mid|| (the stream the write joins);
- usage (circuitlab.analysis.code_usage): distinct features used, effective features, the share of tokens
  using the most used feature, features used by over 10% of tokens, dead share, the firing-frequency
  histogram, and the share of all uses that go to the 100 most used features; the participation ratio of
  the FFN writes;
- coherence of the dictionary.
For the model: held-out loss, and the loss with every FFN write (hook_mlp_out) zeroed or replaced by its
layer's mean write (mean ablation), all layers at once and one at a time; for the GELU model the same.
Per window the report also keeps the summed losses of the whole-model runs (`window_losses`) and, per layer, the
summed squared error and squared norm of the write (`window_error`, `window_norm`), so readers can draw
bootstrap intervals over windows (circuitlab.claims.seed003).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from circuitlab.analysis.code_usage import WriteMoments, usage_figures
from circuitlab.analysis.parity_report import TARGETS, judged, layer_ablation_table, targets

TOP_FEATURES = 100
EXHAUSTIVE_TOKENS = 4096  # tokens per layer scored exhaustively (the reference is m scores per token)


def natural_windows(model, folder: Path, n_tokens: int | None, seq_len: int, split: str = "held_out") -> torch.Tensor:
    """[windows, seq_len + 1] token ids from a split of the natural stories (inputs and next tokens): enough
    windows for `n_tokens` predictions, or all of them for None."""
    from circuitlab.analysis.legibility import held_out_windows
    from circuitlab.data.natural import load_natural_stories

    texts = [story.text for story in load_natural_stories(folder).split(split)]
    window = min(seq_len, model.cfg.n_ctx - 1) + 1
    windows = held_out_windows(model, texts, seq_len=window) if window <= model.cfg.n_ctx else None
    if windows is None:  # seq_len + 1 > n_ctx: cut one token shorter
        windows = held_out_windows(model, texts, seq_len=model.cfg.n_ctx)
    if n_tokens is None:
        return windows
    n_windows = max(1, math.ceil(n_tokens / (windows.shape[1] - 1)))
    return windows[:n_windows]


def _batches(windows: torch.Tensor, batch_size: int, what: str):
    from tqdm.auto import tqdm

    for start in tqdm(range(0, windows.shape[0], batch_size), desc=what, unit="batch", file=sys.stderr):
        yield windows[start : start + batch_size]


def _autocast(device: torch.device):
    from circuitlab.distributed import autocast_for

    return autocast_for(device)


@torch.no_grad()
def losses(model, windows: torch.Tensor, batch_size: int, device: torch.device, what: str,
           means: list[torch.Tensor] | None = None) -> dict:
    """Held-out loss; with every block's FFN write (hook_mlp_out) zeroed; and, given each layer's mean write
    (`means`), with every write replaced by its layer's mean (mean ablation), all layers at once and one
    layer at a time."""
    n_layers = model.config.n_layers
    name = "blocks.{}.hook_mlp_out".format

    def zero(value, hook):
        return torch.zeros_like(value)

    def mean_of(layer):
        return lambda value, hook: means[layer].to(value.device, value.dtype).expand_as(value)

    runs = {"loss": [], "loss_writes_zeroed": [(name(layer), zero) for layer in range(n_layers)]}
    if means is not None:
        runs["loss_writes_mean_ablated"] = [(name(layer), mean_of(layer)) for layer in range(n_layers)]
        for layer in range(n_layers):
            runs[f"zeroed_layer_{layer}"] = [(name(layer), zero)]
            runs[f"mean_ablated_layer_{layer}"] = [(name(layer), mean_of(layer))]
    totals = dict.fromkeys(runs, 0.0)
    whole = [key for key in runs if not key.startswith(("zeroed_layer", "mean_ablated_layer"))]
    per_window: dict[str, list[float]] = {key: [] for key in whole}
    count = 0
    for batch in _batches(windows, batch_size, f"{what} losses"):
        batch = batch.to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:].reshape(-1)
        for key, hooks in runs.items():
            with _autocast(device):
                logits = model.run_with_hooks(inputs, fwd_hooks=hooks) if hooks else model(inputs)
            token_losses = F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="none")
            window_sums = token_losses.view(inputs.shape[0], -1).double().sum(dim=1)
            totals[key] += window_sums.sum().item()
            if key in per_window:
                per_window[key] += window_sums.tolist()
        count += targets.numel()
    result = {key: totals[key] / count for key in whole}
    result["window_losses"] = per_window  # summed nats of each window (windows.shape[1] - 1 tokens each)
    if means is not None:
        result["zeroed_by_layer"] = [totals[f"zeroed_layer_{layer}"] / count - result["loss"] for layer in range(n_layers)]
        result["mean_ablated_by_layer"] = [totals[f"mean_ablated_layer_{layer}"] / count - result["loss"]
                                           for layer in range(n_layers)]
    return result


def _overlap(found: torch.Tensor, reference: torch.Tensor) -> float:
    return (found[:, :, None] == reference[:, None, :]).any(-1).float().mean().item()


@torch.no_grad()
def layer_stats(model, windows: torch.Tensor, batch_size: int, device: torch.device, beams: list[int]) -> list[dict]:
    """Per-layer figures of the bottleneck (and write norms) over the windows."""
    from circuitlab.architectures.bottleneck.parity_code import relative_error

    n_layers = model.config.n_layers
    d = model.config.d_model
    stats = [dict(error_sum=0.0, norm_sum=0.0, write_ratio_sum=0.0, tokens=0, sampled=[], usage=None,
                  writes=WriteMoments(d), coded=WriteMoments(d), window_error=[], window_norm=[], window_sum=[])
             for _ in range(n_layers)]
    wanted = ("hook_in", "hook_recon", "hook_code_indices", "hook_resid_mid", "hook_mlp_out")
    for batch in _batches(windows, batch_size, "bottleneck"):
        with _autocast(device):
            _, cache = model.run_with_cache(batch[:, :-1].to(device), names_filter=lambda name: name.endswith(wanted))
        for layer in range(n_layers):
            entry, prefix = stats[layer], f"blocks.{layer}."
            write = cache[prefix + "hook_mlp_out"].float()
            stream = cache[prefix + "hook_resid_mid"].float()
            entry["write_ratio_sum"] += (write.norm(dim=-1) / stream.norm(dim=-1).clamp_min(1e-12)).sum().item()
            entry["tokens"] += write.shape[0] * write.shape[1]
            entry["writes"].add(write)  # what the block writes (its mean is the mean-ablation value)
            if model.blocks[layer].bottleneck is None:
                continue
            x = cache[prefix + "bottleneck.hook_in"].float()
            entry["coded"].add(x)  # the FFN write the bottleneck codes
            x_hat = cache[prefix + "bottleneck.hook_recon"].float()
            window_error = (x - x_hat).pow(2).sum(dim=(1, 2)).tolist()  # per window, for intervals over windows
            window_norm = x.pow(2).sum(dim=(1, 2)).tolist()
            entry["window_error"] += window_error
            entry["window_norm"] += window_norm
            entry["window_sum"].append(x.double().sum(dim=1).cpu())  # [windows, d]: for each window's spread below
            entry["error_sum"] += sum(window_error)
            entry["norm_sum"] += sum(window_norm)
            indices = cache[prefix + "bottleneck.hook_code_indices"].long().flatten()
            counts = torch.bincount(indices, minlength=model.blocks[layer].bottleneck.n_features).cpu()
            entry["usage"] = counts if entry["usage"] is None else entry["usage"] + counts
            taken = sum(sample.shape[0] for sample in entry["sampled"])
            if taken < EXHAUSTIVE_TOKENS:
                entry["sampled"].append(x.flatten(0, 1)[: EXHAUSTIVE_TOKENS - taken])
    results = []
    for layer in range(n_layers):
        entry = stats[layer]
        row = {"layer": layer, "write_over_residual": entry["write_ratio_sum"] / max(entry["tokens"], 1),
               "write_mean": entry["writes"].mean.tolist(), "participation_ratio": entry["writes"].participation_ratio(),
               "variance_share": entry["writes"].spread() / max(entry["writes"].energy(), 1e-30)}
        bottleneck = model.blocks[layer].bottleneck
        if bottleneck is not None:
            row["reconstruction"] = entry["error_sum"] / max(entry["norm_sum"], 1e-30)
            # the same error over the writes' variation around their mean, and that variation's share of the
            # writes: a write that is nearly constant reconstructs well on the first whatever the code keeps
            row["centred_reconstruction"] = entry["error_sum"] / max(entry["coded"].spread(), 1e-30)
            row["variance_share"] = entry["coded"].spread() / max(entry["coded"].energy(), 1e-30)  # before coding
            # per window, sum ||x - mean||^2 about the mean of all tokens (so the windows' spreads add up to the
            # layer's): sum ||x||^2 - 2 mean . sum x + n ||mean||^2
            mean, sums = entry["coded"].mean, torch.cat(entry["window_sum"])
            tokens_per_window = windows.shape[1] - 1
            norms = torch.tensor(entry["window_norm"], dtype=torch.float64)
            row["window_spread"] = (norms - 2 * sums @ mean + tokens_per_window * mean.pow(2).sum()).tolist()
            row["window_error"], row["window_norm"] = entry["window_error"], entry["window_norm"]
            row["participation_ratio"] = entry["coded"].participation_ratio()  # of the writes before coding
            usage = entry["usage"]
            row.update(usage_figures(usage, entry["tokens"]))
            row["top100_share"] = float(usage.topk(min(TOP_FEATURES, usage.numel())).values.sum() / usage.sum())
            x = torch.cat(entry["sampled"])
            row["sampled_tokens"] = int(x.shape[0])
            row.update(encoder_agreement(bottleneck, x, beams, relative_error))
            row["coherence"] = bottleneck.coherence()
        results.append(row)
    return results


def encoder_agreement(bottleneck, x_NxD: torch.Tensor, beams: list[int], relative_error) -> dict:
    """Fast encoder (first round) against the exhaustive top-k on the sampled FFN writes, at the configured
    beam and at `beams`; the final support and reconstruction with the exhaustive encoder."""
    out: dict = {}
    x = x_NxD[None]
    if not hasattr(bottleneck, "beam"):  # the linear design's encoder is exhaustive: its support is the top k
        scores = bottleneck.scores(x_NxD.float()).abs()
        exhaustive = scores.topk(bottleneck.k, dim=-1).indices
        first = bottleneck.top_scores(x_NxD.float(), bottleneck.k)[0]
        out.update(agreement=_overlap(first, exhaustive), certified=None, by_beam=None)
        support = bottleneck.encode_indices(x)[0]
        x_hat = bottleneck.decode(support[None], bottleneck.coefficients(x, support[None]))
        out["reconstruction_sampled"] = out["reconstruction_exhaustive_sampled"] = relative_error(x, x_hat).item()
        out["support_agreement"] = 1.0
        return out
    grid = bottleneck._grid(x_NxD.float())
    exhaustive = bottleneck.top_scores(grid, bottleneck.k, beam=None)[0]
    by_beam = {}
    for beam in sorted({bottleneck.beam, *beams}):
        if beam > 2**bottleneck.col_bits:
            continue
        fast, _, certified = bottleneck.top_scores(grid, bottleneck.k, beam=beam)
        by_beam[beam] = {"agreement": _overlap(fast, exhaustive), "certified": certified.float().mean().item()}
    out.update(by_beam[bottleneck.beam])
    out["by_beam"] = by_beam
    support_fast = bottleneck.encode_indices(x)[0]
    support_exhaustive = bottleneck.encode_indices(x, exhaustive=True)[0]
    out["support_agreement"] = _overlap(support_fast, support_exhaustive)
    x_hat = bottleneck.decode(support_exhaustive[None], bottleneck.coefficients(x, support_exhaustive[None]))
    out["reconstruction_exhaustive_sampled"] = relative_error(x, x_hat).item()
    x_hat = bottleneck.decode(support_fast[None], bottleneck.coefficients(x, support_fast[None]))
    out["reconstruction_sampled"] = relative_error(x, x_hat).item()
    return out


def _shown(path: Path) -> str:
    """A path as the report records it: relative to the source tree when inside it (the default folder)."""
    from circuitlab.resources import SOURCE_TREE

    try:
        return str(Path(path).resolve().relative_to(SOURCE_TREE))
    except ValueError:
        return str(path)


def report(model_dir: str, gelu_dir: str | None, n_tokens: int, natural: Path | None, seq_len: int, batch_size: int,
           device: str, beams: list[int], overrides: dict | None = None) -> dict:
    """The figures above. `overrides` ({"beam": ..., "pursuit_rounds": ..., "k": ...}) runs the trained model's
    encoder with other settings than it was trained with; the result records them."""
    from circuitlab.architectures.transformer import load_model
    from circuitlab.errors import UserError

    torch_device = torch.device(device)
    model = load_model(model_dir, device=torch_device).eval()
    if model.config.bottleneck is None:
        raise UserError(f"{model_dir} has no parity bottleneck (config.bottleneck is null)")
    overrides = dict(overrides or {})
    unknown = set(overrides) - {"beam", "pursuit_rounds", "k"}
    if unknown or any(not isinstance(value, int) or value < 1 for value in overrides.values()):
        raise UserError(f"encoder overrides are a beam, pursuit rounds and k, positive integers; got {overrides}")
    for block in model.blocks:
        bottleneck = block.bottleneck
        for key, value in overrides.items():
            setattr(bottleneck, key, value)
    if natural is None:
        from circuitlab.resources import natural_root

        natural = natural_root()
    windows = natural_windows(model, natural, n_tokens, seq_len)
    result = {
        "model": str(model_dir),
        "design": {**model.config.bottleneck.model_dump(mode="json"), **overrides},
        "encoder_overrides": overrides,
        "tokens": int(windows.shape[0] * (windows.shape[1] - 1)),
        "natural": _shown(natural),
        "layers": layer_stats(model, windows, batch_size, torch_device, beams),
    }
    means = [torch.tensor(row.pop("write_mean")) for row in result["layers"]]
    result["parity"] = losses(model, windows, batch_size, torch_device, "parity", means)
    if gelu_dir is not None:
        gelu = load_model(gelu_dir, device=torch_device).eval()
        if gelu.tokenizer is not None and model.tokenizer is not None and gelu.tokenizer.hash() != model.tokenizer.hash():
            raise UserError(f"{gelu_dir} and {model_dir} use different tokenizers; their losses would not compare")
        gelu_layers = layer_stats(gelu, windows, batch_size, torch_device, beams)
        gelu_means = [torch.tensor(row.pop("write_mean")) for row in gelu_layers]
        result["gelu"] = {"model": str(gelu_dir), **losses(gelu, windows, batch_size, torch_device, "gelu", gelu_means)}
        result["gelu"]["write_over_residual"] = [row["write_over_residual"] for row in gelu_layers]
        result["gelu"]["participation_ratio"] = [row["participation_ratio"] for row in gelu_layers]
        result["gelu"]["variance_share"] = [row["variance_share"] for row in gelu_layers]
        parity_cost = result["parity"]["loss_writes_zeroed"] - result["parity"]["loss"]
        gelu_cost = result["gelu"]["loss_writes_zeroed"] - result["gelu"]["loss"]
        result["ablation_share"] = parity_cost / gelu_cost if gelu_cost != 0 else None
        parity_mean = result["parity"]["loss_writes_mean_ablated"] - result["parity"]["loss"]
        gelu_mean = result["gelu"]["loss_writes_mean_ablated"] - result["gelu"]["loss"]
        result["mean_ablation_share"] = parity_mean / gelu_mean if gelu_mean != 0 else None
        result["loss_ratio"] = result["parity"]["loss"] / result["gelu"]["loss"]
        result["perplexity_ratio"] = math.exp(result["parity"]["loss"] - result["gelu"]["loss"])
    result["targets"] = targets(result)
    return result


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(result: dict) -> str:
    """The report as the command prints it (and results/parity/parity_report.md holds): markdown tables per
    layer, the losses, and every target judged on the report's numbers (a report written before a figure was
    measured shows "-" and "not measured" there)."""
    gelu = result.get("gelu") or {}
    gelu_ratios, gelu_participation = gelu.get("write_over_residual"), gelu.get("participation_ratio")
    lines = [
        f"parity report: {result['model']} on {result['tokens']:,} held-out natural tokens"
        + (f" (encoder run with {result['encoder_overrides']}, not as trained)" if result.get("encoder_overrides") else ""),
        "| layer | recon | recon (exhaustive) | agreement | certified | write/resid | GELU write/resid | coherence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["layers"]:
        lines.append(
            f"| {row['layer']} | {row['reconstruction']:.3f} | {_number(row.get('reconstruction_exhaustive_sampled'), '.3f')} | "
            f"{row['agreement']:.3f} | {_number(row.get('certified'), '.3f')} | {row['write_over_residual']:.3f} | "
            f"{_number(gelu_ratios and gelu_ratios[row['layer']], '.3f')} | {_number(row.get('coherence'), '.3f')} |")
    if any("centred_reconstruction" in row for row in result["layers"]):
        gelu_shares = gelu.get("variance_share")
        lines += ["", "| layer | write variation share | GELU write variation share | recon of the variation |",
                  "|---|---|---|---|"]
        lines += [f"| {row['layer']} | {_number(row.get('variance_share'), '.4f')} | "
                  f"{_number(gelu_shares and gelu_shares[row['layer']], '.4f')} | "
                  f"{_number(row.get('centred_reconstruction'), '.3f')} |" for row in result["layers"]]
        lines.append("(variation share: sum ||x - mean||^2 / sum ||x||^2 of the FFN writes; recon of the variation: the "
                     "reconstruction error over sum ||x - mean||^2 instead of sum ||x||^2)")
    lines += ["",
              "| layer | features used | effective features | top feature share | features > 10% | dead share | "
              "top-100 share | participation ratio | GELU participation ratio |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in result["layers"]:
        lines.append(
            f"| {row['layer']} | {row['distinct_features']:,} | {_number(row.get('effective_features'), ',.1f')} | "
            f"{_number(row.get('top_feature_share'), '.3f')} | {_number(row.get('over_10_percent'), ',')} | "
            f"{_number(row.get('dead_share'), '.3f')} | {row['top100_share']:.3f} | "
            f"{_number(row.get('participation_ratio'), '.1f')} | "
            f"{_number(gelu_participation and gelu_participation[row['layer']], '.1f')} |")
    ablations = layer_ablation_table(result)
    if ablations:
        lines += ["", "| layer | parity zeroed | parity mean-ablated | GELU zeroed | GELU mean-ablated | zeroed share | "
                      "mean-ablated share |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {row['layer']} | " + " | ".join(_number(row[name], ".4f" if "share" not in name else ".3f") for name in (
            "parity zeroed", "parity mean-ablated", "GELU zeroed", "GELU mean-ablated", "zeroed share",
            "mean-ablated share")) + " |" for row in ablations]
        lines.append("(loss cost in nats/token of ablating the FFN write of one layer, or of all layers at once)")
    lines.append("")
    for name, losses, what in (("parity", result["parity"], "bottleneck"), ("GELU", gelu, "FFN")):
        if losses:
            lines.append(f"{name} loss {losses['loss']:.4f} (ppl {math.exp(losses['loss']):.3f}); every {what} write "
                         f"zeroed {losses['loss_writes_zeroed']:.4f}, mean-ablated "
                         f"{_number(losses.get('loss_writes_mean_ablated'), '.4f')}")
    judged_targets = targets(result)
    for key, target in TARGETS.items():
        measured = judged_targets.get(key, {}).get("measured")
        lines.append(f"target {key}: {_number(measured, '.3f')} ({target.text}) {judged(key, measured)}")
    by_beam = result["layers"][0].get("by_beam")
    if by_beam:
        lines.append("layer 0 agreement / certified by beam: " + ", ".join(
            f"{beam}: {values['agreement']:.3f} / {values['certified']:.3f}" for beam, values in by_beam.items()))
    return "\n".join(lines)
