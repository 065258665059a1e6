"""The Triton fast paths against their plain-PyTorch references, forward and backward.

On a machine without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set here before
triton is imported); with CUDA the same tests run the compiled kernels on the GPU (and on the CPU too when
the interpreter is on). Sizes are small and awkward on purpose: non-powers of two, duplicate indices, T = 1,
blocks that do not divide the sizes.

Tolerances, as ||fast - ref|| / ||ref|| with the reference in float64 on the same (rounded) inputs:
float32 1e-5; bfloat16 1.5e-2 (outputs and gradients are rounded to bfloat16, relative step 2^-8).
"""

from __future__ import annotations

import os

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# one compiled config per kernel in tests; the benchmark tunes and checks the tuned configs itself
os.environ.setdefault("CIRCUITLAB_KERNELS_TUNE", "0")

pytest.importorskip("triton", reason="triton is not installed: the kernel tests need it (pip install 'circuitlab[triton]')")

import circuitlab.kernels as kernels  # noqa: E402
from circuitlab.kernels import reference  # noqa: E402

DEVICES = (["cpu"] if kernels.triton_interpreting() else []) + (["cuda"] if CUDA else [])
DTYPES = [torch.float32, torch.bfloat16]
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.5e-2}

pytestmark = pytest.mark.skipif(not DEVICES, reason="no CUDA device and TRITON_INTERPRET is off: nowhere to run Triton")


