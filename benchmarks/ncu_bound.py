"""What the GPU's busiest unit allows: per-kernel floors from Nsight Compute's hardware counters.

A training target that a kernel-level change cannot reach needs a bound, not a guess. Nsight Compute (ncu)
reads, for every kernel of one workload, its duration and how busy each unit of the GPU was over it
(speed-of-light percentages: the SM's issue slots and pipes, L1, L2, DRAM). A kernel that keeps its busiest
unit X% busy for t ms does work that needs t * X / 100 ms even if that unit ran at its peak the whole time:
its floor, as this implementation does the work. Summed over a training step, the floors say how fast the
step could be with the same instructions and bytes; a target below that sum needs less work (another
algorithm or design), not tuning.

Two halves, so the workload runs under ncu and the table is made anywhere:

    # on the GPU (scripts/gpu_ncu.sh wraps this):
    ncu --profile-from-start off --clock-control none --metrics <METRICS> -o step \\
        python benchmarks/ncu_bound.py step --preset parity-stories
    ncu --import step.ncu-rep --csv --page raw --print-units base > step.csv
    # anywhere:
    python benchmarks/ncu_bound.py table step.csv --baseline gelu_step.csv --target-ratio 0.5 --out runs/ncu

Workloads (each warms up, then profiles exactly one run between cudaProfilerStart and cudaProfilerStop):
- step --preset P: one training step of preset P as bench_gpu.py times it (batch 256 x 256, bf16 autocast,
  fused AdamW, compiled in the mode the trainer picks);
- layer --shape tinystories|scale8 --which sgatlin|swiglu: bench_gpu.py's sgatlin layer or the SwiGLU beside
  it, forward+backward.

The table groups kernels by family (circuitlab's own kernels by name; Inductor's fused kernels; matrix
products; torch's sort, top-k and sorted search; the rest) and gives per family the measured time, the floor,
and the busiest unit. Durations under ncu are of kernels run one at a time, caches flushed before each (ncu's
default) and the clocks left alone; they are near, not equal to, the same kernels' times in a normal run,
which is why the floors are given beside them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# speed-of-light percentages over the kernel's elapsed time (the SM's busiest pipe or issue, memory's busiest
# unit: L1, L2 or DRAM), the issue slots on their own, and counts of instructions and bytes
METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    "smsp__inst_executed.sum",
    "dram__bytes.sum",
    "lts__t_bytes.sum",
)
UNITS = {  # the busiest-unit candidates, by the metric that measures each
    "SM (issue or a pipe)": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory (L1, L2 or DRAM)": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
}
# to the units of the table (ms, bytes, percent, counts); ncu's --print-units base gives ns and byte
SCALE = {"%": 1.0, "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "ns": 1e-6, "nsecond": 1e-6,
         "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "inst": 1.0}
# kernel families, first match wins (names as ncu prints them: Triton kernels by their function name)
FAMILIES = (
    ("parity: scoring and selection", r"_candidates_kernel"),
    ("parity: fused least squares and decode", r"_features_kernel"),
    ("parity: decode and dots", r"_decode_kernel|_dots_kernel"),
    ("sgatlin: combine", r"_combine_"),
    ("sgatlin: router", r"_route_"),
    ("legible: scans", r"_scan_fwd_kernel|_scan_bwd_kernel"),
    ("matrix products (cuBLAS, CUTLASS)", r"gemm|xmma|cutlass|nvjet|sm90_|wgmma|_mm_|splitK|splitk"),
    ("torch sort, top-k and search", r"(?i)sort|topk|radix"),
    ("Inductor fused kernels", r"^triton_"),
    ("optimizer (fused AdamW)", r"adam|Adam|multi_tensor"),
    ("other", r"."),
)


# --- the workloads (run under ncu) -----------------------------------------------------------------------


def profiled_once(run, warmup: int) -> None:
    """`run` `warmup` times, then once between cudaProfilerStart and cudaProfilerStop (what ncu profiles)."""
    import torch

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def step_workload(args) -> None:
    import torch

    import bench_gpu

    torch.backends.cuda.matmul.allow_tf32 = True
    step, batches = bench_gpu.make_step(args.preset, args.batch, args.seq, "cuda", compiled=not args.eager,
                                        compile_backend="inductor", compile_mode="auto")
    turn = iter(range(10**9))
    profiled_once(lambda: step(batches[next(turn) % len(batches)]), args.warmup)
    print(f"profiled one training step of {args.preset} ({args.batch} x {args.seq} tokens)", flush=True)


def layer_workload(args) -> None:
    import torch

    import bench_gpu
    import bench_kernels as kb

    shape = {"tinystories": bench_gpu.TINYSTORIES, "scale8": bench_gpu.SCALE8}[args.shape]
    if args.which == "sgatlin":
        forward, params, upstream = bench_gpu.sgatlin_layer(shape, "cuda")
    else:
        forward, params, upstream = kb.swiglu_layer(shape["n_tokens"], shape["d_model"], shape["swiglu"], "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    profiled_once(kb.fwd_bwd(forward, params, upstream), args.warmup)
    print(f"profiled one forward+backward of the {args.which} layer at the {args.shape} shape", flush=True)


# --- the table (anywhere) ----------------------------------------------------------------------------------


def read_raw_csv(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw`: one dict per kernel, metric values in the units of METRICS' names
    (ms for durations, bytes, percent, counts). Lines before the header (ncu's own messages) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV header (a line starting with \"ID\") in the input")
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, rows = table[0], table[1], table[2:]
    kernels = []
    for row in rows:
        if len(row) != len(header):
            continue
        record: dict = {}
        for name, unit, value in zip(header, units, row):
            if name in METRICS:
                number = value.replace(",", "").strip()
                if unit.strip().lower() not in SCALE:
                    raise ValueError(f"{name}: unit {unit!r} is not one the table converts")
                try:
                    record[name] = float(number) * SCALE[unit.strip().lower()]
                except ValueError:  # "n/a" where a kernel has no such counter
                    record[name] = None
            else:
                record[name] = value
        kernels.append(record)
    return kernels


def family(name: str) -> str:
    for label, pattern in FAMILIES:
        if re.search(pattern, name):
            return label
    return "other"


def kernel_floor(record: dict) -> tuple[float, str]:
    """(floor ms: the duration times its busiest unit's fraction of peak, that unit's name)."""
    time_ms = record.get("gpu__time_duration.sum") or 0.0
    unit, busiest = max(((label, record.get(metric) or 0.0) for label, metric in UNITS.items()), key=lambda u: u[1])
    return time_ms * min(busiest, 100.0) / 100.0, unit


def summarise(kernels: list[dict]) -> dict:
    """Per family and in total: kernels, measured ms, floor ms, warp instructions, DRAM and L2 bytes, and how
    much of the time each unit was the busiest."""
    families: dict = defaultdict(lambda: dict(kernels=0, ms=0.0, floor_ms=0.0, warp_instructions=0.0,
                                              dram_bytes=0.0, l2_bytes=0.0, busiest_ms=defaultdict(float)))
    for record in kernels:
        name = record.get("Kernel Name") or record.get("Function Name") or ""
        entry = families[family(name)]
        floor, unit = kernel_floor(record)
        time_ms = record.get("gpu__time_duration.sum") or 0.0
        entry["kernels"] += 1
        entry["ms"] += time_ms
        entry["floor_ms"] += floor
        entry["busiest_ms"][unit] += time_ms
        entry["warp_instructions"] += record.get("smsp__inst_executed.sum") or 0.0
        entry["dram_bytes"] += record.get("dram__bytes.sum") or 0.0
        entry["l2_bytes"] += record.get("lts__t_bytes.sum") or 0.0
    out = {label: {**entry, "busiest": max(entry["busiest_ms"], key=entry["busiest_ms"].get),
                   "busiest_ms": dict(entry["busiest_ms"])} for label, entry in families.items()}
    total = dict(kernels=sum(e["kernels"] for e in out.values()), ms=sum(e["ms"] for e in out.values()),
                 floor_ms=sum(e["floor_ms"] for e in out.values()))
    return dict(families=dict(sorted(out.items(), key=lambda item: -item[1]["ms"])), total=total)


def markdown(summary: dict, title: str, budget_ms: float | None) -> str:
    lines = [f"### {title}", "",
             "| kernels | count | ms under ncu | floor ms | floor / ms | busiest unit | warp instructions (G) "
             "| DRAM GB | L2 GB |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for label, e in summary["families"].items():
        ratio = e["floor_ms"] / e["ms"] if e["ms"] else 0.0
        lines.append(f"| {label} | {e['kernels']} | {e['ms']:.3f} | {e['floor_ms']:.3f} | {ratio:.2f} | "
                     f"{e['busiest']} | "
                     f"{e['warp_instructions'] / 1e9:.3f} | {e['dram_bytes'] / 1e9:.3f} | {e['l2_bytes'] / 1e9:.3f} |")
    t = summary["total"]
    lines.append(f"| **all** | {t['kernels']} | **{t['ms']:.3f}** | **{t['floor_ms']:.3f}** | "
                 f"{t['floor_ms'] / t['ms'] if t['ms'] else 0.0:.2f} | | | | |")
    if budget_ms is not None:
        verdict = "above" if t["floor_ms"] > budget_ms else "below"
        lines += ["", f"Budget {budget_ms:.3f} ms: the summed floor is {verdict} it "
                      f"({t['floor_ms']:.3f} ms, {t['floor_ms'] / budget_ms:.2f}x the budget)."]
    return "\n".join(lines) + "\n"


def table_command(args) -> None:
    kernels = read_raw_csv(Path(args.csv).read_text())
    if not kernels:
        raise SystemExit(f"{args.csv}: no kernels in the ncu report")
    summary = summarise(kernels)
    title = args.title or Path(args.csv).stem
    budget_ms = args.budget_ms
    if args.baseline:  # the budget of a throughput target: the baseline's kernel time over the target ratio
        baseline = summarise(read_raw_csv(Path(args.baseline).read_text()))["total"]
        budget_ms = baseline["ms"] / args.target_ratio
        summary["baseline"] = dict(csv=Path(args.baseline).name, target_ratio=args.target_ratio, **baseline)
        title += f" (budget: {Path(args.baseline).stem}'s {baseline['ms']:.3f} ms under ncu / {args.target_ratio})"
    text = markdown(summary, title, budget_ms)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{Path(args.csv).stem}_bound.md").write_text(text)
        (out / f"{Path(args.csv).stem}_bound.json").write_text(
            json.dumps(dict(title=title, budget_ms=budget_ms, **summary), indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    step = sub.add_parser("step", help="one training step of a preset (run under ncu)")
    step.add_argument("--preset", required=True)
    step.add_argument("--batch", type=int, default=256)
    step.add_argument("--seq", type=int, default=256)
    step.add_argument("--warmup", type=int, default=3, help="steps before the profiled one (the first compiles)")
    step.add_argument("--eager", action="store_true", help="do not compile the model")
    layer = sub.add_parser("layer", help="the sgatlin layer or SwiGLU forward+backward (run under ncu)")
    layer.add_argument("--shape", choices=("tinystories", "scale8"), required=True)
    layer.add_argument("--which", choices=("sgatlin", "swiglu"), required=True)
    layer.add_argument("--warmup", type=int, default=5)
    table = sub.add_parser("table", help="the floors table of an ncu raw CSV")
    table.add_argument("csv")
    table.add_argument("--budget-ms", type=float, default=None,
                       help="the time a target allows, to set the floor beside")
    table.add_argument("--baseline", default=None, help="ncu raw CSV of the baseline workload: budget = its kernel "
                       "time / --target-ratio (a tokens/s target of R x the baseline allows 1/R of its time)")
    table.add_argument("--target-ratio", type=float, default=0.5)
    table.add_argument("--title", default=None)
    table.add_argument("--out", default=None, help="folder for <csv stem>_bound.md and .json")
    args = parser.parse_args(argv)
    if args.command == "table":
        table_command(args)
        return 0
    import torch

    if not torch.cuda.is_available():
        parser.error("the workloads need a CUDA GPU (and run under ncu); `table` runs anywhere")
    (step_workload if args.command == "step" else layer_workload)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
