"""Causal self-attention; its value mode (seed 002, section 3) is a design of its own (attention/<mode>.py):

standard:   V = X W_v
membership: V = sigmoid(X W_v) in [0, 1]                                  (seed 002, eq. 1)
boolean:    A = sigmoid(X W_a), B = sigmoid(X W_b), V = [A*B ; A*(1-B)]    (seed 002, eq. 2)
The first `n_special` heads use the bounded mode, the rest stay standard. W_O is always free. The value mode
adds its value parameters to the layer, computes the values and names the bounded channels.

Hooks follow TransformerLens: hook_q / hook_k are the projections X W_Q, X W_K, before QK-norm and RoPE;
hook_rot_q / hook_rot_k (RoPE models only) are what the scores read, after both. Its units are the heads
(each writes z_h W_O[h], hook_result); its bounded channels are the special heads' values and operands.

Letters: B batch, T/Q/K positions (query, key), H heads, S special heads, E d_head, D d_model.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.code_layer import ChannelGroup, CodeLayer, UnitWrites
from circuitlab.architectures.components import RMSNorm, Rotary, is_hooked, selectivity_penalty
from circuitlab.architectures.design import ModelShape



class Attention(CodeLayer):
    kind = "attention"

    def __init__(self, config: ModelShape):
        super().__init__()
        self.config = config
        n_heads, d_model, d_head = config.n_heads, config.d_model, config.d_head
        self.mode = config.attention
        self.value_mode = self.mode.value_mode
        self.n_special = self.mode.n_special
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.mode.add_value_parameters(self, config)
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.q_norm = RMSNorm(d_head, config.norm_eps) if config.attention.qk_norm else None
        self.k_norm = RMSNorm(d_head, config.norm_eps) if config.attention.qk_norm else None
        self.rotary = Rotary(d_head, config.rope_base) if config.positional == "rope" else None

        self.hook_q = HookPoint()  # [B, T, H, E] X W_Q, before QK-norm and RoPE
        self.hook_k = HookPoint()
        if self.rotary is not None:
            self.hook_rot_q = HookPoint()  # [B, T, H, E] after QK-norm and RoPE: what the scores read
            self.hook_rot_k = HookPoint()
        self.hook_v = HookPoint()  # [B, T, H, E]; bounded in the first n_special heads
        self.hook_operand_a = HookPoint()  # [B, T, S, E/2] boolean heads only
        self.hook_operand_b = HookPoint()
        self.hook_attn_scores = HookPoint()  # [B, H, Q, K]
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()  # [B, T, H, E]
        self.hook_result = HookPoint()  # [B, T, H, D] per-head write

    def forward(self, x_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, dict[str, Tensor] | None]:
        q_BxTxHxE = self.hook_q(torch.einsum("btd,hde->bthe", x_BxTxD, self.W_Q))
        k_BxTxHxE = self.hook_k(torch.einsum("btd,hde->bthe", x_BxTxD, self.W_K))
        if self.q_norm is not None:
            q_BxTxHxE, k_BxTxHxE = self.q_norm(q_BxTxHxE), self.k_norm(k_BxTxHxE)
        if self.rotary is not None:
            q_BxTxHxE = self.hook_rot_q(self.rotary(q_BxTxHxE))
            k_BxTxHxE = self.hook_rot_k(self.rotary(k_BxTxHxE))

        v_BxTxHxE, operands = self._values(x_BxTxD)
        v_BxTxHxE = self.hook_v(v_BxTxHxE)

        if is_hooked(self.hook_attn_scores, self.hook_pattern):
            scores_BxHxQxK = torch.einsum("bqhe,bkhe->bhqk", q_BxTxHxE.float(), k_BxTxHxE.float())
            scores_BxHxQxK = scores_BxHxQxK / math.sqrt(self.config.d_head)
            n_pos = scores_BxHxQxK.shape[-1]
            future = torch.triu(torch.ones(n_pos, n_pos, dtype=torch.bool, device=x_BxTxD.device), 1)
            scores_BxHxQxK = self.hook_attn_scores(scores_BxHxQxK.masked_fill(future, float("-inf")))
            pattern_BxHxQxK = self.hook_pattern(scores_BxHxQxK.softmax(-1))
            z_BxTxHxE = torch.einsum("bhqk,bkhe->bqhe", pattern_BxHxQxK, v_BxTxHxE.float()).to(v_BxTxHxE.dtype)
        else:
            # nobody observes the pattern: fused kernel, same softmax(QK^T / sqrt(E)) V
            z_BxHxTxE = F.scaled_dot_product_attention(
                q_BxTxHxE.transpose(1, 2), k_BxTxHxE.transpose(1, 2), v_BxTxHxE.transpose(1, 2), is_causal=True
            )
            z_BxTxHxE = z_BxHxTxE.transpose(1, 2)
        z_BxTxHxE = self.hook_z(z_BxTxHxE)

        if is_hooked(self.hook_result):
            result_BxTxHxD = self.hook_result(torch.einsum("bthe,hed->bthd", z_BxTxHxE, self.W_O))
            out_BxTxD = result_BxTxHxD.sum(2)
        else:
            out_BxTxD = torch.einsum("bthe,hed->btd", z_BxTxHxE, self.W_O)

        penalty = selectivity_penalty(operands, "attn", self.config.selectivity, self.config.n_layers)
        return out_BxTxD, penalty

    def _values(self, x_BxTxD: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The value of every head, and the bounded operands the selectivity pressures act on."""
        return self.mode.values(self, x_BxTxD)

    # --- its units and channels (see CodeLayer) ---------------------------------------------------------

    def unit_kinds(self) -> list[str]:
        """The value mode of each head."""
        return [self.value_mode if head < self.n_special else "standard" for head in range(self.config.n_heads)]

    def unit_name(self, unit: int) -> str:
        return f"L{self.layer_index}H{unit}"

    def layout(self) -> dict:
        return {"kind": self.kind, "value_mode": self.value_mode, "n_special": self.n_special,
                "n_heads": self.config.n_heads}

    def unit_write_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_result)]

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        """Each head's write z_h W_O[h]; they sum to hook_attn_out."""
        result_HxD = read(self.hook_name(self.hook_result))
        heads = list(range(result_HxD.shape[0]))
        return UnitWrites(writes_NxD=result_HxD, ids=heads, kind="attn_head", operations=self.unit_kinds(),
                          labels=[self.unit_name(head) for head in heads])

    def design_label(self) -> str:
        return f"{self.value_mode} head-{round(100 * self.n_special / self.config.n_heads)}"

    def bounded_channels(self) -> list[ChannelGroup]:
        return self.mode.bounded_channels(self) if self.n_special else []
