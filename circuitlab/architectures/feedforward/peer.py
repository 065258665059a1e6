"""PEER: parameter-efficient expert retrieval, seed 000's fine-grained MoE baseline (its reference [11]).

`N` = d_ffw single-neuron experts (u_i, v_i) are shared by C retrieval heads ("channels"). Per token z and
head c: query q_c = z W_query[:, c] (each head its own projection, unlike sgatlin's shared one), split into
halves (q_c1, q_c2); subkey scores s_ch[j] = q_ch . K_ch[j] for n = sqrt(N) subkeys per half; product top-k
picks k experts (i = i1 * n + i2, score s_c1[i1] + s_c2[i2]); gates g = softmax over the k scores;
out = sum_c sum_i g_ci sigma(u_i . z) v_i with sigma the expert nonlinearity (GELU by default). PEER's
batch normalisation of the queries is left out (seed 000's comparison does not mention it).

Compared with sgatlin (seed 000, section 5.2): experts shared across heads, a query projection per head, a
softmax over the gates and a nonlinearity on each expert.

Its code is the gate vector: C*k (slot, gate) pairs per token, slot ids c * N + i (head c retrieving expert
i), so two heads retrieving the same expert stay two units; each slot writes g * sigma(u_i . z) * v_i.

Letters: B batch, T position, D d_model, Q d_key, H = Q/2, C heads, n keys per half, N = n*n experts, K gates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from pydantic import model_validator
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

import circuitlab.kernels as kernels
from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.architectures.design import FeedForwardPart, LayerCost, ModelShape, PositiveInt
from circuitlab.architectures.feedforward.sgatlin import check_product_keys, peer_subkey_scores
from circuitlab.codes import SparseCode


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}


class ExpertDot(torch.autograd.Function):
    """u_i . z for the retrieved experts, [B, T, C, K], without keeping the gathered [B, T, C, K, D] rows for
    the backward pass (they are gathered again there): the activation memory of a layer stays O(B T D)."""

    @staticmethod
    def forward(ctx: Any, z_BxTxD: Tensor, indices_BxTxCxK: Tensor, weight_NxD: Tensor) -> Tensor:
        ctx.save_for_backward(z_BxTxD, indices_BxTxCxK, weight_NxD)
        return torch.einsum("btd,btckd->btck", z_BxTxD, F.embedding(indices_BxTxCxK, weight_NxD))

    @staticmethod
    def backward(ctx: Any, grad_BxTxCxK: Tensor) -> tuple[Tensor, None, Tensor]:
        z_BxTxD, indices_BxTxCxK, weight_NxD = ctx.saved_tensors
        dtype = grad_BxTxCxK.dtype
        rows = F.embedding(indices_BxTxCxK, weight_NxD).to(dtype)
        grad_z = torch.einsum("btck,btckd->btd", grad_BxTxCxK, rows).to(z_BxTxD.dtype)
        del rows
        contributions = grad_BxTxCxK[..., None] * z_BxTxD.to(dtype)[:, :, None, None, :]
        grad_weight = torch.zeros_like(weight_NxD).index_add_(
            0, indices_BxTxCxK.reshape(-1), contributions.reshape(-1, z_BxTxD.shape[-1]).to(weight_NxD.dtype))
        return grad_z, None, grad_weight


class PEERConfig(FeedForwardPart):
    """PEER (the fine-grained MoE baseline of seed 000): `d_ffw` single-neuron experts (a perfect square, for
    product keys) shared by `n_channels` retrieval heads; each head has its own query projection to `d_key`
    (split in two halves for the product keys), retrieves `k` experts, softmaxes their scores and applies
    `activation` to each expert's input. Its code is the softmax gates of the retrieved experts."""

    type: Literal["peer"] = "peer"
    d_ffw: PositiveInt = 1024
    n_channels: PositiveInt = 8
    k: PositiveInt = 8
    d_key: PositiveInt = 128
    activation: Literal["gelu", "relu", "silu"] = "gelu"
    label = "PEER"

    @model_validator(mode="after")
    def _product_keys(self) -> PEERConfig:
        check_product_keys("peer", "experts", self.d_ffw, self.k)
        if self.d_key % 2:
            raise ValueError(f"peer d_key={self.d_key} must be even (the query splits into two product-key halves)")
        return self

    def build(self, config: ModelShape) -> PEER:
        return PEER(config)

    def cost(self, d_model: int) -> LayerCost:
        """Every head's query projection and subkeys, and the C*k retrieved experts' rows."""
        n_keys, channels = math.isqrt(self.d_ffw), self.n_channels
        router = d_model * channels * self.d_key + (self.d_key // 2) * 2 * channels * n_keys
        return LayerCost(matmul_weights=router + 2 * channels * self.k * d_model,
                         total_parameters=router + 2 * self.d_ffw * d_model)

    def describe(self) -> str:
        return (f"peer, {self.d_ffw} experts shared by {self.n_channels} heads, k {self.k} per head, d_key "
                f"{self.d_key}, {self.activation} experts")

    def hidden_units(self) -> int:
        return self.d_ffw * self.n_channels  # slot ids c * N + i

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any]:
        """seed 000, appendix B.2: N = (32 + 24 s)^2 experts, 16 heads, k 8, d_key 128."""
        return {"d_ffw": (32 + 24 * scale) ** 2, "n_channels": 16, "k": 8, "d_key": 128}


