"""Triton fast paths for the parity dictionary (DESIGN section 5), with no dictionary in memory.

Letters: M tokens (batch * pos flattened), D d_model, R index bits (padded to R2 >= 32 for the int8 tensor
cores), F features (codes or candidates) per token.

phi_i = e_i for i < D, and R(M bits(i)) / sqrt(D) otherwise. For a tile of tokens and one feature slot the
kernels build the 0/1 matrix bits(i) [tokens, R2] in registers and multiply it by the code's transpose
[R2, D-tile] on the int8 tensor cores: the products are exact integer counts whose parity is the sign
bit of the pattern. The parity goes straight into the float's sign bit (an xor), so each (token, feature,
coordinate) costs a handful of integer/float instructions and no memory traffic. The only operands in
memory are the code M (D x R bits) and the tokens' own indices, values and activations.

decode  x_hat[t] = sum_f a_f phi_(i_f)           (forward of parity_decode, backward of parity_scores)
dots    s[t, f] = <x[t], phi_(i_f)>                (forward of parity_scores, backward of parity_decode)
The two are each other's adjoint, so each autograd function's backward is the other kernel.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from circuitlab.kernels._triton_common import next_power_of_2, tuning_configs
from circuitlab.kernels.dispatch import autocast_dtype


@triton.jit
def _pattern_sign_bits(indices, code_tile, R2: tl.constexpr):
    """[rows] indices, [cols, R2] 0/1 code rows (int8) -> [rows, cols] int32 holding parity(bits(i) . M_j) << 31,
    i.e. the float sign bit of the pattern entry."""
    bit = tl.arange(0, R2)
    if R2 <= 32:  # 32-bit shifts are half the instructions of 64-bit ones
        bits = ((indices.to(tl.int32)[:, None] >> bit[None, :]) & 1).to(tl.int8)
    else:
        bits = ((indices[:, None] >> bit[None, :].to(tl.int64)) & 1).to(tl.int8)
    # integer tensor-core products: exact counts (a float accumulator may drop low bits)
    counts = tl.dot(bits, tl.trans(code_tile), out_dtype=tl.int32)
    return counts << 31


@triton.autotune(
    configs=tuning_configs(
        [
            triton.Config({"BLOCK_M": 64, "BLOCK_D": 128}, num_warps=4),
            triton.Config({"BLOCK_M": 128, "BLOCK_D": 128}, num_warps=8),
            triton.Config({"BLOCK_M": 64, "BLOCK_D": 256}, num_warps=8),
        ],
        triton.Config({"BLOCK_M": 16, "BLOCK_D": 16}, num_warps=4),
    ),
    key=["D", "F", "R2"],
)
@triton.jit
def _decode_kernel(
    idx_ptr, val_ptr, code_ptr, out_ptr,
    M, D, F, inv_sqrt_d,
    R2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    bit = tl.arange(0, R2)
    code_tile = tl.load(code_ptr + cols[:, None] * R2 + bit[None, :], mask=col_ok[:, None], other=0)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for f in range(0, F):
        index = tl.load(idx_ptr + rows.to(tl.int64) * F + f, mask=row_ok, other=0).to(tl.int64)
        value = tl.load(val_ptr + rows.to(tl.int64) * F + f, mask=row_ok, other=0.0).to(tl.float32)
        is_pattern = index >= D
        weight = tl.where(is_pattern, value * inv_sqrt_d, 0.0)
        signs = _pattern_sign_bits(index, code_tile, R2)
        acc += (weight.to(tl.int32, bitcast=True)[:, None] ^ signs).to(tl.float32, bitcast=True)
        if tl.sum((row_ok & (index < D)).to(tl.int32), axis=0) > 0:  # a basis feature e_i in this tile
            basis_value = tl.where(is_pattern, 0.0, value)
            acc += tl.where(cols[None, :] == index[:, None], basis_value[:, None], 0.0)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * D + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.autotune(
    configs=tuning_configs(
        [
            triton.Config({"BLOCK_M": 64, "BLOCK_D": 128, "BLOCK_F": 16}, num_warps=4),
            triton.Config({"BLOCK_M": 64, "BLOCK_D": 256, "BLOCK_F": 16}, num_warps=8),
            triton.Config({"BLOCK_M": 128, "BLOCK_D": 128, "BLOCK_F": 8}, num_warps=8),
        ],
        triton.Config({"BLOCK_M": 16, "BLOCK_D": 16, "BLOCK_F": 4}, num_warps=4),
    ),
    key=["D", "F", "R2"],
)
@triton.jit
def _dots_kernel(
    x_ptr, idx_ptr, code_ptr, out_ptr,
    M, D, F, inv_sqrt_d,
    R2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    slot = tl.arange(0, BLOCK_F)
    features = tl.program_id(1) * BLOCK_F + slot
    feature_ok = features < F
    bit = tl.arange(0, R2)
    acc = tl.zeros([BLOCK_M, BLOCK_F], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        col_ok = cols < D
        code_tile = tl.load(code_ptr + cols[:, None] * R2 + bit[None, :], mask=col_ok[:, None], other=0)
        x = tl.load(
            x_ptr + rows.to(tl.int64)[:, None] * D + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0
        ).to(tl.float32)
        x_bits = x.to(tl.int32, bitcast=True)
        for j in tl.static_range(BLOCK_F):
            feature = tl.program_id(1) * BLOCK_F + j
            index = tl.load(idx_ptr + rows.to(tl.int64) * F + feature, mask=row_ok & (rows * 0 + feature < F), other=0)
            signed = (x_bits ^ _pattern_sign_bits(index.to(tl.int64), code_tile, R2)).to(tl.float32, bitcast=True)
            acc += tl.where(slot[None, :] == j, tl.sum(signed, axis=1)[:, None], 0.0)
    pair_ok = row_ok[:, None] & feature_ok[None, :]
    index = tl.load(idx_ptr + rows.to(tl.int64)[:, None] * F + features[None, :], mask=pair_ok, other=0).to(tl.int64)
    is_basis = index < D
    basis = tl.load(x_ptr + rows.to(tl.int64)[:, None] * D + index, mask=pair_ok & is_basis, other=0.0).to(tl.float32)
    scores = tl.where(is_basis, basis, acc * inv_sqrt_d)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * F + features[None, :], scores.to(out_ptr.dtype.element_ty),
             mask=pair_ok)


def _code_operand(code_DxR: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The code as 0/1 int8 [D, R2] (R2 >= 32, a power of two, columns past R zero): the tensor-core operand."""
    d_model, n_bits = code_DxR.shape
    r2 = max(32, next_power_of_2(n_bits))
    code = torch.zeros((d_model, r2), dtype=torch.int8, device=code_DxR.device)
    code[:, :n_bits] = (code_DxR.to(torch.int64) & 1).to(torch.int8)
    return code, r2


