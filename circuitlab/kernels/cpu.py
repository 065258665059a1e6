"""CPU fast paths: the references' math rearranged for a CPU (flat gathers, one top-k call per step,
embedding_bag for the weighted sum), differentiable by ordinary autograd, run on torch's threads.

The references index experts with a [C, 1] channel tensor and a [B, T, C, K] index tensor, which PyTorch's
CPU advanced indexing runs slowly (a generic strided gather), and contract the gathered [B, T, C, K, D]
tensors with einsums that become many tiny matrix-vector products. Here every expert row is addressed by
one flat id c * N + i. Without gradients (inference, collection) the products w_in . z come from one
sampled dense-dense product (a CSR pattern of C*K entries per token: nothing gathered, one parallel op,
which also holds up when other processes share the cores); with gradients, the rows are gathered with
index_select a block of tokens at a time and contracted with bmm. The output sum over the C*K chosen rows
is one embedding_bag (no gathered w_out at all).

Letters: B batch, T position, D d_model, C channels, K gates per channel, N neurons per channel, n subkeys
per half, M tokens (B*T flattened).
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

GATHER_TOKENS = 128  # tokens per gathered block (training): 128 x C*K rows x D floats = 8 MiB at C*K = 64, D = 256


def sgatlin_combine(
    z_BxTxD: Float[Tensor, "batch pos d_model"],
    indices_BxTxCxK: Int[Tensor, "batch pos channel k"],
    gates_BxTxCxK: Float[Tensor, "batch pos channel k"],
    experts_2xCxNxD: Float[Tensor, "2 channel neuron d_model"],
) -> Float[Tensor, "batch pos d_model"]:
    """sum_c sum_k g * (w_in . z) * w_out (seed 000, eq. 2), equal to `reference.sgatlin_combine`."""
    d_model = z_BxTxD.shape[-1]
    n_channels, n_neurons = experts_2xCxNxD.shape[1:3]
    n_gates = n_channels * indices_BxTxCxK.shape[-1]
    if indices_BxTxCxK.numel() and (int(indices_BxTxCxK.min()) < 0 or int(indices_BxTxCxK.max()) >= n_neurons):
        raise IndexError(f"sgatlin expert indices must lie in [0, {n_neurons}) (neurons per channel)")
    offsets_Cx1 = torch.arange(n_channels, device=indices_BxTxCxK.device)[:, None] * n_neurons
    rows_MxCK = (indices_BxTxCxK.long() + offsets_Cx1).reshape(-1, n_gates)
    z_MxD = z_BxTxD.reshape(-1, d_model)
    w_in_RxD = experts_2xCxNxD[0].reshape(n_channels * n_neurons, d_model)
    w_out_RxD = experts_2xCxNxD[1].reshape(n_channels * n_neurons, d_model)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (z_BxTxD, gates_BxTxCxK, experts_2xCxNxD))
    if z_MxD.shape[0] == 0:
        neuron_pre_MxCK = z_MxD.new_zeros(0, n_gates)
    elif needs_grad or _has_repeats(indices_BxTxCxK):
        neuron_pre_MxCK = torch.cat(
            [
                torch.bmm(
                    w_in_RxD.index_select(0, rows_MxCK[start : start + GATHER_TOKENS].reshape(-1)).view(-1, n_gates, d_model),
                    z_MxD[start : start + GATHER_TOKENS, :, None],
                )[..., 0]
                for start in range(0, z_MxD.shape[0], GATHER_TOKENS)
            ]
        )
    else:
        neuron_pre_MxCK = _sampled_products(z_MxD, w_in_RxD, rows_MxCK)
    neuron_post_MxCK = neuron_pre_MxCK * gates_BxTxCxK.reshape(-1, n_gates).to(neuron_pre_MxCK.dtype)
    out_MxD = F.embedding_bag(rows_MxCK, w_out_RxD, per_sample_weights=neuron_post_MxCK, mode="sum")
    return out_MxD.view(z_BxTxD.shape)


def _has_repeats(indices_BxTxCxK: Int[Tensor, "batch pos channel k"]) -> bool:
    """True when a token names one expert row twice within a channel (a CSR pattern cannot hold that; the
    router never does). Rows of different channels differ once every index lies in [0, N)."""
    sorted_BxTxCxK = indices_BxTxCxK.sort(dim=-1).values
    return bool((sorted_BxTxCxK[..., 1:] == sorted_BxTxCxK[..., :-1]).any())


def _sampled_products(
    z_MxD: Float[Tensor, "tokens d_model"], w_in_RxD: Float[Tensor, "rows d_model"], rows_MxCK: Int[Tensor, "tokens gates"]
) -> Float[Tensor, "tokens gates"]:
    """w_in[rows[m, a]] . z[m] for every (token, gate) in one sampled dense-dense product (torch.sparse
    sampled_addmm over a CSR pattern with C*K entries per token): one parallel op reading each chosen row
    once, with nothing gathered; inference only (no autograd through the CSR pattern), distinct rows per token."""
    import warnings

    n_tokens, n_gates = rows_MxCK.shape
    row_offsets = torch.arange(0, n_tokens * n_gates + 1, n_gates, device=rows_MxCK.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        pattern = torch.sparse_csr_tensor(
            row_offsets, rows_MxCK.reshape(-1), z_MxD.new_zeros(n_tokens * n_gates),
            size=(n_tokens, w_in_RxD.shape[0]), check_invariants=False,
        )
        products = torch.sparse.sampled_addmm(pattern, z_MxD, w_in_RxD.T, beta=0.0)
    return products.values().view(n_tokens, n_gates)


def sgatlin_route(
    subkey_scores_BxTx2xCxn: Float[Tensor, "batch pos 2 channel n_subkeys"], k: int
) -> tuple[Int[Tensor, "batch pos channel k"], Float[Tensor, "batch pos channel k"]]:
    """Product top-k, equal to `reference.sgatlin_route`: one top-k over both halves of every (token,
    channel) at once, then one top-k over the k*k pair sums."""
    n_subkeys = subkey_scores_BxTx2xCxn.shape[-1]
    if k > n_subkeys:
        raise ValueError(f"product top-k needs k <= subkeys per half, got k={k} > n={n_subkeys}")
    half_top_BxTx2xCxK, half_idx_BxTx2xCxK = subkey_scores_BxTx2xCxn.topk(k, dim=-1)
    first_top, second_top = half_top_BxTx2xCxK.unbind(-3)
    pair_sums_BxTxCxKK = (first_top[..., :, None] + second_top[..., None, :]).flatten(-2)
    gates_BxTxCxK, pair_BxTxCxK = pair_sums_BxTxCxKK.topk(k, dim=-1)
    first_idx, second_idx = half_idx_BxTx2xCxK.unbind(-3)
    first_BxTxCxK = first_idx.gather(-1, pair_BxTxCxK // k)
    second_BxTxCxK = second_idx.gather(-1, pair_BxTxCxK % k)
    return first_BxTxCxK * n_subkeys + second_BxTxCxK, gates_BxTxCxK


def takes(*tensors: Tensor) -> bool:
    """True when a call on these tensors runs here: backend "auto", every tensor on the CPU, no CPU
    autocast (under autocast the references' einsums set the precision; this path reads float32), and not
    inside torch.compile (which traces the references whole; this path's sparse pattern would break the graph)."""
    from circuitlab.kernels.dispatch import requested_backend

    return (
        not torch.compiler.is_compiling()
        and requested_backend() == "auto"
        and all(t.device.type == "cpu" for t in tensors)
        and not torch.is_autocast_enabled("cpu")
    )


MAX_COMPILED_BITS = 22  # the compiled parity encoder's largest dictionary: 4 MB of flags per chunk of tokens


@functools.cache
def numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def parity_encode(
    X_NxHxW: Float[Tensor, "tokens rows cols"], row_signs_PxH: Tensor, col_signs_UxW: Tensor, k: int,
    beam: int | None, rounds: int, ridge: float,
) -> tuple[Int[Tensor, "tokens k"], Float[Tensor, "tokens k"], Float[Tensor, "tokens rows cols"]] | None:
    """The product parity encoder compiled for the CPU (kernels/_parity_numba.py): (supports, least-squares
    coefficients, the decoded writes sum_i a_i phi_i as grids), or None where it does not run (numba missing, a
    backend forced, not on the CPU, or inside torch.compile, a dictionary above 2^MAX_COMPILED_BITS features,
    whose flags for the pursuit's excluded features each thread would hold, or a write that is not finite or
    too large for float32 scores). `beam` None is the exhaustive encoder. Same supports as
    ParityBottleneck._pursue except where rounding decides a near-tie."""
    n_features = row_signs_PxH.shape[0] * col_signs_UxW.shape[0]
    if not (numba_available() and takes(X_NxHxW)) or X_NxHxW.shape[0] == 0 or n_features > 2**MAX_COMPILED_BITS:
        return None
    n_cols = col_signs_UxW.shape[0]
    if 2 * k > min(n_cols if beam is None else beam, n_cols) * row_signs_PxH.shape[0]:
        return None  # fewer scored features than the pursuit's 2k: the PyTorch encoder says what is wrong
    import numba

    import circuitlab.kernels._parity_numba as compiled

    grid = X_NxHxW.detach().to(torch.float32).contiguous().numpy()
    n_chunks = min(grid.shape[0], 8 * numba.get_num_threads())  # chunks of tokens shared out over the threads
    with _blas_on_one_thread():
        support, values, decoded, _, encoded = compiled.encode(
            grid, row_signs_PxH.to(torch.float32).contiguous().numpy(),
            col_signs_UxW.to(torch.float32).contiguous().numpy(),
            row_signs_PxH.mean(-1).double().numpy(), col_signs_UxW.mean(-1).double().numpy(), k,
            n_cols if beam is None else min(beam, n_cols), rounds, float(ridge),
            1.0 / math.sqrt(row_signs_PxH.shape[1] * col_signs_UxW.shape[1]), int(n_cols).bit_length() - 1, n_chunks,
        )
    if not encoded.all():
        return None  # writes the compiled loops leave out (not finite, or too large): the PyTorch encoder
    return torch.from_numpy(support), torch.from_numpy(values), torch.from_numpy(decoded)


@functools.cache
def _blas_controller():
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (the BLAS numba calls for np.dot, loaded before the scan)
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def _blas_on_one_thread():
    """The compiled encoder runs its tokens on numba's threads and calls BLAS on small products from each: a
    BLAS that keeps threads of its own then competes with them for the cores (2 cores: 33 against 24 us a
    token per layer call of parity-stories). threadpoolctl limits it for the call where it is installed."""
    controller = _blas_controller()
    if controller is None:
        return contextlib.nullcontext()
    return controller.limit(limits=1, user_api="blas")