class PEER(CodeLayer):
    kind = "peer"
    sparse_by_construction = True

    def __init__(self, config: ModelShape):
        super().__init__()
        ffn = config.feedforward
        self.n_channels, self.k, self.d_ffw, self.d_key = ffn.n_channels, ffn.k, ffn.d_ffw, ffn.d_key
        self.n_keys = math.isqrt(ffn.d_ffw)
        self.activation = ffn.activation
        self.W_query = nn.Parameter(torch.empty(config.d_model, ffn.n_channels, ffn.d_key))
        self.W_key = nn.Parameter(torch.empty(ffn.d_key // 2, 2, ffn.n_channels, self.n_keys))
        self.experts = nn.Parameter(torch.empty(2, ffn.d_ffw, config.d_model))  # [u; v], shared by the heads

        self.hook_query = HookPoint()  # [B, T, C, Q]
        self.hook_subkey_scores = HookPoint()  # [B, T, 2, C, n]
        self.hook_gate_indices = HookPoint()  # [B, T, C, K] expert id
        self.hook_gate_scores = HookPoint()  # [B, T, C, K] product-key scores (before the softmax)
        self.hook_gate_values = HookPoint()  # [B, T, C, K] softmax of the scores over the head's K
        self.hook_neuron_pre = HookPoint()  # [B, T, C, K] u . z
        self.hook_neuron_post = HookPoint()  # [B, T, C, K] g * sigma(u . z)

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        query_BxTxCxQ = self.hook_query(torch.einsum("btd,dcq->btcq", z_BxTxD, self.W_query))
        subkey_BxTx2xCxn = self.hook_subkey_scores(peer_subkey_scores(query_BxTxCxQ, self.W_key))
        indices_BxTxCxK, scores_BxTxCxK = kernels.sgatlin_route(subkey_BxTx2xCxn, self.k)
        indices_BxTxCxK = self.hook_gate_indices(indices_BxTxCxK)
        scores_BxTxCxK = self.hook_gate_scores(scores_BxTxCxK)
        gates_BxTxCxK = self.hook_gate_values(scores_BxTxCxK.float().softmax(-1).to(scores_BxTxCxK.dtype))
        neuron_pre = self.hook_neuron_pre(ExpertDot.apply(z_BxTxD, indices_BxTxCxK, self.experts[0]))
        neuron_post = self.hook_neuron_post(gates_BxTxCxK * ACTIVATIONS[self.activation](neuron_pre))
        # out = sum over the C*K slots of post * v_i, without materialising the gathered v rows
        B, T, D = z_BxTxD.shape
        weights = self.experts[1]
        out_MxD = F.embedding_bag(
            indices_BxTxCxK.reshape(B * T, -1), weights, per_sample_weights=neuron_post.reshape(B * T, -1).to(weights.dtype),
            mode="sum",
        )
        return out_MxD.view(B, T, D), None

    # --- its code and units (see CodeLayer) ---------------------------------------------------------------

    def active_parameters_per_token(self) -> int:
        """The router (every head's query projection and subkeys) and the C*k retrieved experts' u and v rows."""
        return self.W_query.numel() + self.W_key.numel() + 2 * self.n_channels * self.k * self.experts.shape[-1]

    def code_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_gate_indices), self.hook_name(self.hook_gate_values)]

    def sparse_code(self, cache: Cache) -> SparseCode:
        """The softmax gates of a token, slot ids c * N + i (head c retrieving expert i)."""
        try:
            indices_BxTxCxK = cache[self.hook_name(self.hook_gate_indices)].long()
            gates_BxTxCxK = cache[self.hook_name(self.hook_gate_values)].float()
        except KeyError as error:
            raise code_hook_error(self, error) from None
        offsets_Cx1 = torch.arange(self.n_channels, device=indices_BxTxCxK.device)[:, None] * self.d_ffw
        return SparseCode(
            (indices_BxTxCxK + offsets_Cx1).flatten(-2), gates_BxTxCxK.flatten(-2), self.n_channels * self.d_ffw
        )

    def layout(self) -> dict:
        return {
            "kind": self.kind, "n_channels": self.n_channels, "experts": self.d_ffw, "experts_shared_by_channels": True,
            "keys_per_half": self.n_keys, "k": self.k, "activation": self.activation,
        }

    def unit_kinds(self) -> list[str]:
        return [self.activation] * (self.n_channels * self.d_ffw)

    def unit_name(self, unit: int) -> str:
        return f"h{unit // self.d_ffw} e{unit % self.d_ffw}"

    def unit_write_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_gate_indices), self.hook_name(self.hook_neuron_post)]

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        """The C*k retrieved slots; each writes g * sigma(u . z) * v."""
        indices_CxK = read(self.hook_name(self.hook_gate_indices)).long()
        neuron_post_CxK = read(self.hook_name(self.hook_neuron_post))
        v_CxKxD = self.experts[1].detach()[indices_CxK].double()
        channel_CxK = torch.arange(self.n_channels, device=indices_CxK.device)[:, None].expand_as(indices_CxK)
        ids = (channel_CxK * self.d_ffw + indices_CxK).flatten().tolist()
        return UnitWrites(
            writes_NxD=(neuron_post_CxK[..., None] * v_CxKxD).reshape(len(ids), -1), ids=ids, kind="neuron",
            operations=[self.activation] * len(ids), labels=[self.unit_name(unit) for unit in ids],
        )
