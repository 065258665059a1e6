"""Fast paths. Layers call the functions exported here; each has a plain-PyTorch reference in
`reference.py` that it must equal, and a Triton implementation that runs on CUDA tensors when triton is
installed (rules in `dispatch.py`; override with `use_backend(...)` or $CIRCUITLAB_KERNELS). The sgatlin and
scan fast paths are PyTorch custom operators (`ops.py`), so `torch.compile` traces models through them.

Letters: B batch, T position, D d_model, C channels, K gates per channel, N neurons per channel,
U quantifier units, R index bits, F features (candidates) per token, n subkeys per half.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

import circuitlab.kernels.cpu as cpu
import circuitlab.kernels.ops as ops
import circuitlab.kernels.reference as reference
from circuitlab.kernels.dispatch import (
    BACKENDS,
    ENV_VAR,
    backend_for,
    fast_module,
    fast_ready,
    requested_backend,
    triton_installed,
    triton_interpreting,
    use_backend,
)
from circuitlab.kernels.reference import existential_loop, proportion_loop


def sgatlin_combine(
    z_BxTxD: Float[Tensor, "batch pos d_model"],
    indices_BxTxCxK: Int[Tensor, "batch pos channel k"],
    gates_BxTxCxK: Float[Tensor, "batch pos channel k"],
    experts_2xCxNxD: Float[Tensor, "2 channel neuron d_model"],
) -> Float[Tensor, "batch pos d_model"]:
    """sum_c sum_k g * (w_in . z) * w_out (seed 000, eq. 2 with channels). The fast path never builds the
    gathered [tokens, C, K, D] expert tensors, and its backward gives z, gates and experts their gradients."""
    tensors = (z_BxTxD, indices_BxTxCxK, gates_BxTxCxK, experts_2xCxNxD)
    if backend_for(*tensors) == "triton" and fast_ready("sgatlin_triton"):
        return ops.sgatlin_combine(*tensors)
    if cpu.takes(*tensors):
        return cpu.sgatlin_combine(*tensors)
    return reference.sgatlin_combine(*tensors)


def sgatlin_route(
    subkey_scores_BxTx2xCxn: Float[Tensor, "batch pos 2 channel n_subkeys"], k: int
) -> tuple[Int[Tensor, "batch pos channel k"], Float[Tensor, "batch pos channel k"]]:
    """Product top-k router: (neuron indices i1 * n + i2 as long, gate values = summed subkey scores),
    each channel's k gates in descending order. Gradients flow from the gate values to the scores."""
    n_subkeys = subkey_scores_BxTx2xCxn.shape[-1]
    unsupported = None
    if k > n_subkeys:
        unsupported = f"k={k} > {n_subkeys} subkeys per half"
    elif subkey_scores_BxTx2xCxn.dim() < 3 or subkey_scores_BxTx2xCxn.shape[-3] != 2:
        unsupported = f"subkey scores must end in [2, C, n], got shape {tuple(subkey_scores_BxTx2xCxn.shape)}"
    elif k > 64 or n_subkeys > 4096:
        unsupported = f"the fused router takes k <= 64 and n <= 4096 (got k={k}, n={n_subkeys})"
    if backend_for(subkey_scores_BxTx2xCxn, unsupported=unsupported) == "triton":
        if fast_ready("sgatlin_triton"):
            return ops.sgatlin_route(subkey_scores_BxTx2xCxn, k)
    if cpu.takes(subkey_scores_BxTx2xCxn):
        return cpu.sgatlin_route(subkey_scores_BxTx2xCxn, k)
    return reference.sgatlin_route(subkey_scores_BxTx2xCxn, k)


def _scan_unsupported(membership: Tensor, decay: Tensor) -> str | None:
    if membership.dim() < 2:
        return f"membership must be [..., T, U], got shape {tuple(membership.shape)}"
    n_units = membership.shape[-1]
    if decay.numel() != n_units or (decay.dim() > 0 and decay.shape[-1] != n_units):
        return f"the fast scans take one decay per unit (shape [U] = [{n_units}]), got {tuple(decay.shape)}"
    return None


def existential_scan(
    membership_BxTxU: Float[Tensor, "batch pos unit"], decay_U: Float[Tensor, "unit"]
) -> Float[Tensor, "batch pos unit"]:
    """Soft existential E_t = max(M_t, gamma * E_(t-1)), E_(-1) = 0, as a parallel scan over positions.
    On an exact tie M_t = gamma * E_(t-1) the fast path's gradient goes to M_t."""
    unsupported = _scan_unsupported(membership_BxTxU, decay_U)
    if backend_for(membership_BxTxU, decay_U, unsupported=unsupported) == "triton":
        if fast_ready("scans_triton"):
            return ops.existential_scan(membership_BxTxU, decay_U)
    return reference.existential_scan(membership_BxTxU, decay_U)


