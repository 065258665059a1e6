"""Data-parallel training through PyTorch's own engine, launched with torchrun.

    torchrun --nproc_per_node=2 -m circuitlab.cli train --preset sgatlin-stories ...

The process group comes from `circuitlab.distributed` (shared with sharded collection). The global batch of an optimizer step is split
into equal contiguous slices, one per rank; every rank averages its slice's loss, DDP averages the gradients,
so the update equals single-process training on the whole batch (up to float rounding). Rank 0 alone logs
and writes checkpoints; every rank loads the same checkpoint to resume.

`--fsdp` wraps the model with FSDP2 (`torch.distributed.fsdp.fully_shard`) per block and at the root, so
parameters, gradients and Adam moments are sharded across ranks: the option for models whose experts (the
sgatlin `experts` tensor, [2, C, N, d_model]) outgrow one GPU. Checkpoints are still written as full,
unsharded tensors (gathered to rank 0), so a checkpoint does not depend on the number of ranks.
"""

from __future__ import annotations

from torch import nn

from circuitlab.distributed import DistributedContext


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
