"""The first design of the parity bottleneck (design "prefix"), kept so that models trained with it still load
and run as they were trained. New models use the product design (parity.py), which replaces both the search
and the coefficient rule below: measured on the first shipped model, this search does not route (agreement
with the exhaustive top-k 0.08-0.16) and a_i = <x, phi_i> does not reconstruct x (relative error about 1).

Dictionary of m = 2^r features in d dimensions, computed, never stored:
  phi_i = e_i                       for i < d (a coordinate read)
  phi_i = R(M bits(i)) / sqrt(d)    for i >= d, M in F2^(d x r), R(0) = +1, R(1) = -1
so sqrt(d) phi_(i xor j) = sqrt(d) phi_i * sqrt(d) phi_j, and <phi_i, phi_j> = 1 - 2 wt(M(bits i xor bits j)) / d.

Encoder (a beam search over index-bit prefixes): the low log2(d) bits name a parent coordinate; the other
bits come in levels of b bits. Level 0 reads the d coordinates of x (free) and keeps the B_0 parents with
the largest |x_j|. Level l expands each kept prefix by the 2^b values of its next group (child = prefix xor
g << shift, so its sign pattern is the prefix's times the group's) and keeps the best B_l. The k features
with the largest |<x, phi_i>| met anywhere are the code, with coefficients a_i = <x, phi_i>; the decoder
writes x_hat = sum a_i phi_i. Indices carry no gradient; x gets gradient through the coefficients.

Where it sits: on each block's FFN write (FFN -> hook_in -> bottleneck -> hook_recon = hook_mlp_out ->
residual), so everything the block's FFN writes into the residual stream is a sum of k dictionary features.
Its code is those k (feature id, coefficient) pairs; feature i writes a_i phi_i.

Letters: B batch, T position, D d_model, R index bits, P prefixes in the beam, G = 2^b group values, K code.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab import kernels
from circuitlab.config import ModelConfig
from circuitlab.kernels.reference import parity_signs
from circuitlab.architectures.feedforward.parity import FeatureCodeLayer, make_code_matrix, relative_error


class PrefixParityBottleneck(FeatureCodeLayer):
    kind = "parity"
    sparse_by_construction = True

    def __init__(self, config: ModelConfig):
        super().__init__()
        bottleneck = config.bottleneck
        self.d_model = config.d_model
        self.n_bits = bottleneck.n_bits
        self.k = bottleneck.k
        self.bits_per_level = bottleneck.bits_per_level
        self.beams = tuple(bottleneck.beams)
        self.low_bits = int(math.log2(config.d_model))
        self.n_features = 2**self.n_bits
        # recomputed from the seed on construction, so it is never stored in checkpoints
        self.register_buffer("code", make_code_matrix(config.d_model, self.n_bits, bottleneck.code_seed), persistent=False)

        self.hook_in = HookPoint()  # [B, T, D] the FFN write entering the bottleneck
        self.hook_code_indices = HookPoint()  # [B, T, K] feature ids in [0, m)
        self.hook_code_values = HookPoint()  # [B, T, K] coefficients a_i = <x, phi_i>
        self.hook_recon = HookPoint()  # [B, T, D] x_hat, what the block writes

    # --- encoder ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def encode_indices(self, x_BxTxD: Float[Tensor, "batch pos d_model"]) -> Int[Tensor, "batch pos k"]:
        """The hierarchical search: k feature ids per token (see the module docstring)."""
        x = x_BxTxD.float()
        scale = 1.0 / math.sqrt(self.d_model)
        group_values = torch.arange(2**self.bits_per_level, device=x.device)
        pool_indices = [torch.arange(self.d_model, device=x.device).expand(*x.shape[:-1], self.d_model)]
        pool_scores = [x.abs()]
        beam_scores, prefixes = x.abs().topk(self.beams[0], dim=-1)  # level 0: parents by |x_j|
        prefix_signs = parity_signs(prefixes, self.code).to(x.dtype)  # [B, T, P, D]
        n_levels = len(self.beams)
        for level in range(n_levels):
            shift = self.low_bits + level * self.bits_per_level
            group_signs_GxD = parity_signs(group_values << shift, self.code).to(x.dtype)
            # <x, phi_child> = (x * s_prefix) . s_group / sqrt(d): one small matmul per level
            child_scores = torch.einsum("btpd,gd->btpg", x[..., None, :] * prefix_signs, group_signs_GxD) * scale
            child_scores = child_scores.abs()
            child_scores[..., 0] = beam_scores  # g = 0 continues the prefix itself (already scored)
            children = prefixes[..., None] | (group_values << shift)
            pool_indices.append(children[..., 1:].flatten(-2))
            pool_scores.append(child_scores[..., 1:].flatten(-2))
            if level + 1 < n_levels:
                beam_scores, best = child_scores.flatten(-2).topk(self.beams[level + 1], dim=-1)
                prefixes = children.flatten(-2).gather(-1, best)
                parent_of_best = best // group_values.numel()
                group_of_best = best % group_values.numel()
                prefix_signs = prefix_signs.gather(
                    -2, parent_of_best[..., None].expand(*parent_of_best.shape, self.d_model)
                ) * group_signs_GxD[group_of_best]
        scores = torch.cat(pool_scores, dim=-1)
        indices = torch.cat(pool_indices, dim=-1)
        best = scores.topk(self.k, dim=-1).indices
        return indices.gather(-1, best)

    @torch.no_grad()
    def encode_indices_exhaustive(self, x_BxTxD: Float[Tensor, "batch pos d_model"]) -> Int[Tensor, "batch pos k"]:
        """Reference encoder for small m: score all m features with the materialised dictionary."""
        if self.n_features > 2**16:
            raise ValueError(f"the exhaustive encoder materialises all m={self.n_features} features; use m <= 2^16")
        scores = x_BxTxD.float() @ self.dictionary().T
        return scores.abs().topk(self.k, dim=-1).indices

    def dictionary(self) -> Float[Tensor, "features d_model"]:
        """All m directions, materialised (tests and small m only)."""
        return kernels.parity_directions(torch.arange(self.n_features, device=self.code.device), self.code)

    def feature_directions(self, indices: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        """phi_i of the given feature ids, computed from their bits."""
        return kernels.parity_directions(indices, self.code)

    def coherence(self, max_features: int = 2**16) -> float:
        """max |<phi_i, phi_j>| over pattern features (i, j >= d): 1 - 2 min_u wt(M u) / d over u != 0,
        computed exactly over all 2^r codewords when 2^r <= max_features."""
        if self.n_features > max_features:
            raise ValueError(f"coherence enumerates 2^r = {self.n_features} codewords; raise max_features to allow it")
        signs = parity_signs(torch.arange(1, self.n_features, device=self.code.device), self.code)
        return float(signs.mean(-1).abs().max())

    def features_scored_per_token(self) -> int:
        return self.d_model + sum(beam * (2**self.bits_per_level - 1) for beam in self.beams)

    # --- forward ---------------------------------------------------------------------------------------

    def forward(self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False) -> Tensor:
        return self.reconstruct(x_BxTxD, exhaustive)[0]

    def reconstruct(self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False) -> tuple[Tensor, Tensor]:
        """(x_hat, relative reconstruction error of the batch), as the product design's `reconstruct`."""
        x_BxTxD = self.hook_in(x_BxTxD)
        indices = self.encode_indices_exhaustive(x_BxTxD) if exhaustive else self.encode_indices(x_BxTxD)
        indices_BxTxK = self.hook_code_indices(indices)
        values_BxTxK = self.hook_code_values(kernels.parity_scores(x_BxTxD, indices_BxTxK, self.code))
        x_hat_BxTxD = self.hook_recon(kernels.parity_decode(indices_BxTxK, values_BxTxK, self.code))
        return x_hat_BxTxD, relative_error(x_BxTxD, x_hat_BxTxD)

    def design_notes(self) -> str:
        return (f"prefix design: levels of {self.bits_per_level} index bits, beams {list(self.beams)}, "
                "coefficients a_i = <x, phi_i>")
