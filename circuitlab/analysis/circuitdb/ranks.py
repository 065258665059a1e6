"""A database split over the ranks of a torchrun job: each rank searches its own shards, the answers merge.

    context = setup_distributed("auto")         # NCCL on GPUs, gloo on CPUs (circuitlab/distributed.py)
    db = CircuitDB.open(folder); db.distribute(context)
    hits = db.search(queries, layer, k)          # on every rank, the same answer

The shards are cut into `world_size` contiguous runs of about equal rows; rank r opens and searches only its
run (on its own GPU, `LOCAL_RANK`, or the CPU). Each rank's k best of its rows go to every rank (all_gather
through torch.distributed) and are merged by (distance, circuit id): every circuit lives in exactly one
run, so the merged k best are the k best of the whole database. Queries are rank 0's: a text query is turned
into codes on rank 0 and broadcast, so every rank searches the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from circuitlab.analysis.circuitdb.search import Served, approximate_ids, device_name, exact_ids, merge_top_k
from circuitlab.distributed import DistributedContext, broadcast_object


@dataclass
class RankPlan:
    """This rank's place in the job and the shards it searches."""

    context: DistributedContext
    shards: list[int]

    @classmethod
    def split(cls, table, context: DistributedContext) -> "RankPlan":
        """Contiguous runs of shards, one per rank, cut where the rows pass r / world of the total."""
        middles = (table.starts[:-1] + table.starts[1:]) / 2.0
        owner = np.minimum((middles * context.world_size / max(table.n_rows, 1)).astype(int), context.world_size - 1)
        return cls(context, [int(shard) for shard in np.flatnonzero(owner == context.rank)])

    def device(self, device: str | None):
        """This rank's device: its own GPU under "auto" or "cuda" when there are GPUs, else the CPU."""
        import torch

        choice = (device or "auto").lower()
        if choice in ("auto", "cuda") and torch.cuda.is_available():
            return torch.device("cuda", self.context.local_rank)
        return torch.device("cpu") if choice in ("auto", "cpu") else torch.device(choice)

    def same_queries(self, value: Any) -> Any:
        """Rank 0's value on every rank (the queries every rank must search)."""
        return broadcast_object(value, self.context)

    def search(self, db, queries, layer: int, k: int, exact: bool, exclude, n_candidates, device):
        where = self.device(device)
        if self.shards:
            search = exact_ids if exact else approximate_ids
            options = () if exact else (n_candidates,)
            ids, distances, served = search(db, queries, layer, k, exclude, *options, where, self.shards)
        else:  # more ranks than shards: this one holds none
            ids = np.full((len(queries), k), -1, dtype=np.int64)
            distances = np.full((len(queries), k), np.inf)
            served = Served(str(where), device_name(where), "nothing (no shards on this rank)")
        merged_ids, merged_distances = gather_top_k(ids, distances, k, self.context)
        return merged_ids, merged_distances, Served(served.device, served.device_name, served.engine,
                                                    ranks=self.context.world_size)


def gather_top_k(ids: np.ndarray, distances: np.ndarray, k: int, context: DistributedContext) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's k best (circuit ids [Q, k], distances [Q, k]) sent to every rank and merged by (distance,
    circuit id): the k best of the union, the same on all ranks."""
    import torch
    import torch.distributed as dist

    if not context.enabled:
        return ids, distances
    carrier = torch.device("cuda", context.local_rank) if context.backend == "nccl" else torch.device("cpu")
    local = torch.cat([torch.from_numpy(ids).double(), torch.from_numpy(distances)], dim=1).to(carrier)
    gathered = [torch.empty_like(local) for _ in range(context.world_size)]
    dist.all_gather(gathered, local)  # circuit ids < 2^53 travel exactly as float64
    parts = []
    for part in gathered:
        part = part.cpu().numpy()
        parts.append((part[:, :k].astype(np.int64), part[:, k:]))
    return merge_top_k(parts, k)
