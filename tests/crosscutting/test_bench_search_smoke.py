"""benchmarks/bench_search.py: its float64 references are brute force, and --smoke runs every CPU path end
to end (a sharded database written, opened in a fresh process, searched exactly, approximately, and by the
accelerator path on the CPU) and writes the JSON the docs' table is read from. Timings here mean nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import torch

from circuitlab.analysis.circuitdb.device import DeviceCodes
from circuitlab.analysis.codeindex import CodeMatrix, brute_force_search, structured_synthetic_codes

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_search", ROOT / "benchmarks" / "bench_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_float64_references_are_brute_force():
    bench = _bench()
    stored = structured_synthetic_codes(700, channels=4, k=4, neurons=32, seed=1)
    queries = structured_synthetic_codes(9, channels=4, k=4, neurons=32, seed=2, prototypes_seed=1)
    reference_ids, reference_distances = brute_force_search(stored, queries, 8)
    parts = [(0, stored.rows(np.arange(300))), (300, stored.rows(np.arange(300, 700)))]
    ids, distances = bench.brute_force_cpu(parts, queries, 8)
    np.testing.assert_array_equal(ids, reference_ids)
    np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)
    codes = DeviceCodes.from_matrices([(50, stored)], "cpu", tile=64)
    ids, distances = bench.brute_force_device(codes, queries, 8)
    np.testing.assert_array_equal(ids, reference_ids + 50)
    np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)


def test_the_synthetic_codes_have_the_shape_and_skew_asked_for():
    bench = _bench()
    (first, indices, values), = bench.chunks(20000, seed=3, device="cpu", chunk_rows=20000)
    assert first == 0 and indices.shape == values.shape == (20000, 64) and indices.dtype == torch.int32
    channels = indices.numpy().reshape(20000, 8, 8) // 1024
    assert (channels == np.arange(8)[None, :, None]).all()  # 8 neurons in each channel of 1,024
    assert (np.diff(indices.numpy(), axis=1) > 0).all()  # sorted, no repeats
    frequency = np.sort(np.bincount(indices.numpy().ravel(), minlength=8192).reshape(8, 1024), axis=1)[:, ::-1].mean(0)
    frequency /= 20000
    assert 0.2 < frequency[0] < 0.4 and frequency[511] < 0.01  # a few units in a quarter of the codes, most rare
    negative = (values.numpy() < 0).mean()
    assert abs(negative - bench.SKEW[bench.SKEW_LAYER]["negative"]) < 0.005
    again = next(bench.chunks(40000, seed=3, device="cpu", chunk_rows=20000, first_chunk=1))
    assert again[0] == 20000 and not torch.equal(again[1], indices)  # chunk 1 on its own is chunk 1 of the set
    assert torch.equal(list(bench.chunks(40000, seed=3, device="cpu", chunk_rows=20000))[1][1], again[1])


def test_smoke_run_writes_every_row(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "search.json"
    assert bench.main(["--smoke", "--out", str(out), "--workdir", str(tmp_path)]) == 0
    record = json.loads(out.read_text())
    rows = {row["search"]: row for row in record["rows"]}
    assert set(rows) == {"exact", "approximate (postings)", "approximate (ivf)", "exact (device path)"}
    for name in ("exact", "exact (device path)"):
        assert rows[name]["identical"] and rows[name]["recall_at_10"] == 1.0 and rows[name]["checked_queries"] == 20
    for name in ("approximate (postings)", "approximate (ivf)"):
        assert 0.0 <= rows[name]["recall_at_10"] <= 1.0 and rows[name]["queries_per_second"] > 0
    exact = rows["exact"]
    assert exact["codes"] == 3000 and exact["shards"] == 3 and exact["open_rss_mb"] > exact["open_rss_added_mb"] >= 0
    assert record["skew"]["layer"] == 2 and record["k"] == 10
    printed = capsys.readouterr().out
    assert printed.count("| 3e+03 | cpu |") == 4 and f"wrote {out}" in printed


def test_the_gpu_path_runs_on_the_cpu_as_a_dry_run(tmp_path):
    """--scan: codes drawn into the scan layout and searched by the accelerator path (the PyTorch scan here),
    answers checked against the benchmark's device brute force, the bytes bound written beside the rate."""
    bench = _bench()
    out = tmp_path / "scan.json"
    assert bench.main(["--device", "cpu", "--scan", "--codes", "3000", "--queries", "40", "--check", "10",
                       "--out", str(out)]) == 0
    exact, approximate = json.loads(out.read_text())["rows"]
    assert exact["identical"] and exact["checked_queries"] == 10 and exact["engine"] == "PyTorch scan"
    assert sum(exact["counters"].values()) == 40
    layout_bytes = exact["scan_bytes_per_rank"]
    assert layout_bytes == -(-3000 // 128) * 128 * (64 * (2 + 4) + 4)  # int16 units, float32 values, inverse norms
    assert exact["bytes_bound_queries_per_second"] == round(40 / (layout_bytes / 4.0e12), 1)
    assert "not_measured" in approximate


def test_the_postings_probe_scores_every_row_as_the_dense_product():
    """The design probe (`--postings-probe`): its posting lists hold each code entry once under its unit, its
    kernel's scores are the dot products of every query with every row, and the postings it reports reading
    are the query units' list lengths. Long lists are split into several segments here (segment 16)."""
    import pytest

    import circuitlab.kernels.dispatch as dispatch

    if not (dispatch.triton_installed() and dispatch.triton_interpreting()):
        pytest.skip("the probe's kernel runs on the CPU under TRITON_INTERPRET=1 only")
    bench = _bench()
    stored = structured_synthetic_codes(700, channels=4, k=4, neurons=32, seed=1)
    queries = structured_synthetic_codes(9, channels=4, k=4, neurons=32, seed=2, prototypes_seed=1)
    codes = DeviceCodes.from_matrices([(0, stored)], "cpu", tile=64)
    offsets, rows, values = bench.postings_of(codes)
    frequency = np.bincount(stored.indices.ravel(), minlength=stored.size)
    np.testing.assert_array_equal(np.diff(offsets.numpy()), frequency)
    assert rows.numel() == 700 * 16 and (np.diff(offsets.numpy()) > 16).any()  # some lists span segments
    units, weights = torch.from_numpy(queries.indices).long(), torch.from_numpy(queries.values)
    scores = bench.postings_scores((offsets, rows, values), codes.n_rows, units, weights, segment=16)
    dense = stored.to_dense().astype(np.float64) @ queries.to_dense().astype(np.float64).T
    np.testing.assert_allclose(scores.numpy().T, dense, rtol=1e-5, atol=1e-4)
    reference_ids, _ = bench.brute_force_device(codes, queries, 10)
    probe = bench.postings_probe(codes, queries, reference_ids, block=4)
    assert probe["postings_per_query"] == round(float(frequency[queries.indices].sum(1).mean()), 1)
    assert probe["scan_entries_per_query"] == 700 * 16 and probe["recall_at_10"] > 0.9


def test_the_benchmarks_queries_favour_the_stored_codes_neurons():
    """Queries are fresh draws of the stored set's law: the same popular neurons (as a real model's queries
    would), not a reshuffled popularity."""
    bench = _bench()
    (_, stored, _), = bench.chunks(20000, seed=0, device="cpu", chunk_rows=20000)
    queries = bench.queries_of(20000, seed=0)
    assert not np.array_equal(queries.indices[:100], stored.numpy()[:100])  # drawn apart
    frequency = np.bincount(stored.numpy().ravel(), minlength=8192) / 20000
    query_frequency = np.bincount(queries.indices.ravel(), minlength=8192) / 20000
    assert np.corrcoef(frequency, query_frequency)[0, 1] > 0.99
    reshuffled = np.bincount(next(bench.chunks(20000, seed=7919, device="cpu", chunk_rows=20000))[1].numpy().ravel(),
                             minlength=8192) / 20000
    assert np.corrcoef(frequency, reshuffled)[0, 1] < 0.5  # another seed's layout favours other neurons
