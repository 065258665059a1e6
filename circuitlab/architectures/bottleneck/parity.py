"""The deep parity bottleneck, product design (docs/designs/parity.md; seed 003, whose full text was not available:
every choice below is circuitlab's and is recorded here and in the parity model card).

Dictionary. m = 2^r features in d dimensions, computed, never stored. d is read as a grid of g_r rows x g_c
columns (x_grid = x.view(g_r, g_c), row-major). Two seeded full-rank F2 matrices, Q (g_c x r1) for the
columns and P (g_r x r2) for the rows, r1 + r2 = r, give sign tables sQ(u1) = R(Q bits(u1)) in {+1,-1}^g_c
and sP(u2) = R(P bits(u2)) in {+1,-1}^g_r (R(0) = +1, R(1) = -1). Feature u = u1 + 2^r1 u2 is
    phi_u = outer(sP(u2), sQ(u1)).flatten() / sqrt(d),
the pattern R(M bits(u)) / sqrt(d) of the linear code M whose row (row, col) is [Q[col], P[row]]. So the
facts of the design hold (docs/designs/parity.md): sqrt(d) phi_(u xor v) = sqrt(d) phi_u * sqrt(d) phi_v, and
<phi_u, phi_v> = mean sign of the codeword of u xor v = tQ[u1 xor v1] * tP[u2 xor v2], with tQ, tP the mean
signs of the column and row codewords. Only the sign tables (2^r1 x g_c and 2^r2 x g_r) are kept, and they
are recomputed from the seed.

Exact scores of all m features. With Y = x_grid @ sQ^T (g_r x 2^r1, one column per u1),
<x, phi_u> = (sP @ Y)[u2, u1] / sqrt(d): two small matmuls, about 1 MFLOP per token at d = 256, m = 2^16.
This is the exhaustive reference encoder (`beam=None`).

Fast encoder, with a certificate. |<x, phi_(u1, u2)>| <= ||Y[:, u1]||_1 / sqrt(d) for every u2. Keep the
`beam` columns u1 with the largest bound, score their beam * 2^r2 features exactly, take the top k by
|score|. The result is the exhaustive top-k whenever the k-th best exact score is >= the (beam+1)-th largest
bound (no unvisited feature can beat it): `top_scores` reports this per token. The encoder never takes a
top-k over all m scores of a token.

Coefficients: least squares on the support S, differentiable in x, a = (G_S + ridge I)^-1 Phi_S^T x, with the
Gram matrix read from the xor-group identity, <phi_u, phi_v> = <phi_0, phi_(u xor v)> = tP[u2 xor v2] *
tQ[u1 xor v1], one lookup per entry in a table of the m overlaps (no d-dimensional direction built), batched
over tokens, so x_hat = sum a_i phi_i is the best write on the chosen support (up to the small ridge that
keeps the solve stable when features overlap). Then `pursuit_rounds - 1` subspace-pursuit rounds: score the
residual with the same fast encoder, add its best k features that are not in the support, solve on the 2k,
keep the k largest |a|, solve again, and keep the new support only where it lowers the residual (so more
rounds never reconstruct worse). The support carries no gradient; x gets its gradient through the final solve.

Where it sits: on each block's FFN write (FFN -> hook_in -> bottleneck -> hook_recon = hook_mlp_out ->
residual), so everything the FFN writes into the residual stream is a sum of k dictionary features.
`reconstruct` also returns the relative reconstruction error ||x - x_hat||^2 / ||x||^2 of the batch (sums
over tokens), which the model returns as aux["reconstruction"] (mean over layers) and training adds to the
loss times `lambda_recon`, so that the FFN learns writes the k features carry. Without it the out-of-span
part of a write costs the language model nothing and nothing pushes it out.

Why each choice was made, and the variants measured and dropped: docs/designs/parity.md, docs/decisions/.
Paths: the encoder's beam search and the least squares each have a fast path and a reference, chosen per call
by `circuitlab.kernels` (Triton on CUDA, the numba-compiled encoder on the CPU where numba is installed, the
PyTorch code below elsewhere or under `kernels.use_backend("reference")`).

Letters: B batch, T position, D d_model, N tokens (B*T), K code (k features), H grid rows (g_r), W grid
columns (g_c), U column patterns (2^r1), P row patterns (2^r2), C beam (column patterns kept), F features
per token in a candidate list.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

import torch
from jaxtyping import Float, Int
from pydantic import Field, StrictBool, StrictInt
from torch import Tensor
from transformer_lens.hook_points import HookPoint

import circuitlab.kernels as kernels
from circuitlab.architectures.bottleneck.parity_code import make_factor_code, product_layout, relative_error, sign_table
from circuitlab.architectures.bottleneck.usage import usage_balance
from circuitlab.architectures.bottleneck.feature_layer import FeatureCodeLayer
from circuitlab.architectures.components import is_hooked
from circuitlab.architectures.design import BottleneckPart, ModelShape, Number, PositiveInt


EXHAUSTIVE_CHUNK = 1024  # tokens per chunk of the exhaustive encoder (chunk x m scores in memory)
OVERLAP_TABLE_BITS = 20  # up to m = 2^20 the m overlaps <phi_0, phi_w> are kept as a table (4 MB in float32)
# tokens per encoder pass of the PyTorch encoder on the CPU: a pass's intermediates (2k x 2k systems, 16,384
# scores a token) then stay in cache (docs/decisions/parity-cpu-chunk.md)
CPU_ENCODE_CHUNK = 128


class ParityCommon(BottleneckPart):
    """The fields every parity design shares: m = 2**n_bits features, k active per token, the code's seed,
    least squares (`ridge`) with `pursuit_rounds - 1` swap rounds, the reconstruction term `lambda_recon`;
    `bias`: a learned vector b taken off the write before it is coded and added back after, so the constant
    part of the writes needs no feature (circuitlab.architectures.bottleneck.usage); `lambda_balance`: the
    weight of the usage-balancing term (ibid.); `recon_reference`: what the reconstruction term is relative to,
    the write ("write": ||x - x_hat||^2 / ||x||^2) or its variation over the batch ("centred": over
    ||x - mean x||^2; parity_code.relative_error). The first can be lowered by writing a large constant that
    the bias path carries, whatever the code does with the rest; the second cannot (docs/decisions/parity-recon.md)."""

    # fields added after models were shipped: left out of the config hash at these values, so old hashes hold
    LATER_DEFAULTS: ClassVar[dict[str, Any]] = {"bias": False, "lambda_balance": 0.0, "recon_reference": "write"}

    design: str
    n_bits: PositiveInt = 16
    k: PositiveInt = 32
    code_seed: StrictInt = 0
    pursuit_rounds: PositiveInt = 2
    ridge: Annotated[Number, Field(ge=0)] = 1e-3
    lambda_recon: Annotated[Number, Field(ge=0)] = 1.0
    bias: StrictBool = False
    lambda_balance: Annotated[Number, Field(ge=0)] = 0.0
    recon_reference: Literal["write", "centred"] = "write"

    def usage_notes(self) -> str:
        return (f", bias path {'on' if self.bias else 'off'}"
                + (f", usage balance lambda {self.lambda_balance:g}" if self.lambda_balance else "")
                + (", reconstruction term relative to the writes' variation" if self.recon_reference == "centred" else ""))


class ParityConfig(ParityCommon):
    """The deep parity bottleneck, product design, on each block's FFN write (see the module docstring): m =
    2**n_bits features in d_model dimensions, k active per token. d_model is read as a `grid` of rows x cols
    (None: the most nearly square one); the low `col_bits` index bits (None: half of n_bits, rounded up) pick
    a column pattern, the others a row pattern. The encoder keeps the `beam` column patterns with the largest
    score bound, scores their features exactly and keeps the top k; coefficients are least squares on the
    support (`ridge` added to the Gram matrix), refined by `pursuit_rounds - 1` swap rounds. Training adds
    `lambda_recon` times the relative reconstruction error of the FFN write to the loss."""

    design: Literal["product"] = "product"
    grid: tuple[PositiveInt, PositiveInt] | None = None
    col_bits: PositiveInt | None = None
    beam: PositiveInt = 64

    def build(self, config: ModelShape) -> ParityBottleneck:
        return ParityBottleneck(config)

    def describe(self, d_model: int) -> str:
        rows, cols, row_bits, col_bits = product_layout(self, d_model)
        return (
            f"m = 2^{self.n_bits} = {2 ** self.n_bits} features, k {self.k}, code seed {self.code_seed}, product "
            f"design: grid {rows} x {cols}, {col_bits} column + {row_bits} row index bits, beam {self.beam} column "
            f"patterns, least-squares coefficients (ridge {self.ridge:g}) with {self.pursuit_rounds - 1} pursuit "
            f"round(s), reconstruction term lambda {self.lambda_recon:g}{self.usage_notes()}"
        )

    def check(self, d_model: int) -> None:
        if self.k > 2**self.n_bits:
            raise ValueError(f"bottleneck k={self.k} must lie in (0, m={2**self.n_bits}]")
        if self.n_bits > 30:
            raise ValueError(f"bottleneck n_bits={self.n_bits} is larger than supported (30)")
        rows, cols, row_bits, col_bits = product_layout(self, d_model)
        if rows * cols != d_model:
            raise ValueError(f"bottleneck grid {rows} x {cols} must hold d_model={d_model} coordinates")
        if not 1 <= col_bits < self.n_bits:
            raise ValueError(f"bottleneck col_bits={col_bits} must leave row bits: 1 <= col_bits < n_bits={self.n_bits}")
        if col_bits > cols or row_bits > rows:
            raise ValueError(
                f"bottleneck: {col_bits} column bits and {row_bits} row bits need a grid of at least {row_bits} rows x "
                f"{col_bits} cols (full-rank codes, so distinct features differ), got {rows} x {cols}"
            )
        if self.beam > 2**col_bits:
            raise ValueError(f"bottleneck beam={self.beam} must lie in (0, 2^col_bits = {2**col_bits}]")
        needed = self.k * (2 if self.pursuit_rounds > 1 else 1)
        if needed > self.beam * 2**row_bits:
            raise ValueError(
                f"bottleneck: the beam scores {self.beam * 2**row_bits} features per token, fewer than the "
                f"{needed} that k={self.k}{' and pursuit' if needed > self.k else ''} need"
            )

# --- the layer -----------------------------------------------------------------------------------------------


class ParityBottleneck(FeatureCodeLayer):
    kind = "parity"
    sparse_by_construction = True

    @property
    def cuda_graphs(self) -> bool:
        """Whether a compiled step may be captured in CUDA graphs: only when every solve runs fused on CUDA (the
        batched LU refuses capture; the fused kernels and top-k do not)."""
        widest = self.k * (2 if self.pursuit_rounds > 1 else 1)
        fused = kernels.requested_backend() != "reference"
        return fused and widest <= kernels.MAX_SOLVE_FEATURES and max(self.grid_rows, self.grid_cols) <= 64

    def __init__(self, config: ModelShape):
        super().__init__()
        bottleneck = config.bottleneck
        self.d_model = config.d_model
        self.n_bits = bottleneck.n_bits
        self.n_features = 2**self.n_bits
        self.k = bottleneck.k
        self.beam = bottleneck.beam
        self.pursuit_rounds = bottleneck.pursuit_rounds
        self.ridge = float(bottleneck.ridge)
        self.recon_centred = bottleneck.recon_reference == "centred"  # what the training term is relative to
        self.grid_rows, self.grid_cols, self.row_bits, self.col_bits = product_layout(bottleneck, config.d_model)
        # recomputed from the seed on construction, never stored in checkpoints
        row_code = make_factor_code(self.grid_rows, self.row_bits, 2 * bottleneck.code_seed + 1).clone()
        col_code = make_factor_code(self.grid_cols, self.col_bits, 2 * bottleneck.code_seed + 2).clone()
        row_signs, col_signs = sign_table(row_code), sign_table(col_code)
        # M: row (row, col) = [Q[col], P[row]], the low r1 index bits read Q
        code = torch.cat([col_code.repeat(self.grid_rows, 1), row_code.repeat_interleave(self.grid_cols, 0)], dim=1)
        self.register_buffer("code", code, persistent=False)
        self.register_buffer("row_signs", row_signs, persistent=False)  # [P, H]
        self.register_buffer("col_signs", col_signs, persistent=False)  # [U, W]
        self.register_buffer("row_means", row_signs.mean(-1), persistent=False)  # [P]
        self.register_buffer("col_means", col_signs.mean(-1), persistent=False)  # [U]
        # <phi_0, phi_w> = tP[w2] tQ[w1] for every w (flat index w2 * U + w1 = w), so <phi_u, phi_v> is one lookup
        overlaps = (row_signs.mean(-1)[:, None] * col_signs.mean(-1)[None, :]).flatten()
        self.register_buffer("overlaps", overlaps if self.n_bits <= OVERLAP_TABLE_BITS else None, persistent=False)

        # the bias path (bottleneck/usage.py): b, zero at the start, carries the writes' common part
        self.bias = torch.nn.Parameter(torch.zeros(config.d_model)) if bottleneck.bias else None
        self.hook_in = HookPoint()  # [B, T, D] the FFN write entering the bottleneck
        self.hook_code_indices = HookPoint()  # [B, T, K] feature ids in [0, m)
        self.hook_code_values = HookPoint()  # [B, T, K] least-squares coefficients a_i
        self.hook_recon = HookPoint()  # [B, T, D] x_hat = sum a_i phi_i, what the block writes

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.d_model)

    def _tables(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return (self.row_signs.to(dtype), self.col_signs.to(dtype), self.row_means.to(dtype), self.col_means.to(dtype))

    def _grid(self, x_NxD: Tensor) -> Float[Tensor, "tokens rows cols"]:
        return x_NxD.reshape(-1, self.grid_rows, self.grid_cols)

    def _split(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """(u1, u2): the column pattern (low r1 bits) and the row pattern of each feature id."""
        indices = indices.long()
        return indices & (2**self.col_bits - 1), indices >> self.col_bits

    # --- the encoder ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def top_scores(
        self, x_NxHxW: Float[Tensor, "tokens rows cols"], count: int, beam: int | None
    ) -> tuple[Int[Tensor, "tokens count"], Float[Tensor, "tokens count"], Tensor]:
        """The `count` features of largest |<x, phi_u>| per token: (ids, |scores| descending, certified).

        beam None (or >= 2^r1): exhaustive over all m features. Otherwise only the `beam` column patterns of
        largest bound ||Y[:, u1]||_1 / sqrt(d) are scored; certified[n] says the result is the exhaustive
        top-`count` (the count-th score is >= the best bound left out)."""
        dtype = torch.promote_types(x_NxHxW.dtype, torch.float32)
        with torch.autocast(device_type=x_NxHxW.device.type, enabled=False):
            row_signs, col_signs, _, _ = self._tables(dtype)
            n_cols = col_signs.shape[0]
            if beam is None or beam >= n_cols:
                Y_NxHxU = x_NxHxW.to(dtype) @ col_signs.T
                ids, scores = [], []
                for start in range(0, Y_NxHxU.shape[0], EXHAUSTIVE_CHUNK):
                    S_NxPxU = (row_signs @ Y_NxHxU[start : start + EXHAUSTIVE_CHUNK]).abs_()
                    best_scores, top_ids = S_NxPxU.flatten(1).topk(count, dim=-1)
                    ids.append(top_ids)  # flat id u2 * 2^r1 + u1 is the feature id
                    scores.append(best_scores)
                ids_NxF, scores_NxF = torch.cat(ids), torch.cat(scores) * self.scale
                return ids_NxF, scores_NxF, torch.ones(ids_NxF.shape[0], dtype=torch.bool, device=ids_NxF.device)
            # bounds, beam, scores and top `count` (on CUDA one kernel per token up to beam 32, else the beam
            # chosen in PyTorch and scored by one: kernels/parity_select_triton.py)
            ids, best_scores, next_bound = kernels.parity_beam_select(x_NxHxW.to(dtype), row_signs, col_signs, beam,
                                                                     count)
            return ids, best_scores * self.scale, best_scores[:, -1] >= next_bound

    @torch.no_grad()
    def encode_indices(
        self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False
    ) -> Int[Tensor, "batch pos k"]:
        """The support: the top k (fast encoder, or exhaustive), refined by the pursuit rounds."""
        return self._encode(x_BxTxD, exhaustive)[0]

    @torch.no_grad()
    def _encode(
        self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool
    ) -> tuple[Int[Tensor, "batch pos k"], Tensor | None, Tensor | None]:
        """(support, its least-squares coefficients in float32 and their decoded write where the compiled CPU
        encoder found them, else None and None)."""
        with torch.autocast(device_type=x_BxTxD.device.type, enabled=False):
            X = self._grid(x_BxTxD).float()
            if not torch.compiler.is_compiling():
                beam = None if exhaustive else self.beam
                compiled = kernels.cpu.parity_encode(X, self.row_signs, self.col_signs, self.k, beam,
                                                     self.pursuit_rounds, self.ridge)
                if compiled is not None:
                    support, values, decoded = compiled
                    shape = (*x_BxTxD.shape[:-1], self.k)
                    return support.reshape(shape), values.reshape(shape), decoded.reshape(x_BxTxD.shape)
            if X.device.type == "cpu" and X.shape[0] > CPU_ENCODE_CHUNK and not torch.compiler.is_compiling():
                chunks = X.split(CPU_ENCODE_CHUNK)  # every token is encoded on its own: same supports
                support = torch.cat([self._pursue(chunk, exhaustive) for chunk in chunks])
            else:
                support = self._pursue(X, exhaustive)
            return support.reshape(*x_BxTxD.shape[:-1], self.k), None, None

    def _pursue(self, X: Float[Tensor, "tokens rows cols"], exhaustive: bool) -> Int[Tensor, "tokens k"]:
        beam = None if exhaustive else self.beam
        support = self.top_scores(X, self.k, beam)[0]
        if self.pursuit_rounds <= 1:  # no round compares residuals: the support is the top k
            return support
        fused = self._fused(X, 2 * self.k)
        if fused:
            residual = self._fused_residual(X, support)
        else:
            residual = self._residual(X, support, self._solve(X, support))
        error = residual.pow(2).sum((-2, -1))
        for _ in range(self.pursuit_rounds - 1):
            fresh = self.top_scores(residual, 2 * self.k, beam)[0]
            # the k best residual features not already in the support (at least k of the 2k are not)
            outside = ~(fresh[:, :, None] == support[:, None, :]).any(-1)
            rank = outside * torch.arange(2 * self.k, 0, -1, device=X.device)
            fresh = fresh.gather(-1, rank.topk(self.k, dim=-1).indices)
            union = torch.cat([support, fresh], dim=-1)
            if fused:  # one kernel solves the union, one the kept k (their systems rebuilt on chip)
                keep = self._solve(X, union).abs().topk(self.k, dim=-1).indices
                candidate = union.gather(-1, keep)
                candidate_residual = self._fused_residual(X, candidate)
            else:
                gram, inner = self._system(X, union)
                keep = self._solve_system(gram, inner).abs().topk(self.k, dim=-1).indices
                candidate = union.gather(-1, keep)
                # the candidate's system is the kept rows and columns of the union's
                rows = gram.gather(1, keep[:, :, None].expand(-1, -1, union.shape[-1]))
                candidate_gram = rows.gather(2, keep[:, None, :].expand(-1, self.k, -1))
                candidate_coefficients = self._solve_system(candidate_gram, inner.gather(-1, keep))
                candidate_residual = self._residual(X, candidate, candidate_coefficients)
            candidate_error = candidate_residual.pow(2).sum((-2, -1))
            better = candidate_error < error
            support = torch.where(better[:, None], candidate, support)
            residual = torch.where(better[:, None, None], candidate_residual, residual)
            error = torch.minimum(error, candidate_error)
        return support

    # --- coefficients and decoding ------------------------------------------------------------------------

    def _patterns(self, indices_NxF: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The row and column sign patterns of the listed features: sP(u2) [N, F, H], sQ(u1) [N, F, W]."""
        row_signs, col_signs, _, _ = self._tables(dtype)
        u1, u2 = self._split(indices_NxF)
        return row_signs[u2], col_signs[u1]

    def gram(self, indices_NxF: Int[Tensor, "tokens feat"], dtype: torch.dtype = torch.float32) -> Tensor:
        """<phi_i, phi_j> = tP[u2_i xor u2_j] * tQ[u1_i xor u1_j] (the xor-group identity): one lookup per entry
        in the table of all m overlaps <phi_0, phi_w> (two lookups in tP and tQ where m > 2^OVERLAP_TABLE_BITS),
        exact, with no pattern or d-dimensional direction built."""
        indices = indices_NxF.long()
        xor_NxFxF = indices[..., :, None] ^ indices[..., None, :]
        if self.overlaps is not None:
            return self.overlaps.to(dtype)[xor_NxFxF]
        _, _, row_means, col_means = self._tables(dtype)
        return row_means[xor_NxFxF >> self.col_bits] * col_means[xor_NxFxF & (2**self.col_bits - 1)]

    def _inner(self, X_NxHxW: Tensor, rows_NxFxH: Tensor, cols_NxFxW: Tensor) -> Float[Tensor, "tokens feat"]:
        """<x, phi_i> for the listed features: sP(u2)^T x_grid sQ(u1) / sqrt(d)."""
        XQ_NxHxF = X_NxHxW @ cols_NxFxW.transpose(-1, -2)
        return (rows_NxFxH.transpose(-1, -2) * XQ_NxHxF).sum(-2) * self.scale

    def _decode_grid(self, indices_NxF: Tensor, values_NxF: Tensor) -> Float[Tensor, "tokens rows cols"]:
        """sum_i a_i outer(sP(u2_i), sQ(u1_i)) / sqrt(d): one [H, F] @ [F, W] matmul per token."""
        if self._fused(values_NxF, indices_NxF.shape[-1]):
            x_hat = self._fused_call(values_NxF.new_empty(0), values_NxF, indices_NxF, False, False, True)[1]
            return x_hat.view(-1, self.grid_rows, self.grid_cols)
        rows_NxFxH, cols_NxFxW = self._patterns(indices_NxF, values_NxF.dtype)
        return (rows_NxFxH * values_NxF[..., None]).transpose(-1, -2) @ cols_NxFxW * self.scale

    def _system(self, X_NxHxW: Tensor, indices_NxF: Tensor) -> tuple[Tensor, Tensor]:
        """The normal equations of least squares on the support: (G + ridge I, Phi^T x)."""
        rows_NxFxH, cols_NxFxW = self._patterns(indices_NxF, X_NxHxW.dtype)
        gram_NxFxF = self.gram(indices_NxF, X_NxHxW.dtype)
        gram_NxFxF = gram_NxFxF + self.ridge * torch.eye(gram_NxFxF.shape[-1], dtype=gram_NxFxF.dtype, device=gram_NxFxF.device)
        return gram_NxFxF, self._inner(X_NxHxW, rows_NxFxH, cols_NxFxW)

    def _solve_system(self, gram_NxFxF: Tensor, inner_NxF: Tensor) -> Float[Tensor, "tokens feat"]:
        """(G + ridge I) a = Phi^T x, by LU without a host sync (no check for singular systems: the ridge keeps
        them regular). The systems are symmetric positive definite, for which elimination without pivoting is
        stable, so on CUDA it skips the row swaps; the CPU has only partial pivoting
        (docs/decisions/parity-solver.md)."""
        if gram_NxFxF.is_cuda:
            factors, pivots, _ = torch.linalg.lu_factor_ex(gram_NxFxF, pivot=False)
            return torch.linalg.lu_solve(factors, pivots, inner_NxF[..., None])[..., 0]
        return torch.linalg.solve_ex(gram_NxFxF, inner_NxF[..., None])[0][..., 0]

    def _fused(self, X: Tensor, n_features: int) -> bool:
        """Whether least squares and decode on `n_features` features run fused (`kernels.parity_feature_solve`,
        one Triton kernel per token, float32): where that kernel runs (CUDA under the "auto" backend, or a forced
        "triton" backend)."""
        if X.dtype != torch.float32:
            return False
        return kernels.parity_feature_solve_backend(X, n_features, self.row_signs, self.col_signs) == "triton"

    def _fused_call(self, x: Tensor, v: Tensor, indices_NxF: Tensor, solve: bool, write_a: bool, decode: bool):
        return kernels.parity_feature_solve(x, v, indices_NxF, self.row_signs, self.col_signs, self.ridge, solve,
                                            write_a, decode)

    def _fused_residual(self, X_NxHxW: Tensor, indices_NxF: Tensor) -> Tensor:
        """x - x_hat of least squares on the support, fused (no coefficient written)."""
        _, x_hat = self._fused_call(X_NxHxW.flatten(1), X_NxHxW.new_empty(0), indices_NxF, True, False, True)
        return X_NxHxW - x_hat.view_as(X_NxHxW)

    def _solve(self, X_NxHxW: Tensor, indices_NxF: Tensor) -> Float[Tensor, "tokens feat"]:
        """Least squares on the support: (G + ridge I) a = Phi^T x."""
        if self._fused(X_NxHxW, indices_NxF.shape[-1]):
            return self._fused_call(X_NxHxW.flatten(1), X_NxHxW.new_empty(0), indices_NxF, True, True, False)[0]
        return self._solve_system(*self._system(X_NxHxW, indices_NxF))

    def _residual(self, X_NxHxW: Tensor, indices_NxF: Tensor, values_NxF: Tensor) -> Tensor:
        return X_NxHxW - self._decode_grid(indices_NxF, values_NxF)

    def coefficients(
        self, x_BxTxD: Float[Tensor, "batch pos d_model"], indices_BxTxK: Int[Tensor, "batch pos k"]
    ) -> Float[Tensor, "batch pos k"]:
        """Least-squares coefficients of x on the given support (differentiable in x; float32 or float64)."""
        return self._fit(x_BxTxD, indices_BxTxK, decode=False)[0]

    def _fit(
        self, x_BxTxD: Tensor, indices_BxTxK: Tensor, decode: bool
    ) -> tuple[Float[Tensor, "batch pos k"], Tensor | None]:
        """(least-squares coefficients, and where `decode` and the fused kernel runs, their decoded write x_hat
        from the same launch, else None). Fused, coefficients and write are one launch forward and one backward
        (the operator's backward takes both upstream gradients) instead of two each."""
        dtype = torch.promote_types(x_BxTxD.dtype, torch.float32)
        with torch.autocast(device_type=x_BxTxD.device.type, enabled=False):
            X = self._grid(x_BxTxD.to(dtype))
            indices_NxK = indices_BxTxK.reshape(X.shape[0], -1)
            if not (decode and self._fused(X, indices_NxK.shape[-1])):
                return self._solve(X, indices_NxK).reshape(indices_BxTxK.shape), None
            values, x_hat = self._fused_call(X.flatten(1), X.new_empty(0), indices_NxK, True, True, True)
        return values.reshape(indices_BxTxK.shape), x_hat.reshape(x_BxTxD.shape)

    def decode(
        self, indices_BxTxK: Int[Tensor, "batch pos k"], values_BxTxK: Float[Tensor, "batch pos k"]
    ) -> Float[Tensor, "batch pos d_model"]:
        """x_hat = sum_i a_i phi_i (float32 or float64, as the values)."""
        dtype = torch.promote_types(values_BxTxK.dtype, torch.float32)
        with torch.autocast(device_type=values_BxTxK.device.type, enabled=False):
            n_features = indices_BxTxK.shape[-1]
            grid = self._decode_grid(indices_BxTxK.reshape(-1, n_features), values_BxTxK.to(dtype).reshape(-1, n_features))
        return grid.reshape(*indices_BxTxK.shape[:-1], self.d_model)

    # --- forward ---------------------------------------------------------------------------------------

    def forward(self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False) -> Tensor:
        return self.reconstruct(x_BxTxD, exhaustive)[0]

    def reconstruct(
        self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False
    ) -> tuple[Float[Tensor, "batch pos d_model"], Tensor]:
        """(x_hat, relative reconstruction error ||x - x_hat||^2 / ||x||^2 of the batch)."""
        return self.reconstruct_with_usage(x_BxTxD, exhaustive)[:2]

    def reconstruct_with_usage(
        self, x_BxTxD: Float[Tensor, "batch pos d_model"], exhaustive: bool = False
    ) -> tuple[Float[Tensor, "batch pos d_model"], Tensor, Tensor]:
        """(x_hat, relative reconstruction error, usage balance of the batch's code: bottleneck/usage.py)."""
        written_BxTxD = self.hook_in(x_BxTxD)
        # the bias path: b is taken off before coding and added back after (bottleneck/usage.py)
        x_BxTxD = written_BxTxD - self.bias.to(written_BxTxD.dtype) if self.bias is not None else written_BxTxD
        found_BxTxK, values_BxTxK, decoded_BxTxD = self._encode(x_BxTxD, exhaustive)
        indices_BxTxK = self.hook_code_indices(found_BxTxK)
        # the compiled CPU encoder's coefficients serve where nothing needs their gradient, x is float32 and no
        # hook changed the support; else least squares again, differentiable. Its decoded write serves too
        # where no hook is attached to the coefficients (one could change them in place)
        reuse = (
            values_BxTxK is not None and x_BxTxD.dtype == torch.float32
            and not (torch.is_grad_enabled() and x_BxTxD.requires_grad)
            and (indices_BxTxK is found_BxTxK or torch.equal(indices_BxTxK, found_BxTxK))
        )
        values_hooked = is_hooked(self.hook_code_values)
        x_hat_BxTxD = None
        if not reuse:
            values_BxTxK, x_hat_BxTxD = self._fit(x_BxTxD, indices_BxTxK, decode=not values_hooked)
        values_BxTxK = self.hook_code_values(values_BxTxK)
        if reuse and not values_hooked:
            x_hat_BxTxD = decoded_BxTxD.to(x_BxTxD.device)
        elif x_hat_BxTxD is None:
            x_hat_BxTxD = self.decode(indices_BxTxK, values_BxTxK)
        if self.bias is not None:
            x_hat_BxTxD = x_hat_BxTxD + self.bias.to(x_hat_BxTxD.dtype)
        x_hat_BxTxD = self.hook_recon(x_hat_BxTxD)
        balance = usage_balance(indices_BxTxK, values_BxTxK, self.n_features)
        return x_hat_BxTxD, relative_error(written_BxTxD, x_hat_BxTxD, self.recon_centred), balance

    # --- the dictionary, explicitly (tests, analyses) -------------------------------------------------------

    def feature_directions(self, indices: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        """phi_i of the given feature ids, from the two sign tables."""
        u1, u2 = self._split(indices)
        outer = self.row_signs[u2][..., :, None] * self.col_signs[u1][..., None, :]
        return outer.flatten(-2) * self.scale

    def dictionary(self) -> Float[Tensor, "features d_model"]:
        """All m directions, materialised (tests and small m only)."""
        if self.n_features > 2**16:
            raise ValueError(f"the dictionary has m={self.n_features} directions; materialise it only for m <= 2^16")
        return self.feature_directions(torch.arange(self.n_features, device=self.row_signs.device))

    def coherence(self) -> float:
        """max |<phi_u, phi_v>| over u != v: the largest |tQ[w1] tP[w2]| over non-zero w = u xor v, exact."""
        overlaps = (self.row_means[:, None] * self.col_means[None, :]).abs().flatten()
        return float(overlaps[1:].max())

    def features_scored_per_token(self) -> int:
        """Exact scores the fast encoder computes per token, over all pursuit rounds."""
        per_round = min(self.beam, 2**self.col_bits) * 2**self.row_bits
        return per_round * self.pursuit_rounds

    def design_notes(self) -> str:
        return (
            f"product design: grid {self.grid_rows} x {self.grid_cols}, {self.col_bits} column + {self.row_bits} row "
            f"index bits, beam {self.beam} column patterns, least squares (ridge {self.ridge:g}) with "
            f"{self.pursuit_rounds - 1} pursuit round(s), coherence {self.coherence():.3f}"
        )
