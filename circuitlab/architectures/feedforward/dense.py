"""Dense FFNs: the GELU MLP and SwiGLU baselines.

  MLP:     out = W_out GELU(W_in z)
  SwiGLU:  out = W_out (SiLU(W_gate z) * W_in z)
No biases. Both write a sum of hidden units, post_f * W_out[f]; their code is the `code_k` largest
|post_f| of a token (a baseline to compare circuits against, not a circuit).

Letters: B batch, T position, D d_model, F hidden.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.codes import SparseCode
from circuitlab.config import ModelConfig


class HiddenUnitFFN(CodeLayer):
    """An FFN whose write is W_out applied to a hidden vector `hook_post` [B, T, F]: each hidden unit writes
    post_f * W_out[f]. Subclasses define W_out, hook_post, forward and `unit_kinds`."""

    W_out: Tensor
    hook_post: HookPoint

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.code_k = config.feedforward.code_k

    def code_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_post)]

    def sparse_code(self, cache: Cache) -> SparseCode:
        """The `code_k` hidden units of largest |activation| per token, with their activations."""
        try:
            post_BxTxF = cache[self.hook_name(self.hook_post)].float()
        except KeyError as error:
            raise code_hook_error(self, error) from None
        top = post_BxTxF.abs().topk(min(self.code_k, post_BxTxF.shape[-1]), dim=-1).indices
        return SparseCode(top, post_BxTxF.gather(-1, top), post_BxTxF.shape[-1])

    def layout(self) -> dict:
        return {"kind": self.kind, "code_k": self.code_k}

    def unit_name(self, unit: int) -> str:
        return f"{self.unit_kinds()[unit]} u{unit}"

    def unit_write_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_post)]

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        post_F = read(self.hook_name(self.hook_post))
        kinds = self.unit_kinds()
        return UnitWrites(
            writes_NxD=post_F[:, None] * self.W_out.detach().double(), ids=list(range(post_F.numel())),
            kind="ffn_unit", operations=kinds, labels=[f"{kind} u{f}" for f, kind in enumerate(kinds)],
        )


class MLP(HiddenUnitFFN):
    """W_out GELU(W_in z), no biases."""

    kind = "mlp"

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        d_model, d_ffw = config.d_model, config.feedforward.d_ffw
        self.W_in = torch.nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_out = torch.nn.Parameter(torch.empty(d_ffw, d_model))
        self.hook_pre = HookPoint()  # [B, T, F]
        self.hook_post = HookPoint()  # [B, T, F]: the unit activations W_out reads

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, None]:
        pre_BxTxF = self.hook_pre(z_BxTxD @ self.W_in)
        post_BxTxF = self.hook_post(F.gelu(pre_BxTxF))
        return post_BxTxF @ self.W_out, None

    def unit_kinds(self) -> list[str]:
        return ["gelu"] * self.W_out.shape[0]


class SwiGLU(HiddenUnitFFN):
    """W_out (SiLU(W_gate z) * W_in z), no biases."""

    kind = "swiglu"

    def __init__(self, config: ModelConfig):
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
