"""Data-parallel training through PyTorch's own engine, launched with torchrun.

    torchrun --nproc_per_node=2 -m circuitlab.cli train --preset sgatlin-stories ...

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; `setup_distributed` reads them, joins the process group
(NCCL on CUDA, gloo on CPU) and pins each rank to its GPU. The global batch of an optimizer step is split
into equal contiguous slices, one per rank; every rank averages its slice's loss, DDP averages the gradients,
so the update equals single-process training on the whole batch (up to float rounding). Rank 0 alone logs
and writes checkpoints; every rank loads the same checkpoint to resume.

`--fsdp` wraps the model with FSDP2 (`torch.distributed.fsdp.fully_shard`) per block and at the root, so
parameters, gradients and Adam moments are sharded across ranks: the option for models whose experts (the
sgatlin `experts` tensor, [2, C, N, d_model]) outgrow one GPU. Checkpoints are still written as full,
unsharded tensors (gathered to rank 0), so a checkpoint does not depend on the number of ranks.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


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


def device_for(context: DistributedContext, device: str = "auto") -> torch.device:
    """The device of this rank: its own GPU under torchrun, else `device` ("auto": CUDA when present)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and context.enabled:
        return torch.device("cuda", context.local_rank)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but CUDA is not available here; use --device cpu")
    return torch.device(device)


def wrap_model(model: nn.Module, context: DistributedContext, fsdp: bool = False) -> nn.Module:
    """DDP (default) or FSDP2 around `model` when distributed; the model itself otherwise."""
    if not context.enabled:
        if fsdp:
            raise ValueError("--fsdp shards a model across processes: launch with torchrun --nproc_per_node=N")
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        # zero-size parameters (e.g. W_V when every head is Boolean) cannot be chunked; there is nothing to shard
        empty = {param for param in model.parameters() if param.numel() == 0}
        for block in model.blocks:
            fully_shard(block, ignored_params=empty)
        fully_shard(model, ignored_params=empty)
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [model.W_E.device.index] if model.W_E.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The CircuitTransformer inside a DDP wrapper (FSDP2 shards in place, so it is the model itself)."""
    inner = getattr(model, "module", model)
    return getattr(inner, "_orig_mod", inner)


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
