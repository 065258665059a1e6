"""Seconds per training step of the top-k sparse autoencoder at the parity comparison's full size (m 2^16, k 16,
d 256, 4096 writes a step), through circuitlab.training.sae_fit.fit_dictionary on random writes: what the token
budget of scripts/gpu_parity_sae.sh is planned from (steps x seconds a step x 4 layers).

    python benchmarks/sae_step_time.py --device cuda --out benchmarks/results/sae_step_time_h200.json
    python benchmarks/sae_step_time.py --device cpu --n-latents 1024 --k 8 --d-model 64 --batch-size 256   (tiny)

Times `--steps` steps after `--warmup-steps` untimed ones (CUDA synchronised around the timed part), TF32 on
for CUDA as `circuitlab report sae` sets it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch

    from circuitlab.analysis.sae import SAEConfig, TopKSAE
    from circuitlab.training.sae_fit import fit_dictionary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--n-latents", type=int, default=2**16)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=650_000, help="activation rows (the natural training split's size)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    writes = torch.randn(args.rows, args.d_model, generator=torch.Generator().manual_seed(0)).to(device)
    config = SAEConfig(d_model=args.d_model, n_latents=args.n_latents, k=args.k, k_aux=args.d_model // 2,
                       dead_after=2**20)

    def run(steps: int) -> float:
        sae = TopKSAE(config).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fit_dictionary(sae, writes, steps=steps, batch_size=args.batch_size, lr=5e-4, warmup=10, progress=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    run(args.warmup_steps)
    short, long = run(args.warmup_steps), run(args.warmup_steps + args.steps)
    per_step = (long - short) / args.steps  # the difference leaves out the start (init, optimizer) of a run
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "n_latents": args.n_latents, "k": args.k, "d_model": args.d_model, "batch_size": args.batch_size,
              "rows": args.rows, "timed_steps": args.steps, "seconds_per_step": per_step,
              "seconds_start_of_a_run": short - args.warmup_steps * per_step,
              "torch": torch.__version__}
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