def proportion_scan(
    membership_BxTxU: Float[Tensor, "batch pos unit"], decay_U: Float[Tensor, "unit"]
) -> Float[Tensor, "batch pos unit"]:
    """Soft proportion P_t = (1 - lambda) M_t + lambda P_(t-1), P_(-1) = 0, as a parallel scan."""
    unsupported = _scan_unsupported(membership_BxTxU, decay_U)
    if backend_for(membership_BxTxU, decay_U, unsupported=unsupported) == "triton":
        if fast_ready("scans_triton"):
            return ops.proportion_scan(membership_BxTxU, decay_U)
    return reference.proportion_scan(membership_BxTxU, decay_U)


def _padded(n: int) -> int:
    return 1 << max(15, n - 1).bit_length()


def parity_beam_top(
    y_NxHxC: Float[Tensor, "tokens rows cols"], signs_PxH: Float[Tensor, "patterns rows"], count: int
) -> tuple[Float[Tensor, "tokens count"], Int[Tensor, "tokens count"]]:
    """The `count` largest |(signs @ y)[n]| per token, descending, and their flat positions p * C + c. The fast
    path scores and selects in one kernel per token without writing the N x P x C scores to memory
    (parity_select_triton.py)."""
    unsupported = None
    if y_NxHxC.dim() != 3 or signs_PxH.dim() != 2 or signs_PxH.shape[1] != y_NxHxC.shape[1]:
        unsupported = f"y must be [N, H, C] and signs [P, H], got {tuple(y_NxHxC.shape)} and {tuple(signs_PxH.shape)}"
    elif _padded(signs_PxH.shape[0]) * _padded(y_NxHxC.shape[2]) > 2**14:
        unsupported = (f"the fast path keeps a token's P x C scores in registers (at most 16384 after padding each "
                       f"to a power of two >= 16), got {signs_PxH.shape[0]} x {y_NxHxC.shape[2]}")
    if backend_for(y_NxHxC, signs_PxH, unsupported=unsupported) == "triton":
        if fast_ready("parity_select_triton"):
            return ops.parity_beam_top(y_NxHxC, signs_PxH, count)
    return reference.parity_beam_top(y_NxHxC, signs_PxH, count)


FUSED_SELECT_MAX_BEAM = 32  # wider beams: torch.topk chooses the beam, parity_beam_top scores it


