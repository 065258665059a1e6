"""Small parts shared by every architecture: norms, rotary positions, hook helpers.

Letters: B batch, T position, H heads, E d_head, D d_model.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint



def is_hooked(*hook_points: HookPoint) -> bool:
    """True when any of these hook points has a forward hook or a forward pre-hook (e.g. while caching or
    patching): either can see the tensor, and change it in place.

    Layers use it to take the fused fast path only when nobody observes the intermediate tensors.
    """
    return any(len(hp._forward_hooks) > 0 or len(hp._forward_pre_hooks) > 0 for hp in hook_points)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, computed in float32 (w initialised to 1)."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(width))
        # [..., 1]: the rms the input is divided by (TransformerLens' meaning, which its apply_ln_to_stack
        # reads); frozen by DLA
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: Float[Tensor, "... width"]) -> Float[Tensor, "... width"]:
        x32 = x.float()
        scale = self.hook_scale(torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps))
        return self.hook_normalized((x32 / scale * self.w.float()).to(x.dtype))


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * w + b, computed in float32."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(width))
        self.b = nn.Parameter(torch.zeros(width))
        self.hook_scale = HookPoint()  # [..., 1]: the standard deviation the input is divided by
        self.hook_normalized = HookPoint()

    def forward(self, x: Float[Tensor, "... width"]) -> Float[Tensor, "... width"]:
        x32 = x.float()
        centred = x32 - x32.mean(-1, keepdim=True)
        scale = self.hook_scale(torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps))
        return self.hook_normalized((centred / scale * self.w.float() + self.b.float()).to(x.dtype))


def make_norm(kind: str, width: int, eps: float) -> nn.Module:
    return RMSNorm(width, eps) if kind == "rmsnorm" else LayerNorm(width, eps)


class Rotary(nn.Module):
    """RoPE, half-split ("rotate_half") convention: pairs (x_i, x_(i + E/2)) rotate by t * base^(-2i/E)."""

    def __init__(self, d_head: int, base: float = 10000.0):
        super().__init__()
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x_BxTxHxE: Float[Tensor, "batch pos head d_head"]) -> Float[Tensor, "batch pos head d_head"]:
        n_pos = x_BxTxHxE.shape[1]
        angle_TxE2 = torch.arange(n_pos, device=x_BxTxHxE.device, dtype=torch.float32)[:, None] * self.inv_freq
        cos = torch.cat([angle_TxE2.cos()] * 2, -1)[None, :, None, :]
        sin = torch.cat([angle_TxE2.sin()] * 2, -1)[None, :, None, :]
        x32 = x_BxTxHxE.float()
        first, second = x32.chunk(2, dim=-1)
        rotated = torch.cat([-second, first], dim=-1)
        return (x32 * cos + rotated * sin).to(x_BxTxHxE.dtype)


def selectivity_penalty(
    operands: list[Tensor], surface: str, selectivity: Any, n_layers: int  # selectivity: config.SelectivityConfig
) -> dict[str, Tensor] | None:
    """seed 002, section 3.6: lambda_s * sum |v| and lambda_c * sum v (1 - v) over one layer's operands, as
    {"<surface>_sparsity": ..., "<surface>_crispness": ...} (only the terms that are on), in nats/token.

    normalization "sum": summed over channels, averaged over tokens (the layer terms add up over layers).
    normalization "mean": averaged over tokens and channels and divided by n_layers, so the terms summed
    over layers are the mean over the whole surface. Operands lie in [0, 1], so |v| = v. None when both
    pressures of the surface are off.
    """
    sparsity = float(getattr(selectivity, f"{surface}_sparsity"))
    crispness = float(getattr(selectivity, f"{surface}_crispness"))
    if (sparsity == 0 and crispness == 0) or not operands:
        return None
    v_sum = operands[0].new_zeros((), dtype=torch.float32)
    crisp_sum = operands[0].new_zeros((), dtype=torch.float32)
    n_channels = 0
    for v in operands:
        v32 = v.float()
        if sparsity:
            v_sum = v_sum + v32.sum()
        if crispness:
            crisp_sum = crisp_sum + (v32 * (1 - v32)).sum()
        n_channels += math.prod(v32.shape[2:])
    tokens = operands[0].shape[0] * operands[0].shape[1]
    denominator = tokens if selectivity.normalization == "sum" else tokens * n_channels * n_layers
    terms = {}
    if sparsity:
        terms[f"{surface}_sparsity"] = sparsity * v_sum / denominator
    if crispness:
        terms[f"{surface}_crispness"] = crispness * crisp_sum / denominator
    return terms
