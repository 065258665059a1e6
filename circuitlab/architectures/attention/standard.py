"""Standard attention values: every head computes V = X W_v.

Letters: B batch, T position, H heads, E d_head, D d_model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from pydantic import StrictBool
from torch import Tensor, nn

from circuitlab.architectures.design import ModelShape, ValueModePart

if TYPE_CHECKING:
    from circuitlab.architectures.code_layer import ChannelGroup


class StandardAttentionConfig(ValueModePart):
    """Every head computes V = X W_v (no special heads: n_special is 0)."""

    value_mode: Literal["standard"] = "standard"
    n_special: Literal[0] = 0
    qk_norm: StrictBool = True

    def add_value_parameters(self, attn: nn.Module, config: ModelShape) -> None:
        attn.W_V = nn.Parameter(torch.empty(config.n_heads, config.d_model, config.d_head))

    def values(self, attn: nn.Module, x_BxTxD: Tensor) -> tuple[Tensor, list[Tensor]]:
        return torch.einsum("btd,hde->bthe", x_BxTxD, attn.W_V), []

    def bounded_channels(self, attn: nn.Module) -> list[ChannelGroup]:
        return []
