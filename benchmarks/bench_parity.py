"""Where the parity bottleneck's time goes (issue 13/15: parity training tokens/s against GELU).

Times, at the training batch of bench_gpu.py (256 x 256 tokens, d_model 256, m = 2^16, k 32, the shipped beam
and pursuit rounds), each stage of one bottleneck layer against one GELU MLP (d_ffw 1024) forward+backward,
and prints the GPU kernel breakdown of the whole bottleneck, so the training ratio's miss is explained by
measured stage times. `--smoke` runs it tiny on the CPU.

Each stage is timed on two paths in the same run: "before", the layer as it ran until 2026-12-01, 15:30 UTC (on
CUDA the fused scores-and-selection kernel, kernels/parity_select_triton.py, then PyTorch gathers of the
features' sign patterns, batched matmuls and LU without pivoting for the least squares and the decode); and
"now", what the layer runs by default (on CUDA the least squares and decode fused too, one kernel per token
that builds the patterns on chip and solves in registers, kernels/parity_solve_triton.py). With the shipped
parity-stories weights present it also encodes held-out natural text on both paths and reports how often the
supports agree (with each other, and with the same encoder run in float64), the reconstruction error per layer
and the held-out loss of each.

    python benchmarks/bench_parity.py [--tokens 65536] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

import circuitlab.kernels as kernels

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_kernels as kb  # noqa: E402

from circuitlab.architectures.feedforward.mlp import MLP  # noqa: E402
from circuitlab.architectures.bottleneck.parity import ParityBottleneck  # noqa: E402
from circuitlab.architectures.bottleneck.parity_code import relative_error  # noqa: E402
from circuitlab.config import ModelConfig  # noqa: E402


@contextlib.contextmanager
def path(name: str):
    """"before": the PyTorch reference path (circuitlab.kernels.use_backend("reference")); "now": the fast paths
    the layer picks by itself."""
    with kernels.use_backend("reference" if name == "before" else "auto"):
        yield


def shipped_model_check(device: str, n_windows: int) -> dict | None:
    """Supports and held-out loss of the shipped parity-stories on both paths (None without its weights)."""
    import torch.nn.functional as F

    from circuitlab.architectures.transformer import load_model
    from circuitlab.data.natural import default_folder

    try:
        model = load_model("parity-stories").to(device).eval()
    except Exception as error:  # noqa: BLE001 - the weights are optional here
        print(f"  shipped-model check skipped: {type(error).__name__}: {error}")
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from parity_report import natural_windows

    windows = natural_windows(model, default_folder(), n_windows * 256, 256).to(device)
    layers = range(model.cfg.n_layers)
    names = [f"blocks.{i}.bottleneck.hook_{hook}" for i in layers for hook in ("code_indices", "in", "recon")]
    out = {}
    hook = "blocks.{}.bottleneck.hook_{}".format
    with torch.inference_mode():
        for name in ("before", "now"):
            with path(name):
                logits, cache = model.run_with_cache(windows[:, :-1], names_filter=lambda hook: hook in names)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten())
            out[name] = dict(
                loss=float(loss), supports=[cache[hook(i, "code_indices")].sort(-1).values for i in layers],
                errors=[float(relative_error(cache[hook(i, "in")], cache[hook(i, "recon")])) for i in layers],
            )
    # the same encoder in float64 (PyTorch selection and solves) on each layer's input of the "now" run
    with torch.inference_mode(), kernels.use_backend("reference"):
        exact = [model.blocks[i].bottleneck._pursue(model.blocks[i].bottleneck._grid(cache[hook(i, "in")].double()), False)
                 .sort(-1).values.reshape(out["now"]["supports"][i].shape) for i in layers]

    def agreement(supports: list[torch.Tensor], others: list[torch.Tensor]) -> list[float]:
        return [float((a == b).all(-1).float().mean()) for a, b in zip(supports, others)]

    agree = agreement(out["before"]["supports"], out["now"]["supports"])
    result = dict(tokens=int(windows[:, :-1].numel()), loss_before=out["before"]["loss"], loss_now=out["now"]["loss"],
                  identical_supports_per_layer=agree, reconstruction_error_before=out["before"]["errors"],
                  reconstruction_error_now=out["now"]["errors"],
                  same_support_as_float64_before=agreement(out["before"]["supports"], exact),
                  same_support_as_float64_now=agreement(out["now"]["supports"], exact))
    print(f"  shipped parity-stories on {result['tokens']:,} held-out natural tokens: loss {result['loss_before']:.5f} "
          f"before, {result['loss_now']:.5f} now; tokens whose support is identical per layer: "
          + ", ".join(f"{a:.4f}" for a in agree))
    print("  tokens whose support equals the float64 encoder's (on the now-path's layer inputs), before: "
          + ", ".join(f"{a:.4f}" for a in result["same_support_as_float64_before"]) + "; now: "
          + ", ".join(f"{a:.4f}" for a in result["same_support_as_float64_now"]))
    print("  relative reconstruction error per layer, before: " + ", ".join(f"{e:.5f}" for e in out["before"]["errors"])
          + "; now: " + ", ".join(f"{e:.5f}" for e in out["now"]["errors"]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256 * 256)
    parser.add_argument("--smoke", action="store_true", help="tiny, on the CPU")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    n = 512 if args.smoke else args.tokens
    config = ModelConfig.preset("parity-stories-product")
    bottleneck = ParityBottleneck(config).to(device)
    mlp = MLP(config).to(device)
    timer = kb.Timer(device, warmup_ms=25 if args.smoke else 100, rep_ms=50 if args.smoke else 300)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(1, n, config.d_model, device=device, generator=gen, requires_grad=True)
    upstream = torch.randn(1, n, config.d_model, device=device, generator=gen)
    X = bottleneck._grid(x.detach()).float()
    support = bottleneck.encode_indices(x.detach())
    support_N = support.reshape(n, -1)
    union_N = bottleneck.top_scores(X, 2 * bottleneck.k, bottleneck.beam)[0]  # 2k distinct features, as the pursuit's

    def time_ms(fn) -> float:
        return timer(fn)

    def mlp_fwd_bwd():
        out, _ = mlp(x)
        return torch.autograd.grad(out, [x, *mlp.parameters()], upstream)

    def coefficients_fwd_bwd():
        values = bottleneck.coefficients(x, support)
        return torch.autograd.grad(values, x, torch.ones_like(values))

    def decode_fwd():
        return bottleneck.decode(support, torch.ones(support.shape, device=device))

    def bottleneck_fwd_bwd():
        return torch.autograd.grad(bottleneck(x), x, upstream)

    stages = {
        "GELU MLP d_ffw 1024, fwd+bwd": mlp_fwd_bwd,
        "bottleneck: beam scores + top-k (one call of top_scores)": lambda: bottleneck.top_scores(X, bottleneck.k, bottleneck.beam),
        "bottleneck: encoder with its pursuit rounds (no grad)": lambda: bottleneck.encode_indices(x.detach()),
        "bottleneck: least-squares coefficients, fwd+bwd": coefficients_fwd_bwd,
        "bottleneck: one least-squares solve (no grad)": lambda: bottleneck._solve(X, support_N),
        "bottleneck: the pursuit's least-squares solve on 2k features (no grad)": lambda: bottleneck._solve(X, union_N),
        "bottleneck: Gram matrix of 2k features (no grad)": lambda: bottleneck.gram(union_N),
        "bottleneck: decode (no grad)": decode_fwd,
        "bottleneck: whole layer, fwd+bwd": bottleneck_fwd_bwd,
    }
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "tokens": n,
               "beam": bottleneck.beam, "pursuit_rounds": bottleneck.pursuit_rounds, "stages_ms": {}, "stages_ms_before": {}}
    print(f"parity bottleneck stages at {n:,} tokens on {results['device']} (beam {bottleneck.beam}, "
          f"pursuit rounds {bottleneck.pursuit_rounds}, k {bottleneck.k}, m 2^{config.bottleneck.n_bits})")
    print(f"  {'before ms':>10} {'now ms':>10} {'before/now':>10}  stage")
    for name, fn in stages.items():
        for which, key in (("before", "stages_ms_before"), ("now", "stages_ms")):
            with path(which), torch.no_grad() if "no grad" in name or "top_scores" in name else torch.enable_grad():
                results[key][name] = time_ms(fn)
        before, now = results["stages_ms_before"][name], results["stages_ms"][name]
        print(f"  {before:10.3f} {now:10.3f} {before / now:10.2f}  {name}")
    whole, dense = results["stages_ms"]["bottleneck: whole layer, fwd+bwd"], results["stages_ms"]["GELU MLP d_ffw 1024, fwd+bwd"]
    results["bottleneck_over_mlp"] = whole / dense
    results["bottleneck_over_mlp_before"] = results["stages_ms_before"]["bottleneck: whole layer, fwd+bwd"] / dense
    print(f"  one bottleneck layer fwd+bwd = {whole / dense:.1f}x one GELU MLP fwd+bwd "
          f"(before: {results['bottleneck_over_mlp_before']:.1f}x)")
    results["shipped_model"] = shipped_model_check(device, 4 if args.smoke else 64)
    results["breakdown"] = kb.kernel_breakdown("parity bottleneck fwd+bwd", bottleneck_fwd_bwd, device, top=12)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
