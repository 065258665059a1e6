"""The held-out loss the loop reports: mean next-token cross-entropy in nats over held-out windows, split
evenly across ranks and summed over them."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor

from circuitlab.distributed import autocast_for
from circuitlab.distributed import DistributedContext, all_reduce_sum


@torch.no_grad()
def held_out_loss(
    forward: Callable[[Tensor], Tensor], windows: Int[Tensor, "n window"], context: DistributedContext,
    device: torch.device, batch_size: int, max_windows: int | None = None,
) -> float:
    """Mean next-token cross-entropy of `forward` (tokens -> logits) over `windows` (the first `max_windows`),
    each rank taking every world_size-th window; every rank gets the same number."""
    if max_windows is not None and max_windows > 0:
        windows = windows[:max_windows]
    usable = (windows.shape[0] // context.world_size) * context.world_size
    local = windows[:usable][context.rank :: context.world_size]
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    for start in range(0, local.shape[0], batch_size):
        batch = local[start : start + batch_size].to(device).long()
        with autocast_for(device):
            logits_BxTxV = forward(batch[:, :-1])
        loss_sum = F.cross_entropy(
            logits_BxTxV.float().reshape(-1, logits_BxTxV.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
        )
        totals += torch.stack([loss_sum.double(), torch.tensor(batch[:, 1:].numel(), device=device, dtype=torch.float64)])
    totals = all_reduce_sum(totals, context)
    return float(totals[0] / totals[1])
