"""SwiGLU, the gated dense baseline: out = W_out (SiLU(W_gate z) * W_in z), no biases.

Its code is the `code_k` largest |post_f| of a token (circuitlab.architectures.feedforward.hidden).

Letters: B batch, T position, D d_model, F hidden.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.design import FeedForwardPart, LayerCost, ModelShape, PositiveInt
from circuitlab.architectures.feedforward.hidden import HiddenUnitFFN



class SwiGLUConfig(FeedForwardPart):
    """SwiGLU of `d_ffw` hidden units; its sparse code keeps the `code_k` largest |activations|."""

    type: Literal["swiglu"] = "swiglu"
    d_ffw: PositiveInt = 1024
    code_k: PositiveInt = 32
    label = "SwiGLU"
    gated = True

    def build(self, config: ModelShape) -> SwiGLU:
        return SwiGLU(config)

    def cost(self, d_model: int) -> LayerCost:
        return LayerCost(matmul_weights=3 * d_model * self.d_ffw, total_parameters=3 * d_model * self.d_ffw)

    def describe(self) -> str:
        return f"swiglu, width {self.d_ffw}"

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any]:
        return {"d_ffw": int(8 / 3 * d_model / 256) * 256}


class SwiGLU(HiddenUnitFFN):
    """W_out (SiLU(W_gate z) * W_in z), no biases."""

    kind = "swiglu"

    def __init__(self, config: ModelShape):
        super().__init__(config)
        d_model, d_ffw = config.d_model, config.feedforward.d_ffw
        self.W_gate = torch.nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_in = torch.nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_out = torch.nn.Parameter(torch.empty(d_ffw, d_model))
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