def relative_error(fast: torch.Tensor, ref: torch.Tensor) -> float:
    assert fast.shape == ref.shape, (fast.shape, ref.shape)
    assert torch.isfinite(fast).all(), "fast path produced non-finite values"
    return ((fast.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def leaf(tensor: torch.Tensor, dtype: torch.dtype, device: str) -> torch.Tensor:
    return tensor.to(device=device, dtype=dtype).requires_grad_(True)


def float64_twin(tensor: torch.Tensor) -> torch.Tensor:
    """The same (already rounded) values in float64, as a fresh leaf."""
    return tensor.detach().double().requires_grad_(True)


def backward_nodes(out: torch.Tensor) -> set[str]:
    """Class names of every node in the autograd graph behind `out`."""
    seen, stack, names = set(), [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def ran_op(out: torch.Tensor, op: str) -> bool:
    """Whether `out` came from the custom operator circuitlab::<op> (its generated backward is in the graph)."""
    return any(f"circuitlab_{op}_" in name for name in backward_nodes(out))


def grads(out: torch.Tensor, inputs: list[torch.Tensor], upstream: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, inputs, upstream.to(out.dtype))


# --- sgatlin combine ---------------------------------------------------------------------------------------

# (batch, pos, channels, k, neurons, d_model): T = 1; K > N forces repeats inside a channel; odd d_model
COMBINE_SHAPES = [(2, 3, 3, 3, 5, 20), (1, 1, 2, 5, 3, 7), (3, 2, 1, 7, 11, 33)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", COMBINE_SHAPES)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_sgatlin_combine_matches_reference(device, dtype, shape, index_dtype):
    batch, pos, channels, k, neurons, d_model = shape
    gen = torch.Generator().manual_seed(hash(shape) % 2**31)
    indices = torch.randint(0, neurons, (batch, pos, channels, k), generator=gen)
    indices[0, 0, 0, -1] = indices[0, 0, 0, 0]  # a repeat inside one token's channel
    flat = indices.reshape(-1, channels, k)[:, 0, :].reshape(-1)
    assert flat.unique().numel() < flat.numel(), "the test must contain duplicate expert rows"
    z = leaf(torch.randn(batch, pos, d_model, generator=gen), dtype, device)
    gates = leaf(torch.randn(batch, pos, channels, k, generator=gen), dtype, device)
    experts = leaf(torch.randn(2, channels, neurons, d_model, generator=gen) / d_model**0.5, dtype, device)
    indices = indices.to(device=device, dtype=index_dtype)
    upstream = torch.randn(batch, pos, d_model, generator=gen).to(device)

    with kernels.use_backend("triton"):
        out = kernels.sgatlin_combine(z, indices, gates, experts)
    assert ran_op(out, "sgatlin_combine_fwd")
    twins = [float64_twin(t) for t in (z, gates, experts)]
    ref = reference.sgatlin_combine(twins[0], indices.long(), twins[1], twins[2])

    tol = TOLERANCE[dtype]
    assert out.dtype == dtype
    assert relative_error(out, ref) < tol
    fast_grads = grads(out, [z, gates, experts], upstream)
    ref_grads = grads(ref, twins, upstream)
    for name, fast, slow in zip(("z", "gates", "experts"), fast_grads, ref_grads):
        assert fast.dtype == dtype, name
        assert relative_error(fast, slow) < tol, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d_model", [256, 1024])
def test_sgatlin_combine_in_every_tile_the_tuner_may_pick(device, d_model, monkeypatch):
    """The other tests run each combine kernel in its first tile only (no tuning in tests). Here each tile the
    autotuner keeps for this d_model (rows x d_model, in 2, 4 or 8 warps) is pinned in turn, and the output and
    all gradients must equal the float64 reference: more assignments per token (36) and per expert row (33)
    than the largest tile has rows, so every kernel's loop runs more than once."""
    import triton

    from circuitlab.kernels import sgatlin_triton

    tokens, channels, k, neurons = 33, 4, 9, 9  # k == neurons: every token picks every neuron of each channel
    gen = torch.Generator().manual_seed(d_model)
    indices = torch.stack([torch.randperm(neurons, generator=gen) for _ in range(tokens * channels)])
    indices = indices.reshape(1, tokens, channels, k).to(device)
    z = leaf(torch.randn(1, tokens, d_model, generator=gen), torch.float32, device)
    gates = leaf(torch.randn(1, tokens, channels, k, generator=gen), torch.float32, device)
    experts = leaf(torch.randn(2, channels, neurons, d_model, generator=gen) / d_model**0.5, torch.float32, device)
    upstream = torch.randn(1, tokens, d_model, generator=gen).to(device)
    twins = [float64_twin(t) for t in (z, gates, experts)]
    ref = reference.sgatlin_combine(twins[0], indices, twins[1], twins[2])
    ref_grads = grads(ref, twins, upstream)

    tiles = sgatlin_triton.prune_row_tiles(sgatlin_triton.row_tile_candidates("BLOCK_R"), {}, BLOCK_D=d_model)
    assert {tile.num_warps for tile in tiles} == {2, 4, 8} and len(tiles) == 7
    kernels_by_block = {"BLOCK_R": [sgatlin_triton._combine_fwd_kernel, sgatlin_triton._combine_bwd_token_kernel],
                        "BLOCK_S": [sgatlin_triton._combine_bwd_expert_kernel]}
    for tile in tiles:
        (rows,) = tile.kwargs.values()
        for block, autotuned in kernels_by_block.items():
            for kernel in autotuned:
                monkeypatch.setattr(kernel, "configs", [triton.Config({block: rows}, num_warps=tile.num_warps)])
                monkeypatch.setattr(kernel, "early_config_prune", None)
                monkeypatch.setattr(kernel, "cache", {})
        with kernels.use_backend("triton"):
            out = kernels.sgatlin_combine(z, indices, gates, experts)
        assert relative_error(out, ref) < TOLERANCE[torch.float32], tile
        for name, fast, slow in zip(("z", "gates", "experts"), grads(out, [z, gates, experts], upstream), ref_grads):
            assert relative_error(fast, slow) < TOLERANCE[torch.float32], (tile, name)
        for block, autotuned in kernels_by_block.items():  # the pinned tile is the one that ran
            assert all(kernel.best_config.kwargs == {block: rows} for kernel in autotuned), tile


@pytest.mark.parametrize("device", DEVICES)
def test_sgatlin_combine_untouched_expert_rows_get_zero_gradient(device):
    gen = torch.Generator().manual_seed(3)
    indices = torch.tensor([[[[0, 0], [2, 2]]]], device=device)  # channel 0 uses row 0 only, channel 1 row 2
    z = torch.randn(1, 1, 6, generator=gen).to(device)
    gates = torch.randn(1, 1, 2, 2, generator=gen).to(device)
    experts = torch.randn(2, 2, 3, 6, generator=gen).to(device).requires_grad_(True)
    with kernels.use_backend("triton"):
        out = kernels.sgatlin_combine(z, indices, gates, experts)
    (dexperts,) = torch.autograd.grad(out.sum(), [experts])
    used = torch.zeros(2, 3, dtype=torch.bool)
    used[0, 0] = used[1, 2] = True
    assert (dexperts[:, ~used] == 0).all()
    assert (dexperts[:, used].abs().sum(-1) > 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_sgatlin_combine_under_autocast_reads_bf16_like_the_reference(device):
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(2, 3, 16, generator=gen).to(device)
    indices = torch.randint(0, 4, (2, 3, 2, 3), generator=gen).to(device)
    gates = torch.randn(2, 3, 2, 3, generator=gen).to(device)
    experts = torch.randn(2, 2, 4, 16, generator=gen).to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        with kernels.use_backend("triton"):
            out = kernels.sgatlin_combine(z, indices, gates, experts)
        ref = reference.sgatlin_combine(z, indices, gates, experts)
    assert out.dtype == ref.dtype == torch.bfloat16
    exact = reference.sgatlin_combine(z.double(), indices, gates.double(), experts.double())
    assert relative_error(out, exact) < TOLERANCE[torch.bfloat16]


# --- sgatlin router ----------------------------------------------------------------------------------------

# (batch, pos, channels, subkeys per half, k): k == n, k odd, n not a power of two, T = 1
ROUTE_SHAPES = [(2, 5, 3, 6, 4), (1, 1, 2, 3, 3), (2, 3, 1, 17, 5)]


def brute_force_top_gates(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k of all n * n subkey-score sums per channel, descending (what the product top-k must equal)."""
    sums = scores[..., 0, :, :, None] + scores[..., 1, :, None, :]
    return sums.flatten(-2).topk(k, dim=-1).values


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ROUTE_SHAPES)
def test_sgatlin_route_matches_reference_and_brute_force(device, dtype, shape):
    batch, pos, channels, n_subkeys, k = shape
    gen = torch.Generator().manual_seed(sum(shape))
    scores = leaf(torch.randn(batch, pos, 2, channels, n_subkeys, generator=gen), dtype, device)
    with kernels.use_backend("triton"):
        indices, gates = kernels.sgatlin_route(scores, k)
    assert ran_op(gates, "sgatlin_route_fwd")
    assert indices.dtype == torch.int64 and gates.dtype == dtype
    assert indices.shape == gates.shape == (batch, pos, channels, k)

    exact = scores.detach().double()
    first, second = indices // n_subkeys, indices % n_subkeys
    # each gate is the (rounded) sum of the two subkey scores its index names
    named = exact[..., 0, :, :].gather(-1, first) + exact[..., 1, :, :].gather(-1, second)
    # exact on the GPU; one bf16 step on the CPU interpreter, which truncates float32 -> bf16
    # where the GPU (and torch) round to nearest
    ulps = 2.0**-7 if (device == "cpu" and dtype == torch.bfloat16) else 0.0
    torch.testing.assert_close(gates.double(), named.to(dtype).double(), rtol=ulps, atol=0.0)
    # the chosen neurons are distinct and their gates are the k best of all n * n sums, descending
    assert (indices.sort(-1).values.diff(dim=-1) > 0).all()
    torch.testing.assert_close(gates.double(), brute_force_top_gates(exact, k).to(dtype).double(), rtol=ulps, atol=0.0)
    if dtype == torch.float32:  # no ties among random float32 sums: the very same neurons as the reference
        ref_indices, _ = reference.sgatlin_route(scores, k)
        assert torch.equal(indices, ref_indices)

    # backward: each gate's gradient lands on its two subkeys (summed where gates share a subkey)
    upstream = torch.randn(gates.shape, generator=gen).to(device=device, dtype=dtype)
    (dscores,) = torch.autograd.grad(gates, [scores], upstream)
    expected = torch.zeros_like(exact)
    expected[..., 0, :, :].scatter_add_(-1, first, upstream.double())
    expected[..., 1, :, :].scatter_add_(-1, second, upstream.double())
    assert relative_error(dscores, expected) < TOLERANCE[dtype]
    if dtype == torch.float32:
        (ref_dscores,) = torch.autograd.grad(reference.sgatlin_route(scores, k)[1], [scores], upstream)
        assert relative_error(dscores, ref_dscores) < TOLERANCE[dtype]


# (batch, pos, channels, subkeys per half, k): the one-row-per-thread router, then k above its limit (the tiled
# router takes over)
TIED_ROUTE_SHAPES = [(3, 7, 4, 9, 8), (2, 5, 3, 6, 6), (1, 4, 2, 18, 17)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", TIED_ROUTE_SHAPES)
def test_sgatlin_route_breaks_ties_toward_the_lower_neuron(device, shape):
    """Scores that are small integers tie everywhere and sum exactly: the product top-k must equal the top-k
    of all n * n sums in the total order (sum descending, neuron i1 * n + i2 ascending), neuron for neuron."""
    from circuitlab.kernels import sgatlin_triton

    batch, pos, channels, n_subkeys, k = shape
    assert (k <= sgatlin_triton.ROW_ROUTER_MAX_K) == (k < 17)
    gen = torch.Generator().manual_seed(sum(shape))
    # + 0.0 turns -0.0 into 0.0, which the tiled router's keys would order below it
    scores = torch.randint(-3, 4, (batch, pos, 2, channels, n_subkeys), generator=gen).float() + 0.0
    with kernels.use_backend("triton"):
        indices, gates = kernels.sgatlin_route(leaf(scores, torch.float32, device), k)
    assert ran_op(gates, "sgatlin_route_fwd")
    gates = gates.detach()
    sums = (scores[..., 0, :, :, None] + scores[..., 1, :, None, :]).flatten(-2)  # [..., C, n * n]
    neuron = torch.arange(n_subkeys * n_subkeys).expand_as(sums)
    # sort by neuron, then stably by sum descending: ties keep the lower neuron first
    order = sums.argsort(dim=-1, descending=True, stable=True)
    expected_indices, expected_gates = neuron.gather(-1, order)[..., :k], sums.gather(-1, order)[..., :k]
    assert torch.equal(expected_indices, indices.cpu())
    assert torch.equal(expected_gates, gates.cpu())
    # the tiled design gives the same answer (the default picks it only above ROW_ROUTER_MAX_K)
    tiled_gates, tiled_indices = sgatlin_triton.route_forward(
        scores.to(device).reshape(-1, 2 * channels * n_subkeys), channels, k, design="tiled")
    assert torch.equal(expected_indices, tiled_indices.cpu().reshape(indices.shape))
    assert torch.equal(expected_gates, tiled_gates.cpu().reshape(gates.shape))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_neurons", [37, 40_000])
def test_expert_row_segments_equal_a_stable_sort(device, n_neurons):
    """int16 sort keys while C * N fits them, int32 beyond: the same stable order and offsets as numpy's."""
    from circuitlab.kernels import sgatlin_triton

    tokens, channels, k = 50, 2, 5
    gen = torch.Generator().manual_seed(n_neurons)
    indices = torch.stack([torch.randperm(n_neurons, generator=gen)[:k] for _ in range(tokens * channels)])
    indices = indices.reshape(tokens, channels * k)
    order, offsets = sgatlin_triton.expert_row_segments(indices.to(device), channels, n_neurons, k)
    rows = (indices + torch.arange(channels).repeat_interleave(k) * n_neurons).reshape(-1).numpy()
    assert torch.equal(order.cpu(), torch.from_numpy(rows.argsort(kind="stable")))
    counts = torch.bincount(torch.from_numpy(rows), minlength=channels * n_neurons)
    assert torch.equal(offsets.cpu().long(), torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))


# --- quantifier scans ----------------------------------------------------------------------------------------

# membership shapes [..., T, U]: several chunks (the interpreter's blocks are 16 x 16), T = 1, extra lead dims
SCAN_SHAPES = [(2, 37, 5), (3, 1, 4), (2, 2, 18, 3)]
SCANS = {
    "existential": (kernels.existential_scan, reference.existential_loop),
    "proportion": (kernels.proportion_scan, reference.proportion_loop),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SCAN_SHAPES)
@pytest.mark.parametrize("which", sorted(SCANS))
def test_scans_match_the_step_by_step_loop(device, dtype, shape, which):
    """Forward and both gradients equal the autograd of the step-by-step definition. (On an exact tie
    M_t = gamma E_(t-1) the loop's torch.maximum splits the gradient in half while the fast path gives it to
    M_t; random float32 inputs have no ties.)"""
    fast_scan, loop = SCANS[which]
    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[-2])
    n_units = shape[-1]
    # memberships in (0, 1) with some negatives (the scans are defined on any reals); decays in [0, 1]
    member = leaf(torch.rand(shape, generator=gen) * 1.2 - 0.1, dtype, device)
    decay_values = torch.rand(n_units, generator=gen)
    if dtype == torch.float32:  # (in bf16 a membership can equal the running max exactly: a tie, see below)
        decay_values[0] = 1.0
    if n_units > 2:
        decay_values[1] = 0.0
    decay = leaf(decay_values, torch.float32, device)
    upstream = torch.randn(shape, generator=gen).to(device)

    with kernels.use_backend("triton"):
        out = fast_scan(member, decay)
    assert ran_op(out, "quantifier_scan_fwd")
    twins = [float64_twin(member), float64_twin(decay)]
    ref = loop(*twins)
    tol = TOLERANCE[dtype]
    assert relative_error(out, ref) < tol
    dmember, ddecay = grads(out, [member, decay], upstream)
    ref_dmember, ref_ddecay = grads(ref, twins, upstream)
    assert dmember.dtype == dtype and ddecay.dtype == torch.float32
    assert relative_error(dmember, ref_dmember) < tol
    assert relative_error(ddecay, ref_ddecay) < tol


@pytest.mark.parametrize("device", DEVICES)
def test_scans_equal_the_parallel_reference(device):
    gen = torch.Generator().manual_seed(11)
    member = torch.rand(2, 40, 6, generator=gen).to(device)
    decay = torch.rand(6, generator=gen).to(device)
    for fast_scan, ref_scan in ((kernels.existential_scan, reference.existential_scan),
                                (kernels.proportion_scan, reference.proportion_scan)):
        with kernels.use_backend("triton"):
            out = fast_scan(member, decay)
        assert relative_error(out, ref_scan(member, decay)) < TOLERANCE[torch.float32]


# --- parity product encoder: fused scores and selection -----------------------------------------------------

# (tokens, grid rows H, row patterns P, kept columns C, count): the shipped layer's shape (k and the pursuit's
# 2k), tiny-parity's, and shapes that pad every axis and leave fewer candidates than slots
BEAM_SHAPES = [(6, 16, 256, 64, 32), (3, 16, 256, 64, 64), (9, 8, 32, 8, 8), (4, 5, 12, 7, 3), (2, 3, 4, 2, 8)]


def product_signs(n_rows: int, n_patterns: int) -> torch.Tensor:
    """Row sign patterns of a seeded F2 code (distinct and never negatives of each other, so no exact ties)."""
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    n_bits = max(1, (n_patterns - 1).bit_length())
    return sign_table(make_factor_code(n_rows, n_bits, 7))[:n_patterns]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", BEAM_SHAPES)
def test_parity_beam_top_equals_the_exhaustive_top_k(device, shape):
    n_tokens, n_rows, n_patterns, n_cols, count = shape
    gen = torch.Generator().manual_seed(sum(shape))
    signs = product_signs(n_rows, n_patterns)
    y = torch.randn(n_tokens, n_rows, n_cols, generator=gen)
    count = min(count, n_patterns * n_cols)
    with kernels.use_backend("triton"):
        values, positions = kernels.parity_beam_top(y.to(device), signs.to(device), count)
    values, positions = values.cpu(), positions.cpu()
    brute = (signs.double() @ y.double()).abs().flatten(1)  # every score, in float64
    expected, expected_positions = brute.topk(count, dim=-1)
    assert positions.dtype == torch.int64 and values.shape == positions.shape == (n_tokens, count)
    torch.testing.assert_close(values.double(), expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(positions.sort(-1).values, expected_positions.sort(-1).values)
    # each position's score is the value reported beside it
    torch.testing.assert_close(brute.gather(-1, positions), values.double(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_parity_beam_top_keeps_a_valid_top_k_when_more_scores_tie_than_there_are_slots(device):
    """A column whose write sits on one grid row scores |y| on every row pattern: 256 equal scores per column,
    more than the 64 candidate slots, which bisection cannot split. The scores above the tie come first."""
    signs = product_signs(16, 256)
    y = torch.zeros(3, 16, 64)
    y[:, 5, :] = torch.linspace(1.0, 2.0, 64)  # column c scores y[5, c] on all 256 patterns
    y[1, 2, 10] = 40.0  # one token with a column above the ties: its 256 scores 40 +- 2 come first
    with kernels.use_backend("triton"):
        values, positions = kernels.parity_beam_top(y.to(device), signs.to(device), 32)
    values, positions = values.cpu(), positions.cpu()
    brute = (signs @ y).abs().flatten(1)
    torch.testing.assert_close(values, brute.topk(32, dim=-1).values)
    torch.testing.assert_close(brute.gather(-1, positions), values)
    assert all(len(set(row)) == 32 for row in positions.tolist())  # 32 distinct features per token
    assert (positions[1] % 64 == 10).all()  # the column above the ties holds the whole top-32


# (tokens, grid rows, grid cols, row bits, col bits, beam, count): the shipped grid at beam 16 / k 16 and at the
# pursuit's 2k; a beam of every column; grids and beams padded to 16; a count above the beam
SELECT_SHAPES = [(5, 16, 16, 8, 8, 16, 16), (3, 16, 16, 8, 8, 32, 64), (4, 8, 8, 5, 5, 32, 8), (4, 8, 8, 5, 5, 3, 20),
                 (3, 4, 8, 3, 4, 16, 7)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SELECT_SHAPES)
def test_parity_beam_select_in_one_kernel_equals_brute_force(device, shape):
    """Bounds, beam, scores and top `count` from the write alone, against every bound and score in float64."""
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    n_tokens, n_rows, n_cols, row_bits, col_bits, beam, count = shape
    gen = torch.Generator().manual_seed(sum(shape))
    rows, cols = sign_table(make_factor_code(n_rows, row_bits, 1)), sign_table(make_factor_code(n_cols, col_bits, 2))
    x = torch.randn(n_tokens, n_rows, n_cols, generator=gen) * torch.rand(n_tokens, n_rows, n_cols, generator=gen) ** 4
    with kernels.use_backend("triton"):
        ids, values, next_bound = kernels.parity_beam_select(x.to(device), rows.to(device), cols.to(device), beam, count)
    ids, values, next_bound = ids.cpu(), values.cpu(), next_bound.cpu()
    n_col_patterns = cols.shape[0]
    u2, u1 = ids // n_col_patterns, ids % n_col_patterns
    Y = x.double() @ cols.double().T
    bounds = Y.abs().sum(-2)
    ranked, order = bounds.sort(-1, descending=True)
    expected_next = ranked[:, beam] if beam < n_col_patterns else torch.full((n_tokens,), -1.0, dtype=torch.double)
    torch.testing.assert_close(next_bound.double(), expected_next, rtol=1e-5, atol=1e-6)
    beam_columns = order[:, :beam]
    assert all(set(a.tolist()) <= set(b.tolist()) for a, b in zip(u1, beam_columns))  # features of the beam
    scores = (rows.double() @ Y.gather(-1, beam_columns[:, None, :].expand(-1, n_rows, -1))).abs().flatten(1)
    expected = scores.topk(count, dim=-1).values
    assert ids.dtype == torch.int64 and values.shape == ids.shape == (n_tokens, count)
    torch.testing.assert_close(values.double(), expected, rtol=1e-5, atol=1e-6)  # descending, like topk
    # each feature scores the value reported beside it, and no feature is listed twice
    own = (rows.double()[u2] * Y.transpose(1, 2).gather(1, u1[..., None].expand(-1, -1, n_rows))).sum(-1).abs()
    torch.testing.assert_close(own, values.double(), rtol=1e-5, atol=1e-6)
    assert all(len(set(row.tolist())) == count for row in ids)


@pytest.mark.parametrize("device", DEVICES)
def test_the_one_kernel_beam_select_keeps_a_valid_top_k_when_scores_tie(device):
    """A write on one grid row scores |Y[5, u1]| on all 256 row patterns of a column: ties the bisection cannot
    split, and every row has the same maximum. The top 16 is still 16 distinct features of the best columns,
    each scored as reported."""
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    rows, cols = sign_table(make_factor_code(16, 8, 1)), sign_table(make_factor_code(16, 8, 2))
    x = torch.zeros(2, 16, 16)
    x[:, 5, :] = torch.randn(2, 16, generator=torch.Generator().manual_seed(9))
    with kernels.use_backend("triton"):
        ids, values, _ = kernels.parity_beam_select(x.to(device), rows.to(device), cols.to(device), 16, 16)
    ids, values = ids.cpu(), values.cpu()
    Y = x @ cols.T
    brute = (rows @ Y).abs().flatten(1)  # every feature u2 * 256 + u1
    torch.testing.assert_close(values, brute.topk(16, dim=-1).values)
    torch.testing.assert_close(brute.gather(-1, ids), values)
    assert all(len(set(row.tolist())) == 16 for row in ids)


@pytest.mark.parametrize("device", DEVICES)
def test_the_one_kernel_beam_select_agrees_with_the_composed_path(device):
    """The fused kernel and the PyTorch beam with `parity_beam_top` give the same features and certificates."""
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    rows, cols = sign_table(make_factor_code(16, 8, 1)).to(device), sign_table(make_factor_code(16, 8, 2)).to(device)
    x = torch.randn(7, 16, 16, generator=torch.Generator().manual_seed(3)).to(device)
    with kernels.use_backend("triton"):
        fused = kernels.parity_beam_select(x, rows, cols, 16, 16)
        composed = kernels.reference.parity_beam_select(x, rows, cols, 16, 16, beam_top=kernels.parity_beam_top)
    assert torch.equal(fused[0].sort(-1).values, composed[0].sort(-1).values)
    torch.testing.assert_close(fused[1], composed[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused[2], composed[2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_the_product_encoder_gives_the_same_supports_on_both_paths(device):
    """The whole encoder (beam scores, top-k, one pursuit round) of a product parity layer: its supports do not
    depend on which path scores and selects."""
    from circuitlab.architectures.bottleneck.parity import ParityBottleneck
    from circuitlab.config import ModelConfig

    layer = ParityBottleneck(ModelConfig.preset("tiny-parity")).to(device)
    x = torch.randn(2, 11, layer.d_model, generator=torch.Generator().manual_seed(8)).to(device)
    with kernels.use_backend("reference"):
        reference_support = layer.encode_indices(x)
    with kernels.use_backend("triton"):
        fast_support = layer.encode_indices(x)
    assert torch.equal(fast_support.sort(-1).values, reference_support.sort(-1).values)


# --- parity product layer: least squares and decode on a support -------------------------------------------

# (tokens, grid rows, grid cols, row bits, col bits, features): F not a multiple of the 16-feature blocks (one,
# two and three of four blocks used), grids padded to 16, the shipped 16 x 16 grid with the pursuit's 64 features
SOLVE_SHAPES = [(5, 8, 8, 5, 5, 20), (3, 4, 8, 3, 4, 7), (2, 8, 8, 5, 5, 40), (2, 16, 16, 8, 8, 64)]
# (solve, write_a, decode): least squares, least squares and decode, decode alone, inner products alone
SOLVE_MODES = [(True, True, False), (True, True, True), (False, False, True), (False, True, False)]


def feature_tables(n_rows: int, n_cols: int, row_bits: int, col_bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    from circuitlab.architectures.bottleneck.parity_code import make_factor_code, sign_table

    return sign_table(make_factor_code(n_rows, row_bits, 5)), sign_table(make_factor_code(n_cols, col_bits, 6))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SOLVE_SHAPES)
@pytest.mark.parametrize("mode", SOLVE_MODES)
def test_parity_feature_solve_matches_the_materialised_reference(device, shape, mode):
    """Values and gradients (in x and v) of the fused least squares / decode against the float64 reference,
    which materialises every feature direction and solves with torch.linalg.solve."""
    n_tokens, n_rows, n_cols, row_bits, col_bits, n_features = shape
    solve, write_a, decode = mode
    rows, cols = feature_tables(n_rows, n_cols, row_bits, col_bits)
    gen = torch.Generator().manual_seed(sum(shape))
    indices = torch.stack([torch.randperm(2 ** (row_bits + col_bits), generator=gen)[:n_features] for _ in range(n_tokens)])
    x = torch.randn(n_tokens, n_rows * n_cols, generator=gen)
    v = torch.randn(n_tokens, n_features, generator=gen)
    upstream_a, upstream_x = torch.randn(n_tokens, n_features, generator=gen), torch.randn(n_tokens, n_rows * n_cols, generator=gen)

    def run(fn, x, v):
        a, x_hat = fn(x, v, indices.to(x.device), rows.to(x.device), cols.to(x.device), 1e-2, solve, write_a, decode)
        loss = (a * upstream_a.to(a)).sum() if write_a else 0.0
        loss = loss + ((x_hat * upstream_x.to(x_hat)).sum() if decode else 0.0)
        return (a, x_hat, *torch.autograd.grad(loss, [x, v]))

    with kernels.use_backend("triton"):
        fast = run(kernels.parity_feature_solve, leaf(x, torch.float32, device), leaf(v, torch.float32, device))
    expected = run(reference.parity_feature_solve, float64_twin(x), float64_twin(v))
    for got, want, name in zip(fast, expected, ("a", "x_hat", "dx", "dv")):
        if want.numel() == 0:
            assert got.numel() == 0, name
            continue
        assert got.dtype == torch.float32 and relative_error(got.cpu(), want) < 1e-5, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_features", [12, 20, 40])
def test_parity_feature_solve_keeps_the_factors_its_backward_loads(device, n_features):
    """The factors a launch keeps (one, two or four 16-feature blocks) are those of the token's system, G + ridge
    I = L D L^T (checked in float64), and a launch given them instead of factoring solves the same systems."""
    from circuitlab.kernels import ops

    rows, cols = feature_tables(8, 8, 5, 5)
    gen = torch.Generator().manual_seed(n_features)
    indices = torch.stack([torch.randperm(1024, generator=gen)[:n_features] for _ in range(3)])
    x, v = torch.randn(3, 64, generator=gen), torch.randn(3, n_features, generator=gen)
    ridge, empty = 1e-2, torch.empty(0)
    on = [t.to(device) for t in (x, v, indices, rows, cols, empty)]
    with kernels.use_backend("triton"):
        a, x_hat, factors = ops.parity_feature_solve(*on, ridge, True, True, True, True)
        a_loaded, x_hat_loaded, none_kept = ops.parity_feature_solve(*on[:5], factors, ridge, True, True, True, True)
    blocks = -(-n_features // 16)
    blocks = 1 << (blocks - 1).bit_length()
    assert factors.shape == (3, {1: 1, 2: 3, 4: 10}[blocks], 16, 16) and none_kept.numel() == 0
    # the system, padded to whole blocks with unit diagonal entries (as the kernel pads it)
    size = 16 * blocks
    unit_values = torch.eye(n_features).repeat(3, 1)  # token t's feature f alone, row t * F + f
    _, phi = reference.parity_feature_solve(empty, unit_values, indices.repeat_interleave(n_features, 0), rows, cols,
                                            0.0, False, False, True)
    phi = phi.view(3, n_features, 64).double()
    system = torch.eye(size, dtype=torch.double).repeat(3, 1, 1)
    system[:, :n_features, :n_features] = phi @ phi.transpose(1, 2) + ridge * torch.eye(n_features, dtype=torch.double)
    tiles = factors.cpu().double()
    order = {1: [(0, 0)], 2: [(0, 0), (1, 1), (1, 0)],
             4: [(0, 0), (1, 1), (2, 2), (3, 3), (1, 0), (2, 0), (3, 0), (2, 1), (3, 1), (3, 2)]}[blocks]
    lower = torch.eye(size, dtype=torch.double).repeat(3, 1, 1)
    diagonal = torch.zeros(3, size, size, dtype=torch.double)
    for tile, (i, j) in enumerate(order):
        block = (slice(None), slice(16 * i, 16 * i + 16), slice(16 * j, 16 * j + 16))
        if i == j:  # the inverse of D's block
            diagonal[block] = torch.linalg.inv(tiles[:, tile])
        else:
            lower[block] = tiles[:, tile]
    rebuilt = lower @ diagonal @ lower.transpose(1, 2)
    assert (rebuilt - system).abs().max() < 1e-4 * system.abs().max()
    for got, want in ((a_loaded, a), (x_hat_loaded, x_hat)):
        assert relative_error(got.cpu(), want.cpu()) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_parity_feature_solve_is_least_squares(device):
    """Invariant: the residual x - x_hat of an unridged solve is orthogonal to every feature of the support."""
    rows, cols = feature_tables(8, 8, 5, 5)
    gen = torch.Generator().manual_seed(3)
    indices = torch.stack([torch.randperm(1024, generator=gen)[:12] for _ in range(4)])
    x = torch.randn(4, 64, generator=gen)
    empty = torch.empty(0)
    with kernels.use_backend("triton"):
        a, x_hat = kernels.parity_feature_solve(
            x.to(device), empty.to(device), indices.to(device), rows.to(device), cols.to(device), 0.0, True, True, True
        )
    inner_of_residual, _ = reference.parity_feature_solve(x - x_hat.cpu(), empty, indices, rows, cols, 0.0, False, True, False)
    assert inner_of_residual.abs().max() < 1e-4 * x.abs().max()
    # and x_hat is the decode of the coefficients written beside it
    _, decoded = reference.parity_feature_solve(empty, a.cpu().double(), indices, rows, cols, 0.0, False, False, True)
    torch.testing.assert_close(x_hat.cpu().double(), decoded, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_the_product_layer_gives_the_same_code_and_gradients_with_fused_solves(device):
    """The whole product parity layer (encoder with its pursuit round, least-squares coefficients, decode, and
    the gradient through them) with its solves fused or in PyTorch."""
    from circuitlab.architectures.bottleneck.parity import ParityBottleneck
    from circuitlab.config import ModelConfig

    layer = ParityBottleneck(ModelConfig.preset("tiny-parity")).to(device)
    x = torch.randn(2, 9, layer.d_model, generator=torch.Generator().manual_seed(4)).to(device)
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(device)
    results = {}
    for fused in (False, True):
        xs = x.clone().requires_grad_(True)
        with kernels.use_backend("triton"), torch.no_grad():
            support = layer.encode_indices(xs)
        with kernels.use_backend("triton" if fused else "reference"):
            values = layer.coefficients(xs, support)
            x_hat = layer.decode(support, values)
            (dx,) = torch.autograd.grad((x_hat * upstream).sum(), xs)
            fused_support = layer.encode_indices(xs)
        results[fused] = (fused_support.sort(-1).values, values, x_hat, dx)
        assert ran_op(values, "parity_feature_solve") == fused
    assert torch.equal(results[False][0], results[True][0])
    for got, want in zip(results[True][1:], results[False][1:]):
        assert relative_error(got, want) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_parity_feature_solve_says_what_the_fast_path_cannot_take(device):
    rows, cols = (table.to(device) for table in feature_tables(8, 8, 5, 5))
    indices = torch.arange(65, device=device)[None].expand(2, -1)
    x, empty = torch.randn(2, 64, device=device), torch.empty(0, device=device)
    with kernels.use_backend("triton"), pytest.raises(ValueError, match="at most 64 features"):
        kernels.parity_feature_solve(x, empty, indices, rows, cols, 1e-3)
    with pytest.raises(ValueError, match=r"indices must be \[N, F\]"):
        kernels.parity_feature_solve(x, empty, indices[0], rows, cols, 1e-3)
    # the reference takes any size (65 features in 64 dimensions: the ridge keeps the system regular)
    with kernels.use_backend("reference"):
        a, _ = kernels.parity_feature_solve(x, empty, indices, rows, cols, 1e-3)
    assert a.shape == (2, 65) and torch.isfinite(a).all()
