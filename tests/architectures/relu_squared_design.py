"""A sixth FFN design, written the way a user adds one: this file plus one `register_design` line.

ReLU^2 MLP: out = W_out relu(W_in z)^2 (no biases). Its code, units and bounded channels come from the
hidden-unit base every dense FFN shares.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.design import FeedForwardPart, LayerCost, ModelShape, PositiveInt
from circuitlab.architectures.feedforward.hidden import HiddenUnitFFN


class ReLUSquaredConfig(FeedForwardPart):
    type: Literal["relu2"] = "relu2"
    d_ffw: PositiveInt = 256
    code_k: PositiveInt = 16
    label = "ReLU^2 MLP"

    def build(self, config: ModelShape) -> ReLUSquared:
        return ReLUSquared(config)

    def cost(self, d_model: int) -> LayerCost:
        return LayerCost(matmul_weights=2 * d_model * self.d_ffw, total_parameters=2 * d_model * self.d_ffw)

    def describe(self) -> str:
        return f"relu2, width {self.d_ffw}"

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any]:
        return {"d_ffw": 4 * d_model}


class ReLUSquared(HiddenUnitFFN):
    kind = "relu2"

    def __init__(self, config: ModelShape):
        super().__init__(config)
        self.W_in = torch.nn.Parameter(torch.empty(config.d_model, config.feedforward.d_ffw))
        self.W_out = torch.nn.Parameter(torch.empty(config.feedforward.d_ffw, config.d_model))
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, z: Tensor) -> tuple[Tensor, None]:
        post = self.hook_post(torch.relu(self.hook_pre(z @ self.W_in)) ** 2)
        return post @ self.W_out, None

    def unit_kinds(self) -> list[str]:
        return ["relu2"] * self.W_out.shape[0]
