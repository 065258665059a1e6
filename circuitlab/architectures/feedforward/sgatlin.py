"""sgatlin: sparsely gated linear neurons (seed 000, section 2 and appendix A.1).

Per token z and channel c: query q = W_query z (shared by channels), subkey scores s = q W_key reshaped to
[2, C, n]; product top-k picks k of the n*n = N neurons (i = i1 * n + i2) with gate g = s1[i1] + s2[i2]
(raw scores, no softmax); out = sum_c sum_i g_ci (w_in_ci . z) w_out_ci (eq. 2). Given the gates the layer
is linear in z: a rank <= C*k matrix per token.

Its code is the gate vector (seed 000, eq. 1): C*k (neuron, gate) pairs per token, neuron ids offset by
channel (c * N + i) so one index space holds every channel; each chosen neuron writes g * (w_in . z) * w_out.

Letters: B batch, T position, D d_model, Q d_key, C channels, n keys per half, N = n*n neurons, K gates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from pydantic import model_validator
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

import circuitlab.kernels as kernels
from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.architectures.components import is_hooked
from circuitlab.architectures.design import FeedForwardPart, LayerCost, ModelShape, PositiveInt
from circuitlab.codes import SparseCode


ACTIVATIONS = {"relu": torch.nn.functional.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}


def check_product_keys(name: str, units: str, d_ffw: int, k: int) -> int:
    """sqrt(d_ffw), after checking that d_ffw is a perfect square and 0 < k < sqrt(d_ffw) (product keys)."""
    n_keys = math.isqrt(d_ffw)
    if n_keys * n_keys != d_ffw:
        raise ValueError(
            f"{name} d_ffw ({units}) must be a perfect square for product keys, got {d_ffw}"
            f" (nearest: {n_keys * n_keys} or {(n_keys + 1) ** 2})"
        )
    if not k < n_keys:
        raise ValueError(f"{name} k={k} must satisfy 0 < k < sqrt(d_ffw)={n_keys} (k candidates per key half)")
    return n_keys


def peer_subkey_scores(
    query_BxTxCxQ: Float[Tensor, "batch pos channel d_key"], W_key_Hx2xCxn: Float[Tensor, "half 2 channel n"]
) -> Float[Tensor, "batch pos 2 channel n"]:
    """Each head's query halves against its own subkeys: [B, T, 2, C, n] (the layout sgatlin's router takes)."""
    halves_BxTxCx2xH = query_BxTxCxQ.unflatten(-1, (2, -1))
    return torch.einsum("btcsh,hscn->btscn", halves_BxTxCx2xH, W_key_Hx2xCxn)


class SgatlinConfig(FeedForwardPart):
    """sgatlin (seed 000): `n_channels` channels of `d_ffw` neurons (a perfect square, for product keys),
    `k` gates per channel, router bottleneck `d_key`. Its code is the gates themselves."""

    type: Literal["sgatlin"] = "sgatlin"
    d_ffw: PositiveInt = 1024
    n_channels: PositiveInt = 8
    k: PositiveInt = 8
    d_key: PositiveInt = 128
    # seed 000's Table 1 ablation: a nonlinearity on each neuron, g * sigma(w_in . z) * w_out ("none": sgatlin)
    activation: Literal["none", "relu", "gelu", "silu"] = "none"
    # seed 000's Table 1 router swap: "peer" replaces the gating network with PEER's router (a query projection
    # per channel, each query half against its own subkeys, softmax over the k chosen scores); the experts stay
    # sgatlin's (their own per channel, linear)
    router: Literal["sgatlin", "peer"] = "sgatlin"
    label = "sgatlin"

    @model_validator(mode="after")
    def _product_keys(self) -> SgatlinConfig:
        check_product_keys("sgatlin", "neurons per channel", self.d_ffw, self.k)
        if self.router == "peer" and self.d_key % 2:
            raise ValueError(f"sgatlin with PEER's router splits each query in halves: d_key must be even, got {self.d_key}")
        return self

    def serialized(self) -> dict[str, Any]:
        data = super().serialized()
        for field, plain in (("activation", "none"), ("router", "sgatlin")):
            if data[field] == plain:
                del data[field]  # plain sgatlin is written (and hashed) as before the ablation fields
        return data

    def build(self, config: ModelShape) -> Sgatlin:
        return Sgatlin(config)

    def cost(self, d_model: int) -> LayerCost:
        """The router (shared query projection, every channel's subkeys; with PEER's router, a query projection
        per channel and half-width subkeys) and the C*k chosen neurons' rows."""
        n_keys, channels = math.isqrt(self.d_ffw), self.n_channels
        if self.router == "peer":
            router = d_model * channels * self.d_key + (self.d_key // 2) * 2 * channels * n_keys
        else:
            router = d_model * self.d_key + self.d_key * 2 * channels * n_keys
        return LayerCost(matmul_weights=router + 2 * channels * self.k * d_model,
                         total_parameters=router + 2 * channels * self.d_ffw * d_model)

    def describe(self) -> str:
        return (f"sgatlin, {self.n_channels} channels x {self.d_ffw} neurons, k {self.k} per channel, d_key {self.d_key}"
                + ("" if self.activation == "none" else f", {self.activation} on each neuron")
                + ("" if self.router == "sgatlin" else ", PEER's router"))

    def hidden_units(self) -> int:
        return self.d_ffw * self.n_channels  # c * N + i

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any]:
        """seed 000, appendix B.1.1 / B.2: N = (16 + 12 s)^2 neurons per channel, 16 channels, k 8, d_key 128."""
        return {"d_ffw": (16 + 12 * scale) ** 2, "n_channels": 16, "k": 8, "d_key": 128}


