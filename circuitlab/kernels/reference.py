"""Plain-PyTorch references for every fast path. The Triton kernels in this package must equal these.

Letters: B batch, T position, D d_model, C channels, K gates per channel, N neurons per channel,
U quantifier units, R index bits, F features (candidates) per token, n subkeys per half (n * n = N).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor

# --- sgatlin (seed 000, eq. 2 with channels, appendix A.1) ---------------------------------------------


def sgatlin_combine(
    z_BxTxD: Float[Tensor, "batch pos d_model"],
    indices_BxTxCxK: Int[Tensor, "batch pos channel k"],
    gates_BxTxCxK: Float[Tensor, "batch pos channel k"],
    experts_2xCxNxD: Float[Tensor, "2 channel neuron d_model"],
) -> Float[Tensor, "batch pos d_model"]:
    """sum_c sum_k g * (w_in . z) * w_out, by gathering the chosen expert rows."""
    n_channels = experts_2xCxNxD.shape[1]
    channel_C = torch.arange(n_channels, device=indices_BxTxCxK.device)[:, None]
    w_in_BxTxCxKxD = experts_2xCxNxD[0][channel_C, indices_BxTxCxK]
    w_out_BxTxCxKxD = experts_2xCxNxD[1][channel_C, indices_BxTxCxK]
    neuron_pre_BxTxCxK = torch.einsum("btd,btckd->btck", z_BxTxD, w_in_BxTxCxKxD)
    return torch.einsum("btck,btckd->btd", neuron_pre_BxTxCxK * gates_BxTxCxK, w_out_BxTxCxKxD)


def sgatlin_route(
    subkey_scores_BxTx2xCxn: Float[Tensor, "batch pos 2 channel n_subkeys"], k: int
) -> tuple[Int[Tensor, "batch pos channel k"], Float[Tensor, "batch pos channel k"]]:
    """Product top-k (seed 000, eq. 1; docs/designs/sgatlin.md): per channel, the top-k of each half of the subkey
    scores, the k*k sums of the two candidate lists, and the top-k of those. Returns neuron indices
    i1 * n + i2 (long) and gate values, the raw summed scores (gradients flow to the subkey scores)."""
    n_subkeys = subkey_scores_BxTx2xCxn.shape[-1]
    if k > n_subkeys:
        raise ValueError(f"product top-k needs k <= subkeys per half, got k={k} > n={n_subkeys}")
    first_BxTxCxn = subkey_scores_BxTx2xCxn[..., 0, :, :]
    second_BxTxCxn = subkey_scores_BxTx2xCxn[..., 1, :, :]
    first_top_BxTxCxK, first_idx_BxTxCxK = first_BxTxCxn.topk(k, dim=-1)
    second_top_BxTxCxK, second_idx_BxTxCxK = second_BxTxCxn.topk(k, dim=-1)
    pair_sums_BxTxCxKK = (first_top_BxTxCxK[..., :, None] + second_top_BxTxCxK[..., None, :]).flatten(-2)
    gates_BxTxCxK, pair_BxTxCxK = pair_sums_BxTxCxKK.topk(k, dim=-1)
    first_BxTxCxK = first_idx_BxTxCxK.gather(-1, pair_BxTxCxK // k)
    second_BxTxCxK = second_idx_BxTxCxK.gather(-1, pair_BxTxCxK % k)
    return first_BxTxCxK * n_subkeys + second_BxTxCxK, gates_BxTxCxK


# --- NC-FFN sequence quantifiers (docs/designs/legible.md) ----------------------------------------------------
# Both recurrences are associative scans over (value a, decay g) pairs, composed left-to-right as
#   existential: (a1, g1) then (a2, g2) -> (max(a2, g2 * a1), g1 * g2)
#   proportion:  (a1, g1) then (a2, g2) -> (a2 + g2 * a1,      g1 * g2)
# run here by recursive doubling (log2 T steps), so the reference is already parallel over the sequence.


def _doubling_scan(values: Tensor, decay: Tensor, combine_max: bool) -> Tensor:
    """values [..., T, U]; decay broadcastable to values (constant over T). Scan along dim -2."""
    acc = values
    gain = decay.expand_as(values)
    n_pos = values.shape[-2]
    shift = 1
    while shift < n_pos:
        earlier = torch.nn.functional.pad(acc[..., :-shift, :], (0, 0, shift, 0))
        carried = gain * earlier
        acc = torch.maximum(acc, carried) if combine_max else acc + carried
        gain = gain * torch.nn.functional.pad(gain[..., :-shift, :], (0, 0, shift, 0), value=1.0)
        shift *= 2
    return acc


def existential_scan(
    membership_BxTxU: Float[Tensor, "batch pos unit"], decay_U: Float[Tensor, "unit"]
) -> Float[Tensor, "batch pos unit"]:
    """Soft existential E_t = max(M_t, gamma * E_(t-1)), E_(-1) = 0."""
    return _doubling_scan(membership_BxTxU, decay_U, combine_max=True)


def proportion_scan(
    membership_BxTxU: Float[Tensor, "batch pos unit"], decay_U: Float[Tensor, "unit"]
) -> Float[Tensor, "batch pos unit"]:
    """Soft proportion P_t = (1 - lambda) M_t + lambda P_(t-1), P_(-1) = 0."""
    return _doubling_scan((1 - decay_U) * membership_BxTxU, decay_U, combine_max=False)


def existential_loop(membership_BxTxU: Tensor, decay_U: Tensor) -> Tensor:
    """Step-by-step definition, for tests and benchmarks."""
    out = torch.empty_like(membership_BxTxU)
    state = torch.zeros_like(membership_BxTxU[..., 0, :])
    for t in range(membership_BxTxU.shape[-2]):
        state = torch.maximum(membership_BxTxU[..., t, :], decay_U * state)
        out[..., t, :] = state
    return out


def proportion_loop(membership_BxTxU: Tensor, decay_U: Tensor) -> Tensor:
    """Step-by-step definition, for tests and benchmarks."""
    out = torch.empty_like(membership_BxTxU)
    state = torch.zeros_like(membership_BxTxU[..., 0, :])
    for t in range(membership_BxTxU.shape[-2]):
        state = (1 - decay_U) * membership_BxTxU[..., t, :] + decay_U * state
        out[..., t, :] = state
    return out


# --- the product parity bottleneck (architectures/bottleneck/parity.py) -------------------------------


def parity_beam_top(
    y_NxHxC: Float[Tensor, "tokens rows cols"], signs_PxH: Float[Tensor, "patterns rows"], count: int
) -> tuple[Float[Tensor, "tokens count"], Int[Tensor, "tokens count"]]:
    """The `count` largest |(signs @ y)[n]| of each token, descending, with their flat positions p * C + c
    (the product encoder's scores of P row patterns times C kept column patterns; parity.py)."""
    dtype = torch.promote_types(y_NxHxC.dtype, torch.float32)  # float64 writes are scored in float64
    scores_NxPxC = (signs_PxH.to(dtype) @ y_NxHxC.to(dtype)).abs_()
    return scores_NxPxC.flatten(1).topk(count, dim=-1)


def parity_beam_select(
    x_NxHxW: Float[Tensor, "tokens rows cols"], row_signs_PxH: Float[Tensor, "row_patterns rows"],
    col_signs_UxW: Float[Tensor, "col_patterns cols"], beam: int, count: int, beam_top: Callable = parity_beam_top,
) -> tuple[Tensor, Tensor, Tensor]:
    """The product encoder's beam search (parity.py): Y = x_grid col_signs^T, the `beam` column patterns of
    largest bound ||Y[:, u]||_1 kept, and the `count` largest scores |row_signs @ Y[:, kept]| (by `beam_top`).
    Returns (feature ids u2 * U + u1 [N, count] int64 (row pattern u2, column pattern u1), their scores
    descending, the largest bound of a column left out [N], -1 where the beam keeps every column). Scores and
    bounds are unscaled, so a token's top `count` is the exhaustive one when its last score is at least that
    bound."""
    dtype = torch.promote_types(x_NxHxW.dtype, torch.float32)
    Y_NxHxU = x_NxHxW.to(dtype) @ col_signs_UxW.to(dtype).T
    bounds_NxU = Y_NxHxU.abs().sum(-2)
    n_patterns = bounds_NxU.shape[-1]
    kept_bounds, columns_NxC1 = bounds_NxU.topk(min(beam + 1, n_patterns), dim=-1)
    if beam < n_patterns:
        next_bound = kept_bounds[:, beam]
    else:
        next_bound = torch.full_like(bounds_NxU[:, 0], -1.0)
    columns_NxC = columns_NxC1[:, :beam]
    Y_NxHxC = Y_NxHxU.gather(-1, columns_NxC[:, None, :].expand(-1, Y_NxHxU.shape[1], -1))
    best, flat = beam_top(Y_NxHxC, row_signs_PxH, count)
    return (flat // beam) * n_patterns + columns_NxC.gather(-1, flat % beam), best, next_bound


def parity_feature_solve(
    x_NxD: Float[Tensor, "tokens d_model"], v_NxF: Float[Tensor, "tokens feat"], indices_NxF: Int[Tensor, "tokens feat"],
    row_signs_PxH: Float[Tensor, "row_patterns rows"], col_signs_UxW: Float[Tensor, "col_patterns cols"],
    ridge: float, solve: bool, write_a: bool, decode: bool,
) -> tuple[Tensor, Tensor]:
    """The product parity layer's features of each token, phi_u = outer(sP[u2], sQ[u1]).flatten() / sqrt(D) with
    u1 the low log2(U) bits of u, materialised: b = Phi^T x + v, a = (Phi^T Phi + ridge I)^-1 b (or b when not
    `solve`), x_hat = Phi a. Returns (a or an empty [0], x_hat or an empty [0]); x or v empty ([0]) counts as
    zero. Computes in the inputs' floating dtype (at least float32)."""
    n_tokens, n_features = indices_NxF.shape
    dtype = torch.promote_types(torch.promote_types(x_NxD.dtype, v_NxF.dtype), torch.float32)
    n_col_patterns, d_model = col_signs_UxW.shape[0], row_signs_PxH.shape[1] * col_signs_UxW.shape[1]
    u1, u2 = indices_NxF.long() % n_col_patterns, indices_NxF.long() // n_col_patterns
    outer = row_signs_PxH.to(dtype)[u2][..., :, None] * col_signs_UxW.to(dtype)[u1][..., None, :]
    phi_NxFxD = outer.flatten(-2) / d_model**0.5
    b = torch.zeros((n_tokens, n_features), dtype=dtype, device=indices_NxF.device)
    if x_NxD.numel():
        b = b + (phi_NxFxD @ x_NxD.to(dtype)[..., None])[..., 0]
    if v_NxF.numel():
        b = b + v_NxF.to(dtype)
    a = b
    if solve:
        gram = phi_NxFxD @ phi_NxFxD.transpose(-1, -2) + ridge * torch.eye(n_features, dtype=dtype, device=b.device)
        a = torch.linalg.solve(gram, b[..., None])[..., 0]
    empty = b.new_empty(0)
    x_hat = (a[..., None, :] @ phi_NxFxD)[..., 0, :] if decode else empty
    return (a if write_a else empty), x_hat
