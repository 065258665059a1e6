"""The deep parity bottleneck, product design (DESIGN section 5; seed 003, whose full text was not available:
every choice below is circuitlab's and is recorded here and in the parity model card).

Dictionary. m = 2^r features in d dimensions, computed, never stored. d is read as a grid of g_r rows x g_c
columns (x_grid = x.view(g_r, g_c), row-major). Two seeded full-rank F2 matrices, Q (g_c x r1) for the
columns and P (g_r x r2) for the rows, r1 + r2 = r, give sign tables sQ(u1) = R(Q bits(u1)) in {+1,-1}^g_c
and sP(u2) = R(P bits(u2)) in {+1,-1}^g_r (R(0) = +1, R(1) = -1). Feature u = u1 + 2^r1 u2 is
    phi_u = outer(sP(u2), sQ(u1)).flatten() / sqrt(d),
the pattern R(M bits(u)) / sqrt(d) of the linear code M whose row (row, col) is [Q[col], P[row]]. So the
facts of DESIGN section 5 hold: sqrt(d) phi_(u xor v) = sqrt(d) phi_u * sqrt(d) phi_v, and
<phi_u, phi_v> = mean sign of the codeword of u xor v = tQ[u1 xor v1] * tP[u2 xor v2], with tQ, tP the mean
signs of the column and row codewords. Only the sign tables (2^r1 x g_c and 2^r2 x g_r) are kept, and they
are recomputed from the seed. Unlike the prefix design (parity_prefix.py) there are no basis features.

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

Choices and why ("the first model" is the parity-stories shipped until 2026-12-02: k 32, beam 64, two
pursuit rounds; the model shipped since trains at k 16, beam 16, no pursuit round, the last choice below):
- product code: exact exhaustive scores for the price of two small matmuls and a bound that prunes whole
  columns of features; the first design's parents (|x_j|) said nothing about their children.
- each factor code is the full-rank seeded matrix of lowest coherence among `FACTOR_CODE_TRIES` seeded
  draws: distinct features differ, and lower overlap makes the least squares better conditioned.
- least squares instead of a_i = <x, phi_i>: on a coherent dictionary the inner products over-count shared
  directions (relative error 1.5 with the exhaustive top-32 on the prefix-design model shipped before these).
- ridge relative to the unit diagonal of the Gram matrix: 1e-3 by default, small enough not to bias x_hat.
- selection and solves in float32 with autocast off: top-k orders and 32 x 32 solves need the precision.
  (Training on CUDA allows TF32 matmuls: scores then carry about 1e-3 relative rounding, so near-ties may
  be ordered differently and a certificate holds up to that rounding; the +-1 Gram matrices stay exact.)
- the first model's beam, 64 of 256 column patterns (16,384 exact scores per token and round instead of
  65,536): on unstructured Gaussian writes it agrees with the exhaustive top-32 on 0.98 of features (beam 32:
  0.86, 16: 0.67; tests/architectures/test_parity.py); on a trained model scripts/parity_report.py measures
  it (the model shipped since: the top 16 at beam 16 certified on every held-out token, every layer).
- the first model's pursuit round in training (pursuit_rounds 2): on planted 16-sparse writes the relative error falls
  0.26 -> 0.06 with one round and to 0.003 with three; each round costs one more encoder pass and solves.
- the code is the encoder's choice, not the unique sparse write: the 2^r2 features of one column pattern
  lie in a g_r-dimensional space, so any g_r + 1 of them are linearly dependent, and a 32-sparse write has
  many 32-sparse representations (planted 32-sparse writes are reconstructed, error 0.2 after one round,
  but their features are not recovered). The search is deterministic, so equal writes get equal codes.
- coherence: a [16, 8] factor code of 64 seeded draws reaches 0.625 (0.5 came up in 4 of 2000 draws); the
  product's coherence is the larger of its factors'.
- fast path: batched matmuls, top-k and batched solves, no Python loop per token and no host sync;
  torch.compile traces it in one graph (tested). On CUDA the beam's scores and their top-k run as one Triton
  kernel per token (`kernels.parity_beam_top`, a custom operator; kernels/parity_select_triton.py) that
  never writes the N x 2^r2 x beam scores to memory: one `top_scores` call at 65,536 tokens went from 19.5 to
  10.6 ms on an H200 (8.8 ms once its slots were numbered in one scan), the whole layer fwd+bwd from 97
  to 78 ms, with identical supports on the first model (benchmarks/bench_parity.py). The only tables are
  the two 2^8 x 16 sign tables (32 KB in float32) and the m overlaps <phi_0, phi_w> (256 KB at m = 2^16), so
  a kernel that builds patterns from index bits saves no dictionary bytes here; the first design's kernels
  (kernels/parity_triton.py) serve the prefix design.
- the Gram matrix by lookup in the overlap table instead of two batched matmuls of the features' row and
  column patterns: equal entries (both exact). Compared once on an H200 at 65,536 tokens (a one-off run, not
  kept as a script): 0.25 against 3.4 ms (k = 32) and 2.4 against 8.1 ms (64 features) compiled; on 2 CPU
  cores, 4,096 tokens, 6.5 against 18.4 ms (k = 32) and 88 against 146 ms (64).
- LU without pivoting on CUDA (`pivot_free`): the systems are symmetric positive definite, and partial
  pivoting's batched LU was 101 of the 241 ms of kernels of a compiled parity-stories training step on an
  H200, its row swaps alone 54 ms (benchmarks/results/gpu_2026-12-01_parity_profile.json). Without pivoting
  the pursuit's 2k-feature solve takes 15.7 ms instead of 37.8, the encoder 54 ms instead of 94, the layer
  fwd+bwd 65 ms instead of 105 (benchmarks/bench_parity.py, 65,536 tokens). It rounds differently, so the
  pursuit's near-tie choices can differ: on 16,384 held-out natural tokens the first model kept the same
  support on 0.999, 0.994, 0.986 and 0.973 of tokens in layers 0-3, with the same reconstruction errors
  (0.0058, 0.0075, 0.0070, 0.0113) and held-out loss (3.19837). torch's cuSOLVER backend solves the 64-feature
  systems slower (8.7 against 6.2 ms without pivoting; one-off run), so the default backend is kept.
- the pursuit round solves the 2k-feature union once and takes the kept k's system (rows and columns of the
  union's Gram matrix, entries of its Phi^T x) from it instead of rebuilding it; same supports. (The fused
  path below rebuilds it on chip, which costs less than gathering it.)
- on CUDA (`fused_solves`) the least squares and the decode are one Triton kernel per token
  (`kernels.parity_feature_solve`, kernels/parity_solve_triton.py): the features' patterns are built from the
  sign tables and never written out, the Gram matrix is factored in 16 x 16 blocks without pivoting and the
  solution refined once, x_hat is decoded in the same launch; the launch is also its own backward (which, since
  2026-12-02, loads the factors the forward kept instead of factoring again). Twelve
  pattern gathers had taken 17.7 of a layer call's 58.9 ms of kernels; with the kernel the layer fwd+bwd takes
  31.6 instead of 60.6 ms and the training step 127 instead of 154 ms (H200, 65,536 tokens,
  benchmarks/bench_parity.py and bench_gpu.py). Its rounding differs from the LU's, so near-tie pursuit
  choices can too: on 16,384 held-out natural tokens the first model's supports equal those of the same
  encoder run in float64 on 0.995, 0.989, 0.968, 0.993 of tokens in layers 0-3 (PyTorch's float32 path: 0.997,
  0.986, 0.961, 0.917), the held-out loss is 3.19821 (3.19837).
- on the CPU (`compiled_cpu_encoder`, where numba is installed) the encoder is compiled and runs one token at
  a time on numba's threads (kernels/_parity_numba.py): the columns visited in decreasing bound and the visit
  stopped once the k kept scores beat every bound left (the configured beam's result, found without scoring
  the columns that cannot change it), the pursuit's k best residual features outside the support asked for
  directly, Cholesky in float64 with the union's system built on the support's factor. Its coefficients
  serve the forward pass where no gradient is needed and no hook changed the support, and its decoded write
  where, in addition, no hook is attached to the coefficients. On 2 CPU cores the parity-stories forward (the first model) went
  from 1,506-1,669 to 5,121-5,674 tokens/s (0.14-0.15x to 0.51-0.60x gelu-stories' in the runs of record,
  benchmarks/bench_cpu.py --rounds 8; BENCHMARKS.md). Its supports equal
  the PyTorch encoder's except where rounding decides a near-tie, among the scores or the union's |a| (tested:
  there the two fits stay within 10% of each other; one token 4% apart on another machine's CPU). On the
  bottleneck inputs of 4,096 random tokens run through the first model, its supports equal those of the
  PyTorch encoder run in float64 on 0.9988-0.9995 of tokens by layer (the PyTorch encoder in float32:
  0.9949-0.9963). Without numba the CPU runs the PyTorch encoder below, 128 tokens at a time.
- the first top-k scores the whole beam at once. Tried and not kept (2026-12-01, BENCHMARKS.md): half the beam
  first, the whole beam only for tokens whose k-th score there does not beat every bound left (same
  supports). On the first model's writes every token settled, and the encoder gained 5-10% on 2 CPU cores
  and 3.5% on an H200; on random writes, as training starts with, a layer lost 12-14% on both.
- CUDA graphs only where every solve runs fused (`cuda_graphs`). The batched LU refuses capture: a compiled
  parity-stories step with it failed on an H200, and captured one at a time (torch 2.11, one-off run) solve_ex
  and lu_factor_ex failed with and without pivoting, while cholesky_ex, topk and the fused selection kernel
  were captured (`torch.backends.cuda.preferred_linalg_library("cusolver")` captures the LU too, but that
  setting is process-wide and slower, above). On CUDA with the fused solves the step has no LU, and since
  2026-12-02 the trainer captures it: the first model's step took 127.54 ms against 127.36 ms in torch's
  default mode (paired runs, H200, benchmarks/results/gpu_2026-12-02_parity_settings*.md): that step was
  kernel-bound, so graphs bought little there.
- the coefficients and their decoded write come from one fused launch, and its backward is one launch, where
  nothing is hooked on `hook_code_values` (a hook there may change the coefficients, so they are then solved
  and decoded apart). Measured once (2026-12-01 against 2026-12-02, H200): the first model's step's fused-solve
  launches went from 28 to 20 and their time stayed 41.3 ms, the dropped launches being cheap decodes.
- with one pursuit round (`pursuit_rounds = 1`) the support is the encoder's top k and no solve compares
  residuals. The settings decide training speed far more than any kernel (paired against gelu-stories on an
  H200, untrained models, 2026-12-02): beam 64 / two rounds / k 32 (the first model) 0.09x, beam 64 / one
  round 0.22x, beam 16 / one round 0.32x, beam 16 / one round / k 16 0.39x. Run at k 16, beam 16 and one round
  without retraining, the first model found and certified its top 16 (agreement 1.000) but its perplexity was
  1.057x GELU's (16,384 held-out tokens, scripts/parity_report.py --k 16 --beam 16 --pursuit-rounds 1;
  BENCHMARKS.md). Trained with those settings (scripts/gpu_parity.sh), the shipped model meets the four quality
  targets on 65,536 held-out natural tokens: reconstruction 0.002-0.019, agreement 1.000 with every token
  certified, ablation share 0.513, perplexity 0.973x GELU's (results/parity/parity_report.md). Its feature
  usage is narrow: 334-737 distinct features per layer, the 100 most used carrying 0.98-0.99 of uses (the
  first model: 3,366-18,185 and 0.46-0.72).
- up to beam 32 the beam search is one Triton kernel per token on CUDA (`kernels.parity_beam_select`,
  kernels/parity_select_triton.py `beam_select`): bounds, beam, scores and their top k on chip, no torch top-k
  after it. Up to beam 16 it takes the top k among the k rows of largest maximum, their scores computed again,
  instead of numbering candidates into slots: 1.89 ms (2.24-2.26 with the slots, 2.53 with full sorts) against
  4.15 ms for the composed path at beam 16 and k 16 (H200, 65,536 tokens). With it, and the fused solve's
  backward loading the forward's factors, the training step is 0.52x gelu-stories' in two paired runs (0.48x
  with the slots and the backward factoring again, 0.45x with full sorts, 0.39x composed; target 0.5x: met;
  BENCHMARKS.md, "The top by row maxima"). Wider beams choose the beam in PyTorch and score it with `parity_beam_top`: a first version of the
  one kernel was slower at beam 64.

Letters: B batch, T position, D d_model, N tokens (B*T), K code (k features), H grid rows (g_r), W grid
columns (g_c), U column patterns (2^r1), P row patterns (2^r2), C beam (column patterns kept), F features
per token in a candidate list.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from circuitlab import kernels
from circuitlab.architectures.code_layer import Cache, CodeLayer, UnitWrites, code_hook_error
from circuitlab.architectures.components import is_hooked
from circuitlab.codes import SparseCode
from circuitlab.config import ModelConfig, product_layout

FACTOR_CODE_TRIES = 64  # seeded draws per factor code; the least coherent full-rank one is kept
EXHAUSTIVE_CHUNK = 1024  # tokens per chunk of the exhaustive encoder (chunk x m scores in memory)
OVERLAP_TABLE_BITS = 20  # up to m = 2^20 the m overlaps <phi_0, phi_w> are kept as a table (4 MB in float32)
# tokens per encoder pass on the CPU (eager): a pass's intermediates (2k x 2k systems, 16,384 scores a token)
# then stay in cache; 4,096 tokens of parity-stories' layer on 2 cores took 0.64 instead of 0.97 s (128 tokens;
# 64: 0.73 s, 256: 0.67 s, 1024: 0.90 s; one run, 2026-12-01)
CPU_ENCODE_CHUNK = 128


# --- F2 codes ------------------------------------------------------------------------------------------------


def f2_rank(bits_DxR: Tensor) -> int:
    """Rank over GF(2) of a 0/1 matrix, by Gaussian elimination on its columns."""
    rows = [int("".join(str(int(b)) for b in column), 2) for column in bits_DxR.T.tolist()]
    rank = 0
    for bit in reversed(range(bits_DxR.shape[0])):
        pivot = next((i for i in range(rank, len(rows)) if rows[i] >> bit & 1), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for i in range(len(rows)):
            if i != rank and rows[i] >> bit & 1:
                rows[i] ^= rows[rank]
        rank += 1
    return rank


def make_code_matrix(d_model: int, n_bits: int, seed: int) -> Int[Tensor, "d_model n_bits"]:
    """A seeded random M in F2^(d x r) of full column rank (distinct features get distinct patterns)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(100):
        # on the CPU even under a meta default device (the CLI sizes models on meta before training them)
        code = torch.randint(0, 2, (d_model, n_bits), generator=generator, dtype=torch.int32, device="cpu")
        if f2_rank(code) == n_bits:
            return code
    raise RuntimeError(f"no full-rank {d_model}x{n_bits} F2 matrix found from seed {seed}")


