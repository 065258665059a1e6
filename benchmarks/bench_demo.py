"""`circuitlab demo` from a cold start, as a newcomer runs it: a fresh process (imports, numba's compilation
of UMAP) and an empty run folder, the shipped default model, no dashboard. Prints the wall time of each run
with the seconds each artifact took (from the run folder's manifest), the machine's cores and load, and the
target of 90 s on 2 cores; writes them as JSON.

    python benchmarks/bench_demo.py --repeats 2 --out benchmarks/results/demo_$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 90.0


def one_run(model: str, fast: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="circuitlab-demo-bench-") as runs:
        command = [sys.executable, "-m", "circuitlab", "demo", model, "--runs", runs, "--no-serve", "--quiet"]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        finished = subprocess.run(command + (["--fast"] if fast else []), capture_output=True, text=True)
        wall = time.perf_counter() - started
        if finished.returncode != 0:
            raise SystemExit(f"the demo failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
        manifest_path = next(Path(runs).glob("*/manifest.json"))
        manifest = json.loads(manifest_path.read_text())
        steps = {key: round(entry.get("seconds", 0.0), 2) for key, entry in manifest["artifacts"].items()}
        return {"wall_seconds": round(wall, 2), "pipeline_seconds": manifest.get("last_demo_seconds"),
                "steps": steps, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sgatlin-stories")
    parser.add_argument("--repeats", type=int, default=1, help="cold runs, one after another")
    parser.add_argument("--fast", action="store_true", help="the demo's --fast sizes")
    parser.add_argument("--out", help="write the results (.json)")
    args = parser.parse_args(argv)
    runs = []
    for repeat in range(args.repeats):
        runs.append(one_run(args.model, args.fast))
        print(f"run {repeat + 1}: {runs[-1]['wall_seconds']:.1f} s wall (load {runs[-1]['load_before']:.1f} before)", flush=True)
    median = statistics.median(run["wall_seconds"] for run in runs)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\n{'artifact':<12}" + "".join(f"{f'run {i + 1}':>10}" for i in range(len(runs))))
    for key in runs[0]["steps"]:
        print(f"{key:<12}" + "".join(f"{run['steps'].get(key, 0.0):>9.1f}s" for run in runs))
    print(f"{'wall':<12}" + "".join(f"{run['wall_seconds']:>9.1f}s" for run in runs))
    verdict = "met" if median <= TARGET_SECONDS else "missed"
    print(f"\nmedian wall {median:.1f} s on {cores} cores; target <= {TARGET_SECONDS:.0f} s on 2 cores: {verdict}")
    result = {"model": args.model, "fast": args.fast, "cores": cores, "runs": runs, "median_wall_seconds": median,
              "target_seconds": TARGET_SECONDS, "date": time.strftime("%Y-%m-%d")}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
