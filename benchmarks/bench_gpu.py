"""Every GPU ratio of issue 15, measured on one GPU and printed side by side.

    python benchmarks/bench_gpu.py --out runs/bench_gpu --skip paired                  # about 4 minutes on one H200
    python benchmarks/bench_gpu.py --out runs/bench_gpu_pairs --skip layers,parts,training   # about 2 minutes
    python benchmarks/bench_gpu.py --smoke                  # tiny sizes on the CPU (Triton interpreter): checks the script

1. Training tokens/s of the story presets (gelu, sgatlin, legible, parity), eager and torch.compile'd, at
   batch 256 x 256 tokens: bf16 autocast, fused AdamW, random tokens, untrained weights, circuitlab kernels on
   their default backend (Triton on CUDA), each model compiled in the mode the trainer picks for it (CUDA
   graphs where every layer can be captured: --compile-mode auto, the default). Each ratio is against
   gelu-stories compiled at the same batch.
   Per preset: whether it compiled, the graph breaks dynamo counted, the compile time (first step), and the
   loss of the first step compiled vs eager on the same batch (the compiled model computes the same thing).
2. The sgatlin layer (router + fused combine) forward+backward against a dense SwiGLU at the TinyStories shape
   (d 256, N 1024, C 8, k 8, d_key 128, 32768 tokens; SwiGLU d_ffw 512) and at scale 8 (d 1024, N 12544,
   C 16, k 8, 8192 tokens; SwiGLU d_ffw 2560), with the copy bandwidth of the same run and the bytes bound
   of the combine's design (below).
3. The depth question of legible-stories (6 layers against gelu-stories' 4): gelu-stories at 6 layers
   (gelu-stories-6l) is trained beside it as its depth-matched baseline, the 4-layer legible-stories-v1 beside
   gelu-stories, and one block's attention and FFN are timed forward+backward against the GELU block's.
4. sgatlin-stories' router at the training batch: the forward's two designs side by side (one (token,
   channel) row per thread, the default, against tiles of rows), its backward, and the sort of the assignments
   by expert row with int16 against int32 keys (--skip router leaves it out).
5. Each preset and its baseline compiled side by side and timed in alternating rounds (--pairs; the targets
   are judged on these ratios, since drift between runs hits both models of a pair alike), and with
   --profile the GPU time of each kernel of one compiled step.
6. Writes bench_gpu.json and bench_gpu.md (the tables) into the output folder. One call on one H200 is
   limited to 10 minutes: run it twice, with --skip paired and with --skip layers,parts,training.

The combine's bytes count. Forward: each token reads its C*K chosen w_in and w_out rows. Backward: a token
pass reads the same rows again (dz, gate gradients), and an expert-row pass reads z and dy once per
assignment to write each expert-gradient row once. So fwd+bwd moves 3 x M*C*K*2*D*2 bytes (bf16) of
gathered rows, plus the per-token tensors and one write of the whole expert gradient. At the measured copy
bandwidth that is its time if every row came from HBM. It is not a floor: rows chosen more than once are
served from L2, and the layer has run faster than this count (benchmarks/results/history.md).

Timing: triton.testing.do_bench (median, L2 flushed) for the layers; wall clock over synchronised steps for
training (median of 3 rounds). Warm-up and timed steps are bounded (--steps, --warmup).
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
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_kernels as kb  # noqa: E402  (timer, table, copy and SwiGLU cases)

PRESETS = ("gelu-stories", "sgatlin-stories", "legible-stories", "parity-stories", "gelu-stories-6l",
           "legible-stories-v1")
SMOKE_PRESETS = {"gelu-stories": "tiny-gelu", "sgatlin-stories": "tiny-sgatlin", "legible-stories": "tiny-legible",
                 "parity-stories": "tiny-parity", "gelu-stories-6l": "tiny-gelu", "legible-stories-v1": "tiny-legible"}
# benchmark-only variants of a preset: gelu-stories at the 6 layers of legible-stories, its depth-matched baseline
VARIANTS = {"gelu-stories-6l": ("gelu-stories", {"n_layers": 6})}
# parity-stories with another beam (b), number of pursuit rounds (r) and code size (k), to time the encoder's settings
VARIANTS.update({f"parity-stories-b{beam}r{rounds}" + (f"k{k}" if k != 32 else ""):
                 ("parity-stories", {"bottleneck": {"beam": beam, "pursuit_rounds": rounds, "k": k}})
                 for beam in (16, 32, 64) for rounds in (1, 2) for k in (16, 32)})
SMOKE_PRESETS.update({name: "tiny-parity" for name in VARIANTS if name.startswith("parity-stories-")})
# presets whose depth differs from gelu-stories' 4 layers, and the baseline of their depth
DEPTH_MATCHED = {"legible-stories": "gelu-stories-6l"}
# each preset against its baseline, timed side by side in alternating rounds (paired_ratio)
PAIRS = (("sgatlin-stories", "gelu-stories"), ("parity-stories", "gelu-stories"),
         ("legible-stories", "gelu-stories-6l"), ("legible-stories-v1", "gelu-stories"))
# x gelu-stories compiled (legible-stories: x its depth-matched baseline, see DEPTH_MATCHED)
TARGETS = {"sgatlin-stories": 0.5, "parity-stories": 0.5, "legible-stories": 0.7, "legible-stories-v1": 0.7}
LAYER_TARGETS = {"tinystories": 2.0, "scale8": 2.5}  # sgatlin fwd+bwd / SwiGLU fwd+bwd, at most
TINYSTORIES = dict(n_tokens=32768, d_model=256, n_neurons=1024, n_channels=8, k=8, d_key=128, swiglu=512)
SCALE8 = dict(n_tokens=8192, d_model=1024, n_neurons=12544, n_channels=16, k=8, d_key=128, swiglu=2560)
SMOKE_SHAPE = dict(n_tokens=24, d_model=32, n_neurons=16, n_channels=2, k=3, d_key=8, swiglu=64)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- training throughput ----------------------------------------------------------------------------------


def first_line(error: BaseException) -> str:
    """The error's type and the first line of its message (escaped newlines count as line ends)."""
    text = f"{type(error).__name__}: {error}".replace("\\n", "\n").strip()
    return text.splitlines()[0][:300]


