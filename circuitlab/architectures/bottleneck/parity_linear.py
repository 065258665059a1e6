"""The deep parity bottleneck with seed 003's eq. 1 code: a seeded random linear code M in F2^(d x r).

Feature u in [0, 2^r) is phi_u = R(M bits(u)) / sqrt(d): coordinate j is (-1)^<m_j, u> / sqrt(d), m_j the j-th
row of M read as an r-bit key. Unlike the product design (bottleneck/parity.py), nothing ties the coordinates
into a grid, so the dictionary's coherence is the random code's (about 0.27 for d 256, r 16, against the
product grid's 0.625).

Exact scores of all m = 2^r features, per token. With f the histogram of x over the keys, f[v] = sum over j
with m_j = v of x_j,
    <x, phi_u> = sum_j x_j (-1)^<m_j, u> / sqrt(d) = (H f)[u] / sqrt(d),
H the 2^r-point Walsh-Hadamard transform (r butterfly passes, r 2^r additions). Up to m = 2^16 the scores are
instead one matrix product with the materialised dictionary, x @ Phi^T (d 2^r multiply-adds a token, 64 MB of
float32 signs at d 256): the transform's r passes over a 2^r-wide array per token are memory-bound, and on a GPU
the product is over ten times faster (a training step of parity-stories spent most of its time in the passes).
Both give the same scores (a test checks them against each other and against brute force). The encoder takes the top k of
|<x, phi_u>| over all m features: exhaustive, so its support is the exhaustive top-k by construction. Pursuit
rounds (as in the product design) swap in the residual's best features where that lowers the residual.

Gram matrix and coefficients: <phi_u, phi_v> = o[u xor v] with o = H h / d, h the histogram of the keys (the
table of all m overlaps, computed once); least squares on the support, (G_S + ridge I) a = Phi_S^T x,
differentiable in x, its inner products and the decoded write built from the support's sign patterns.

Letters: B batch, T position, D d_model, N tokens, K code (k features), M features (2^r), F features listed.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from jaxtyping import Float, Int
from pydantic import StrictBool
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.bottleneck.feature_layer import FeatureCodeLayer
from circuitlab.architectures.bottleneck.parity import ParityCommon
from circuitlab.architectures.bottleneck.parity_code import make_code_matrix, relative_error
from circuitlab.architectures.bottleneck.usage import usage_balance
from circuitlab.architectures.design import ModelShape, PositiveInt

SCORE_CHUNK_VALUES = 2**27  # tokens x features scored at once (512 MB in float32)
MATMUL_SCORES_MAX_BITS = 16  # up to 2^16 features the scores are one product with the materialised dictionary


class LinearParityConfig(ParityCommon):
    """The deep parity bottleneck with seed 003's eq. 1 random linear code (see the module docstring)."""

    design: Literal["linear"] = "linear"
    k: PositiveInt = 16
    pursuit_rounds: PositiveInt = 1
    bias: StrictBool = True

    def build(self, config: ModelShape) -> LinearParityBottleneck:
        return LinearParityBottleneck(config)

    def describe(self, d_model: int) -> str:
        return (f"m = 2^{self.n_bits} = {2 ** self.n_bits} features, k {self.k}, code seed {self.code_seed}, linear "
                f"design (seed 003, eq. 1: a random {d_model} x {self.n_bits} F2 code), exhaustive encoder by a "
                f"Walsh-Hadamard transform, least-squares coefficients (ridge {self.ridge:g}) with "
                f"{self.pursuit_rounds - 1} pursuit round(s), reconstruction term lambda {self.lambda_recon:g}"
                f"{self.usage_notes()}")

    def check(self, d_model: int) -> None:
        if self.k > 2**self.n_bits:
            raise ValueError(f"bottleneck k={self.k} must lie in (0, m={2**self.n_bits}]")
        if self.n_bits > 24:
            raise ValueError(f"the linear design scores all 2^n_bits features per token; n_bits={self.n_bits} > 24 is too many")
        if self.n_bits > d_model:
            raise ValueError(f"a full-rank {d_model} x {self.n_bits} code needs n_bits <= d_model={d_model}")