def _decode(indices_MxF: torch.Tensor, values_MxF: torch.Tensor, code_operand: torch.Tensor, r2: int, out_dtype: torch.dtype):
    n_tokens, n_features = indices_MxF.shape
    d_model = code_operand.shape[0]
    out = torch.empty((n_tokens, d_model), dtype=out_dtype, device=values_MxF.device)
    if n_tokens > 0:
        grid = lambda meta: (triton.cdiv(n_tokens, meta["BLOCK_M"]), triton.cdiv(d_model, meta["BLOCK_D"]))  # noqa: E731
        _decode_kernel[grid](indices_MxF, values_MxF, code_operand, out, n_tokens, d_model, n_features,
                             1.0 / math.sqrt(d_model), R2=r2)
    return out


def _dots(x_MxD: torch.Tensor, indices_MxF: torch.Tensor, code_operand: torch.Tensor, r2: int, out_dtype: torch.dtype):
    n_tokens, n_features = indices_MxF.shape
    d_model = code_operand.shape[0]
    out = torch.empty((n_tokens, n_features), dtype=out_dtype, device=x_MxD.device)
    if n_tokens > 0 and n_features > 0:
        grid = lambda meta: (triton.cdiv(n_tokens, meta["BLOCK_M"]), triton.cdiv(n_features, meta["BLOCK_F"]))  # noqa: E731
        _dots_kernel[grid](x_MxD, indices_MxF, code_operand, out, n_tokens, d_model, n_features,
                           1.0 / math.sqrt(d_model), R2=r2)
    return out


