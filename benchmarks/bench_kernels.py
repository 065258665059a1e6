"""Benchmark circuitlab's Triton fast paths against dense layers, the plain-PyTorch references and a memory
copy, all measured in one run on one GPU.

    python benchmarks/bench_kernels.py                 # kernel table (prints it; --json FILE or $OUT saves it)
    python benchmarks/bench_kernels.py --e2e           # training tokens/s of the shipped story presets,
                                                       # use_backend("reference") against use_backend("auto")
    python benchmarks/bench_kernels.py --smoke         # tiny sizes on the CPU interpreter: checks the script

Timing: triton.testing.do_bench, median, with its warm-up and its L2 flush between runs; inputs are fresh
random tensors per case (never zeros). The copy bandwidth is a device-to-device copy of 1 GiB, counting
bytes read plus bytes written. Peak memory is torch.cuda.max_memory_allocated over one forward+backward
with only that case's inputs and parameters resident.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30


# --- timing helpers ----------------------------------------------------------------------------------------


class Timer:
    def __init__(self, device: str, warmup_ms: float, rep_ms: float):
        self.device, self.warmup_ms, self.rep_ms = device, warmup_ms, rep_ms

    def __call__(self, fn: Callable[[], object]) -> float:
        """Median milliseconds per call."""
        if self.device == "cuda":
            from triton.testing import do_bench

            return float(do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"))
        fn()
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return sorted(samples)[1]

    def peak_gib(self, fn: Callable[[], object]) -> float | None:
        if self.device != "cuda":
            return None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / GIB


def relative_error(fast: torch.Tensor, ref: torch.Tensor) -> float:
    return ((fast.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def fwd_bwd(forward: Callable[[], torch.Tensor], inputs: list[torch.Tensor], upstream: torch.Tensor) -> Callable[[], object]:
    """One forward and backward (gradients returned, not accumulated into .grad)."""

    def run():
        return torch.autograd.grad(forward(), inputs, upstream)

    return run


def no_grad(forward: Callable[[], torch.Tensor]) -> Callable[[], object]:
    def run():
        with torch.no_grad():
            return forward()

    return run


def kernel_breakdown(label: str, fn: Callable[[], object], device: str, top: int = 10) -> list[dict]:
    """GPU time per call of each kernel in one call of `fn` (torch.profiler, averaged over 3 calls)."""
    if device != "cuda":
        return []
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    calls = 3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = getattr(event, "self_cuda_time_total", 0.0)
        if us > 0:
            rows.append(dict(kernel=event.key, ms=us / calls / 1e3, launches=event.count / calls))
    rows.sort(key=lambda row: -row["ms"])
    total = sum(row["ms"] for row in rows)
    print(f"  breakdown {label}: {total:.3f} ms of kernels per call", flush=True)
    for row in rows[:top]:
        print(f"      {row['ms']:8.3f} ms  x{row['launches']:<4.0f} {row['kernel'][:90]}", flush=True)
    return rows


class Table:
    def __init__(self):
        self.rows: list[dict] = []
        self.checks: list[dict] = []

    def add(self, case: str, variant: str, **values):
        self.rows.append(dict(case=case, variant=variant, **values))
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(f"  {case:<22} {variant:<28} {shown}", flush=True)

    def check(self, name: str, value: float, bound: float, relation: str = "<="):
        ok = value <= bound if relation == "<=" else value < bound
        self.checks.append(dict(name=name, value=value, bound=bound, relation=relation, met=bool(ok)))
        print(f"  check {name}: {value:.4g} {relation} {bound:.4g} -> {'met' if ok else 'MISSED'}", flush=True)


# --- cases ---------------------------------------------------------------------------------------------------


def copy_bandwidth(table: Table, timer: Timer, device: str, gib: float) -> float:
    n = int(gib * GIB) // 2
    source = torch.randn(n, device=device, dtype=torch.bfloat16)
    target = torch.empty_like(source)
    ms = timer(lambda: target.copy_(source))
    gbps = 2 * source.numel() * 2 / ms / 1e6
    table.add("copy", f"{gib:g} GiB bf16", ms=ms, GBps=gbps)
    return gbps


def swiglu_layer(n_tokens: int, d_model: int, d_ffw: int, device: str):
    """(a dense SwiGLU's forward, its parameters, an upstream gradient), bf16."""
    gen = torch.Generator(device=device).manual_seed(1)
    dt = torch.bfloat16
    z = torch.randn(n_tokens, d_model, device=device, dtype=dt, generator=gen).requires_grad_(True)
    w_gate = (torch.randn(d_model, d_ffw, device=device, generator=gen) / d_model**0.5).to(dt).requires_grad_(True)
    w_up = (torch.randn(d_model, d_ffw, device=device, generator=gen) / d_model**0.5).to(dt).requires_grad_(True)
    w_down = (torch.randn(d_ffw, d_model, device=device, generator=gen) / d_ffw**0.5).to(dt).requires_grad_(True)
    upstream = torch.randn(n_tokens, d_model, device=device, dtype=dt, generator=gen)

    def forward():
        return (F.silu(z @ w_gate) * (z @ w_up)) @ w_down

    return forward, [z, w_gate, w_up, w_down], upstream


def swiglu_case(table: Table, timer: Timer, case: str, n_tokens: int, d_model: int, d_ffw: int, device: str):
    forward, params, upstream = swiglu_layer(n_tokens, d_model, d_ffw, device)
    result = dict(
        fwd_ms=timer(no_grad(forward)),
        fwd_bwd_ms=timer(fwd_bwd(forward, params, upstream)),
        peak_GiB=timer.peak_gib(fwd_bwd(forward, params, upstream)),
    )
    table.add(case, f"SwiGLU d_ffw {d_ffw}", **result)
    return result


def sgatlin_case(table: Table, timer: Timer, case: str, n_tokens: int, d_model: int, n_neurons: int,
                 n_channels: int, k: int, d_key: int, device: str, check_reference: bool = True):
    import circuitlab.kernels as kernels
    from circuitlab.kernels import reference

    gen = torch.Generator(device=device).manual_seed(2)
    dt = torch.bfloat16
    n_keys = math.isqrt(n_neurons)
    z = torch.randn(1, n_tokens, d_model, device=device, dtype=dt, generator=gen).requires_grad_(True)
    w_query = (torch.randn(d_model, d_key, device=device, generator=gen) / d_model**0.5).to(dt).requires_grad_(True)
    w_key = (torch.randn(d_key, 2, n_channels, n_keys, device=device, generator=gen) / d_key**0.5).to(dt)
    w_key.requires_grad_(True)
    experts = (torch.randn(2, n_channels, n_neurons, d_model, device=device, generator=gen) / d_model**0.5).to(dt)
    experts.requires_grad_(True)
    upstream = torch.randn(1, n_tokens, d_model, device=device, dtype=dt, generator=gen)
    params = [z, w_query, w_key, experts]

    def layer(backend: str, router: str):
        def forward():
            with kernels.use_backend(backend):
                query = z @ w_query
                scores = torch.einsum("btq,qscn->btscn", query, w_key)
                if router == "fused":
                    indices, gates = kernels.sgatlin_route(scores, k)
                else:
                    indices, gates = reference.sgatlin_route(scores, k)
                return kernels.sgatlin_combine(z, indices, gates, experts)

        return forward

    variants = {
        "triton (fused router)": layer("triton", "fused"),
        "triton combine, torch router": layer("triton", "torch"),
        "PyTorch gather reference": layer("reference", "torch"),
    }
    gathered_bytes = n_tokens * n_channels * k * 2 * d_model * 2  # w_in and w_out rows, bf16, one pass
    results = {}
    for name, forward in variants.items():
        result = dict(
            fwd_ms=timer(no_grad(forward)),
            fwd_bwd_ms=timer(fwd_bwd(forward, params, upstream)),
            peak_GiB=timer.peak_gib(fwd_bwd(forward, params, upstream)),
        )
        # forward reads every chosen row once; backward twice more (token pass + expert-row pass reads z, dy)
        result["fwd_gathered_GBps"] = gathered_bytes / result["fwd_ms"] / 1e6
        results[name] = result
        table.add(case, name, **result)

    results["breakdown_fwd_bwd"] = kernel_breakdown(f"{case} triton fwd+bwd", fwd_bwd(
        variants["triton (fused router)"], params, upstream), device)

    if check_reference:
        # the fused combine against a float32 reference on identical routing
        with torch.no_grad():
            scores = torch.einsum("btq,qscn->btscn", z @ w_query, w_key)
        with kernels.use_backend("triton"):
            indices, gates = kernels.sgatlin_route(scores, k)
        gates = gates.detach().requires_grad_(True)
        with kernels.use_backend("triton"):
            out = kernels.sgatlin_combine(z, indices, gates, experts)
        twins = [t.detach().float().requires_grad_(True) for t in (z, gates, experts)]
        ref = reference.sgatlin_combine(twins[0], indices, twins[1], twins[2])
        errors = {"out": relative_error(out, ref)}
        fast_grads = torch.autograd.grad(out, [z, gates, experts], upstream)
        ref_grads = torch.autograd.grad(ref, twins, upstream.float())
        for name, fast, slow in zip(("dz", "dgates", "dexperts"), fast_grads, ref_grads):
            errors[name] = relative_error(fast, slow)
        # the fused router's gates are the k best of all n * n subkey sums
        first, second = indices // n_keys, indices % n_keys
        exact = scores.float()
        named = exact[..., 0, :, :].gather(-1, first) + exact[..., 1, :, :].gather(-1, second)
        best = (exact[..., 0, :, :, None] + exact[..., 1, :, None, :]).flatten(-2).topk(k, dim=-1).values
        for name, value in errors.items():
            table.check(f"{case} {name} rel. error (bf16 vs fp32 ref)", value, 2e-2)
        # exact on the GPU (round to nearest); the CPU interpreter truncates float32 -> bf16
        router_bound = 0.0 if device == "cuda" else 1e-2
        table.check(f"{case} router gates vs brute-force top-k of all n*n sums", relative_error(gates.detach(), best.to(dt)), router_bound)
        table.check(f"{case} router gates vs the scores their indices name", relative_error(gates.detach(), named.to(dt)), router_bound)
    return results


def scan_case(table: Table, timer: Timer, batch: int, n_pos: int, n_units: int, device: str, loop: bool = True):
    import circuitlab.kernels as kernels
    from circuitlab.kernels import reference

    gen = torch.Generator(device=device).manual_seed(3)
    member = torch.sigmoid(torch.randn(batch, n_pos, n_units, device=device, generator=gen)).requires_grad_(True)
    decay = torch.sigmoid(torch.randn(n_units, device=device, generator=gen) + 3.0).requires_grad_(True)
    upstream = torch.randn(batch, n_pos, n_units, device=device, generator=gen)
    element_bytes = member.element_size()
    copy_target = torch.empty_like(member)
    copy_ms = timer(lambda: copy_target.copy_(member.detach()))
    table.add("scans", "copy in->out (fp32)", ms=copy_ms, GBps=2 * member.numel() * element_bytes / copy_ms / 1e6)
    results = {"copy_ms": copy_ms}
    for which, fast, ref_scan, step_loop, extra_fwd, bwd_bytes in (
        ("existential", kernels.existential_scan, reference.existential_scan, reference.existential_loop, 1, 4 + 4 + 1 + 4),
        ("proportion", kernels.proportion_scan, reference.proportion_scan, reference.proportion_loop, 0, 4 + 4 + 4 + 4),
    ):
        def run_fast(fast=fast):
            with kernels.use_backend("triton"):
                return fast(member, decay)

        variants = {"triton scan": run_fast, "PyTorch doubling reference": lambda r=ref_scan: r(member, decay)}
        if loop:
            variants["step-by-step loop"] = lambda s=step_loop: s(member, decay)
        fwd_bytes = member.numel() * (element_bytes * 2 + extra_fwd)
        for name, forward in variants.items():
            result = dict(fwd_ms=timer(no_grad(forward)), fwd_bwd_ms=timer(fwd_bwd(forward, [member, decay], upstream)))
            if name == "triton scan":
                result["fwd_GBps"] = fwd_bytes / result["fwd_ms"] / 1e6
                result["fwd_bwd_GBps"] = (fwd_bytes + member.numel() * bwd_bytes) / result["fwd_bwd_ms"] / 1e6
                result["fwd_over_copy"] = result["fwd_ms"] / copy_ms
                result["fwd_bwd_over_copy_of_its_bytes"] = result["fwd_bwd_ms"] / (
                    copy_ms * (fwd_bytes + member.numel() * bwd_bytes) / (2 * member.numel() * element_bytes)
                )
            results[f"{which}/{name}"] = result
            table.add(f"{which} scan", name, **result)
        results[f"{which}/breakdown_fwd_bwd"] = kernel_breakdown(
            f"{which} scan triton fwd+bwd", fwd_bwd(run_fast, [member, decay], upstream), device, top=5)
        with torch.no_grad():
            error = relative_error(run_fast(), step_loop(member.double(), decay.double()))
        table.check(f"{which} scan rel. error vs fp64 loop", error, 1e-5)
    return results


@torch.no_grad()
def end_to_end(presets: list[str], steps: int, batch: int, seq: int, device: str, rounds_per_backend: int = 3,
               profile_kernels: bool = False) -> list[dict]:
    """Training tokens/s (AdamW, bf16 autocast) of each preset under the reference and the auto backend:
    the median over interleaved rounds of `steps` steps each."""
    import circuitlab
    import circuitlab.kernels as kernels

    rows = []
    for name in presets:
        config = circuitlab.ModelConfig.preset(name)
        torch.manual_seed(0)
        model = circuitlab.CircuitTransformer(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator(device=device).manual_seed(5)
        batches = [torch.randint(0, config.d_vocab, (batch, seq + 1), device=device, generator=gen) for _ in range(4)]

        def step(tokens):
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
                logits, aux = model(tokens[:, :-1], return_aux=True)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()) + aux["selectivity"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        row = dict(preset=name, batch=batch, seq=seq)
        for backend in ("reference", "auto"):  # warm-up (and Triton autotuning) outside the timed rounds
            with kernels.use_backend(backend):
                for i in range(3):
                    step(batches[i % len(batches)])
        rounds: dict[str, list[float]] = {"reference": [], "auto": []}
        for _ in range(rounds_per_backend):  # interleaved, so drift hits both backends alike
            for backend in ("reference", "auto"):
                with kernels.use_backend(backend):
                    if device == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    for i in range(steps):
                        loss = step(batches[i % len(batches)])
                    if device == "cuda":
                        torch.cuda.synchronize()
                    rounds[backend].append((time.perf_counter() - start) / steps)
                    row[f"{backend}_last_loss"] = float(loss)
        for backend, seconds in rounds.items():
            median = sorted(seconds)[len(seconds) // 2]
            row[f"{backend}_ms_per_step"] = median * 1e3
            row[f"{backend}_tokens_per_s"] = batch * seq / median
        if profile_kernels:
            for backend in ("reference", "auto"):
                with kernels.use_backend(backend):
                    row[f"{backend}_breakdown"] = kernel_breakdown(
                        f"{name} training step, {backend}", lambda: step(batches[0]), device, top=8)
        row["speedup"] = row["auto_tokens_per_s"] / row["reference_tokens_per_s"]
        print(f"  {name:<18} reference {row['reference_tokens_per_s']:>11.0f} tok/s   auto {row['auto_tokens_per_s']:>11.0f}"
              f" tok/s   x{row['speedup']:.2f}", flush=True)
        rows.append(row)
        del model, optimizer
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


# --- report ----------------------------------------------------------------------------------------------------


def summary_lines(results: dict, table: Table) -> list[str]:
    lines = []
    ts, s8 = results.get("sgatlin_tinystories"), results.get("sgatlin_scale8")
    if ts:
        fast, ref, dense = ts["triton (fused router)"], ts["PyTorch gather reference"], ts["swiglu"]
        lines.append(f"TinyStories sgatlin fwd+bwd {fast['fwd_bwd_ms']:.3f} ms = {fast['fwd_bwd_ms'] / dense['fwd_bwd_ms']:.2f}x SwiGLU(512)"
                     f" [target <= 1.0]; {ref['fwd_bwd_ms'] / fast['fwd_bwd_ms']:.1f}x faster than gather ref [target >= 5]")
        if fast.get("peak_GiB") is not None:
            lines.append(f"TinyStories peak {fast['peak_GiB']:.3f} GiB = {fast['peak_GiB'] / dense['peak_GiB']:.2f}x SwiGLU [target <= 1.5]")
    if s8:
        fast, dense = s8["triton (fused router)"], s8["swiglu"]
        lines.append(f"scale-8 sgatlin fwd+bwd {fast['fwd_bwd_ms']:.3f} ms = {fast['fwd_bwd_ms'] / dense['fwd_bwd_ms']:.2f}x SwiGLU(2560) [target <= 2.0]")
    scans = results.get("scans")
    if scans:
        for which in ("existential", "proportion"):
            fast = scans[f"{which}/triton scan"]
            loop = scans.get(f"{which}/step-by-step loop")
            speedup = f"{loop['fwd_ms'] / fast['fwd_ms']:.0f}x fwd, {loop['fwd_bwd_ms'] / fast['fwd_bwd_ms']:.0f}x fwd+bwd faster than loop [target >= 20]" if loop else ""
            lines.append(f"{which} scan fwd {fast['fwd_ms']:.3f} ms = {fast['fwd_over_copy']:.2f}x copy [target <= 2]; {speedup}")
    missed = [c["name"] for c in table.checks if not c["met"]]
    lines.append("correctness checks: " + ("all met" if not missed else "MISSED " + "; ".join(missed)))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e2e", action="store_true", help="time training steps of the shipped story presets")
    parser.add_argument("--presets", default="sgatlin-stories,gelu-stories,legible-stories,parity-stories")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per round (--e2e)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per backend (--e2e)")
    parser.add_argument("--profile", action="store_true", help="with --e2e: per-kernel GPU time of one step")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (Triton interpreter)")
    parser.add_argument("--json", default=None, help="write results here (default: $OUT/bench_kernels.json if $OUT)")
    parser.add_argument("--skip", default="", help="comma list of cases to skip: copy,tinystories,scale8,scans")
    args = parser.parse_args(argv)

    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or pass --smoke for the CPU dry run")
    timer = Timer(device, warmup_ms=10, rep_ms=60)
    table = Table()
    skip = set(filter(None, args.skip.split(",")))
    results: dict = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        torch=torch.__version__,
    )
    try:
        import triton

        results["triton"] = triton.__version__
    except ImportError:
        results["triton"] = None
    print(f"{results['device']}  torch {results['torch']}  triton {results['triton']}  {results['date']}", flush=True)

    if args.e2e:
        presets = [p for p in args.presets.split(",") if p]
        batch, seq = (2, 16) if args.smoke else (32, 256)
        results["e2e"] = end_to_end(presets, 1 if args.smoke else args.steps, batch, seq, device,
                                    rounds_per_backend=1 if args.smoke else args.rounds, profile_kernels=args.profile)
    else:
        run_cases(args, table, timer, device, skip, results)
        results["checks"] = table.checks
        results["rows"] = table.rows
        print("\nsummary")
        results["summary"] = summary_lines(results, table)
        for line in results["summary"]:
            print("  " + line)

    path = args.json or (os.path.join(os.environ["OUT"], "bench_kernels.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(results, indent=1, default=str))
        print(f"results written to {path}")
    return 0


def run_cases(args, table: Table, timer: Timer, device: str, skip: set[str], results: dict) -> None:
    """Each case in turn; one that fails is reported and the rest still run."""
    import traceback

    s = args.smoke
    cases = []
    if "copy" not in skip:
        cases.append(("copy_GBps", lambda: copy_bandwidth(table, timer, device, 0.01 if s else 1.0)))
    if "tinystories" not in skip:
        def tinystories():
            shape = dict(n_tokens=24, d_model=32, n_neurons=16, n_channels=2, k=3, d_key=8) if s else dict(
                n_tokens=32768, d_model=256, n_neurons=1024, n_channels=8, k=8, d_key=128)
            ts = sgatlin_case(table, timer, "sgatlin TinyStories", device=device, **shape)
            ts["swiglu"] = swiglu_case(table, timer, "sgatlin TinyStories", shape["n_tokens"], shape["d_model"],
                                       64 if s else 512, device)
            return ts

        cases.append(("sgatlin_tinystories", tinystories))
    if "scale8" not in skip:
        def scale8():
            shape = dict(n_tokens=16, d_model=48, n_neurons=25, n_channels=3, k=2, d_key=8) if s else dict(
                n_tokens=8192, d_model=1024, n_neurons=12544, n_channels=16, k=8, d_key=128)
            s8 = sgatlin_case(table, timer, "sgatlin scale-8", device=device, **shape)
            s8["swiglu"] = swiglu_case(table, timer, "sgatlin scale-8", shape["n_tokens"], shape["d_model"],
                                       96 if s else 2560, device)
            return s8

        cases.append(("sgatlin_scale8", scale8))
    if "scans" not in skip:
        cases.append(("scans", lambda: scan_case(table, timer, *((2, 40, 24) if s else (32, 1024, 1024)), device=device)))
    for key, run in cases:
        try:
            results[key] = run()
        except Exception as error:  # noqa: BLE001 - one broken case must not hide the others' numbers
            traceback.print_exc()
            results[key] = {"error": repr(error)}
            table.check(f"{key} ran", 1.0, 0.0)
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    raise SystemExit(main())
