"""Coarse top-k mixture of SwiGLU experts: seed 000's MoE baseline (the GPT-OSS layout, 16 experts, top-2).

Per token z: router logits r = z W_router [E]; the k largest pick experts e_1..e_k with weights
w = softmax(r_e1..r_ek); out = sum_j w_j SwiGLU_ej(z), SwiGLU_e(z) = W_out[e] (SiLU(z W_gate[e]) * z W_in[e]).
No biases.

Two dispatches give the same numbers (to float rounding; tested): "grouped" sorts the token-expert pairs by
expert and runs one matmul per expert, computing only the chosen experts; "dense" runs every expert on every
token as one matmul and keeps the chosen ones (E/k times the multiply-adds, no host sync). "auto", the
default, picks dense on a GPU, where the grouped split's host sync per matmul stalls the launch queue (and
stalls every run sharing the GPU), and grouped elsewhere. FLOP budgets count the chosen experts only, as in
seed 000.

Units: hidden unit f of expert e, id e * F + f, writes w_e * post_ef * W_out[e, f]. The code keeps the
`code_k` chosen-expert units of largest |w * post| per token: sparse at the expert level by construction,
a top-k view within the chosen experts (like the dense baselines' codes).

Letters: B batch, T position, D d_model, E experts, K chosen experts, F hidden units per expert, M tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from pydantic import model_validator
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.architectures.design import FeedForwardPart, LayerCost, ModelShape, PositiveInt
from circuitlab.codes import SparseCode



class MoEConfig(FeedForwardPart):
    """Coarse top-k mixture of experts (GPT-OSS style, seed 000's MoE baseline): `n_experts` SwiGLU experts of
    `d_ffw` hidden units each, a linear router, the `k` highest-scoring experts per token weighted by the
    softmax of their router logits. Its sparse code keeps the `code_k` largest |weighted activations| among
    the chosen experts' hidden units (ids e * d_ffw + f)."""

    type: Literal["moe"] = "moe"
    d_ffw: PositiveInt = 256
    n_experts: PositiveInt = 16
    k: PositiveInt = 2
    code_k: PositiveInt = 32
    label = "MoE (top-2 of 16)"

    @model_validator(mode="after")
    def _routing(self) -> MoEConfig:
        if not self.k <= self.n_experts:
            raise ValueError(f"moe k={self.k} must satisfy 0 < k <= n_experts={self.n_experts}")
        return self

    def build(self, config: ModelShape) -> MoE:
        return MoE(config)

    def cost(self, d_model: int) -> LayerCost:
        """The router matrix and the k chosen SwiGLU experts' three matrices."""
        router = d_model * self.n_experts
        return LayerCost(matmul_weights=router + self.k * 3 * d_model * self.d_ffw,
                         total_parameters=router + self.n_experts * 3 * d_model * self.d_ffw)

    def describe(self) -> str:
        return f"moe, top-{self.k} of {self.n_experts} SwiGLU experts of width {self.d_ffw}"

    def hidden_units(self) -> int:
        return self.d_ffw * self.n_experts  # e * F + f

    @classmethod
    def ladder(cls, scale: int, d_model: int) -> dict[str, Any]:
        """seed 000, appendix B.2: 16 SwiGLU experts of width d_model, top-2."""
        return {"d_ffw": d_model, "n_experts": 16, "k": 2}


class MoE(CodeLayer):
    kind = "moe"

    def __init__(self, config: ModelShape):
        super().__init__()
        ffn = config.feedforward
        self.n_experts, self.k, self.d_ffw, self.code_k = ffn.n_experts, ffn.k, ffn.d_ffw, ffn.code_k
        self.dispatch: Literal["auto", "grouped", "dense"] = "auto"  # see the module docstring
        d_model = config.d_model
        self.W_router = nn.Parameter(torch.empty(d_model, ffn.n_experts))
        self.W_gate = nn.Parameter(torch.empty(ffn.n_experts, d_model, ffn.d_ffw))
        self.W_in = nn.Parameter(torch.empty(ffn.n_experts, d_model, ffn.d_ffw))
        self.W_out = nn.Parameter(torch.empty(ffn.n_experts, ffn.d_ffw, d_model))

        self.hook_router_logits = HookPoint()  # [B, T, E]
        self.hook_expert_indices = HookPoint()  # [B, T, K] chosen experts, highest logit first
        self.hook_expert_weights = HookPoint()  # [B, T, K] softmax over the chosen logits
        self.hook_pre = HookPoint()  # [B, T, K, F] gate pre-activation of each chosen expert
        self.hook_pre_linear = HookPoint()  # [B, T, K, F] linear branch
        self.hook_post = HookPoint()  # [B, T, K, F] SiLU(gate) * linear (before the expert weight)

    def _per_expert(self, rows_AxI: Tensor, weight_ExIxO: Tensor, expert_A: Tensor) -> Tensor:
        """rows_AxI[a] @ weight[expert_A[a]] for every assignment a, one matmul per expert."""
        order_A = expert_A.argsort(stable=True)
        counts = torch.bincount(expert_A, minlength=self.n_experts).tolist()
        sorted_rows = rows_AxI[order_A]
        outputs = [chunk @ weight_ExIxO[e] for e, chunk in enumerate(sorted_rows.split(counts)) if counts[e]]
        out_sorted = torch.cat(outputs) if outputs else sorted_rows.new_zeros(0, weight_ExIxO.shape[-1])
        out_AxO = torch.empty(len(expert_A), weight_ExIxO.shape[-1], dtype=out_sorted.dtype, device=out_sorted.device)
        return out_AxO.index_copy(0, order_A, out_sorted)

    def _dense(self, z_BxTxD: Tensor) -> bool:
        if self.dispatch not in ("auto", "grouped", "dense"):
            raise ValueError(f"moe dispatch must be 'auto', 'grouped' or 'dense', not {self.dispatch!r}")
        return self.dispatch == "dense" or (self.dispatch == "auto" and z_BxTxD.is_cuda)

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        B, T, D = z_BxTxD.shape
        logits_BxTxE = self.hook_router_logits(z_BxTxD @ self.W_router)
        top_logits, indices_BxTxK = logits_BxTxE.topk(self.k, dim=-1)
        indices_BxTxK = self.hook_expert_indices(indices_BxTxK)
        weights_BxTxK = self.hook_expert_weights(top_logits.float().softmax(-1).to(top_logits.dtype))
        dense = self._dense(z_BxTxD)
        if dense:
            z_MxD, chosen_MxKxF = z_BxTxD.reshape(B * T, D), indices_BxTxK.reshape(B * T, self.k, 1)
            chosen_MxKxF = chosen_MxKxF.expand(-1, -1, self.d_ffw)

            def chosen_of(weight_ExDxF: Tensor) -> Tensor:
                return torch.einsum("md,edf->mef", z_MxD, weight_ExDxF).gather(1, chosen_MxKxF).view(B, T, self.k, -1)
        else:
            expert_A = indices_BxTxK.reshape(-1)  # A = M * K assignments, token-major
            rows_AxD = z_BxTxD.reshape(B * T, 1, D).expand(B * T, self.k, D).reshape(-1, D)

            def chosen_of(weight_ExDxF: Tensor) -> Tensor:
                return self._per_expert(rows_AxD, weight_ExDxF, expert_A).view(B, T, self.k, -1)
        gate = self.hook_pre(chosen_of(self.W_gate))
        linear = self.hook_pre_linear(chosen_of(self.W_in))
        post_BxTxKxF = self.hook_post(F.silu(gate) * linear)
        weighted_BxTxKxF = post_BxTxKxF * weights_BxTxK[..., None]
        if dense:  # the chosen experts' rows in place (summed if an edited route repeats one), the rest 0
            spread_MxExF = weighted_BxTxKxF.new_zeros(B * T, self.n_experts, self.d_ffw)
            spread_MxExF = spread_MxExF.scatter_add(1, chosen_MxKxF, weighted_BxTxKxF.reshape(B * T, self.k, -1))
            return torch.einsum("mef,efd->md", spread_MxExF, self.W_out).view(B, T, D), None
        out_AxD = self._per_expert(weighted_BxTxKxF.reshape(-1, self.d_ffw), self.W_out, expert_A)
        return out_AxD.view(B, T, self.k, D).sum(2), None

    # --- its code and units (see CodeLayer) ---------------------------------------------------------------

    def active_parameters_per_token(self) -> int:
        """The router and the k chosen experts' three matrices."""
        return self.W_router.numel() + self.k * 3 * self.W_out.shape[1] * self.W_out.shape[2]

    def code_hooks(self) -> list[str]:
        return [self.hook_name(h) for h in (self.hook_expert_indices, self.hook_expert_weights, self.hook_post)]

    def sparse_code(self, cache: Cache) -> SparseCode:
        """The `code_k` chosen-expert units of largest |w * post| per token, ids e * F + f."""
        try:
            indices_BxTxK = cache[self.hook_name(self.hook_expert_indices)].long()
            weights_BxTxK = cache[self.hook_name(self.hook_expert_weights)].float()
            post_BxTxKxF = cache[self.hook_name(self.hook_post)].float()
        except KeyError as error:
            raise code_hook_error(self, error) from None
        values_BxTxU = (post_BxTxKxF * weights_BxTxK[..., None]).flatten(-2)
        ids_BxTxU = (indices_BxTxK[..., None] * self.d_ffw + torch.arange(self.d_ffw, device=indices_BxTxK.device)).flatten(-2)
        top = values_BxTxU.abs().topk(min(self.code_k, values_BxTxU.shape[-1]), dim=-1).indices
        return SparseCode(ids_BxTxU.gather(-1, top), values_BxTxU.gather(-1, top), self.n_experts * self.d_ffw)

    def layout(self) -> dict:
        return {"kind": self.kind, "n_experts": self.n_experts, "k": self.k, "units_per_expert": self.d_ffw,
                "code_k": self.code_k}

    def unit_kinds(self) -> list[str]:
        return ["swiglu"] * (self.n_experts * self.d_ffw)

    def unit_name(self, unit: int) -> str:
        return f"e{unit // self.d_ffw} u{unit % self.d_ffw}"

    def unit_write_hooks(self) -> list[str]:
        return [self.hook_name(h) for h in (self.hook_expert_indices, self.hook_expert_weights, self.hook_post)]

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        """Every hidden unit of the k chosen experts: w_e * post_ef * W_out[e, f]."""
        indices_K = read(self.hook_name(self.hook_expert_indices)).long()
        weights_K = read(self.hook_name(self.hook_expert_weights))
        post_KxF = read(self.hook_name(self.hook_post))
        rows_KxFxD = self.W_out.detach()[indices_K].double()
        writes_KxFxD = (weights_K[:, None] * post_KxF)[..., None] * rows_KxFxD
        ids = (indices_K[:, None] * self.d_ffw + torch.arange(self.d_ffw, device=indices_K.device)).flatten().tolist()
        return UnitWrites(
            writes_NxD=writes_KxFxD.reshape(len(ids), -1), ids=ids, kind="ffn_unit", operations=["swiglu"] * len(ids),
            labels=[self.unit_name(unit) for unit in ids],
        )
