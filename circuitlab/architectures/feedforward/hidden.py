"""The shared base of FFNs that write W_out applied to a hidden vector (GELU MLP, SwiGLU, NC-FFN).

Each hidden unit f writes post_f * W_out[f]; the code is the `code_k` largest |post_f| of a token (a
baseline to compare circuits against, not a circuit).

Letters: B batch, T position, D d_model, F hidden.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.architectures.design import ModelShape
from circuitlab.codes import SparseCode



class HiddenUnitFFN(CodeLayer):
    """An FFN whose write is W_out applied to a hidden vector `hook_post` [B, T, F]: each hidden unit writes
    post_f * W_out[f]. Subclasses define W_out, hook_post, forward and `unit_kinds`."""

    W_out: Tensor
    hook_post: HookPoint

    def __init__(self, config: ModelShape):
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
