"""Dense FFNs: the GELU MLP and SwiGLU baselines. Letters: B batch, T position, D d_model, F hidden."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from circuitlab.config import ModelConfig


class MLP(nn.Module):
    """W_out GELU(W_in z), no biases."""

    unit_kind = "gelu"

    def __init__(self, config: ModelConfig):
        super().__init__()
        d_model, d_ffw = config.d_model, config.feedforward.d_ffw
        self.W_in = nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_out = nn.Parameter(torch.empty(d_ffw, d_model))
        self.hook_pre = HookPoint()  # [B, T, F]
        self.hook_post = HookPoint()  # [B, T, F]: the unit activations W_out reads

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        pre_BxTxF = self.hook_pre(z_BxTxD @ self.W_in)
        post_BxTxF = self.hook_post(F.gelu(pre_BxTxF))
        return post_BxTxF @ self.W_out, None

    def unit_kinds(self) -> list[str]:
        return ["gelu"] * self.W_out.shape[0]


class SwiGLU(nn.Module):
    """W_out (SiLU(W_gate z) * W_in z), no biases."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d_model, d_ffw = config.d_model, config.feedforward.d_ffw
        self.W_gate = nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_in = nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_out = nn.Parameter(torch.empty(d_ffw, d_model))
        self.hook_pre = HookPoint()  # gate pre-activation [B, T, F]
        self.hook_pre_linear = HookPoint()  # linear branch [B, T, F]
        self.hook_post = HookPoint()  # [B, T, F]

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        gate_BxTxF = self.hook_pre(z_BxTxD @ self.W_gate)
        linear_BxTxF = self.hook_pre_linear(z_BxTxD @ self.W_in)
        post_BxTxF = self.hook_post(F.silu(gate_BxTxF) * linear_BxTxF)
        return post_BxTxF @ self.W_out, None

    def unit_kinds(self) -> list[str]:
        return ["swiglu"] * self.W_out.shape[0]
