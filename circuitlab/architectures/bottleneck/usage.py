"""What keeps a parity bottleneck's features in use: a bias path and a usage-balancing term.

The dictionary is computed from a seeded code, not learned, so a feature nobody uses has no parameters a
resampling step could move (dead-latent resampling is for learned dictionaries, as in the sparse autoencoder
of circuitlab.analysis.sae). What collapses is the FFN's writes: they live in a few directions, and a few
features carry them for every token. Two terms act on the writes instead:

- bias path: the write x is coded as b + sum_i a_i phi_i with b a learned vector (zero at the start), the
  least squares fitted to x - b. The part of the writes common to every token goes to b, so no feature has to
  be on for every token to carry it.
- usage balance: with w_u the share of the batch's coefficient mass sum |a_i| that feature u carries,
  balance = m * sum_u w_u^2 is 1 when every feature carries the same mass and m when one carries all (m /
  balance is the Simpson effective number of features). Training adds lambda_balance * balance to the loss;
  its gradient reaches the FFN through the coefficients (least squares is differentiable in x), lowering
  the mass of the features the batch leans on most.
"""

from __future__ import annotations

import torch
from torch import Tensor


def usage_balance(indices: Tensor, values: Tensor, n_features: int) -> Tensor:
    """m * sum_u w_u^2 over the batch (float32 scalar; 1 for perfectly spread mass, m for a single feature)."""
    mass = values.abs().float().reshape(-1)
    shares = torch.zeros(n_features, device=mass.device, dtype=mass.dtype).index_add(0, indices.reshape(-1).long(), mass)
    shares = shares / mass.sum().clamp_min(torch.finfo(torch.float32).tiny)
    return n_features * shares.pow(2).sum()
