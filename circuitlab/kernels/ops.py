"""The Triton fast paths as PyTorch custom operators (namespace `circuitlab`), so that `torch.compile` traces
a model through them: each operator is one opaque node with a fake (shape-only) implementation for tracing
and a registered backward, instead of an autograd.Function whose Triton launches dynamo would try to trace.

Importing this module registers the operators but does not import triton: an operator imports its Triton
module (circuitlab.kernels.<module>) the first time it runs.

Shared helper for every fast path: `kernel_op(name, schema, module, function, fake)` registers
circuitlab::<name>, implemented by circuitlab.kernels.<module>.<function>; give it a backward with
`op.register_autograd(backward, setup_context=...)` whose backward calls another such operator. The layer
reshapes to the operator's flat layout outside it (plain torch, traced by dynamo) and casts the inputs to
the autocast dtype with `autocast_inputs` (autocast passes custom operators by untouched).

Operators here (letters: M tokens, D d_model, C channels, K gates per channel, n subkeys per half,
S sequences, T positions, U units):
  sgatlin_combine_fwd(z [M, D], indices [M, C*K], gates [M, C*K], experts [2, C, N, D], k)
      -> out [M, D], neuron_pre [M, C*K] float32
  sgatlin_combine_bwd(dy, z, indices, gates, experts, neuron_pre, k, need_dexperts) -> dz, dgates, dexperts
      (dexperts is empty [0] when not needed)
  sgatlin_route_fwd(scores [M, 2*C*n], n_channels, k) -> gates [M, C, K], indices [M, C, K] int64
  sgatlin_route_bwd(dgates [M, C, K], indices [M, C, K], n_subkeys) -> dscores [M, 2*C*n]
  quantifier_scan_fwd(membership [S, T, U], decay [U], is_max) -> out [S, T, U], won [S, T, U] int8 ([1] if not is_max)
  quantifier_scan_bwd(dout, membership, decay, out, won, is_max) -> dmembership, ddecay [U] float32
  parity_beam_candidates(y [M, H, C], signs [P, H], count) -> values [M, CAP] float32, positions [M, CAP] int32
      (a superset of each token's `count` largest |signs @ y|; no gradient: the encoder's support)
  parity_beam_select(x [M, H, W], row_signs [P, H], col_signs [U, W], beam, count)
      -> ids [M, count] int64 (u2 * U + u1), scores [M, count] float32 descending, next_bound [M] float32
      (the product encoder's beam search: the beam of column patterns of largest ||Y[:, u]||_1, Y = x col_signs^T,
      its top `count` features, the largest bound left out or -1; no gradient)
  parity_feature_solve(x [M, D] or [0], v [M, F] or [0], indices [M, F], row_signs [P, H], col_signs [U, W],
      factors [M, tiles, 16, 16] or [0], ridge, solve, write_a, decode, keep_factors)
      -> a [M, F] or [0], x_hat [M, D] or [0], factors [M, tiles, 16, 16] or [0], float32
      (b = Phi^T x + v, a = (G + ridge I)^-1 b or b, x_hat = Phi a; the factors of G + ridge I kept where asked,
      or loaded where given; its backward is the same operator, on the kept factors)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import torch

from circuitlab.kernels.dispatch import autocast_dtype

NAMESPACE = "circuitlab"


def kernel_op(name: str, schema: str, module: str, function: str, fake: Callable) -> torch.library.CustomOpDef:
    """Register the custom operator circuitlab::<name> with `schema` (e.g. "(Tensor x, int k) -> Tensor").

    It runs circuitlab.kernels.<module>.<function>(*args), importing that module only when the operator first
    runs; `fake(*args)` returns empty outputs of the right shapes, dtypes and devices (torch.compile and meta
    tensors use it). The implementation must return fresh contiguous tensors, never views of its inputs, and
    the fake ones must be contiguous too (`new_empty(shape)`, not `empty_like` of a possibly strided input):
    Inductor lays out what follows by the fake outputs' strides."""

    def implementation(*args):
        return getattr(importlib.import_module(f"circuitlab.kernels.{module}"), function)(*args)

    op = torch.library.custom_op(f"{NAMESPACE}::{name}", implementation, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


def autocast_inputs(device_type: str, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors in the autocast dtype when autocast is on for `device_type` (as the references' einsums
    read them), else unchanged."""
    cast = autocast_dtype(device_type)
    if cast is None:
        return tensors
    return tuple(t.to(cast) for t in tensors)


# --- sgatlin combine ---------------------------------------------------------------------------------------


def _combine_fwd_fake(z, indices, gates, experts, k):
    out = z.new_empty(z.shape, dtype=torch.promote_types(z.dtype, experts.dtype))
    return out, z.new_empty(indices.shape, dtype=torch.float32)


sgatlin_combine_fwd = kernel_op(
    "sgatlin_combine_fwd",
    "(Tensor z, Tensor indices, Tensor gates, Tensor experts, int k) -> (Tensor, Tensor)",
    "sgatlin_triton", "combine_forward", _combine_fwd_fake,
)


def _combine_bwd_fake(dy, z, indices, gates, experts, neuron_pre, k, need_dexperts):
    dexperts = experts.new_empty(experts.shape if need_dexperts else (0,))
    return z.new_empty(z.shape), gates.new_empty(gates.shape), dexperts


sgatlin_combine_bwd = kernel_op(
    "sgatlin_combine_bwd",
    "(Tensor dy, Tensor z, Tensor indices, Tensor gates, Tensor experts, Tensor neuron_pre, int k, "
    "bool need_dexperts) -> (Tensor, Tensor, Tensor)",
    "sgatlin_triton", "combine_backward", _combine_bwd_fake,
)


def _combine_setup(ctx, inputs, output):
    z, indices, gates, experts, k = inputs
    ctx.save_for_backward(z, indices, gates, experts, output[1])
    ctx.k = k


def _combine_backward(ctx, dout, dneuron_pre):
    z, indices, gates, experts, neuron_pre = ctx.saved_tensors
    need_dexperts = bool(ctx.needs_input_grad[3])
    dz, dgates, dexperts = sgatlin_combine_bwd(dout, z, indices, gates, experts, neuron_pre, ctx.k, need_dexperts)
    return dz, None, dgates, dexperts if need_dexperts else None, None


sgatlin_combine_fwd.register_autograd(_combine_backward, setup_context=_combine_setup)


# --- sgatlin router ----------------------------------------------------------------------------------------


def _route_fwd_fake(scores, n_channels, k):
    n_tokens = scores.shape[0]
    indices = scores.new_empty((n_tokens, n_channels, k), dtype=torch.int64)
    return scores.new_empty((n_tokens, n_channels, k)), indices


sgatlin_route_fwd = kernel_op(
    "sgatlin_route_fwd", "(Tensor scores, int n_channels, int k) -> (Tensor, Tensor)",
    "sgatlin_triton", "route_forward", _route_fwd_fake,
)


def _route_bwd_fake(dgates, indices, n_subkeys):
    n_tokens, n_channels, _ = indices.shape
    return dgates.new_empty((n_tokens, 2 * n_channels * n_subkeys))


sgatlin_route_bwd = kernel_op(
    "sgatlin_route_bwd", "(Tensor dgates, Tensor indices, int n_subkeys) -> Tensor",
    "sgatlin_triton", "route_backward", _route_bwd_fake,
)


def _route_setup(ctx, inputs, output):
    scores, n_channels, k = inputs
    ctx.save_for_backward(output[1])
    ctx.n_subkeys = scores.shape[1] // (2 * n_channels)
    ctx.scores_dtype = scores.dtype


def _route_backward(ctx, dgates, dindices):
    (indices,) = ctx.saved_tensors
    if dgates is None:
        dgates = indices.new_zeros(indices.shape, dtype=ctx.scores_dtype)
    return sgatlin_route_bwd(dgates.to(ctx.scores_dtype), indices, ctx.n_subkeys), None, None


sgatlin_route_fwd.register_autograd(_route_backward, setup_context=_route_setup)


# --- quantifier scans ----------------------------------------------------------------------------------------


def _scan_fwd_fake(membership, decay, is_max):
    out = membership.new_empty(membership.shape, dtype=torch.promote_types(membership.dtype, decay.dtype))
    won = membership.new_empty(membership.shape if is_max else (1,), dtype=torch.int8)
    return out, won


quantifier_scan_fwd = kernel_op(
    "quantifier_scan_fwd", "(Tensor membership, Tensor decay, bool is_max) -> (Tensor, Tensor)",
    "scans_triton", "scan_forward", _scan_fwd_fake,
)


def _scan_bwd_fake(dout, membership, decay, out, won, is_max):
    return membership.new_empty(membership.shape), decay.new_empty(decay.shape, dtype=torch.float32)


quantifier_scan_bwd = kernel_op(
    "quantifier_scan_bwd",
    "(Tensor dout, Tensor membership, Tensor decay, Tensor out, Tensor won, bool is_max) -> (Tensor, Tensor)",
    "scans_triton", "scan_backward", _scan_bwd_fake,
)


def _scan_setup(ctx, inputs, output):
    membership, decay, is_max = inputs
    ctx.save_for_backward(membership, decay, *output)
    ctx.is_max = is_max


def _scan_backward(ctx, dout, dwon):
    membership, decay, out, won = ctx.saved_tensors
    dmembership, ddecay = quantifier_scan_bwd(dout, membership, decay, out, won, ctx.is_max)
    return dmembership, ddecay.to(decay.dtype), None


quantifier_scan_fwd.register_autograd(_scan_backward, setup_context=_scan_setup)


# --- parity product encoder: scores and selection ------------------------------------------------------------


def _beam_candidates_fake(y, signs, count):
    from circuitlab.kernels.parity_select_triton import candidate_slots

    cap = candidate_slots(count)
    return y.new_empty((y.shape[0], cap), dtype=torch.float32), y.new_empty((y.shape[0], cap), dtype=torch.int32)


parity_beam_candidates = kernel_op(
    "parity_beam_candidates", "(Tensor y, Tensor signs, int count) -> (Tensor, Tensor)",
    "parity_select_triton", "beam_candidates", _beam_candidates_fake,
)


def _beam_select_fake(x, row_signs, col_signs, beam, count):
    n_tokens = x.shape[0]
    return (x.new_empty((n_tokens, count), dtype=torch.int64), x.new_empty((n_tokens, count), dtype=torch.float32),
            x.new_empty((n_tokens,), dtype=torch.float32))


parity_beam_select = kernel_op(
    "parity_beam_select",
    "(Tensor x, Tensor row_signs, Tensor col_signs, int beam, int count) -> (Tensor, Tensor, Tensor)",
    "parity_select_triton", "beam_select", _beam_select_fake,
)


# --- parity product layer: least squares and decode on a support -----------------------------------------------


def _feature_solve_fake(x, v, indices, row_signs, col_signs, factors, ridge, solve, write_a, decode, keep_factors):
    from circuitlab.kernels.parity_solve_triton import BLOCK, factor_tiles

    n_tokens, n_features = indices.shape
    d_model = row_signs.shape[1] * col_signs.shape[1]
    a = indices.new_empty((n_tokens, n_features) if write_a else (0,), dtype=torch.float32)
    x_hat = indices.new_empty((n_tokens, d_model) if decode else (0,), dtype=torch.float32)
    keep = keep_factors and solve and factors.numel() == 0 and (write_a or decode)
    shape = (n_tokens, factor_tiles(n_features), BLOCK, BLOCK) if keep else (0,)
    return a, x_hat, indices.new_empty(shape, dtype=torch.float32)


parity_feature_solve = kernel_op(
    "parity_feature_solve",
    "(Tensor x, Tensor v, Tensor indices, Tensor row_signs, Tensor col_signs, Tensor factors, float ridge, bool solve, "
    "bool write_a, bool decode, bool keep_factors) -> (Tensor, Tensor, Tensor)",
    "parity_solve_triton", "feature_solve", _feature_solve_fake,
)


def _feature_solve_setup(ctx, inputs, output):
    x, v, indices, row_signs, col_signs, factors, ridge, solve, write_a, decode, keep_factors = inputs
    kept = output[2]
    ctx.mark_non_differentiable(kept)
    # the backward solves the same systems: it loads the factors this launch kept (or was given) where there are
    ctx.save_for_backward(indices, row_signs, col_signs, kept if kept.numel() else factors)
    ctx.meta = (ridge, solve, write_a, decode, x.numel() > 0, v.numel() > 0)


def _feature_solve_backward(ctx, da, dx_hat, dfactors):
    """The map (x, v) -> (a, x_hat) is linear and its solve symmetric, so dL/dv and dL/dx are the a and x_hat
    of the same operator run on (dL/dx_hat, dL/da), with the forward's factors where it kept them."""
    indices, row_signs, col_signs, factors = ctx.saved_tensors
    ridge, solve, write_a, decode, has_x, has_v = ctx.meta
    empty = indices.new_empty(0, dtype=torch.float32)
    upstream_x = dx_hat.float() if decode and dx_hat is not None else empty
    upstream_v = da.float() if write_a and da is not None else empty
    no_gradient = (None,) * 11
    if not (has_x or has_v) or (upstream_x.numel() == 0 and upstream_v.numel() == 0):
        return no_gradient
    dv, dx, _ = parity_feature_solve(upstream_x, upstream_v, indices, row_signs, col_signs, factors, ridge, solve,
                                     has_v, has_x, False)
    return (dx if has_x else None, dv if has_v else None) + no_gradient[2:]


parity_feature_solve.register_autograd(_feature_solve_backward, setup_context=_feature_solve_setup)


# --- what circuitlab.kernels calls: reshape to the operators' layout, autocast, call ---------------------------

MAX_D_MODEL = 4096  # the fused combine keeps a token's z, dy and accumulators in registers


def check_combine_shapes(z: torch.Tensor, indices: torch.Tensor, gates: torch.Tensor, experts: torch.Tensor) -> None:
    if experts.dim() != 4 or experts.shape[0] != 2:
        raise ValueError(f"experts must be [2, C, N, D] (w_in, w_out), got {tuple(experts.shape)}")
    _, n_channels, _, d_model = experts.shape
    if z.shape[-1] != d_model:
        raise ValueError(f"z has d_model {z.shape[-1]} but experts have {d_model}")
    if indices.shape != gates.shape or indices.dim() < 2 or indices.shape[-2] != n_channels:
        raise ValueError(
            f"indices {tuple(indices.shape)} and gates {tuple(gates.shape)} must both be [..., C={n_channels}, K]"
        )
    if indices.shape[:-2] != z.shape[:-1]:
        raise ValueError(f"indices lead with {tuple(indices.shape[:-2])} but z with {tuple(z.shape[:-1])}")
    if indices.dtype.is_floating_point or indices.dtype == torch.bool:
        raise ValueError(f"indices must be an integer tensor, got {indices.dtype}")
    if d_model > MAX_D_MODEL:
        raise ValueError(f"the fused combine keeps a token's d_model in registers: d_model <= {MAX_D_MODEL}")


def sgatlin_combine(z: torch.Tensor, indices: torch.Tensor, gates: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """Same contract as `reference.sgatlin_combine`. Under autocast z and experts are read in the autocast
    dtype (as the reference's einsums read them); gates keep their own dtype."""
    check_combine_shapes(z, indices, gates, experts)
    z, experts = autocast_inputs(z.device.type, z, experts)
    _, n_channels, _, d_model = experts.shape
    k = indices.shape[-1]
    out_MxD, _ = sgatlin_combine_fwd(
        z.reshape(-1, d_model), indices.reshape(-1, n_channels * k), gates.reshape(-1, n_channels * k), experts, k
    )
    return out_MxD.view(z.shape)


def sgatlin_route(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `reference.sgatlin_route`: (indices long [..., C, k], gates [..., C, k] in the scores'
    dtype, descending per channel). On exactly equal scores the lower subkey, and then the lower neuron, wins."""
    *lead, two, n_channels, n_subkeys = scores.shape
    gates, indices = sgatlin_route_fwd(scores.reshape(-1, two * n_channels * n_subkeys), n_channels, k)
    return indices.view(*lead, n_channels, k), gates.view(*lead, n_channels, k)


def _scan(membership: torch.Tensor, decay: torch.Tensor, is_max: bool) -> torch.Tensor:
    *lead, n_pos, n_units = membership.shape
    n_seq = math.prod(lead)
    out, _ = quantifier_scan_fwd(membership.reshape(n_seq, n_pos, n_units), decay.reshape(n_units), is_max)
    return out.view(membership.shape)


def existential_scan(membership: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """Same contract as `reference.existential_scan` (decay: one value per unit)."""
    return _scan(membership, decay, True)


def proportion_scan(membership: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """Same contract as `reference.proportion_scan` (decay: one value per unit)."""
    return _scan(membership, decay, False)


def parity_beam_top(y: torch.Tensor, signs: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `reference.parity_beam_top` (ties may be broken differently)."""
    values, positions = parity_beam_candidates(y, signs, count)
    best, slots = values.topk(count, dim=-1)
    return best, positions.gather(-1, slots).long()
