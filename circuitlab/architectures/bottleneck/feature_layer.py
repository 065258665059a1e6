"""The code layer every parity bottleneck is: k (feature id, coefficient) pairs per token, feature i writing
a_i phi_i, and, where the bottleneck has a bias path, a constant write b (bottleneck/usage.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.codes import SparseCode


class FeatureCodeLayer(CodeLayer):
    """A bottleneck whose code is k (feature id, coefficient) pairs on `hook_code_indices` and
    `hook_code_values`, feature i writing a_i phi_i with phi_i = `feature_directions(i)`."""

    def code_hooks(self) -> list[str]:
        return [self.hook_name(self.hook_code_indices), self.hook_name(self.hook_code_values)]

    def sparse_code(self, cache: Cache) -> SparseCode:
        try:
            indices_BxTxK = cache[self.hook_name(self.hook_code_indices)].long()
            values_BxTxK = cache[self.hook_name(self.hook_code_values)].float()
        except KeyError as error:
            raise code_hook_error(self, error) from None
        return SparseCode(indices_BxTxK, values_BxTxK, self.n_features)

    def layout(self) -> dict:
        return {"kind": self.kind, "n_features": self.n_features}

    def unit_name(self, unit: int) -> str:
        return f"feature {unit}"

    def unit_write_hooks(self) -> list[str]:
        return self.code_hooks()

    def unit_writes(self, read: Callable[[str], Tensor]) -> UnitWrites:
        """The k active features; feature i writes a_i phi_i (their sum is hook_recon)."""
        indices_K = read(self.hook_name(self.hook_code_indices)).long()
        values_K = read(self.hook_name(self.hook_code_values))
        phi_KxD = self.feature_directions(indices_K).double()
        ids = indices_K.tolist()
        writes_NxD = values_K[:, None].double() * phi_KxD
        operations, labels = ["feature"] * len(ids), [self.unit_name(unit) for unit in ids]
        bias = getattr(self, "bias", None)
        if bias is not None:  # the bias path's constant write is a unit of its own (id -1)
            writes_NxD = torch.cat([writes_NxD, bias.detach().double().to(writes_NxD.device)[None]])
            ids, operations, labels = ids + [-1], operations + ["bias"], labels + ["bias"]
        return UnitWrites(writes_NxD=writes_NxD, ids=ids, kind="parity_feature", operations=operations, labels=labels)
