"""Which parity bottleneck uses its dictionary: the same model trained with each option side by side, measured
with the parity report's own code on the natural held-out stories.

Variants (all with the same dense GELU MLP under the bottleneck, the same data, steps and seed):
    product            the 16 x 16-style product grid (bottleneck/parity.py), no bias, no balance
    linear             seed 003's eq. 1 random code (bottleneck/parity_linear.py), no bias, no balance
    linear+bias        with the bias path (bottleneck/usage.py)
    linear+bias+bal    with the bias path and the usage-balancing term at --balance
    linear+bias+bal+centred   the same with the reconstruction term relative to the writes' variation
and, for the ablation share, the dense GELU model itself.

    python benchmarks/parity_usage_options.py --size tiny --steps 400 --out benchmarks/results/parity_usage_tiny.json
    python benchmarks/parity_usage_options.py --size stories --steps 3000 --device cuda ...   (on a GPU)

Prints one row per variant: held-out loss, worst-layer reconstruction, effective features, top feature share,
dead share, participation ratio of the writes, and the mean-ablation share against the GELU model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {
    # d 64, m 2^10, k 8: minutes on 2 CPU cores
    "tiny": dict(base="tiny-gelu", n_bits=10, k=8, grid=[8, 8], beam=8, seq_len=128, batch=16, n_stories=3000, vocab=2048),
    # the shipped story models' shape, m 2^16, k 16 (a GPU)
    "stories": dict(base="gelu-stories", n_bits=16, k=16, grid=[16, 16], beam=16, seq_len=256, batch=64, n_stories=60000,
                    vocab=8192),
}


def variants(size: dict, balance: float, recon: float = 1.0) -> dict[str, dict | None]:
    product = dict(design="product", n_bits=size["n_bits"], k=size["k"], grid=size["grid"], beam=size["beam"],
                   pursuit_rounds=1, lambda_recon=recon)
    linear = dict(design="linear", n_bits=size["n_bits"], k=size["k"], pursuit_rounds=1, lambda_recon=recon)
    return {
        "gelu": None,
        "product": product,
        "linear": dict(linear, bias=False),
        "linear+bias": dict(linear, bias=True),
        "linear+bias+bal": dict(linear, bias=True, lambda_balance=balance),
        "linear+bias+bal+centred": dict(linear, bias=True, lambda_balance=balance, recon_reference="centred"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--balance", type=float, default=1e-3, help="lambda of the usage-balancing variant")
    parser.add_argument("--recon", type=float, default=1.0, help="lambda of the reconstruction term of every variant")
    parser.add_argument("--tokens", type=int, default=16384, help="held-out natural tokens to measure on")
    parser.add_argument("--seed", type=int, default=0, help="training seed of every variant (initialisation, batches)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", default=None, help="folder for the runs (default: a temporary one)")
    parser.add_argument("--only", nargs="*", default=None, help="train only these variants")
    parser.add_argument("--out", default=None, help="write the results (.json)")
    args = parser.parse_args(argv)

    from circuitlab.analysis.parity_measure import layer_stats, losses, natural_windows
    from circuitlab.architectures.transformer import load_model
    from circuitlab.config import ModelConfig
    from circuitlab.resources import natural_root
    from circuitlab.training import DataSpec, TrainConfig, train

    import torch

    size = SIZES[args.size]
    runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="parity-usage-"))
    data = DataSpec(n_stories=size["n_stories"], natural_dir=str(natural_root()), vocab_size=size["vocab"])
    settings = TrainConfig(steps=args.steps, batch_size=size["batch"], seq_len=size["seq_len"], lr=3e-3 if args.size == "tiny" else 1e-3,
                           warmup=max(10, args.steps // 20), eval_every=max(1, args.steps // 4), ckpt_every=0,
                           grad_clip=2.0, compile=args.device != "cpu", seed=args.seed)
    device = torch.device(args.device)
    results: dict[str, dict] = {}
    chosen = variants(size, args.balance, args.recon)
    for name, bottleneck in chosen.items():
        if args.only and name not in args.only and name != "gelu":
            continue
        config = ModelConfig.preset(size["base"], bottleneck=bottleneck).replace(name=f"{size['base']}-{name}")
        started = time.perf_counter()
        if not (runs / name / "metrics.json").is_file():  # a finished run of an earlier call is measured again only
            train(runs / name, config, settings, data, data_dir=runs / "data", device=args.device, progress=False)
        seconds = json.loads((runs / name / "metrics.json").read_text())["train_seconds"]
        model = load_model(runs / name, device=device).eval()
        windows = natural_windows(model, natural_root(), args.tokens, size["seq_len"])
        layers = layer_stats(model, windows, 8, device, beams=[])
        means = [torch.tensor(row.pop("write_mean")) for row in layers]
        measured = losses(model, windows, 8, device, name, means)
        results[name] = {"train_seconds": seconds, "losses": measured, "layers": layers}
        print(f"{name}: trained in {seconds:.0f} s, held-out loss {measured['loss']:.4f}", flush=True)
    gelu = results["gelu"]["losses"]
    gelu_cost = gelu["loss_writes_mean_ablated"] - gelu["loss"]
    print(f"\n{'variant':<24} {'loss':>7} {'recon':>7} {'recon var.':>10} {'var. share':>10} {'eff. feat.':>10} "
          f"{'top share':>9} {'dead':>6} {'PR':>6} {'mean-abl. share':>15} {'train s':>8}")
    for name, entry in results.items():
        layers, measured = entry["layers"], entry["losses"]
        share = (measured["loss_writes_mean_ablated"] - measured["loss"]) / gelu_cost if gelu_cost else float("nan")
        entry["mean_ablation_share"] = share
        variation = min(row["variance_share"] for row in layers)
        if name == "gelu":
            print(f"{name:<24} {measured['loss']:>7.4f} {'':>7} {'':>10} {variation:>10.4f} {'':>10} {'':>9} {'':>6} "
                  f"{min(row['participation_ratio'] for row in layers):>6.1f} {1.0:>15.3f} {entry['train_seconds']:>8.0f}")
            continue
        print(f"{name:<24} {measured['loss']:>7.4f} {max(r['reconstruction'] for r in layers):>7.4f} "
              f"{max(r['centred_reconstruction'] for r in layers):>10.4f} {variation:>10.4f} "
              f"{min(r['effective_features'] for r in layers):>10.1f} {max(r['top_feature_share'] for r in layers):>9.3f} "
              f"{max(r['dead_share'] for r in layers):>6.3f} {min(r['participation_ratio'] for r in layers):>6.1f} "
              f"{share:>15.3f} {entry['train_seconds']:>8.0f}")
    print("(worst layer for recon, recon of the variation, variation share, effective features, top share, dead "
          "share and PR)")
    if args.out:
        Path(args.out).write_text(json.dumps({"size": args.size, "steps": args.steps, "balance": args.balance,
                                              "seed": args.seed, "device": args.device, "results": results},
                                             indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