def sign_table(code_GxR: Int[Tensor, "length n_bits"]) -> Float[Tensor, "patterns length"]:
    """R(code bits(u)) for every u in [0, 2^r): row u is the +-1 pattern of codeword code @ bits(u)."""
    length, n_bits = code_GxR.shape
    patterns = torch.arange(2**n_bits, device="cpu")
    bits = (patterns[:, None] >> torch.arange(n_bits, device="cpu")) & 1
    parity = (bits @ code_GxR.to(device="cpu", dtype=torch.int64).T) & 1
    return (1 - 2 * parity).to(torch.float32)


def code_coherence(code_GxR: Int[Tensor, "length n_bits"]) -> float:
    """max over non-zero u of |mean sign of codeword u| (1 when two features would coincide up to sign)."""
    return float(sign_table(code_GxR)[1:].mean(-1).abs().max()) if code_GxR.shape[1] else 0.0


@functools.lru_cache(maxsize=64)
def make_factor_code(length: int, n_bits: int, seed: int) -> Int[Tensor, "length n_bits"]:
    """The full-rank F2 matrix (length x n_bits) of lowest coherence among FACTOR_CODE_TRIES seeded draws
    (cached: every layer of a model draws the same one; treat the result as read-only)."""
    generator = torch.Generator().manual_seed(seed)
    best, best_coherence = None, 2.0
    for _ in range(FACTOR_CODE_TRIES):
        code = torch.randint(0, 2, (length, n_bits), generator=generator, dtype=torch.int32, device="cpu")
        if f2_rank(code) < n_bits:
            continue
        coherence = code_coherence(code)
        if coherence < best_coherence:
            best, best_coherence = code, coherence
    if best is None or best_coherence >= 1.0:
        raise ValueError(
            f"no {length} x {n_bits} F2 code from seed {seed} keeps distinct features apart (an all-ones codeword "
            f"is unavoidable when n_bits = length); use fewer index bits or a larger grid"
        )
    return best


