"""One process-group setup for everything that runs under torchrun: training and sharded collection.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; `setup_distributed` reads them, joins the process group
(NCCL on CUDA, gloo on CPU) and pins each rank to its GPU. Without torchrun every function here is a no-op
on a single-process context, so callers need no branches of their own.

    context = setup_distributed("auto")
    try:
        device = device_for(context, "auto")
        ...
    finally:
        teardown_distributed(context)
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits: rank among world_size processes (1 and 0 when not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1


def setup_distributed(device: str = "auto", timeout_minutes: float = 30.0) -> DistributedContext:
    """Join the process group torchrun prepared (a no-op single-process context otherwise)."""
    if not launched_by_torchrun():
        return DistributedContext()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend)


def teardown_distributed(context: DistributedContext) -> None:
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA (weights and optimizer stay float32); plain float32 elsewhere."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def device_for(context: DistributedContext, device: str = "auto") -> torch.device:
    """The device of this rank: its own GPU under torchrun, else `device` ("auto": CUDA when present)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and context.enabled:
        return torch.device("cuda", context.local_rank)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but CUDA is not available here; use --device cpu")
    return torch.device(device)


def all_reduce_mean(values: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """Mean over ranks (the tensor itself when not distributed)."""
    if not context.enabled:
        return values
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values / context.world_size


def all_reduce_sum(values: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    if not context.enabled:
        return values
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def broadcast_object(value: Any, context: DistributedContext) -> Any:
    """Rank 0's value of a small picklable Python object on every rank (in-memory only, never from files)."""
    if not context.enabled:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def barrier(context: DistributedContext) -> None:
    if context.enabled:
        dist.barrier()
