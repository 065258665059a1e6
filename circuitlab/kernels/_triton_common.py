"""Helpers shared by the Triton kernel modules (imported only once triton is wanted)."""

from __future__ import annotations

import os

import triton

from circuitlab.kernels.dispatch import triton_interpreting

TUNE_ENV_VAR = "CIRCUITLAB_KERNELS_TUNE"


def tuning_configs(configs: list[triton.Config], interpreter: triton.Config | None = None) -> list[triton.Config]:
    """Configs for triton.autotune. Under the CPU interpreter only `interpreter` (small blocks: fast there,
    and they make small test sizes cross block edges) or else the first config; with
    $CIRCUITLAB_KERNELS_TUNE=0 only the first config (skips compiling and timing every candidate)."""
    if triton_interpreting():
        return [interpreter if interpreter is not None else configs[0]]
    if os.environ.get(TUNE_ENV_VAR, "1").strip() == "0":
        return configs[:1]
    return configs


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