class _ParityDecode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices, values, code_DxR):  # type: ignore[override]
        d_model = code_DxR.shape[0]
        n_features = indices.shape[-1]
        indices_MxF = indices.reshape(-1, n_features).contiguous()
        values_MxF = values.reshape(-1, n_features).contiguous()
        code_operand, r2 = _code_operand(code_DxR)
        out = _decode(indices_MxF, values_MxF, code_operand, r2, values.dtype)
        ctx.save_for_backward(indices_MxF, code_operand)
        ctx.meta = (r2, values.shape, values.dtype)
        return out.view(*indices.shape[:-1], d_model)

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        indices_MxF, code_operand = ctx.saved_tensors
        r2, values_shape, values_dtype = ctx.meta
        dout_MxD = dout.reshape(-1, code_operand.shape[0]).contiguous()
        dvalues = _dots(dout_MxD, indices_MxF, code_operand, r2, values_dtype)
        return None, dvalues.view(values_shape), None


class _ParityScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, candidates, code_DxR):  # type: ignore[override]
        d_model = code_DxR.shape[0]
        n_features = candidates.shape[-1]
        x_MxD = x.reshape(-1, d_model).contiguous()
        candidates_MxF = candidates.reshape(-1, n_features).contiguous()
        code_operand, r2 = _code_operand(code_DxR)
        scores = _dots(x_MxD, candidates_MxF, code_operand, r2, x.dtype)
        ctx.save_for_backward(candidates_MxF, code_operand)
        ctx.meta = (r2, x.shape, x.dtype)
        return scores.view(candidates.shape)

    @staticmethod
    def backward(ctx, dscores):  # type: ignore[override]
        candidates_MxF, code_operand = ctx.saved_tensors
        r2, x_shape, x_dtype = ctx.meta
        dscores_MxF = dscores.reshape(candidates_MxF.shape).contiguous()
        dx = _decode(candidates_MxF, dscores_MxF, code_operand, r2, x_dtype)
        return dx.view(x_shape), None, None


def _check(lead_a: torch.Size, lead_b: torch.Size, what: str) -> None:
    if lead_a != lead_b:
        raise ValueError(f"{what}: leading shapes differ, {tuple(lead_a)} vs {tuple(lead_b)}")


def parity_decode(indices: torch.Tensor, values: torch.Tensor, code_DxR: torch.Tensor) -> torch.Tensor:
    """Same contract as `reference.parity_decode`. Under autocast the values are read in the autocast dtype."""
    _check(indices.shape, values.shape, "parity_decode indices and values")
    cast = autocast_dtype(values.device.type)
    if cast is not None:
        values = values.to(cast)
    with torch.autocast(device_type=values.device.type, enabled=False):
        return _ParityDecode.apply(indices, values, code_DxR)


def parity_scores(x: torch.Tensor, candidates: torch.Tensor, code_DxR: torch.Tensor) -> torch.Tensor:
    """Same contract as `reference.parity_scores`. Under autocast x is read in the autocast dtype."""
    _check(x.shape[:-1], candidates.shape[:-1], "parity_scores x and candidates")
    cast = autocast_dtype(x.device.type)
    if cast is not None:
        x = x.to(cast)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return _ParityScores.apply(x, candidates, code_DxR)
