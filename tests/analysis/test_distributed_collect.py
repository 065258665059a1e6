"""Circuit collection sharded across torchrun ranks (gloo on CPU) equals single-process collection."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from circuitlab import load_model
from circuitlab.analysis.circuitdb import CircuitDB
from circuitlab.analysis.collect import collect
from circuitlab.analysis.collect_ranks import merge_collections
from circuitlab.data import held_out_stories


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_merged_parts_equal_single_process_collection(tiny_trained, tmp_path):
    model = load_model(tiny_trained)
    stories = held_out_stories(7)
    single = collect(model, stories, out_dir=tmp_path / "single", progress=False)
    world = 3
    parts = [collect(model, stories[r::world], out_dir=tmp_path / f"rank{r}", progress=False) for r in range(world)]
    merged = merge_collections(parts, world, tmp_path / "merged")
    a, b = single.metadata(), merged.metadata()
    assert len(a) == len(b) == single.stats.n_tokens
    for column in ("circuit_id", "sequence_id", "position", "token_id", "token", "category", "context"):
        assert a[column].tolist() == b[column].tolist(), column
    for layer in single.layers:
        assert np.array_equal(single.codes(layer).indices, merged.codes(layer).indices)
        # batches are composed differently on each rank, so float rounding may differ in the last bits
        np.testing.assert_allclose(single.codes(layer).values, merged.codes(layer).values, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_torchrun_two_ranks_build_the_same_database(tiny_trained, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
         "-m", "circuitlab.analysis.collect_ranks", str(tiny_trained), "--stories", "6", "--out", str(tmp_path / "db"),
         "--batch-size", "4", "--no-index"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    model = load_model(tiny_trained)
    distributed = CircuitDB.load(tmp_path / "db", model=model)
    single = CircuitDB.build(model, held_out_stories(6), index=None, progress=False)
    assert len(distributed) == len(single)
    query = single.code(1, np.arange(5))
    for exact in (True,):
        ours = distributed.search(query, layer=1, k=3, exact=exact)
        theirs = single.search(query, layer=1, k=3, exact=exact)
        assert ours["circuit_id"].tolist() == theirs["circuit_id"].tolist()
        np.testing.assert_allclose(ours["distance"], theirs["distance"], atol=1e-6)
