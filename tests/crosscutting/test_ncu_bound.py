"""benchmarks/ncu_bound.py's table: the floors it reads out of an Nsight Compute raw CSV (the layout of
`ncu --import R --csv --page raw --print-units base`: a header row, a units row, one row per kernel)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ncu_bound():
    spec = importlib.util.spec_from_file_location("ncu_bound", ROOT / "benchmarks" / "ncu_bound.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNITS = {"gpu__time_duration.sum": "ns", "dram__bytes.sum": "byte", "lts__t_bytes.sum": "byte",
         "smsp__inst_executed.sum": "inst"}


def _raw_csv(ncu, kernels: list[dict]) -> str:
    """A raw CSV as ncu writes it, with one of its messages before the header and thousands separators."""
    header = ["ID", "Process ID", "Kernel Name", *ncu.METRICS]
    out = io.StringIO()
    out.write("==PROF== Disconnected from process 1\n")
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow(header)
    writer.writerow(["", "", "", *(UNITS.get(m, "%") for m in ncu.METRICS)])
    for i, kernel in enumerate(kernels):
        writer.writerow([i, 7, kernel["name"], *(f"{kernel.get(m, 0):,}" for m in ncu.METRICS)])
    return out.getvalue()


SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
KERNELS = [
    # 5 ms, SM 80% busy, memory 30%: floor 4 ms, on the SM
    {"name": "_candidates_kernel", "gpu__time_duration.sum": 5_000_000, SM: 80.0, MEM: 30.0,
     "smsp__inst_executed.sum": 3_000_000_000, "dram__bytes.sum": 1_000_000},
    # 2 ms at SM 10%, memory 60%: floor 1.2 ms, memory
    {"name": "_candidates_kernel", "gpu__time_duration.sum": 2_000_000, SM: 10.0, MEM: 60.0,
     "smsp__inst_executed.sum": 1_000_000_000, "dram__bytes.sum": 5_000_000},
    # a cuBLAS product, 1 ms at SM 50%: floor 0.5 ms
    {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gpu__time_duration.sum": 1_000_000,
     SM: 50.0, MEM: 20.0},
    # torch's sorts and top-k, by any capitalisation: 0.2 ms at SM 40%, 0.1 ms at memory 20%
    {"name": "void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long>", "gpu__time_duration.sum": 200_000,
     SM: 40.0, MEM: 30.0},
    {"name": "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "gpu__time_duration.sum": 100_000,
     SM: 10.0, MEM: 20.0},
    # an Inductor kernel at 0.5 ms, memory 90%: floor 0.45 ms
    {"name": "triton_poi_fused_add_mul_0", "gpu__time_duration.sum": 500_000, SM: 5.0, MEM: 90.0,
     "lts__t_bytes.sum": 7e8},
]


def test_the_floor_is_each_kernels_time_at_its_busiest_units_peak(tmp_path):
    ncu = _ncu_bound()
    kernels = ncu.read_raw_csv(_raw_csv(ncu, KERNELS))
    assert len(kernels) == 6
    assert kernels[0]["gpu__time_duration.sum"] == pytest.approx(5.0)  # ns -> ms
    assert kernels[0]["smsp__inst_executed.sum"] == pytest.approx(3e9)  # thousands separators read
    summary = ncu.summarise(kernels)
    selection = summary["families"]["parity: scoring and selection"]
    assert selection["kernels"] == 2 and selection["ms"] == pytest.approx(7.0)
    assert selection["floor_ms"] == pytest.approx(5.0 * 0.8 + 2.0 * 0.6)
    assert selection["busiest"] == "SM (issue or a pipe)"  # 5 of its 7 ms
    assert selection["busiest_ms"] == pytest.approx({"SM (issue or a pipe)": 5.0, "memory (L1, L2 or DRAM)": 2.0})
    assert selection["warp_instructions"] == pytest.approx(4e9) and selection["dram_bytes"] == pytest.approx(6e6)
    assert summary["families"]["matrix products (cuBLAS, CUTLASS)"]["floor_ms"] == pytest.approx(0.5)
    assert summary["families"]["Inductor fused kernels"]["floor_ms"] == pytest.approx(0.45)
    sorts = summary["families"]["torch sort, top-k and search"]
    assert sorts["kernels"] == 2 and sorts["floor_ms"] == pytest.approx(0.2 * 0.4 + 0.1 * 0.2)
    assert summary["total"] == pytest.approx(dict(kernels=6, ms=8.8, floor_ms=4.0 + 1.2 + 0.5 + 0.1 + 0.45))
    assert list(summary["families"])[0] == "parity: scoring and selection"  # largest time first


def test_the_budget_comes_from_the_baselines_kernel_time(tmp_path):
    ncu = _ncu_bound()
    (tmp_path / "step.csv").write_text(_raw_csv(ncu, KERNELS))
    baseline = [{"name": "triton_red_fused_0", "gpu__time_duration.sum": 2_500_000, SM: 40.0, MEM: 70.0}]
    (tmp_path / "base.csv").write_text(_raw_csv(ncu, baseline))
    assert ncu.main(["table", str(tmp_path / "step.csv"), "--baseline", str(tmp_path / "base.csv"),
                     "--target-ratio", "0.5", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "step_bound.json").read_text())
    assert result["budget_ms"] == pytest.approx(5.0)  # 2.5 ms of baseline kernels at half its speed
    assert result["total"]["floor_ms"] == pytest.approx(6.25)
    text = (tmp_path / "out" / "step_bound.md").read_text()
    assert "the summed floor is above it (6.250 ms, 1.25x the budget)" in text


def test_a_file_without_the_raw_header_or_with_unknown_units_is_refused():
    ncu = _ncu_bound()
    with pytest.raises(ValueError, match="no ncu raw CSV header"):
        ncu.read_raw_csv("==PROF== nothing profiled\n")
    with pytest.raises(ValueError, match="unit 'cycle' is not one"):
        ncu.read_raw_csv(_raw_csv(ncu, KERNELS).replace('"ns"', '"cycle"'))
