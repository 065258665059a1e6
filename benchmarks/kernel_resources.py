"""Registers, spills and instructions of the parity kernels, compiled for a GPU without one (Triton's own ptxas
and cuobjdump).

    python benchmarks/kernel_resources.py                 # sm_90 (H100/H200), parity-stories' shapes
    python benchmarks/kernel_resources.py --arch 80

A kernel that needs more than the 255 registers a thread may hold keeps the rest in a stack frame in local
memory (STACK below, bytes a thread), which every access then reads through L1 and L2. The floors of
`benchmarks/ncu_bound.py` are of the kernels as compiled, so a kernel that spills has a floor that a version
without spills could beat. "instructions" counts the SASS instructions of the compiled kernel (each once: a
loop's body once), a thread's static instruction count. The figures depend on the Triton version: the GPU
runs of record used Triton 3.6.

Shapes: parity-stories' bottleneck (d_model 256 as a 16 x 16 grid, 256 row and 256 column patterns): the
one-kernel beam search at the shipped beam 16 and k 16 with its candidate slots and with the top by row maxima
(both orientations); the selection kernel of wider beams (beam 64, k = 32 and the pursuit's 64); least squares
and decode at 16, 32 and 64 features, forward (keeping its factors) and backward (loading them, or factoring
again); each at the warp counts the library launches it with and at neighbouring ones.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from circuitlab.kernels import parity_select_triton, parity_solve_triton  # noqa: E402

SELECT_SIGNATURE = {"y_ptr": "*fp32", "signs_ptr": "*fp32", "value_ptr": "*fp32", "position_ptr": "*i32", "H": "i32",
                    "P": "i32", "C": "i32", "count": "i32", "H_PAD": "constexpr", "P_PAD": "constexpr",
                    "C_PAD": "constexpr", "CAP": "constexpr", "MAX_ITERS": "constexpr"}
SOLVE_SIGNATURE = {"x_ptr": "*fp32", "v_ptr": "*fp32", "idx_ptr": "*i32", "rows_ptr": "*fp32", "cols_ptr": "*fp32",
                   "factors_ptr": "*fp32", "a_ptr": "*fp32", "xhat_ptr": "*fp32", "F": "i32", "H": "i32", "W": "i32", "col_bits": "i32",
                   "scale": "fp32", "ridge": "fp32", "HAS_X": "constexpr", "HAS_V": "constexpr", "SOLVE": "constexpr",
                   "WRITE_A": "constexpr", "DECODE": "constexpr", "BLOCKS": "constexpr", "REFINE": "constexpr",
                   "H_PAD": "constexpr", "W_PAD": "constexpr", "FACTORS": "constexpr"}


BEAM_SIGNATURE = {"x_ptr": "*fp32", "row_signs_ptr": "*fp32", "col_signs_ptr": "*fp32", "column_ptr": "*i32",
                  "next_bound_ptr": "*fp32", "value_ptr": "*i64", "position_ptr": "*i32", "out_value_ptr": "*fp32",
                  "out_id_ptr": "*i64", **{name: "constexpr" for name in (
                      "H", "W", "U", "P", "C", "count", "H_PAD", "W_PAD", "U_PAD", "P_PAD", "C_PAD", "CAP", "MAX_ITERS",
                      "KEYS32", "TOPK", "PACKED", "K_PAD", "ROW_MAX", "ROWS", "TRANSPOSED")}}


def cases():
    """(label, kernel, signature, constexprs, warps, launched by the library)."""
    shipped = dict(H=16, W=16, U=256, P=256, C=16, count=16, H_PAD=16, W_PAD=16, U_PAD=256, P_PAD=256, C_PAD=16,
                   CAP=parity_select_triton.candidate_slots(16), MAX_ITERS=parity_select_triton.MAX_BISECTIONS,
                   KEYS32=False, TOPK=True, PACKED=True, K_PAD=16, ROWS=16)
    forms = (("candidate slots", False, False), ("top by row maxima, tile [P, C]", True, False),
             ("top by row maxima, tile [C, P] (default)", True, True))
    for label, row_max, transposed in forms:
        for warps in (2, 4):
            yield (f"one-kernel beam search, beam 16, k 16: {label}", parity_select_triton._beam_select_kernel,
                   BEAM_SIGNATURE, dict(shipped, ROW_MAX=row_max, TRANSPOSED=transposed), warps,
                   warps == 2 and transposed)
    for count in (32, 64):
        consts = dict(H_PAD=16, P_PAD=256, C_PAD=64, CAP=parity_select_triton.candidate_slots(count),
                      MAX_ITERS=parity_select_triton.MAX_BISECTIONS)
        for warps in (4, 8, 16):
            yield (f"selection, top {count}", parity_select_triton._candidates_kernel, SELECT_SIGNATURE, consts, warps,
                   warps == 8)
    for features, blocks in ((16, 1), (32, 2), (64, 4)):
        default = 2 if blocks >= 4 else 1
        for label, has_v, factors in (("forward, keeping its factors", False, 1), ("backward, loading them", True, 2),
                                      ("backward, factoring again", True, 0)):
            consts = dict(HAS_X=True, HAS_V=has_v, SOLVE=True, WRITE_A=True, DECODE=True, BLOCKS=blocks,
                          REFINE=parity_solve_triton.REFINE_STEPS, H_PAD=16, W_PAD=16, FACTORS=factors)
            for warps in (default, 2 * default):
                yield (f"least squares + decode, {features} features: {label}", parity_solve_triton._features_kernel,
                       SOLVE_SIGNATURE, consts, warps, warps == default and factors != 0)


def resources(kernel, signature: dict, constexprs: dict, warps: int, arch: int) -> dict:
    """REG, STACK, SHARED ... of the kernel's cubin, as cuobjdump -res-usage prints them."""
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    tool = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    if not tool:
        raise SystemExit("this Triton has no cuobjdump (its NVIDIA backend is missing)")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        text = subprocess.run([tool[0], "-res-usage", path], capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([tool[0], "-sass", path], capture_output=True, text=True, check=True).stdout
    usage = {key: int(value) for key, value in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", text)}
    # one instruction a line: /*0a30*/  @!P0 FFMA R1, R2, R3, R4 ;
    usage["INSTRUCTIONS"] = len(re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+\S", sass, flags=re.MULTILINE))
    return usage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100/H200)")
    args = parser.parse_args(argv)
    print(f"Triton {triton.__version__}, sm_{args.arch}\n")
    print("| kernel | warps | launched so | registers a thread | stack bytes a thread (spills) | instructions |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for label, kernel, signature, constexprs, warps, default in cases():
        usage = resources(kernel, signature, constexprs, warps, args.arch)
        print(f"| {label} | {warps} | {'yes' if default else ''} | {usage['REG']} | {usage['STACK']} | "
              f"{usage['INSTRUCTIONS']:,} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