class Sgatlin(CodeLayer):
    kind = "sgatlin"
    sparse_by_construction = True

    def __init__(self, config: ModelShape):
        super().__init__()
        ffn = config.feedforward
        self.n_channels, self.k, self.d_ffw = ffn.n_channels, ffn.k, ffn.d_ffw
        self.n_keys = math.isqrt(ffn.d_ffw)
        self.activation = ffn.activation  # "none" (sgatlin); else seed 000's nonlinearity ablation
        self.router = ffn.router  # "sgatlin"; "peer": seed 000's router swap
        if self.router == "peer":
            self.W_query = nn.Parameter(torch.empty(config.d_model, ffn.n_channels, ffn.d_key))
            self.W_key = nn.Parameter(torch.empty(ffn.d_key // 2, 2, ffn.n_channels, self.n_keys))
        else:
            self.W_query = nn.Parameter(torch.empty(config.d_model, ffn.d_key))
            self.W_key = nn.Parameter(torch.empty(ffn.d_key, 2, ffn.n_channels, self.n_keys))
        self.experts = nn.Parameter(torch.empty(2, ffn.n_channels, ffn.d_ffw, config.d_model))  # [w_in; w_out]

        self.hook_query = HookPoint()  # [B, T, Q] ([B, T, C, Q] with PEER's router)
        self.hook_subkey_scores = HookPoint()  # [B, T, 2, C, n]
        self.hook_gate_indices = HookPoint()  # [B, T, C, K] neuron id within its channel
        self.hook_gate_values = HookPoint()  # [B, T, C, K]
        self.hook_neuron_pre = HookPoint()  # [B, T, C, K] w_in . z
        self.hook_neuron_post = HookPoint()  # [B, T, C, K] g * (w_in . z)

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        if self.router == "peer":
            query_BxTxCxQ = self.hook_query(torch.einsum("btd,dcq->btcq", z_BxTxD, self.W_query))
            subkey_BxTx2xCxn = self.hook_subkey_scores(peer_subkey_scores(query_BxTxCxQ, self.W_key))
        else:
            query_BxTxQ = self.hook_query(z_BxTxD @ self.W_query)
            subkey_BxTx2xCxn = self.hook_subkey_scores(torch.einsum("btq,qscn->btscn", query_BxTxQ, self.W_key))
        # product top-k (exact: each member of the top-k of the n*n sums has both parts in its half's top-k)
        indices_BxTxCxK, gates_BxTxCxK = kernels.sgatlin_route(subkey_BxTx2xCxn, self.k)
        if self.router == "peer":  # PEER's gates: a softmax over each channel's k chosen scores
            gates_BxTxCxK = gates_BxTxCxK.float().softmax(-1).to(gates_BxTxCxK.dtype)
        indices_BxTxCxK = self.hook_gate_indices(indices_BxTxCxK)
        gates_BxTxCxK = self.hook_gate_values(gates_BxTxCxK)
        if self.activation == "none" and not is_hooked(self.hook_neuron_pre, self.hook_neuron_post):
            return kernels.sgatlin_combine(z_BxTxD, indices_BxTxCxK, gates_BxTxCxK, self.experts), None
        channel_C = torch.arange(self.n_channels, device=z_BxTxD.device)[:, None]
        w_in_BxTxCxKxD = self.experts[0][channel_C, indices_BxTxCxK]
        w_out_BxTxCxKxD = self.experts[1][channel_C, indices_BxTxCxK]
        neuron_pre = self.hook_neuron_pre(torch.einsum("btd,btckd->btck", z_BxTxD, w_in_BxTxCxKxD))
        if self.activation != "none":
            neuron_pre_act = ACTIVATIONS[self.activation](neuron_pre)
        else:
            neuron_pre_act = neuron_pre
        neuron_post = self.hook_neuron_post(neuron_pre_act * gates_BxTxCxK)
        return torch.einsum("btck,btckd->btd", neuron_post, w_out_BxTxCxKxD), None

    def circuit_matrix(
        self, indices_CxK: Int[Tensor, "channel k"], gates_CxK: Float[Tensor, "channel k"]
    ) -> Float[Tensor, "d_model d_model"]:
        """W_circuit = sum_c sum_i g_ci w_out_ci w_in_ci^T: the linear map one token's gates select."""
        if self.activation != "none":
            raise ValueError(f"this sgatlin has a {self.activation} on its neurons: no linear circuit matrix")
        channel_C = torch.arange(self.n_channels, device=indices_CxK.device)[:, None]
        w_in_CxKxD = self.experts[0][channel_C, indices_CxK]
        w_out_CxKxD = self.experts[1][channel_C, indices_CxK]
        return torch.einsum("ck,cko,cki->oi", gates_CxK, w_out_CxKxD, w_in_CxKxD)

    def neuron_out_rows(self, indices_BxTxCxK: Int[Tensor, "batch pos channel k"]) -> Tensor:
        """w_out rows of the selected neurons [B, T, C, K, D] (for direct logit attribution)."""
        channel_C = torch.arange(self.n_channels, device=indices_BxTxCxK.device)[:, None]
        return self.experts[1][channel_C, indices_BxTxCxK]

    # --- its code and units (see CodeLayer) ---------------------------------------------------------------

    def active_parameters_per_token(self) -> int:
        """The router and the C*k chosen neurons' w_in and w_out rows."""
        return self.W_query.numel() + self.W_key.numel() + 2 * self.n_channels * self.k * self.experts.shape[-1]

    def code_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_gate_indices), self.hook_name(self.hook_gate_values)]

    def sparse_code(self, cache: Cache) -> SparseCode:
        """The gates of a token, neuron ids offset by channel: c * N + i."""
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
            "kind": self.kind, "n_channels": self.n_channels, "neurons_per_channel": self.d_ffw,
            "keys_per_half": self.n_keys, "k": self.k,
        } | ({} if self.activation == "none" else {"activation": self.activation}) | (
            {} if self.router == "sgatlin" else {"router": self.router})

    def unit_kinds(self) -> list[str]:
        return ["neuron"] * (self.n_channels * self.d_ffw)

    def unit_name(self, unit: int) -> str:
        return f"c{unit // self.d_ffw} n{unit % self.d_ffw}"

    def unit_write_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_gate_indices), self.hook_name(self.hook_neuron_post)]

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        """The C*k chosen neurons; seed 000, eq. 2: each writes g * (w_in . z) * w_out."""
        indices_CxK = read(self.hook_name(self.hook_gate_indices)).long()
        neuron_post_CxK = read(self.hook_name(self.hook_neuron_post))
        w_out_CxKxD = self.neuron_out_rows(indices_CxK[None, None])[0, 0].double()
        channel_CxK = torch.arange(self.n_channels, device=indices_CxK.device)[:, None].expand_as(indices_CxK)
        ids = (channel_CxK * self.d_ffw + indices_CxK).flatten().tolist()
        return UnitWrites(
            writes_NxD=(neuron_post_CxK[..., None] * w_out_CxKxD).reshape(len(ids), -1), ids=ids, kind="neuron",
            operations=["neuron"] * len(ids), labels=[self.unit_name(unit) for unit in ids],
        )