def preset_config(name: str):
    """The ModelConfig of a preset or of one of the benchmark's VARIANTS."""
    import circuitlab

    if name in VARIANTS:
        base, changes = VARIANTS[name]
        fields = circuitlab.ModelConfig.preset(base).to_dict()
        for key, value in changes.items():  # a dict changes the named entries of a nested setting
            fields[key] = {**fields[key], **value} if isinstance(value, dict) else value
        return circuitlab.ModelConfig.from_dict({**fields, "name": name})
    return circuitlab.ModelConfig.preset(name)


def make_step(model_name: str, batch: int, seq: int, device: str, compiled: bool, compile_backend: str,
              compile_mode: str | None = None):
    """(one training step of a fresh preset model, its three batches): bf16 autocast, fused AdamW, loss = LM
    loss + selectivity pressures, the model compiled or eager."""
    import circuitlab

    config = preset_config(model_name)
    torch.manual_seed(0)
    model = circuitlab.CircuitTransformer(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    gen = torch.Generator(device=device).manual_seed(5)
    batches = [torch.randint(0, config.d_vocab, (batch, seq + 1), device=device, generator=gen) for _ in range(3)]
    if compile_mode == "auto":  # what the trainer picks for this model
        from circuitlab.training.compile import default_compile_mode

        compile_mode = default_compile_mode(model, device)
    forward = torch.compile(model, backend=compile_backend, mode=compile_mode) if compiled else model

    def step(tokens):
        if compiled and compile_mode == "reduce-overhead":  # as the trainer does: a new step of the CUDA graphs
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits, aux = forward(tokens[:, :-1], return_aux=True)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()) + aux["selectivity"].float()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step, batches


