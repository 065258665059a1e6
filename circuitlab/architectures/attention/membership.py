"""Membership attention values (seed 002, eq. 1): the first `n_special` heads compute V = sigmoid(X W_v), a
value in [0, 1] per channel; the rest stay standard.

Letters: B batch, T position, H heads, S special heads, E d_head, D d_model.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import StrictBool
from torch import Tensor, nn

from circuitlab.architectures.code_layer import ChannelGroup
from circuitlab.architectures.design import CountInt, ModelShape, ValueModePart



class MembershipAttentionConfig(ValueModePart):
    """The first `n_special` heads compute V = sigmoid(X W_v) (seed 002, eq. 1)."""

    value_mode: Literal["membership"] = "membership"
    n_special: CountInt = 0
    qk_norm: StrictBool = True

    def add_value_parameters(self, attn: nn.Module, config: ModelShape) -> None:
        attn.W_V = nn.Parameter(torch.empty(config.n_heads, config.d_model, config.d_head))

    def values(self, attn: nn.Module, x_BxTxD: Tensor) -> tuple[Tensor, list[Tensor]]:
        v_BxTxHxE = torch.einsum("btd,hde->bthe", x_BxTxD, attn.W_V)
        if not self.n_special:
            return v_BxTxHxE, []
        membership_BxTxSxE = torch.sigmoid(v_BxTxHxE[:, :, : self.n_special])
        return torch.cat([membership_BxTxSxE, v_BxTxHxE[:, :, self.n_special :]], dim=2), [membership_BxTxSxE]

    def bounded_channels(self, attn: nn.Module) -> list[ChannelGroup]:
        heads = slice(0, self.n_special)
        return [ChannelGroup("attention", attn.layer_index, attn.hook_name(attn.hook_v), "membership", True, True, heads)]
