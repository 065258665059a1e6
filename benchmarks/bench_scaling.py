"""Scale-out on one host: training and circuit-collection throughput on 1 and N GPUs, in one run.

    python benchmarks/bench_scaling.py --tokenizer runs/shipped/tokenizer.json --out runs/scaling

Training (torchrun + DDP, `circuitlab train`): weak scaling, the same batch per GPU, so N GPUs train on N
times the tokens per step; throughput is tokens/s over steps after the warm-up (from train_log.jsonl).
Collection (torchrun, `python -m circuitlab.analysis.collect_ranks`): strong scaling, the same corpus split
across ranks; throughput is tokens collected per second of collection (ranks run concurrently, merge
included). Scaling efficiency = throughput(N) / (N * throughput(1)). Models are untrained presets with the
given tokenizer: throughput does not depend on the weights.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def torchrun(n_procs: int, module_args: list[str], env: dict[str, str], log: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n_procs}", "--standalone", "-m", *module_args]
    with open(log, "w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed; see {log}")


def training_throughput(log_path: Path, warmup_steps: int) -> float:
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "tokens_seen" in r and "elapsed" in r]
    start = next(r for r in rows if r["step"] == warmup_steps)
    end = rows[-1]
    return (end["tokens_seen"] - start["tokens_seen"]) / (end["elapsed"] - start["elapsed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", default="runs/scaling")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--preset", default="sgatlin-stories")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--batch-per-gpu", type=int, default=64)
    parser.add_argument("--stories", type=int, default=8000, help="held-out stories to collect")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    counts = sorted({1, args.gpus})
    results: dict[str, dict[int, float]] = {"training tokens/s": {}, "collection tokens/s": {}}
    for n in counts:
        run = out / f"train{n}"
        torchrun(n, ["circuitlab.cli", "train", "--preset", args.preset, "--steps", str(args.steps),
                     "--batch-size", str(args.batch_per_gpu * n), "--seq-len", "256", "--eval-every", "0",
                     "--ckpt-every", str(10 * args.steps), "--n-stories", "20000", "--held-out-stories", "200",
                     "--tokenizer", args.tokenizer, "--data-dir", str(out / "data"), "--device", "cuda",
                     "--quiet", "--out", str(run)], env, out / f"train{n}.log")
        results["training tokens/s"][n] = training_throughput(run / "train_log.jsonl", args.warmup_steps)
        stats = out / f"collect{n}.json"
        torchrun(n, ["circuitlab.analysis.collect_ranks", f"preset:{args.preset}", "--tokenizer", args.tokenizer,
                     "--stories", str(args.stories), "--out", str(out / f"db{n}"), "--no-index", "--batch-size", "64",
                     "--stats", str(stats)], env, out / f"collect{n}.log")
        results["collection tokens/s"][n] = json.loads(stats.read_text())["tokens_per_second"]

    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"scale-out on {args.gpus} x {device}, preset {args.preset}")
    print(f"| what | 1 GPU | {args.gpus} GPUs | speed-up | scaling efficiency |")
    print("| --- | --- | --- | --- | --- |")
    for what, by_n in results.items():
        one, many = by_n[1], by_n[args.gpus]
        print(f"| {what} | {one:,.0f} | {many:,.0f} | {many / one:.2f}x | {many / (args.gpus * one):.0%} |")
    (out / "scaling.json").write_text(json.dumps({"device": device, "gpus": args.gpus, "preset": args.preset,
                                                  "args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
