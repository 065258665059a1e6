"""Exact circuit search on an accelerator: the Triton scan against its PyTorch reference, and the certified
search (scan + float64 answer, circuitdb/device.py) against float64 brute force.

Without CUDA the kernel runs in Triton's CPU interpreter (TRITON_INTERPRET=1, set here before triton is
imported); with CUDA the same tests run the compiled kernel on the GPU. Sizes are small and awkward: rows
that do not fill the last tile, query counts that do not fill a query block, several row chunks, integer
values (so sums are exact and ties are real ties), negative values, duplicated rows, an all-zero row and an
all-zero query, and excluded rows.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("CIRCUITLAB_KERNELS_TUNE", "0")

pytest.importorskip("triton", reason="triton is not installed: the kernel tests need it (pip install 'circuitlab[triton]')")

import circuitlab.kernels as kernels  # noqa: E402
from circuitlab.analysis.circuitdb.device import DeviceCodes, dense_block, exact_top_k  # noqa: E402
from circuitlab.analysis.codeindex import CodeMatrix, brute_force_search, structured_synthetic_codes  # noqa: E402
from circuitlab.kernels import search_reference  # noqa: E402

DEVICES = (["cpu"] if kernels.triton_interpreting() else []) + (["cuda"] if CUDA else [])
pytestmark = pytest.mark.skipif(not DEVICES, reason="no CUDA device and TRITON_INTERPRET is off: nowhere to run Triton")


def awkward_codes(n_rows: int, size: int, nnz: int, seed: int) -> CodeMatrix:
    """Small integer values of both signs, every 7th row a copy of the one before, a repeated index, a zero row."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, size, (n_rows, nnz))
    values = rng.choice(np.array([-2.0, -1.0, 1.0, 2.0, 3.0], dtype=np.float32), (n_rows, nnz))
    indices[1::7] = indices[0::7][: len(indices[1::7])]
    values[1::7] = values[0::7][: len(values[1::7])]
    indices[3, :2] = indices[3, 2]
    values[5] = 0.0
    return CodeMatrix(indices, values, size)