def training_case(preset: str, model_name: str, batch: int, seq: int, device: str, compiled: bool, steps: int,
                  warmup: int, rounds: int, compile_backend: str, profile: bool = False,
                  compile_mode: str | None = None) -> dict:
    """Tokens/s of training steps of one preset (eager or compiled)."""
    from torch._dynamo.utils import counters

    row: dict = dict(preset=preset, model=model_name, mode="compiled" if compiled else "eager", batch=batch, seq=seq)
    torch._dynamo.reset()
    counters.clear()
    step, batches = make_step(model_name, batch, seq, device, compiled, compile_backend, compile_mode)

    try:
        synchronize(device)
        start = time.perf_counter()
        row["first_loss"] = float(step(batches[0]))
        synchronize(device)
        row["first_step_s"] = time.perf_counter() - start  # includes compiling (and Triton autotuning)
        for i in range(warmup):
            step(batches[(i + 1) % len(batches)])
        seconds = []
        for _ in range(rounds):
            synchronize(device)
            start = time.perf_counter()
            for i in range(steps):
                loss = step(batches[i % len(batches)])
            synchronize(device)
            seconds.append((time.perf_counter() - start) / steps)
        median = sorted(seconds)[len(seconds) // 2]
        row.update(ok=True, ms_per_step=median * 1e3, tokens_per_s=batch * seq / median, last_loss=float(loss))
        if profile:  # GPU time per kernel of one step (torch.profiler), the 60 largest kept
            label = f"{preset} {row['mode']}"
            kernels = kb.kernel_breakdown(label, lambda: step(batches[0]), device, top=15)
            row["kernels"] = kernels[:60]
            # all kernels of the step against its wall time: the difference is time the GPU waits on the host
            row["kernel_ms_total"] = sum(kernel["ms"] for kernel in kernels)
            row["kernel_launches"] = sum(kernel["launches"] for kernel in kernels)
    except Exception as error:  # noqa: BLE001 - a preset that fails is a result, the others still run
        row.update(ok=False, error=first_line(error), error_detail="".join(traceback.format_exception_only(error))[:4000])
    row["graph_breaks"] = int(sum(counters["graph_break"].values())) if compiled else None
    row["graph_break_reasons"] = sorted(counters["graph_break"])[:5] if compiled else None
    step = batches = None  # free the model before the next case
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.empty_cache()
    status = (f"{row['tokens_per_s']:>12,.0f} tok/s  {row['ms_per_step']:8.2f} ms/step  first step {row['first_step_s']:.1f} s"
              if row["ok"] else f"FAILED: {row['error']}")
    breaks = f"  graph breaks {row['graph_breaks']}" if compiled else ""
    print(f"  train {preset:<16} {row['mode']:<8} {status}{breaks}", flush=True)
    return row


def training_table(args, device: str, rows: list[dict], save) -> list[dict]:
    """Appends each case's row to `rows` as it finishes and calls `save()` (a killed run keeps what it measured)."""
    import circuitlab.kernels as kernels

    batch, seq = (2, 16) if args.smoke else (args.batch, args.seq)
    steps, warmup, rounds = (1, 0, 1) if args.smoke else (args.steps, args.warmup, 3)
    # the smoke run forces the fast paths through the CPU interpreter; on CUDA "auto" picks them
    with kernels.use_backend("triton" if args.smoke else "auto"):
        for preset in args.presets:
            model_name = SMOKE_PRESETS[preset] if args.smoke else preset
            for compiled in (False, True):
                rows.append(training_case(preset, model_name, batch, seq, device, compiled, steps, warmup, rounds,
                                          args.compile_backend, profile=compiled and preset in args.profile,
                                          compile_mode=args.compile_mode))
                add_ratios(rows)
                save()
    return rows


def paired_ratio(args, device: str, preset: str, baseline: str, rounds: int = 7) -> dict:
    """One preset against its baseline, both compiled and alive at once, timed in alternating rounds (so drift
    on the host or the GPU hits both alike): the median over rounds of baseline ms / preset ms."""
    batch, seq = (2, 16) if args.smoke else (args.batch, args.seq)
    steps = 1 if args.smoke else args.steps
    names = {name: SMOKE_PRESETS[name] if args.smoke else name for name in (preset, baseline)}
    row: dict = dict(preset=preset, baseline=baseline, rounds=rounds, steps=steps)
    try:
        torch._dynamo.reset()
        trainers = {name: make_step(model, batch, seq, device, True, args.compile_backend, args.compile_mode)
                    for name, model in names.items()}
        for step, batches in trainers.values():  # compile and warm up
            for i in range(1 + args.warmup):
                step(batches[i % len(batches)])
        times: dict[str, list[float]] = {name: [] for name in trainers}
        for _ in range(rounds):
            for name, (step, batches) in trainers.items():
                synchronize(device)
                start = time.perf_counter()
                for i in range(steps):
                    step(batches[i % len(batches)])
                synchronize(device)
                times[name].append((time.perf_counter() - start) / steps * 1e3)
        ratios = sorted(b / p for p, b in zip(times[preset], times[baseline]))
        row.update(ok=True, ms_per_step={name: sorted(t)[len(t) // 2] for name, t in times.items()},
                   ratio=ratios[len(ratios) // 2], ratio_range=[ratios[0], ratios[-1]], round_ratios=ratios,
                   round_ms=times)
        print(f"  paired {preset} vs {baseline}: {row['ratio']:.2f}x (rounds {ratios[0]:.2f} to {ratios[-1]:.2f})",
              flush=True)
    except Exception as error:  # noqa: BLE001
        row.update(ok=False, error=first_line(error))
        print(f"  paired {preset} vs {baseline}: FAILED {row['error']}", flush=True)
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def add_ratios(rows: list[dict]) -> None:
    by = {(r["preset"], r["mode"]): r for r in rows}
    gelu = by.get(("gelu-stories", "compiled"))
    for row in rows:
        eager = by.get((row["preset"], "eager"))
        if row["mode"] == "compiled" and row["ok"] and eager and eager["ok"]:
            row["first_loss_rel_diff_vs_eager"] = abs(row["first_loss"] - eager["first_loss"]) / abs(eager["first_loss"])
            row["speedup_vs_eager"] = row["tokens_per_s"] / eager["tokens_per_s"]
        if gelu and gelu["ok"] and row["ok"]:
            row["ratio_vs_gelu_compiled"] = row["tokens_per_s"] / gelu["tokens_per_s"]
        matched = by.get((DEPTH_MATCHED.get(row["preset"]), "compiled"))
        if matched and matched["ok"] and row["ok"]:
            row["ratio_vs_depth_matched"] = row["tokens_per_s"] / matched["tokens_per_s"]


# --- the sgatlin layer ------------------------------------------------------------------------------------


def combine_bytes(n_tokens: int, d_model: int, n_neurons: int, n_channels: int, k: int) -> tuple[int, int]:
    """(gathered bytes of one pass, bytes of forward+backward) of the fused combine in bf16: three passes of
    gathered rows; z, out, dy, dz per token; indices, gates, neuron_pre, g * back, dgates per assignment; the
    expert gradient written once (every row)."""
    gathered_pass = n_tokens * n_channels * k * 2 * d_model * 2
    per_token = n_tokens * (4 * d_model * 2 + n_channels * k * (8 + 2 + 4 + 4 + 2))
    expert_gradient = 2 * n_channels * n_neurons * d_model * 2
    return gathered_pass, 3 * gathered_pass + per_token + expert_gradient


def mlp_case(table: kb.Table, timer: kb.Timer, case: str, n_tokens: int, d_model: int, d_ffw: int, device: str) -> dict:
    """The GELU MLP of gelu-stories (d_model -> d_ffw -> d_model, bf16) forward+backward."""
    gen = torch.Generator(device=device).manual_seed(3)
    dt = torch.bfloat16
    z = torch.randn(n_tokens, d_model, device=device, dtype=dt, generator=gen).requires_grad_(True)
    w_in = (torch.randn(d_model, d_ffw, device=device, generator=gen) / d_model**0.5).to(dt).requires_grad_(True)
    w_out = (torch.randn(d_ffw, d_model, device=device, generator=gen) / d_ffw**0.5).to(dt).requires_grad_(True)
    upstream = torch.randn(n_tokens, d_model, device=device, dtype=dt, generator=gen)
    result = dict(fwd_bwd_ms=timer(kb.fwd_bwd(lambda: F.gelu(z @ w_in) @ w_out, [z, w_in, w_out], upstream)))
    table.add(case, f"GELU MLP d_ffw {d_ffw}", **result)
    return result


def sgatlin_layer(shape: dict, device: str):
    """(the sgatlin layer's forward: query, subkey scores, fused router, fused combine; its parameters; an upstream
    gradient) at one of the layer shapes, bf16, Triton backend."""
    import circuitlab.kernels as kernels

    n_tokens, d_model, n_neurons = shape["n_tokens"], shape["d_model"], shape["n_neurons"]
    n_channels, k, d_key = shape["n_channels"], shape["k"], shape["d_key"]
    gen = torch.Generator(device=device).manual_seed(2)
    dt = torch.bfloat16
    n_keys = math.isqrt(n_neurons)

    def param(*size, scale):
        return (torch.randn(*size, device=device, generator=gen) * scale).to(dt).requires_grad_(True)

    z = param(1, n_tokens, d_model, scale=1.0)
    w_query = param(d_model, d_key, scale=d_model**-0.5)
    w_key = param(d_key, 2, n_channels, n_keys, scale=d_key**-0.5)
    experts = param(2, n_channels, n_neurons, d_model, scale=d_model**-0.5)
    upstream = torch.randn(1, n_tokens, d_model, device=device, dtype=dt, generator=gen)

    def layer():
        with kernels.use_backend("triton"):
            scores = torch.einsum("btq,qscn->btscn", z @ w_query, w_key)
            indices, gates = kernels.sgatlin_route(scores, k)
            return kernels.sgatlin_combine(z, indices, gates, experts)

    return layer, [z, w_query, w_key, experts], upstream


def sgatlin_layer_case(table: kb.Table, timer: kb.Timer, case: str, shape: dict, device: str, copy_gbps: float | None,
                       smoke: bool) -> dict:
    """The sgatlin layer (query, subkey scores, fused router, fused combine) forward+backward, SwiGLU beside it,
    and the combine's bytes bound."""
    n_tokens, d_model, n_neurons = shape["n_tokens"], shape["d_model"], shape["n_neurons"]
    n_channels, k, d_key = shape["n_channels"], shape["k"], shape["d_key"]
    n_keys = math.isqrt(n_neurons)
    layer, params, upstream = sgatlin_layer(shape, device)

    result = dict(
        fwd_ms=timer(kb.no_grad(layer)),
        fwd_bwd_ms=timer(kb.fwd_bwd(layer, params, upstream)),
        peak_GiB=timer.peak_gib(kb.fwd_bwd(layer, params, upstream)),
    )
    table.add(case, "sgatlin (Triton router + combine)", **result)
    dense = kb.swiglu_case(table, timer, case, n_tokens, d_model, shape["swiglu"], device)
    result["swiglu"] = dense
    result["ratio_vs_swiglu"] = result["fwd_bwd_ms"] / dense["fwd_bwd_ms"]
    result["target_ratio"] = LAYER_TARGETS["scale8" if "scale" in case else "tinystories"]

    # the bytes bound of the design: three passes over the gathered rows (bf16)
    gathered_pass, bound_bytes = combine_bytes(n_tokens, d_model, n_neurons, n_channels, k)
    # flops: the router's two matmuls and the combine's multiply-adds, fwd + bwd (x3)
    flops = 3 * (2 * n_tokens * d_model * d_key + 2 * n_tokens * d_key * 2 * n_channels * n_keys
                 + 2 * 2 * n_tokens * n_channels * k * d_model)
    result["bound"] = dict(gathered_bytes_per_pass=gathered_pass, fwd_bwd_bytes=bound_bytes, fwd_bwd_flops=flops)
    if copy_gbps:
        bound_ms = bound_bytes / copy_gbps / 1e6
        result["bound"].update(fwd_bwd_ms_at_copy_bandwidth=bound_ms,
                               ratio_bound_vs_swiglu=bound_ms / dense["fwd_bwd_ms"],
                               fraction_of_bound_reached=bound_ms / result["fwd_bwd_ms"])
        print(f"  bytes count {case}: 3 passes x {gathered_pass / 1e9:.3f} GB gathered + {(bound_bytes - 3 * gathered_pass) / 1e9:.3f} GB "
              f"= {bound_bytes / 1e9:.3f} GB -> {bound_ms:.3f} ms at {copy_gbps:.0f} GB/s = "
              f"{bound_ms / dense['fwd_bwd_ms']:.2f}x SwiGLU; measured {result['fwd_bwd_ms']:.3f} ms "
              f"({100 * bound_ms / result['fwd_bwd_ms']:.0f}% of the count's speed); {flops / 1e9:.1f} GFLOP", flush=True)
    result["breakdown_fwd_bwd"] = kb.kernel_breakdown(f"{case} sgatlin fwd+bwd", kb.fwd_bwd(layer, params, upstream),
                                                      device, top=8)

    return result


def layer_table(args, device: str) -> dict:
    timer = kb.Timer(device, warmup_ms=10, rep_ms=50)
    table = kb.Table()
    out: dict = {}
    try:
        out["copy_GBps"] = kb.copy_bandwidth(table, timer, device, 0.01 if args.smoke else 1.0)
    except Exception as error:  # noqa: BLE001
        traceback.print_exc(limit=3)
        out["copy_GBps"], out["copy_error"] = None, first_line(error)
    cases = [("tinystories", "sgatlin TinyStories", TINYSTORIES), ("scale8", "sgatlin scale-8", SCALE8)]
    for key, case, shape in cases:
        try:
            out[key] = sgatlin_layer_case(table, timer, case, SMOKE_SHAPE if args.smoke else shape, device,
                                          out["copy_GBps"], args.smoke)
        except Exception as error:  # noqa: BLE001
            traceback.print_exc(limit=3)
            out[key] = {"error": first_line(error)}
        if device == "cuda":
            torch.cuda.empty_cache()
    # for the training ratio with every row from HBM: gelu-stories' MLP at the training batch (what sgatlin replaces)
    n_tokens = 2 * 16 if args.smoke else args.batch * args.seq
    try:
        out["gelu_mlp_at_training_batch"] = dict(n_tokens=n_tokens, **mlp_case(
            table, timer, "training batch", n_tokens, 64 if args.smoke else 256, 128 if args.smoke else 1024, device))
    except Exception as error:  # noqa: BLE001
        out["gelu_mlp_at_training_batch"] = {"error": first_line(error)}
    out["rows"] = table.rows
    return out


def router_table(args, device: str) -> dict:
    """sgatlin-stories' router at the training batch (bf16 subkey scores, its C, n and K): the forward in its two
    designs (one row per thread against tiles of rows; the same gates and indices, checked), the backward, and
    the sort of the assignments by expert row that the combine's backward needs, with int16 against int32 keys."""
    from circuitlab.kernels import sgatlin_triton

    shape = SMOKE_SHAPE if args.smoke else TINYSTORIES
    n_tokens = shape["n_tokens"] if args.smoke else args.batch * args.seq
    n_channels, k, n_keys = shape["n_channels"], shape["k"], math.isqrt(shape["n_neurons"])
    timer = kb.Timer(device, warmup_ms=10, rep_ms=100)
    gen = torch.Generator(device=device).manual_seed(3)
    scores = torch.randn(n_tokens, 2 * n_channels * n_keys, device=device, generator=gen).to(torch.bfloat16)
    out: dict = dict(n_tokens=n_tokens, n_channels=n_channels, n_subkeys=n_keys, k=k)
    chosen = {design: sgatlin_triton.route_forward(scores, n_channels, k, design=design)
              for design in sgatlin_triton.ROUTER_DESIGNS}
    out["designs_agree"] = all(torch.equal(a, b) for a, b in zip(chosen["rows"], chosen["tiled"]))
    out["fwd_ms"] = {design: timer(lambda design=design: sgatlin_triton.route_forward(scores, n_channels, k, design))
                     for design in sgatlin_triton.ROUTER_DESIGNS}
    gates, indices = chosen["rows"]
    dgates = torch.randn(gates.shape, device=device, generator=gen).to(gates.dtype)
    out["bwd_ms"] = timer(lambda: sgatlin_triton.route_backward(dgates, indices, n_keys))
    flat = indices.reshape(n_tokens, n_channels * k)
    key_dtypes = {"int16": torch.int16, "int32": torch.int32}
    segments = {name: sgatlin_triton.expert_row_segments(flat, n_channels, n_keys * n_keys, k, dtype)
                for name, dtype in key_dtypes.items()}
    out["segments_agree"] = all(torch.equal(a.long(), b.long()) for a, b in zip(segments["int16"], segments["int32"]))
    out["segments_ms"] = {
        name: timer(lambda dtype=dtype: sgatlin_triton.expert_row_segments(flat, n_channels, n_keys * n_keys, k, dtype))
        for name, dtype in key_dtypes.items()}
    print(f"  router, {n_tokens} tokens: forward rows {out['fwd_ms']['rows']:.3f} ms, tiled {out['fwd_ms']['tiled']:.3f} ms "
          f"(same choice: {out['designs_agree']}); backward {out['bwd_ms']:.3f} ms; segments int16 "
          f"{out['segments_ms']['int16']:.3f} ms, int32 {out['segments_ms']['int32']:.3f} ms "
          f"(same order: {out['segments_agree']})", flush=True)
    return out


def training_hbm_count(results: dict, args) -> dict | None:
    """sgatlin-stories' training ratio if every gathered row came from HBM: gelu-stories' compiled step with its
    MLPs swapped for the combine's bytes count at the same batch (router time and everything else about sgatlin
    left out). Rows served from L2 beat the count, so this is no ceiling (the module docstring)."""
    layers, training = results.get("layers") or {}, results.get("training") or []
    gelu = next((r for r in training if r["preset"] == "gelu-stories" and r["mode"] == "compiled" and r["ok"]), None)
    mlp = layers.get("gelu_mlp_at_training_batch") or {}
    if gelu is None or "fwd_bwd_ms" not in mlp or not layers.get("copy_GBps"):
        return None
    import circuitlab

    config = circuitlab.ModelConfig.preset(SMOKE_PRESETS["sgatlin-stories"] if args.smoke else "sgatlin-stories")
    ffn = config.feedforward
    n_tokens = gelu["batch"] * gelu["seq"]
    _, count_bytes = combine_bytes(n_tokens, config.d_model, ffn.d_ffw, ffn.n_channels, ffn.k)
    count_ms = count_bytes / layers["copy_GBps"] / 1e6
    step_ms = gelu["ms_per_step"] - config.n_layers * mlp["fwd_bwd_ms"] + config.n_layers * count_ms
    hbm_count = dict(gelu_ms_per_step=gelu["ms_per_step"], gelu_mlp_fwd_bwd_ms=mlp["fwd_bwd_ms"],
                     combine_count_ms=count_ms, n_layers=config.n_layers, sgatlin_count_ms_per_step=step_ms,
                     sgatlin_ratio_if_rows_from_hbm=gelu["ms_per_step"] / step_ms)
    print(f"  HBM bytes count: gelu-stories compiled {gelu['ms_per_step']:.2f} ms/step - {config.n_layers} x MLP "
          f"{mlp['fwd_bwd_ms']:.3f} ms + {config.n_layers} x combine's count {count_ms:.3f} ms = {step_ms:.2f} ms: "
          f"sgatlin-stories {hbm_count['sgatlin_ratio_if_rows_from_hbm']:.2f}x gelu compiled with every row from HBM", flush=True)
    return hbm_count


def block_parts(args, device: str) -> list[dict]:
    """Forward+backward of one block's parts (norm + attention, norm + FFN) at the training batch, eager and
    compiled, bf16 autocast: legible-stories against its depth-matched GELU baseline, to say where the
    legible step's time goes."""
    timer = kb.Timer(device, warmup_ms=5 if args.smoke else 25, rep_ms=5 if args.smoke else 100)
    batch, seq = (2, 16) if args.smoke else (args.batch, args.seq)
    rows = []
    for preset in ("gelu-stories-6l", "legible-stories"):
        config = preset_config(SMOKE_PRESETS[preset] if args.smoke else preset)
        torch.manual_seed(0)
        import circuitlab

        block = circuitlab.CircuitTransformer(config).to(device).blocks[1]
        gen = torch.Generator(device=device).manual_seed(4)
        h = torch.randn(batch, seq, config.d_model, device=device, generator=gen).requires_grad_(True)
        upstream = torch.randn(batch, seq, config.d_model, device=device, generator=gen)
        parts = {"attention": lambda x, b=block: b.attn(b.ln1(x))[0], "ffn": lambda x, b=block: b.mlp(b.ln2(x))[0]}
        for part, fn in parts.items():
            for compiled in (False, True):
                torch._dynamo.reset()
                run = torch.compile(fn, backend=args.compile_backend) if compiled else fn

                def forward(run=run):
                    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
                        return run(h).float()

                row = dict(preset=preset, part=part, mode="compiled" if compiled else "eager")
                try:
                    row["fwd_bwd_ms"] = timer(kb.fwd_bwd(forward, [h], upstream))
                except Exception as error:  # noqa: BLE001
                    row["error"] = first_line(error)
                rows.append(row)
                print(f"  part {preset:<16} {part:<9} {row['mode']:<8} "
                      f"{_fmt(row.get('fwd_bwd_ms'), '.3f', row.get('error', ''))} ms", flush=True)
    torch._dynamo.reset()
    return rows


# --- report -----------------------------------------------------------------------------------------------


def _fmt(value, spec: str = ".2f", missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def markdown(results: dict) -> str:
    lines = [f"Run of `benchmarks/bench_gpu.py` on {results['date']}: {results['device']}, torch {results['torch']}, "
             f"triton {results['triton']}{' (SMOKE: tiny sizes on the CPU, not a measurement)' if results['smoke'] else ''}; "
             f"torch.compile mode {results.get('compile_mode') or 'default'}"
             f"{' (as the trainer picks: reduce-overhead, i.e. CUDA graphs, where every layer can be captured)' if results.get('compile_mode') == 'auto' else ''}"
             ".",
             ""]
    training = results.get("training") or []
    if training:
        batch, seq = training[0]["batch"], training[0]["seq"]
        lines += [f"Training, batch {batch} x {seq} tokens, bf16 autocast, fused AdamW, random tokens; ratio = tokens/s "
                  "over gelu-stories compiled; depth-matched = over the compiled GELU model of the preset's depth "
                  "(gelu-stories-6l: gelu-stories at 6 layers, for the 6-layer legible-stories).", "",
                  "| preset | eager tok/s | compiled tok/s | compiled / eager | ratio vs gelu compiled "
                  "| ratio vs depth-matched gelu | target | met | compiles (graph breaks) | first-step loss, compiled vs eager |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
        by = {(r["preset"], r["mode"]): r for r in training}
        for preset in dict.fromkeys(r["preset"] for r in training):
            eager, comp = by.get((preset, "eager"), {}), by.get((preset, "compiled"), {})
            target = TARGETS.get(preset)
            ratio = comp.get("ratio_vs_depth_matched", comp.get("ratio_vs_gelu_compiled"))
            met = "" if target is None or ratio is None else ("yes" if ratio >= target else "no")
            error = comp.get("error", "not run").replace("|", "/")[:100]
            compiles = f"yes ({comp.get('graph_breaks')})" if comp.get("ok") else f"no: {error}"
            lines.append(
                f"| {preset} | {_fmt(eager.get('tokens_per_s'), ',.0f')} | {_fmt(comp.get('tokens_per_s'), ',.0f')} "
                f"| {_fmt(comp.get('speedup_vs_eager'))} | {_fmt(comp.get('ratio_vs_gelu_compiled'))} "
                f"| {_fmt(comp.get('ratio_vs_depth_matched'), missing='')} | {'' if target is None else f'>= {target}'} "
                f"| {met} | {compiles} | {_fmt(comp.get('first_loss_rel_diff_vs_eager'), '.1e')} |")
        lines.append("")
    hbm_count = results.get("training_hbm_count")
    if hbm_count:
        lines += [f"sgatlin-stories' ratio if every gathered row came from HBM: gelu-stories compiled "
                  f"{hbm_count['gelu_ms_per_step']:.2f} ms/step, minus {hbm_count['n_layers']} GELU MLPs at "
                  f"{hbm_count['gelu_mlp_fwd_bwd_ms']:.3f} ms, plus {hbm_count['n_layers']} combines at their bytes count "
                  f"{hbm_count['combine_count_ms']:.3f} ms = {hbm_count['sgatlin_count_ms_per_step']:.2f} ms/step: "
                  f"{hbm_count['sgatlin_ratio_if_rows_from_hbm']:.2f}x (router not counted; not a ceiling, since rows served from "
                  "L2 beat the count).", ""]
    paired = results.get("paired") or []
    if paired:
        lines += ["Paired, interleaved: each preset and its baseline compiled side by side and timed in alternating "
                  "rounds; ratio = median over rounds of baseline ms / preset ms.", "",
                  "| preset | baseline | preset ms/step | baseline ms/step | ratio (median) | range over rounds "
                  "| target | met |", "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
        for row in paired:
            target = TARGETS.get(row["preset"])
            if not row.get("ok"):
                lines.append(f"| {row['preset']} | {row['baseline']} | failed: {row.get('error', '')[:80]} | | | | | |")
                continue
            ms = row["ms_per_step"]
            met = "" if target is None else ("yes" if row["ratio"] >= target else "no")
            lines.append(f"| {row['preset']} | {row['baseline']} | {ms[row['preset']]:.2f} | {ms[row['baseline']]:.2f} "
                         f"| {row['ratio']:.2f} | {row['ratio_range'][0]:.2f}-{row['ratio_range'][1]:.2f} "
                         f"| {'' if target is None else f'>= {target}'} | {met} |")
        lines.append("")
    parts = results.get("parts") or []
    if parts:
        by = {(r["preset"], r["part"], r["mode"]): r.get("fwd_bwd_ms") for r in parts}
        lines += ["One block's parts, forward+backward at the training batch (bf16 autocast), legible-stories against "
                  "gelu-stories-6l:", "",
                  "| part | mode | gelu-stories-6l ms | legible-stories ms | legible / gelu |",
                  "| --- | --- | ---: | ---: | ---: |"]
        for part in ("attention", "ffn"):
            for mode in ("eager", "compiled"):
                gelu, legible = by.get(("gelu-stories-6l", part, mode)), by.get(("legible-stories", part, mode))
                ratio = legible / gelu if gelu and legible else None
                lines.append(f"| {part} | {mode} | {_fmt(gelu, '.3f')} | {_fmt(legible, '.3f')} | {_fmt(ratio)} |")
        lines.append("")
    router = results.get("router") or {}
    if router:
        fwd = router["fwd_ms"]
        lines += [f"sgatlin-stories' router at {router['n_tokens']:,} tokens (bf16 scores, C {router['n_channels']}, "
                  f"n {router['n_subkeys']}, K {router['k']}), one layer call:", "",
                  "| part | ms | against | ratio |", "| --- | ---: | --- | ---: |",
                  f"| forward, one row per thread | {fwd['rows']:.3f} | tiles of rows {fwd['tiled']:.3f} ms "
                  f"(same gates and indices: {'yes' if router['designs_agree'] else 'NO'}) | {fwd['tiled'] / fwd['rows']:.2f}x |",
                  f"| backward | {router['bwd_ms']:.3f} | | |",
                  f"| assignments sorted by expert row, int16 keys | {router['segments_ms']['int16']:.3f} | int32 keys "
                  f"{router['segments_ms']['int32']:.3f} ms (same order: {'yes' if router['segments_agree'] else 'NO'}) "
                  f"| {router['segments_ms']['int32'] / router['segments_ms']['int16']:.2f}x |", ""]
    layers = results.get("layers") or {}
    if layers:
        lines += [f"sgatlin layer (router + combine), bf16, fwd+bwd vs SwiGLU; copy bandwidth "
                  f"{_fmt(layers.get('copy_GBps'), '.0f')} GB/s (bytes read + written).", "",
                  "| shape | sgatlin fwd+bwd ms | SwiGLU fwd+bwd ms | ratio | target | met | HBM bytes count ms "
                  "(3 passes of gathered rows; not a floor) | count / SwiGLU |",
                  "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
        for key, name in (("tinystories", "TinyStories"), ("scale8", "scale 8")):
            row = layers.get(key) or {}
            if "error" in row or not row:
                lines.append(f"| {name} | failed: {row.get('error', 'not run')} | | | | | | |")
                continue
            bound = row.get("bound", {})
            met = "yes" if row["ratio_vs_swiglu"] <= row["target_ratio"] else "no"
            lines.append(
                f"| {name} | {row['fwd_bwd_ms']:.3f} | {row['swiglu']['fwd_bwd_ms']:.3f} | {row['ratio_vs_swiglu']:.2f}x "
                f"| <= {row['target_ratio']} | {met} | {_fmt(bound.get('fwd_bwd_ms_at_copy_bandwidth'), '.3f')} "
                f"| {_fmt(bound.get('ratio_bound_vs_swiglu'))}x |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="results folder (default: $RESULTS, else $OUT, else runs/bench_gpu)")
    parser.add_argument("--smoke", action="store_true", help="tiny presets and shapes on the CPU (Triton interpreter)")
    parser.add_argument("--presets", default=",".join(PRESETS), help="comma list of story presets to train")
    parser.add_argument("--batch", type=int, default=256, help="sequences per training step")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--steps", type=int, default=8, help="timed training steps per round (3 rounds)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first (compiling) one")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend (default inductor; aot_eager with --smoke: no C++ build on the CPU)")
    parser.add_argument("--compile-mode", default=None,
                        help="torch.compile mode for the training steps (default auto: what the trainer picks on one GPU, "
                             "reduce-overhead = CUDA graphs where every layer can be captured; torch's default with --smoke)")
    parser.add_argument("--skip", default="", help="comma list: training,layers,router,parts,paired")
    parser.add_argument("--pairs", default=",".join(f"{p}:{b}" for p, b in PAIRS),
                        help="comma list of preset:baseline timed side by side in alternating rounds")
    parser.add_argument("--profile", default="", help="comma list of presets whose compiled step is profiled per kernel")
    args = parser.parse_args(argv)
    args.presets = [p for p in args.presets.split(",") if p]
    args.profile = [p for p in args.profile.split(",") if p]
    args.pairs = [tuple(pair.split(":", 1)) for pair in args.pairs.split(",") if pair]
    bad = [pair for pair in args.pairs if len(pair) != 2 or not set(pair) <= set(SMOKE_PRESETS)]
    if bad:
        parser.error(f"--pairs takes preset:baseline with presets from {', '.join(PRESETS)}; got {bad}")
    unknown = [p for p in args.presets if p not in SMOKE_PRESETS]
    if unknown:
        parser.error(f"unknown presets {unknown}; choose from {', '.join(PRESETS)}")
    args.compile_backend = args.compile_backend or ("aot_eager" if args.smoke else "inductor")
    args.compile_mode = args.compile_mode or ("default" if args.smoke else "auto")
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("CIRCUITLAB_KERNELS_TUNE", "0")
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or pass --smoke for the CPU dry run")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    out = Path(args.out or os.environ.get("RESULTS") or os.environ.get("OUT") or "runs/bench_gpu")
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    started = time.perf_counter()
    results: dict = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or "cpu"),
        torch=torch.__version__, smoke=args.smoke, compile_backend=args.compile_backend, compile_mode=args.compile_mode,
    )
    try:
        import triton

        results["triton"] = triton.__version__
    except ImportError:
        results["triton"] = None
    print(f"{results['device']}  torch {results['torch']}  triton {results['triton']}  {results['date']}", flush=True)

    def save() -> str:
        results["seconds"] = time.perf_counter() - started
        (out / "bench_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table = markdown(results)
        (out / "bench_gpu.md").write_text(table)
        return table

    if "layers" not in skip:
        results["layers"] = layer_table(args, device)
        save()
    if "router" not in skip:
        results["router"] = router_table(args, device)
        save()
    if "parts" not in skip:
        results["parts"] = block_parts(args, device)
        save()
    if "paired" not in skip:
        results["paired"] = []
        for preset, baseline in args.pairs:
            results["paired"].append(paired_ratio(args, device, preset, baseline))
            save()
    if "training" not in skip:
        results["training"] = []
        training_table(args, device, results["training"], save)
    results["training_hbm_count"] = training_hbm_count(results, args)
    table = save()
    print("\n" + table)
    print(f"{results['seconds']:.0f} s; results in {out}/bench_gpu.json and bench_gpu.md", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
