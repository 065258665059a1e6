"""Boolean attention values (seed 002, eq. 2): the first `n_special` heads compute two half-width operands
A = sigmoid(X W_a), B = sigmoid(X W_b) and the value V = [A*B ; A*(1-B)] (and, and-not); the rest stay
standard. W_a and W_b replace the special heads' W_v, so the layer keeps the standard head's parameter count.

Letters: B batch, T position, H heads, S special heads, E d_head (E/2 per operand), D d_model.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import StrictBool
from torch import Tensor, nn

from circuitlab.architectures.code_layer import ChannelGroup
from circuitlab.architectures.design import CountInt, ModelShape, ValueModePart



class BooleanAttentionConfig(ValueModePart):
    """The first `n_special` heads compute V = [A*B ; A*(1-B)] from two half-width operands (seed 002, eq. 2)."""

    value_mode: Literal["boolean"] = "boolean"
    n_special: CountInt = 0
    qk_norm: StrictBool = True

    def check(self, config: ModelShape) -> None:
        super().check(config)
        if config.d_head % 2:
            raise ValueError(
                f"boolean heads split the value into two half-width operands: d_head={config.d_head} must be even"
            )

    def add_value_parameters(self, attn: nn.Module, config: ModelShape) -> None:
        n_heads, d_model, d_head = config.n_heads, config.d_model, config.d_head
        attn.W_V = nn.Parameter(torch.empty(n_heads - self.n_special, d_model, d_head))
        attn.W_A = nn.Parameter(torch.empty(self.n_special, d_model, d_head // 2))
        attn.W_B = nn.Parameter(torch.empty(self.n_special, d_model, d_head // 2))

    def values(self, attn: nn.Module, x_BxTxD: Tensor) -> tuple[Tensor, list[Tensor]]:
        standard_BxTxHxE = torch.einsum("btd,hde->bthe", x_BxTxD, attn.W_V)
        if not self.n_special:
            return standard_BxTxHxE, []
        a_BxTxSxE2 = attn.hook_operand_a(torch.sigmoid(torch.einsum("btd,hde->bthe", x_BxTxD, attn.W_A)))
        b_BxTxSxE2 = attn.hook_operand_b(torch.sigmoid(torch.einsum("btd,hde->bthe", x_BxTxD, attn.W_B)))
        special_BxTxSxE = torch.cat([a_BxTxSxE2 * b_BxTxSxE2, a_BxTxSxE2 * (1 - b_BxTxSxE2)], dim=-1)
        return torch.cat([special_BxTxSxE, standard_BxTxHxE], dim=2), [a_BxTxSxE2, b_BxTxSxE2]

    def bounded_channels(self, attn: nn.Module) -> list[ChannelGroup]:
        heads, layer, half = slice(0, self.n_special), attn.layer_index, attn.config.d_head // 2
        return [
            ChannelGroup("attention", layer, attn.hook_name(attn.hook_operand_a), "operand_a", True, False, heads),
            ChannelGroup("attention", layer, attn.hook_name(attn.hook_operand_b), "operand_b", True, False, heads),
            # seed 002, eq. 2: V = [A*B ; A*(1-B)]
            ChannelGroup("attention", layer, attn.hook_name(attn.hook_v), "and", False, True, heads, slice(0, half)),
            ChannelGroup("attention", layer, attn.hook_name(attn.hook_v), "andnot", False, True, heads,
                         slice(half, 2 * half)),
        ]