def relative_error(x: Tensor, x_hat: Tensor) -> Tensor:
    """||x - x_hat||^2 / ||x||^2 summed over all tokens (float32 scalar; 0 for an all-zero x)."""
    x, x_hat = x.float(), x_hat.float()
    return (x - x_hat).pow(2).sum() / x.pow(2).sum().clamp_min(torch.finfo(torch.float32).tiny)


# --- the layer -----------------------------------------------------------------------------------------------


class FeatureCodeLayer(CodeLayer):
    """A bottleneck whose code is k (feature id, coefficient) pairs on `hook_code_indices` and
    `hook_code_values`, feature i writing a_i phi_i with phi_i = `feature_directions(i)` (both parity designs)."""

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
        return UnitWrites(
            writes_NxD=values_K[:, None] * phi_KxD, ids=ids, kind="parity_feature", operations=["feature"] * len(ids),
            labels=[self.unit_name(unit) for unit in ids],
        )


class ParityBottleneck(FeatureCodeLayer):
    kind = "parity"
    sparse_by_construction = True
    # LU without row swaps where the device has it (CUDA); False: partial pivoting everywhere, as until 2026-12-01
    pivot_free = True
    # on CUDA, least squares and decode in one fused kernel per token (kernels.parity_feature_solve); False: the
    # PyTorch gathers, batched matmuls and LU everywhere (the CPU's path; on CUDA until 2026-12-01, 15:30 UTC)
    fused_solves = True
    # on the CPU, the encoder compiled with numba where numba is installed (kernels/_parity_numba.py); False: the
    # batched PyTorch encoder (the reference the compiled one is tested against)
    compiled_cpu_encoder = True

    @property
    def cuda_graphs(self) -> bool:
        """Whether a compiled step may be captured in CUDA graphs: only when every solve runs fused on CUDA. The
        batched LU refuses capture (torch 2.11, H200: "operation failed due to a previous error during
        capture", 2026-12-01), the fused kernels and top-k do not."""
        widest = self.k * (2 if self.pursuit_rounds > 1 else 1)
        return self.fused_solves and widest <= kernels.MAX_SOLVE_FEATURES and max(self.grid_rows, self.grid_cols) <= 64

    def __init__(self, config: ModelConfig):
        super().__init__()
        bottleneck = config.bottleneck
        self.d_model = config.d_model
        self.n_bits = bottleneck.n_bits
        self.n_features = 2**self.n_bits
        self.k = bottleneck.k
        self.beam = bottleneck.beam
        self.pursuit_rounds = bottleneck.pursuit_rounds
        self.ridge = float(bottleneck.ridge)
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
            if self.compiled_cpu_encoder and not torch.compiler.is_compiling():
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
        stable; on CUDA (`pivot_free`) it skips the row swaps: the pursuit's 2k-feature system built and solved
        in 15.7 instead of 37.8 ms (H200, 65,536 tokens, benchmarks/bench_parity.py). The CPU has only partial
        pivoting. Cholesky was measured slower on both devices (H200: 11.3 against 6.2 ms for LU without
        pivoting at 64 features; 2 CPU cores: 28 against 16 ms at 4,096 tokens of k = 32)."""
        if self.pivot_free and gram_NxFxF.is_cuda:
            factors, pivots, _ = torch.linalg.lu_factor_ex(gram_NxFxF, pivot=False)
            return torch.linalg.lu_solve(factors, pivots, inner_NxF[..., None])[..., 0]
        return torch.linalg.solve_ex(gram_NxFxF, inner_NxF[..., None])[0][..., 0]

    def _fused(self, X: Tensor, n_features: int) -> bool:
        """Whether least squares and decode on `n_features` features run fused (`kernels.parity_feature_solve`,
        one Triton kernel per token, float32): where that kernel runs (CUDA under the "auto" backend, or a forced
        "triton" backend), unless `fused_solves` is off."""
        if not self.fused_solves or X.dtype != torch.float32:
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
        x_BxTxD = self.hook_in(x_BxTxD)
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
        x_hat_BxTxD = self.hook_recon(x_hat_BxTxD)
        return x_hat_BxTxD, relative_error(x_BxTxD, x_hat_BxTxD)

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


def make_bottleneck(config: ModelConfig) -> CodeLayer:
    """The bottleneck layer of `config.bottleneck.design`."""
    if config.bottleneck.design == "prefix":
        from circuitlab.architectures.feedforward.parity_prefix import PrefixParityBottleneck

        return PrefixParityBottleneck(config)
    return ParityBottleneck(config)