def scan_inputs(stored: CodeMatrix, queries: CodeMatrix, tile: int, device: str):
    codes = DeviceCodes.from_matrices([(0, stored)], device, tile=tile)
    return codes, dense_block(queries, stored.size, torch.device(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tile, keep, n_chunks", [(16, 8, 3), (16, 16, 2), (32, 16, 1)])
def test_scan_keeps_the_same_keys_as_its_reference(device, tile, keep, n_chunks):
    """Integer values make every product and sum exact in float32, so kernel and reference must agree bit
    for bit whatever the order of additions: keys of each chunk's `keep` best rows, ties to the smaller row."""
    stored = awkward_codes(203, size=50, nnz=6, seed=0)
    queries = CodeMatrix.concatenate([awkward_codes(11, size=50, nnz=6, seed=1), stored.rows([0, 5])])
    codes, dense = scan_inputs(stored, queries, tile, device)
    exclude = torch.full((len(queries),), -1, dtype=torch.int64, device=device)
    exclude[[2, 11]] = torch.tensor([7, 0], device=device)
    arguments = (codes.indices, codes.values, codes.inverse_norms, dense, exclude, codes.n_rows, keep, n_chunks)
    with kernels.use_backend("triton"):
        fast = kernels.code_scan_top_keys(*arguments)
    reference = search_reference.scan_top_keys(*arguments)
    assert fast.shape == reference.shape == (len(search_reference.chunk_bounds(codes.indices.shape[0], n_chunks)),
                                               len(queries), keep)
    assert torch.equal(fast.cpu(), reference.cpu())
    scores, rows = search_reference.unpack_keys(search_reference.merge_chunks(reference, keep))
    # the reference is brute force in float32: its kept rows are the best by (score, row), excluded rows absent
    dense_rows = torch.from_numpy(stored.to_dense()).double()
    dense_queries = torch.from_numpy(queries.to_dense()).double()
    norms = dense_rows.norm(dim=1)
    expected = (dense_queries @ dense_rows.T) * torch.where(norms > 0, 1 / norms, 0.0)
    expected[2, 7] = expected[11, 0] = -torch.inf
    order = np.lexsort((np.broadcast_to(np.arange(203), expected.shape), -expected.numpy()), axis=1)[:, :keep]
    np.testing.assert_array_equal(rows.cpu().numpy(), order)
    np.testing.assert_allclose(scores.cpu().double().numpy(), np.take_along_axis(expected.numpy(), order, 1), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_large_table_is_tuned_on_its_first_tiles_and_answers_as_the_reference(device, monkeypatch):
    """The first launch for a key on more than TUNE_TILES tiles is preceded by one on the first TUNE_TILES
    tiles (where the autotuner times its candidates); the full launch's keys are still the reference's."""
    from circuitlab.kernels import search_triton

    stored = awkward_codes(203, size=50, nnz=6, seed=0)
    queries = awkward_codes(9, size=50, nnz=6, seed=2)
    codes, dense = scan_inputs(stored, queries, 16, device)
    exclude = torch.full((len(queries),), -1, dtype=torch.int64, device=device)
    arguments = (codes.indices, codes.values, codes.inverse_norms, dense, exclude, codes.n_rows, 8, 3)
    monkeypatch.setattr(search_triton, "TUNE_TILES", 4)
    monkeypatch.setattr(search_triton, "_tuned", set())
    launches = []
    real_scan = search_triton.scan_top_keys

    def spy(indices, *rest):
        launches.append((indices.shape[0], rest[4]))  # (tiles, rows) of each launch
        return real_scan(indices, *rest)

    monkeypatch.setattr(search_triton, "scan_top_keys", spy)
    with kernels.use_backend("triton"):
        first = kernels.code_scan_top_keys(*arguments)
        again = kernels.code_scan_top_keys(*arguments)
    reference = search_reference.scan_top_keys(*arguments)
    assert torch.equal(first.cpu(), reference.cpu()) and torch.equal(again.cpu(), reference.cpu())
    n_tiles = codes.indices.shape[0]
    assert launches == [(n_tiles, 203), (4, 64), (n_tiles, 203)]  # the prefix once, for the first call only


def float_codes(n_rows: int, seed: int, prototypes_seed: int = 0) -> CodeMatrix:
    """Codes with float values (no exact ties, sums rounded in float32) and duplicated rows."""
    codes = structured_synthetic_codes(n_rows, channels=4, k=4, neurons=16, seed=seed, prototypes_seed=prototypes_seed)
    noise = np.random.default_rng(seed).uniform(0.5, 1.5, codes.values.shape).astype(np.float32)
    return CodeMatrix(codes.indices, codes.values * noise, codes.size)


CASES = [
    ("integers", 10, 16, "reference"), ("integers", 40, 32, "reference"), ("floats", 5, 32, "reference"),
    ("integers", 3, 32, "triton"), ("floats", 10, 16, "triton"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("values, k, tile, backend", CASES)
def test_certified_search_is_float64_brute_force(device, values, k, tile, backend):
    """ids identical to float64 brute force, ties to the smaller id; distances to 1e-12. The cases reach every
    path: the first scan certifies, the wider scan certifies, and queries are scored against every row (ties
    at the k-th, k beyond what a tile keeps, the all-zero query)."""
    if values == "integers":
        stored = awkward_codes(157, size=50, nnz=6, seed=2)
        fresh = awkward_codes(9, size=50, nnz=6, seed=3)
    else:
        stored, fresh = float_codes(157, seed=4), float_codes(9, seed=5, prototypes_seed=4)
    zero = CodeMatrix(np.zeros((1, stored.nnz), np.int64), np.zeros((1, stored.nnz), np.float32), stored.size)
    queries = CodeMatrix.concatenate([fresh, stored.rows([0, 1, 8]), zero])
    codes = DeviceCodes.from_matrices([(1000, stored.rows(np.arange(60))), (1060, stored.rows(np.arange(60, 157)))],
                                      device, tile=tile)
    with kernels.use_backend(backend):
        ids, distances, counters = exact_top_k(codes, queries, k, n_chunks=2)
        excluded = np.full(len(queries), -1)
        excluded[9:12] = [1000, 1001, 1008]  # each stored row leaves itself out
        ids_without, distances_without, _ = exact_top_k(codes, queries, k, exclude=excluded, n_chunks=2)
    reference_ids, reference_distances = brute_force_search(stored, queries, k + 1)
    np.testing.assert_array_equal(ids, reference_ids[:, :k] + 1000)
    np.testing.assert_allclose(distances, reference_distances[:, :k], rtol=0, atol=1e-12)
    for query in range(len(queries)):
        keep = reference_ids[query] + 1000 != excluded[query]
        np.testing.assert_array_equal(ids_without[query], (reference_ids[query][keep] + 1000)[:k])
        np.testing.assert_allclose(distances_without[query], reference_distances[query][keep][:k], rtol=0, atol=1e-12)
    scored = int((queries.norms > 0).sum())  # all-zero queries are answered without a scan: ids 0.., distance 1
    assert sum(counters.values()) == scored
    if k == 40:
        assert counters["float64_every_row"] == scored  # 40 best need more than a tile of 32 kept rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_exact_ties_beyond_a_scan_go_to_the_wider_scan_then_to_every_row(device, backend):
    """20 copies of one row: the first scan keeps 16 of them, so its 16th score ties the 10th and certifies
    nothing; the wider scan keeps all 20 and a worse row after them. 40 copies of another: no scan of a 32-row
    tile sees past them, so that query is scored against every row. Both answers are brute force's (the
    smallest ids among the tied copies)."""
    base = float_codes(60, seed=7)
    copies = np.concatenate([np.arange(60), np.full(20, 11), np.full(40, 23)])
    stored = base.rows(np.random.default_rng(8).permutation(copies))
    queries = base.rows([11, 23, 30])
    codes = DeviceCodes.from_matrices([(0, stored)], device, tile=32)
    with kernels.use_backend(backend):
        ids, distances, counters = exact_top_k(codes, queries, 10, n_chunks=3)
    reference_ids, reference_distances = brute_force_search(stored, queries, 10)
    np.testing.assert_array_equal(ids, reference_ids)
    np.testing.assert_allclose(distances, reference_distances, rtol=0, atol=1e-12)
    assert counters == {"certified_first": 1, "certified_wider": 1, "float64_every_row": 1}


@pytest.mark.parametrize("device", DEVICES)
def test_fewer_rows_than_k_and_certification_counters(device):
    stored = awkward_codes(12, size=20, nnz=4, seed=6)
    queries = stored.rows([0, 3, 11])
    codes = DeviceCodes.from_matrices([(0, stored)], device, tile=16)
    ids, distances, counters = exact_top_k(codes, queries, 20, exclude=np.array([0, -1, 11]))
    assert (ids[:, 12:] == -1).all() and np.isinf(distances[:, 12:]).all()
    assert (ids[0, :11] >= 0).all() and ids[0, 11] == -1 and 0 not in ids[0]  # 11 rows left for query 0
    assert sorted(ids[1, :12].tolist()) == list(range(12))
    reference_ids, reference_distances = brute_force_search(stored, queries, 12)
    np.testing.assert_array_equal(ids[1, :12], reference_ids[1])
    np.testing.assert_allclose(distances[1, :12], reference_distances[1], atol=1e-12)


@pytest.mark.skipif(not CUDA, reason="the database's device path runs where CUDA is")
def test_a_database_searched_on_the_gpu_answers_as_on_the_cpu(tmp_path):
    """`db.search(device="auto")` takes the GPU where there is one: the same table as the CPU engines, ids and
    distances, on a database of several shards, with its own rows searched for their neighbours."""
    from circuitlab.analysis.circuitdb import CircuitDB

    stored = float_codes(3000, seed=9)
    folder = CircuitDB.from_codes({2: stored}).save(tmp_path / "db", shard_rows=700)
    db = CircuitDB.open(folder)
    queries = float_codes(50, seed=10, prototypes_seed=9)
    on_gpu = db.search(queries, 2, k=10)
    assert on_gpu.attrs["served_by"].startswith("cuda:0")
    on_cpu = db.search(queries, 2, k=10, device="cpu")
    np.testing.assert_array_equal(on_gpu["circuit_id"].to_numpy(), on_cpu["circuit_id"].to_numpy())
    np.testing.assert_allclose(on_gpu["distance"].to_numpy(), on_cpu["distance"].to_numpy(), rtol=0, atol=1e-12)
    ids, distances = db.neighbours(2, [0, 699, 700, 2999], k=5)
    reference_ids, reference_distances = brute_force_search(stored, stored.rows([0, 699, 700, 2999]), 6)
    for row, circuit in enumerate([0, 699, 700, 2999]):
        keep = reference_ids[row] != circuit
        np.testing.assert_array_equal(ids[row], reference_ids[row][keep][:5])
        np.testing.assert_allclose(distances[row], reference_distances[row][keep][:5], atol=1e-12)