def walsh_hadamard(values: Float[Tensor, "... m"]) -> Float[Tensor, "... m"]:
    """The unnormalised Walsh-Hadamard transform along the last axis (length a power of two):
    out[u] = sum_v values[v] (-1)^popcount(u & v)."""
    m = values.shape[-1]
    if m & (m - 1):
        raise ValueError(f"the Walsh-Hadamard transform needs a power-of-two length, got {m}")
    lead = values.shape[:-1]
    out = values.reshape(-1, m)
    half = 1
    while half < m:
        pairs = out.view(-1, m // (2 * half), 2, half)
        out = torch.stack((pairs[:, :, 0] + pairs[:, :, 1], pairs[:, :, 0] - pairs[:, :, 1]), dim=2).view(-1, m)
        half *= 2
    return out.reshape(*lead, m)


class LinearParityBottleneck(FeatureCodeLayer):
    kind = "parity"
    sparse_by_construction = True
    # Not captured in CUDA graphs: the materialised dictionary is built inside the first forward and kept as an
    # attribute, so under reduce-overhead it lives in a graph's output buffer that the next replay overwrites (a
    # paired H200 run stopped on "accessing tensor output of CUDAGraphs that has been overwritten"). The trainer
    # therefore compiles this design in torch's default mode.
    cuda_graphs = False

    def __init__(self, config: ModelShape):
        super().__init__()
        bottleneck = config.bottleneck
        self.d_model = config.d_model
        self.n_bits = bottleneck.n_bits
        self.n_features = 2**self.n_bits
        self.k = bottleneck.k
        self.pursuit_rounds = bottleneck.pursuit_rounds
        self.ridge = float(bottleneck.ridge)
        self.recon_centred = bottleneck.recon_reference == "centred"  # what the training term is relative to
        # recomputed from the seed on construction, never stored in checkpoints
        # built on the CPU even under a meta default device (the CLI sizes models on meta before training them)
        code = make_code_matrix(config.d_model, self.n_bits, 2 * bottleneck.code_seed + 1)
        keys = (code.long() << torch.arange(self.n_bits, device="cpu")).sum(-1)  # m_j as an r-bit integer
        histogram = torch.bincount(keys, minlength=self.n_features).float()
        parity = torch.zeros(self.n_features, dtype=torch.int64, device="cpu")
        for bit in range(self.n_bits):
            parity ^= (torch.arange(self.n_features, device="cpu") >> bit) & 1
        self.register_buffer("code", code, persistent=False)
        self.register_buffer("keys", keys, persistent=False)  # [D]
        self.register_buffer("parity", parity.to(torch.uint8), persistent=False)  # [M] popcount(w) mod 2
        self.register_buffer("overlaps", walsh_hadamard(histogram) / config.d_model, persistent=False)  # [M]
        self.bias = torch.nn.Parameter(torch.zeros(config.d_model)) if bottleneck.bias else None
        self.hook_in = HookPoint()  # [B, T, D] the FFN write entering the bottleneck
        self.hook_code_indices = HookPoint()  # [B, T, K] feature ids in [0, m)
        self.hook_code_values = HookPoint()  # [B, T, K] least-squares coefficients a_i
        self.hook_recon = HookPoint()  # [B, T, D] b + sum a_i phi_i, what the block writes

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.d_model)

    # --- the dictionary ------------------------------------------------------------------------------------

    def signs(self, indices: Int[Tensor, "..."], dtype: torch.dtype = torch.float32) -> Float[Tensor, "... d_model"]:
        """(-1)^<m_j, u> for every coordinate j of each listed feature u."""
        return 1.0 - 2.0 * self.parity[indices.long()[..., None] & self.keys].to(dtype)

    def feature_directions(self, indices: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        return self.signs(indices) * self.scale

    def dictionary(self) -> Float[Tensor, "features d_model"]:
        if self.n_features > 2**16:
            raise ValueError(f"the dictionary has m={self.n_features} directions; materialise it only for m <= 2^16")
        return self.feature_directions(torch.arange(self.n_features, device=self.keys.device))

    def gram(self, indices_NxF: Int[Tensor, "tokens feat"], dtype: torch.dtype = torch.float32) -> Tensor:
        """<phi_i, phi_j> = o[u_i xor u_j], one lookup per entry in the overlap table."""
        indices = indices_NxF.long()
        return self.overlaps.to(dtype)[indices[..., :, None] ^ indices[..., None, :]]

    def coherence(self) -> float:
        """max |<phi_u, phi_v>| over u != v: the largest |o[w]| over non-zero w."""
        return float(self.overlaps[1:].abs().max())

    def features_scored_per_token(self) -> int:
        return self.n_features * self.pursuit_rounds

    def design_notes(self) -> str:
        return (f"linear design (seed 003, eq. 1): a random {self.d_model} x {self.n_bits} F2 code, exhaustive encoder "
                f"(Walsh-Hadamard transform), least squares (ridge {self.ridge:g}) with {self.pursuit_rounds - 1} "
                f"pursuit round(s), coherence {self.coherence():.3f}, bias path {'on' if self.bias is not None else 'off'}")

    # --- the encoder ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def scores(self, x_NxD: Float[Tensor, "tokens d_model"]) -> Float[Tensor, "tokens features"]:
        """<x, phi_u> for all m features of each token (float32): a product with the dictionary up to 2^16
        features, the Walsh-Hadamard transform of the key histogram above."""
        if self.n_bits <= MATMUL_SCORES_MAX_BITS:
            return x_NxD.float() @ self._dictionary_on(x_NxD.device).T
        return self.transform_scores(x_NxD)

    @torch.no_grad()
    def transform_scores(self, x_NxD: Float[Tensor, "tokens d_model"]) -> Float[Tensor, "tokens features"]:
        """<x, phi_u> for all m features by one Walsh-Hadamard transform of the histogram of x over the keys."""
        histogram = torch.zeros(x_NxD.shape[0], self.n_features, device=x_NxD.device, dtype=torch.float32)
        histogram.index_add_(1, self.keys, x_NxD.float())
        return walsh_hadamard(histogram) * self.scale

    def _dictionary_on(self, device: torch.device) -> Float[Tensor, "features d_model"]:
        """The materialised dictionary (float32), built once per device and kept out of the state dict."""
        cached = getattr(self, "_dictionary_cache", None)
        if cached is None or cached.device != device:
            cached = self.feature_directions(torch.arange(self.n_features, device=self.keys.device)).to(device)
            object.__setattr__(self, "_dictionary_cache", cached)  # a plain attribute: not a buffer, not saved
        return cached

    @torch.no_grad()
    def top_scores(self, x_NxD: Float[Tensor, "tokens d_model"], count: int) -> tuple[Tensor, Tensor]:
        """The `count` features of largest |<x, phi_u>| per token, exhaustively: (ids, |scores| descending)."""
        chunk = max(1, SCORE_CHUNK_VALUES // self.n_features)
        ids, best = [], []
        for start in range(0, x_NxD.shape[0], chunk):
            values, top = self.scores(x_NxD[start:start + chunk]).abs_().topk(count, dim=-1)
            ids.append(top)
            best.append(values)
        return torch.cat(ids), torch.cat(best)

    @torch.no_grad()
    def encode_indices(self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = True) -> Tensor:
        """The support: the exhaustive top k, refined by the pursuit rounds (`exhaustive` is always so here)."""
        X = x_BxTxD.reshape(-1, self.d_model).float()
        support = self.top_scores(X, self.k)[0]
        if self.pursuit_rounds > 1:
            support = self._pursue(X, support)
        return support.reshape(*x_BxTxD.shape[:-1], self.k)

    def _pursue(self, X: Tensor, support: Tensor) -> Tensor:
        residual = X - self._decode(support, self._solve(X, support))
        error = residual.pow(2).sum(-1)
        for _ in range(self.pursuit_rounds - 1):
            fresh = self.top_scores(residual, 2 * self.k)[0]
            outside = ~(fresh[:, :, None] == support[:, None, :]).any(-1)
            rank = outside * torch.arange(2 * self.k, 0, -1, device=X.device)
            union = torch.cat([support, fresh.gather(-1, rank.topk(self.k, dim=-1).indices)], dim=-1)
            candidate = union.gather(-1, self._solve(X, union).abs().topk(self.k, dim=-1).indices)
            candidate_residual = X - self._decode(candidate, self._solve(X, candidate))
            candidate_error = candidate_residual.pow(2).sum(-1)
            better = candidate_error < error
            support = torch.where(better[:, None], candidate, support)
            residual = torch.where(better[:, None], candidate_residual, residual)
            error = torch.minimum(error, candidate_error)
        return support

    # --- coefficients and decoding ------------------------------------------------------------------------

    def _solve(self, X_NxD: Tensor, indices_NxF: Tensor) -> Float[Tensor, "tokens feat"]:
        """Least squares on the support: (G + ridge I) a = Phi^T x (differentiable in x)."""
        phi_NxFxD = self.signs(indices_NxF, X_NxD.dtype) * self.scale
        inner_NxF = (phi_NxFxD @ X_NxD[..., None])[..., 0]
        gram = self.gram(indices_NxF, X_NxD.dtype)
        gram = gram + self.ridge * torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
        return torch.linalg.solve_ex(gram, inner_NxF[..., None])[0][..., 0]  # no host sync (CUDA graphs)

    def _decode(self, indices_NxF: Tensor, values_NxF: Tensor) -> Float[Tensor, "tokens d_model"]:
        phi_NxFxD = self.signs(indices_NxF, values_NxF.dtype) * self.scale
        return (values_NxF[:, None, :] @ phi_NxFxD)[:, 0]

    def coefficients(self, x_BxTxD: Tensor, indices_BxTxK: Tensor) -> Float[Tensor, "batch pos k"]:
        dtype = torch.promote_types(x_BxTxD.dtype, torch.float32)
        X = x_BxTxD.reshape(-1, self.d_model).to(dtype)
        return self._solve(X, indices_BxTxK.reshape(X.shape[0], -1)).reshape(indices_BxTxK.shape)

    def decode(self, indices_BxTxK: Tensor, values_BxTxK: Tensor) -> Float[Tensor, "batch pos d_model"]:
        """sum_i a_i phi_i (without the bias)."""
        dtype = torch.promote_types(values_BxTxK.dtype, torch.float32)
        n_features = indices_BxTxK.shape[-1]
        flat = self._decode(indices_BxTxK.reshape(-1, n_features), values_BxTxK.to(dtype).reshape(-1, n_features))
        return flat.reshape(*indices_BxTxK.shape[:-1], self.d_model)

    # --- forward ---------------------------------------------------------------------------------------

    def forward(self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = True) -> Tensor:
        return self.reconstruct(x_BxTxD)[0]

    def reconstruct(self, x_BxTxD: Tensor, exhaustive: bool = True) -> tuple[Tensor, Tensor]:
        """(x_hat, relative reconstruction error ||x - x_hat||^2 / ||x||^2 of the batch)."""
        return self.reconstruct_with_usage(x_BxTxD)[:2]

    def reconstruct_with_usage(self, x_BxTxD: Tensor, exhaustive: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """(x_hat = b + sum a_i phi_i, relative reconstruction error, usage balance: bottleneck/usage.py)."""
        written_BxTxD = self.hook_in(x_BxTxD)
        with torch.autocast(device_type=x_BxTxD.device.type, enabled=False):
            x = written_BxTxD.float()
            if self.bias is not None:
                x = x - self.bias.float()
            indices_BxTxK = self.hook_code_indices(self.encode_indices(x))
            values_BxTxK = self.hook_code_values(self.coefficients(x, indices_BxTxK))
            x_hat_BxTxD = self.decode(indices_BxTxK, values_BxTxK)
            if self.bias is not None:
                x_hat_BxTxD = x_hat_BxTxD + self.bias.float()
        x_hat_BxTxD = self.hook_recon(x_hat_BxTxD.to(written_BxTxD.dtype))
        balance = usage_balance(indices_BxTxK, values_BxTxK, self.n_features)
        return x_hat_BxTxD, relative_error(written_BxTxD, x_hat_BxTxD, self.recon_centred), balance
