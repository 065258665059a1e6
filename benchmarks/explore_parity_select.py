"""Phases of a fused beam selection for the product parity encoder, timed on one GPU (an exploration: the
layer does not use this kernel; BENCHMARKS.md, "The parity bottleneck's settings", and
benchmarks/results/parity_select_2026-12-02_fused_explored.txt record the run and why it was not kept).

One program per token: x loaded, the column bounds ||Y[:, u]||_1 with Y = x_grid sQ^T ([16, 16] @ [16, 256]),
the beam chosen, its columns of Y rebuilt ([16, 16] @ [16, beam]), then the layer's selection
(`parity_select_triton._select`: scores [256, beam], bisection, slots). Switches:
  SORT 0: the beam by tl.sort of 256 int64 keys (bound bits << 32 | 255 - u), read back through memory
  SORT 1: int32 keys (bound bits with the low 8 replaced by 255 - u), read back through memory
  SORT 2: bisection on the 256 bounds, the chosen columns numbered by a cumsum
  SORT 3: no column phase (columns 0..beam-1: the cost of everything else)
  PREC: tl.dot input precision ("ieee": float32 FMA; "tf32x3": three TF32 tensor-core products)
  SELECT 0: scores only (their maximum stored), no bisection or slots

    python benchmarks/explore_parity_select.py        # CUDA only; about 8 minutes on an H200

`--kernel` times instead the one-kernel beam search the layer now runs up to beam 32
(`parity_select_triton.beam_select`, which also sorts its candidate slots to the top `count` on chip) by warps,
beside the composed path the layer runs for wider beams (Y by cuBLAS, bounds, torch top-k of beam + 1, gather,
`beam_candidates`, torch top-k over its slots): a few minutes. `--options [BEST.json]` times the one kernel's
options (`parity_select_triton.BEAM_OPTIONS`) and writes the fastest at beam 16 to BEST.json; `--once
[OPTIONS.json]` launches it twice, for a profiler.
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl

from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table
from circuitlab.kernels.parity_select_triton import MAX_BISECTIONS, _select, candidate_slots


@triton.jit
def _fused_beam_kernel(
    x_ptr, row_signs_ptr, col_signs_ptr, key_ptr, column_ptr, value_ptr, position_ptr,
    H, W, U, P, C, count,
    H_PAD: tl.constexpr, W_PAD: tl.constexpr, U_PAD: tl.constexpr, P_PAD: tl.constexpr, C_PAD: tl.constexpr,
    CAP: tl.constexpr, MAX_ITERS: tl.constexpr, SORT: tl.constexpr, PREC: tl.constexpr, SELECT: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, H_PAD)
    w = tl.arange(0, W_PAD)
    u = tl.arange(0, U_PAD)
    c = tl.arange(0, C_PAD)
    x_HxW = tl.load(x_ptr + token * H * W + h[:, None] * W + w[None, :])
    if SORT == 3:
        columns = c
    else:
        signs_UxW = tl.load(col_signs_ptr + u[:, None] * W + w[None, :])
        bounds = tl.sum(tl.abs(tl.dot(x_HxW, tl.trans(signs_UxW), input_precision=PREC)), axis=0)
        if SORT == 0:
            keys = (bounds.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (U_PAD - 1 - u).to(tl.int64)
            ranked = tl.sort(keys, descending=True)
            tl.store(key_ptr + token * (C + 1) + u, ranked, mask=u < C + 1)
            tl.debug_barrier()
            kept = tl.load(key_ptr + token * (C + 1) + c, mask=c < C, other=0)
            columns = (U_PAD - 1 - (kept & 0xFFFFFFFF)).to(tl.int32)
        elif SORT == 1:
            keys = (bounds.to(tl.int32, bitcast=True) & ~0xFF) | (U_PAD - 1 - u)
            ranked = tl.sort(keys, descending=True)
            tl.store(key_ptr + token * (C + 1) + u, ranked.to(tl.int64), mask=u < C + 1)
            tl.debug_barrier()
            kept = tl.load(key_ptr + token * (C + 1) + c, mask=c < C, other=0)
            columns = (U_PAD - 1 - (kept & 0xFF)).to(tl.int32)
        else:
            top = tl.max(bounds, axis=0)
            lo = top * 0.0
            hi = top * 1.0001 + 1e-30
            iteration = 0
            n_lo = U
            while (n_lo != C) & (iteration < 40):
                mid = 0.5 * (lo + hi)
                n_mid = tl.sum((bounds >= mid).to(tl.int32), axis=0)
                lo = tl.where(n_mid >= C, mid, lo)
                n_lo = tl.where(n_mid >= C, n_mid, n_lo)
                hi = tl.where(n_mid >= C, hi, mid)
                iteration += 1
            chosen = (bounds >= lo).to(tl.int32)
            slot = tl.cumsum(chosen, axis=0) - 1
            tl.store(key_ptr + token * (C + 1) + slot, u.to(tl.int64), mask=(chosen > 0) & (slot < C))
            tl.debug_barrier()
            columns = tl.load(key_ptr + token * (C + 1) + c, mask=c < C, other=0).to(tl.int32)
    tl.store(column_ptr + token * C + c, columns, mask=c < C)
    signs_CxW = tl.load(col_signs_ptr + columns[:, None] * W + w[None, :])
    y_HxC = tl.dot(x_HxW, tl.trans(signs_CxW), input_precision=PREC)
    if SELECT:
        _select(y_HxC, row_signs_ptr, value_ptr, position_ptr, token, H, P, C, count, H_PAD, P_PAD, C_PAD, CAP,
                MAX_ITERS)
    else:
        p = tl.arange(0, P_PAD)
        signs_PxH = tl.load(row_signs_ptr + p[:, None] * H + h[None, :])
        scores = tl.abs(tl.dot(signs_PxH, y_HxC, input_precision=PREC))
        tl.store(value_ptr + token * CAP, tl.max(tl.max(scores, axis=1), axis=0))


def kernel_by_warps(rows: torch.Tensor, cols: torch.Tensor, x: torch.Tensor) -> None:
    from circuitlab.kernels import ops, reference
    from circuitlab.kernels.parity_select_triton import beam_select

    def composed(beam: int, count: int):
        return reference.parity_beam_select(x.view(-1, 16, 16), rows, cols, beam, count, beam_top=ops.parity_beam_top)

    print(f"{'beam':>4} {'count':>5} {'path':>9} {'warps':>5}  ms")
    for beam, count in ((16, 16), (16, 32), (32, 16), (32, 32), (32, 64), (64, 32)):
        ids, values, _ = composed(beam, count)
        timed = triton.testing.do_bench(lambda: composed(beam, count), warmup=5, rep=40)
        print(f"{beam:4d} {count:5d} {'composed':>9} {'-':>5}  {timed:.3f}", flush=True)
        for warps in (1, 2, 4, 8):
            label = f"{beam:4d} {count:5d} {'one':>9} {warps:5d}"
            try:
                fused_ids, fused_values, _ = beam_select(x.view(-1, 16, 16), rows, cols, beam, count, warps)
                same = torch.equal(fused_ids.sort(-1).values, ids.sort(-1).values)
                timed = triton.testing.do_bench(lambda: beam_select(x.view(-1, 16, 16), rows, cols, beam, count, warps),
                                                warmup=5, rep=40)
                print(f"{label}  {timed:.3f}  (features as composed: {'all tokens' if same else 'NOT all tokens'})",
                      flush=True)
            except Exception as error:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
                print(f"{label}  FAILED {type(error).__name__}: {str(error)[:100]}", flush=True)


# the option combinations `--options` times: the earlier default (all sorts, unpacked slots), top-k with packed
# slots (the default until 2026-12-02), and the top by row maxima in both orientations, each with 64- and 32-bit
# beam keys
OPTION_NAMES = ("keys32", "topk", "packed", "row_max", "transposed")
OPTION_COMBINATIONS = tuple((keys32, *flags) for flags in ((False, False, False, False), (True, True, False, False),
                                                           (True, True, True, False), (True, True, True, True))
                            for keys32 in (False, True))


def kernel_options(rows: torch.Tensor, cols: torch.Tensor, x: torch.Tensor, best_path: str | None) -> None:
    """`beam_select`'s options (parity_select_triton.BEAM_OPTIONS: 64- or 32-bit sort keys, full sorts or
    tl.topk, candidate slots as values and positions or as packed keys, the top by row maxima instead of slots,
    its scores tile transposed), the combinations above at the settings of the shipped model (beam 16, count
    16) in 2 and 4 warps, and at beam 32 in 4; the fastest with exact (64-bit) keys at beam 16, with its warps, to
    best_path. (Variants timed once and dropped, as not faster: the beam's columns from registers,
    parity_select_2026-12-02_options.txt; rescoring only the rows that hold a candidate, and the rare
    overflowing ties in a second launch, parity_select_2026-12-02_options_more.txt.)"""
    import json

    from circuitlab.kernels import parity_select_triton as select

    grid = x.view(-1, 16, 16)
    timings = {}
    default, default_row_max_beam = dict(select.BEAM_OPTIONS), select.ROW_MAX_BEAM
    select.ROW_MAX_BEAM = 256  # row_max timed at beam 32 too
    print(f"tl.topk in this Triton: {select.HAS_TOPK}")
    print(f"{'beam':>4} {'count':>5} {'warps':>5} " + " ".join(f"{name:>10}" for name in OPTION_NAMES) + "  ms")
    for beam, count, warps in ((16, 16, 2), (16, 16, 4), (32, 16, 4)):
        reference_ids = None
        for flags in OPTION_COMBINATIONS:
            options = dict(zip(OPTION_NAMES, flags))
            if options["topk"] and not select.HAS_TOPK:
                continue
            select.BEAM_OPTIONS.update(options)
            label = f"{beam:4d} {count:5d} {warps:5d} " + " ".join(f"{flag!s:>10}" for flag in flags)
            try:
                ids = select.beam_select(grid, rows, cols, beam, count, warps)[0].sort(-1).values
                reference_ids = ids if reference_ids is None else reference_ids
                same = (ids == reference_ids).all(-1).float().mean().item()
                timed = triton.testing.do_bench(lambda: select.beam_select(grid, rows, cols, beam, count, warps),
                                                warmup=5, rep=40)
                if beam == 16 and not options["keys32"]:
                    timings[json.dumps({**options, "warps": warps})] = timed
                print(f"{label}  {timed:.3f}  (same features as the first row on {same:.4f} of tokens)", flush=True)
            except Exception as error:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
                print(f"{label}  FAILED {type(error).__name__}: {str(error)[:100]}", flush=True)
    select.BEAM_OPTIONS.clear()
    select.BEAM_OPTIONS.update(default)
    select.ROW_MAX_BEAM = default_row_max_beam
    if best_path and timings:
        with open(best_path, "w") as handle:
            handle.write(min(timings, key=timings.get))


def launch_once(rows: torch.Tensor, cols: torch.Tensor, x: torch.Tensor, options_path: str | None) -> None:
    """Two launches of `beam_select` at the shipped settings (options from a JSON file, else the defaults), for
    a profiler to catch the second: e.g. ncu --kernel-name regex:_beam_select_kernel --launch-skip 1."""
    import json

    from circuitlab.kernels import parity_select_triton as select

    if options_path:
        with open(options_path) as handle:
            select.BEAM_OPTIONS.update(json.load(handle))
    for _ in range(2):
        select.beam_select(x.view(-1, 16, 16), rows, cols, 16, 16)
    torch.cuda.synchronize()
    print(f"beam_select launched twice with {select.BEAM_OPTIONS}")


def main() -> int:
    if not torch.cuda.is_available():
        raise SystemExit("explore_parity_select.py times kernels on a CUDA GPU")
    n_tokens = 65536
    rows, cols = sign_table(make_factor_code(16, 8, 1)).cuda(), sign_table(make_factor_code(16, 8, 2)).cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    # heavy-tailed random writes
    x = torch.randn(n_tokens, 256, device="cuda", generator=gen) * torch.rand(n_tokens, 256, device="cuda", generator=gen) ** 4
    if "--kernel" in sys.argv[1:]:
        kernel_by_warps(rows, cols, x)
        return 0
    if "--once" in sys.argv[1:]:
        at = sys.argv.index("--once")
        launch_once(rows, cols, x, sys.argv[at + 1] if len(sys.argv) > at + 1 else None)
        return 0
    if "--options" in sys.argv[1:]:
        at = sys.argv.index("--options")
        kernel_options(rows, cols, x, sys.argv[at + 1] if len(sys.argv) > at + 1 else None)
        return 0
    print(f"{'beam':>4} {'count':>5} {'sort':>4} {'prec':>7} {'select':>6} {'warps':>5}  ms")
    for beam, count in ((16, 16), (16, 32), (64, 32)):
        cap = candidate_slots(count)
        for sort, prec, select, warps in itertools.product((0, 1, 2, 3), ("ieee", "tf32x3"), (1, 0), (2, 4, 8)):
            if select == 0 and (prec != "ieee" or warps != 4):
                continue
            values = torch.full((n_tokens, cap), -1.0, device="cuda")
            positions = torch.zeros((n_tokens, cap), dtype=torch.int32, device="cuda")
            keys = torch.zeros((n_tokens, beam + 1), dtype=torch.int64, device="cuda")
            columns = torch.empty((n_tokens, beam), dtype=torch.int32, device="cuda")

            def run():
                _fused_beam_kernel[(n_tokens,)](
                    x, rows, cols, keys, columns, values, positions, 16, 16, 256, 256, beam, count,
                    H_PAD=16, W_PAD=16, U_PAD=256, P_PAD=256, C_PAD=beam, CAP=cap, MAX_ITERS=MAX_BISECTIONS,
                    SORT=sort, PREC=prec, SELECT=select, num_warps=warps)

            label = f"{beam:4d} {count:5d} {sort:4d} {prec:>7} {select:6d} {warps:5d}"
            try:
                run()
                torch.cuda.synchronize()
                print(f"{label}  {triton.testing.do_bench(run, warmup=5, rep=40):.3f}", flush=True)
            except Exception as error:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
                print(f"{label}  FAILED {type(error).__name__}: {str(error)[:100]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