def parity_beam_select(
    x_NxHxW: Float[Tensor, "tokens rows cols"], row_signs_PxH: Float[Tensor, "row_patterns rows"],
    col_signs_UxW: Float[Tensor, "col_patterns cols"], beam: int, count: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The product encoder's beam search (contract: `reference.parity_beam_select`). Up to
    FUSED_SELECT_MAX_BEAM the fast path runs it in one kernel per token: bounds, beam, its columns of Y,
    scores and top `count` on chip (parity_select_triton.py, `beam_select`); wider beams, or shapes it does not
    take, are chosen in PyTorch and scored by `parity_beam_top`."""
    n_rows, n_cols = x_NxHxW.shape[1:] if x_NxHxW.dim() == 3 else (0, 0)
    fits = (
        x_NxHxW.dim() == 3 and row_signs_PxH.dim() == 2 and col_signs_UxW.dim() == 2
        and row_signs_PxH.shape[1] == n_rows and col_signs_UxW.shape[1] == n_cols
        and 0 < beam <= min(FUSED_SELECT_MAX_BEAM, col_signs_UxW.shape[0])
        and _padded(row_signs_PxH.shape[0]) * _padded(beam) <= 2**14
        and _padded(col_signs_UxW.shape[0]) * max(_padded(n_rows), _padded(n_cols)) <= 2**14
    )
    if fits and backend_for(x_NxHxW, row_signs_PxH, col_signs_UxW) == "triton":
        if fast_ready("parity_select_triton") and _has_topk():
            return ops.parity_beam_select(x_NxHxW, row_signs_PxH, col_signs_UxW, beam, count)
    return reference.parity_beam_select(x_NxHxW, row_signs_PxH, col_signs_UxW, beam, count, beam_top=parity_beam_top)


def _has_topk() -> bool:
    """Whether this Triton has the bitonic top-k the one-kernel beam search needs (read once traced)."""
    if torch.compiler.is_compiling():
        return True  # the operator checks when it runs
    return fast_module("parity_select_triton").HAS_TOPK


MAX_SOLVE_FEATURES = 64  # the fused solve keeps a token's system in registers, as at most four 16 x 16 blocks


def _feature_solve_unsupported(n_features: int, row_signs_PxH: Tensor, col_signs_UxW: Tensor) -> str | None:
    if row_signs_PxH.dim() != 2 or col_signs_UxW.dim() != 2:
        return f"row signs [P, H] and column signs [U, W] expected, got {tuple(row_signs_PxH.shape)}, {tuple(col_signs_UxW.shape)}"
    n_col_patterns = col_signs_UxW.shape[0]
    if n_col_patterns & (n_col_patterns - 1):
        return f"the column patterns must number a power of two, got {n_col_patterns}"
    if n_features > MAX_SOLVE_FEATURES or max(row_signs_PxH.shape[1], col_signs_UxW.shape[1]) > 64:
        return (f"the fused solve takes at most {MAX_SOLVE_FEATURES} features and grids of at most 64 x 64, got "
                f"{n_features} features, grid {row_signs_PxH.shape[1]} x {col_signs_UxW.shape[1]}")
    return None


def parity_feature_solve_backend(x: Tensor, n_features: int, row_signs_PxH: Tensor, col_signs_UxW: Tensor) -> str:
    """The backend ("triton" or "reference") `parity_feature_solve` would run now on `n_features` features per
    token of x's device."""
    unsupported = _feature_solve_unsupported(n_features, row_signs_PxH, col_signs_UxW)
    return backend_for(x, row_signs_PxH, col_signs_UxW, unsupported=unsupported)


def parity_feature_solve(
    x_NxD: Tensor, v_NxF: Tensor, indices_NxF: Int[Tensor, "tokens feat"], row_signs_PxH: Tensor, col_signs_UxW: Tensor,
    ridge: float, solve: bool = True, write_a: bool = True, decode: bool = False,
) -> tuple[Tensor, Tensor]:
    """The product parity layer's least squares and decode on each token's support (float32): b = Phi^T x + v,
    a = (Phi^T Phi + ridge I)^-1 b (or b when not `solve`), x_hat = Phi a, where feature u's direction is
    outer(sP[u2], sQ[u1]).flatten() / sqrt(D), u1 the low log2(U) bits of u. Returns (a, x_hat), each an empty
    [0] when not asked for (`write_a`, `decode`); x or v empty ([0]) counts as zero. Differentiable in x and v.
    The fast path builds the patterns on chip and solves in registers (parity_solve_triton.py); where a gradient
    will be taken it keeps the system's factors (1 KB a token at 16 features), so that the backward only loads
    them."""
    if indices_NxF.dim() != 2:
        raise ValueError(f"indices must be [N, F], got shape {tuple(indices_NxF.shape)}")
    unsupported = _feature_solve_unsupported(indices_NxF.shape[1], row_signs_PxH, col_signs_UxW)
    tensors = [t for t in (x_NxD, v_NxF) if t.numel()] + [indices_NxF, row_signs_PxH, col_signs_UxW]
    if backend_for(*tensors, unsupported=unsupported) == "triton" and fast_ready("parity_solve_triton"):
        # the factors are kept for the backward only where one will run
        keep = solve and torch.is_grad_enabled() and (x_NxD.requires_grad or v_NxF.requires_grad)
        a, x_hat, _ = ops.parity_feature_solve(x_NxD, v_NxF, indices_NxF, row_signs_PxH, col_signs_UxW,
                                               x_NxD.new_empty(0, dtype=torch.float32), float(ridge), solve, write_a,
                                               decode, keep)
        return a, x_hat
    return reference.parity_feature_solve(x_NxD, v_NxF, indices_NxF, row_signs_PxH, col_signs_UxW, ridge, solve,
                                          write_a, decode)


def kernel_backend(*tensors: torch.Tensor) -> str:
    """The backend ("triton" or "reference") a kernel call on these tensors would run now."""
    return backend_for(*tensors)


__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "backend_for",
    "existential_loop",
    "existential_scan",
    "kernel_backend",
    "parity_beam_top",
    "parity_feature_solve",
    "parity_feature_solve_backend",
    "proportion_loop",
    "proportion_scan",
    "reference",
    "requested_backend",
    "sgatlin_combine",
    "sgatlin_route",
    "triton_installed",
    "triton_interpreting",
    "use_backend",
]


def code_scan_top_keys(
    indices_NxKxB: Int[Tensor, "tiles k tile"],
    values_NxKxB: Float[Tensor, "tiles k tile"],
    inverse_norms_R: Float[Tensor, " padded_rows"],
    dense_queries_SxQ: Float[Tensor, "size queries"],
    exclude_Q: Int[Tensor, " queries"],
    n_rows: int,
    keep: int,
    n_chunks: int,
) -> Int[Tensor, "chunks queries keep"]:
    """Exact circuit search's scan: per row chunk and query, the `keep` best (score, row) keys of tiled codes
    against a dense block of queries (contract: `search_reference.scan_top_keys`). The fast path keeps the
    top-k on chip and never writes the [queries, rows] scores (search_triton.py)."""
    import circuitlab.kernels.search_reference as search_reference

    tile = indices_NxKxB.shape[-1]
    unsupported = None
    if keep & (keep - 1) or tile & (tile - 1) or keep > tile:
        unsupported = f"keep ({keep}) and the tile ({tile} rows) must be powers of two with keep <= tile"
    tensors = (indices_NxKxB, values_NxKxB, inverse_norms_R, dense_queries_SxQ, exclude_Q)
    if backend_for(*tensors, unsupported=unsupported) == "triton" and fast_ready("search_triton"):
        return fast_module("search_triton").scan_top_keys(*tensors, n_rows, keep, n_chunks)
    return search_reference.scan_top_keys(*tensors, n_rows, keep, n_chunks)


__all__ += ["code_scan_top_keys"]
