"""A database split over torchrun ranks (gloo on the CPU): `circuitlab db query` on 2 ranks prints and writes
what it does in one process, exact and approximate."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from circuitlab.analysis.circuitdb import CircuitDB
from circuitlab.analysis.circuitdb.ranks import RankPlan
from circuitlab.analysis.codeindex import structured_synthetic_codes
from circuitlab.distributed import DistributedContext


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_take_contiguous_runs_of_shards_with_about_equal_rows(tmp_path):
    db = CircuitDB.from_codes({0: structured_synthetic_codes(1000, seed=0)})
    folder = db.save(tmp_path / "db", shard_rows=90)  # 12 shards, the last of 10 rows
    table = CircuitDB.open(folder).shard_table
    for world in (1, 2, 3, 8, 16):
        plans = [RankPlan.split(table, DistributedContext(rank, world, rank, "gloo")).shards for rank in range(world)]
        assert sorted(sum(plans, [])) == list(range(12))  # every shard on exactly one rank
        assert all(plan == list(range(plan[0], plan[-1] + 1)) for plan in plans if plan)
        rows = [sum(int(np.diff(table.rows_of(s))[0]) for s in plan) for plan in plans]
        assert max(rows) - min(rows) <= 2 * 90 or world > 12


@pytest.mark.slow
def test_two_gloo_ranks_answer_as_one_process(tmp_path):
    db = CircuitDB.from_codes({layer: structured_synthetic_codes(2000, seed=layer) for layer in (0, 1)},
                              pd.DataFrame({"token": [f"t{i % 9}" for i in range(2000)]}))
    folder = db.save(tmp_path / "db", shard_rows=300)
    opened = CircuitDB.open(folder)
    opened.build_index(kind="flat", progress=False, n_recall_queries=20)
    from circuitlab.analysis.circuitdb.store import save_indexes

    save_indexes(opened, folder)
    query = ["db", "query", str(folder), "--circuit", "5", "17", "299", "300", "1999", "--layer", "1", "-k", "6",
             "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for extra in ([], ["--approximate"]):
        single = subprocess.run([sys.executable, "-m", "circuitlab.cli", *query, *extra, "--csv", str(tmp_path / "one.csv")],
                                capture_output=True, text=True, env=env, timeout=300)
        assert single.returncode == 0, single.stderr[-3000:]
        ranked = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
             "-m", "circuitlab.cli", *query, *extra, "--csv", str(tmp_path / "two.csv")],
            capture_output=True, text=True, env=env, timeout=300,
        )
        assert ranked.returncode == 0, ranked.stderr[-3000:]
        assert "2 ranks" in ranked.stdout and "2 ranks" not in single.stdout
        one, two = pd.read_csv(tmp_path / "one.csv"), pd.read_csv(tmp_path / "two.csv")
        pd.testing.assert_frame_equal(one, two)
        assert len(one) == 30 and (one.groupby("query_position")["distance"].min() < 1e-9).all()
        # the table printed by rank 0 alone: one header line per run
        assert ranked.stdout.count("Neighbour top predictions") == 1
