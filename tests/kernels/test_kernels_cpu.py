"""The CPU fast paths (circuitlab.kernels.cpu) equal the references: values, chosen neurons, gradients."""

from __future__ import annotations

import pytest
import torch

import circuitlab.kernels as kernels
from circuitlab.kernels import cpu, reference


@pytest.fixture(autouse=True)
def no_backend_env(monkeypatch):
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)


# (batch, pos, channels, k, neurons, d_model): K > N forces repeated rows; 70 tokens span several gather blocks
COMBINE_SHAPES = [(2, 3, 3, 3, 5, 20), (1, 1, 2, 5, 3, 7), (2, 35, 2, 4, 16, 33)]


@pytest.mark.parametrize("shape", COMBINE_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_combine_equals_reference_with_gradients(shape, dtype):
    batch, pos, channels, k, neurons, d_model = shape
    gen = torch.Generator().manual_seed(sum(shape))
    indices = torch.randint(0, neurons, (batch, pos, channels, k), generator=gen)
    indices[0, 0, 0, -1] = indices[0, 0, 0, 0]
    leaves = [
        torch.randn(batch, pos, d_model, generator=gen, dtype=dtype).requires_grad_(True),
        torch.randn(batch, pos, channels, k, generator=gen, dtype=dtype).requires_grad_(True),
        (torch.randn(2, channels, neurons, d_model, generator=gen, dtype=dtype) / d_model**0.5).requires_grad_(True),
    ]
    upstream = torch.randn(batch, pos, d_model, generator=gen, dtype=dtype)
    out = cpu.sgatlin_combine(leaves[0], indices, leaves[1], leaves[2])
    ref = reference.sgatlin_combine(leaves[0], indices, leaves[1], leaves[2])
    assert out.dtype == dtype and out.shape == ref.shape
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    fast_grads = torch.autograd.grad(out, leaves, upstream)
    ref_grads = torch.autograd.grad(ref, leaves, upstream)
    for name, fast, slow in zip(("z", "gates", "experts"), fast_grads, ref_grads):
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("shape", COMBINE_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_combine_in_inference_equals_reference(shape, dtype):
    """Without gradients the products come from one sampled product (repeated rows included)."""
    batch, pos, channels, k, neurons, d_model = shape
    gen = torch.Generator().manual_seed(sum(shape) + 1)
    indices = torch.randint(0, neurons, (batch, pos, channels, k), generator=gen)
    indices[0, 0, 0, -1] = indices[0, 0, 0, 0]
    z = torch.randn(batch, pos, d_model, generator=gen, dtype=dtype)
    gates = torch.randn(batch, pos, channels, k, generator=gen, dtype=dtype)
    experts = torch.randn(2, channels, neurons, d_model, generator=gen, dtype=dtype) / d_model**0.5
    ref = reference.sgatlin_combine(z, indices, gates, experts)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    with torch.inference_mode():
        torch.testing.assert_close(cpu.sgatlin_combine(z, indices, gates, experts), ref, rtol=tol, atol=tol)
    with torch.no_grad():
        torch.testing.assert_close(cpu.sgatlin_combine(z, indices, gates, experts), ref, rtol=tol, atol=tol)
    with torch.inference_mode():
        empty = cpu.sgatlin_combine(z[:, :0], indices[:, :0], gates[:, :0], experts)
    assert empty.shape == (batch, 0, d_model)


def test_cpu_combine_refuses_indices_outside_a_channel():
    z, gates, experts = torch.randn(1, 2, 8), torch.randn(1, 2, 2, 3), torch.randn(2, 2, 4, 8)
    for bad in (4, -1):
        indices = torch.zeros(1, 2, 2, 3, dtype=torch.long)
        indices[0, 1, 0, 2] = bad  # would silently name a row of the next (or previous) channel
        with pytest.raises(IndexError, match=r"\[0, 4\)"):
            cpu.sgatlin_combine(z, indices, gates, experts)


def test_cpu_combine_gathers_across_blocks(monkeypatch):
    """A block size that does not divide the token count still covers every token once."""
    monkeypatch.setattr(cpu, "GATHER_TOKENS", 3)
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    indices = torch.randint(0, 4, (2, 5, 2, 3), generator=gen)
    gates = torch.randn(2, 5, 2, 3, generator=gen, dtype=torch.float64)
    experts = torch.randn(2, 2, 4, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(
        cpu.sgatlin_combine(z, indices, gates, experts), reference.sgatlin_combine(z, indices, gates, experts),
        rtol=1e-12, atol=1e-12,
    )


@pytest.mark.parametrize("shape", [(2, 5, 3, 6, 4), (1, 1, 2, 3, 3), (2, 3, 1, 17, 5), (3, 40, 8, 32, 8)])
def test_cpu_route_equals_reference(shape):
    batch, pos, channels, n_subkeys, k = shape
    gen = torch.Generator().manual_seed(sum(shape))
    scores = torch.randn(batch, pos, 2, channels, n_subkeys, generator=gen).requires_grad_(True)
    indices, gates = cpu.sgatlin_route(scores, k)
    ref_indices, ref_gates = reference.sgatlin_route(scores, k)
    assert torch.equal(indices, ref_indices)  # no ties among random float32 sums: the very same neurons
    assert torch.equal(gates, ref_gates)
    # the gates are the k best of all n * n sums, descending
    all_sums = (scores[..., 0, :, :, None] + scores[..., 1, :, None, :]).flatten(-2)
    assert torch.equal(gates, all_sums.topk(k, dim=-1).values)
    upstream = torch.randn(gates.shape, generator=gen)
    (dscores,) = torch.autograd.grad(gates, [scores], upstream)
    (ref_dscores,) = torch.autograd.grad(ref_gates, [scores], upstream)
    assert torch.equal(dscores, ref_dscores)
    with pytest.raises(ValueError, match="k <= subkeys"):
        cpu.sgatlin_route(scores, n_subkeys + 1)


def test_dispatch_takes_the_cpu_path_on_cpu_under_auto_only():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(1, 4, 8, generator=gen)
    indices = torch.randint(0, 4, (1, 4, 2, 3), generator=gen)
    gates = torch.randn(1, 4, 2, 3, generator=gen)
    experts = torch.randn(2, 2, 4, 8, generator=gen)
    assert cpu.takes(z, indices)
    assert torch.equal(kernels.sgatlin_combine(z, indices, gates, experts), cpu.sgatlin_combine(z, indices, gates, experts))
    with kernels.use_backend("reference"):
        assert not cpu.takes(z)
        assert torch.equal(
            kernels.sgatlin_combine(z, indices, gates, experts), reference.sgatlin_combine(z, indices, gates, experts)
        )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not cpu.takes(z)
    seen_while_compiling = []

    def probe(x):
        seen_while_compiling.append(cpu.takes(z))
        return x + 1

    torch.compile(probe, backend="eager")(z)
    assert seen_while_compiling == [False]  # torch.compile traces the references


def test_sgatlin_model_forward_is_unchanged_by_the_cpu_path():
    """A whole tiny sgatlin model: logits and codes of the CPU path equal those of the references."""
    from circuitlab import CircuitTransformer, ModelConfig

    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin")).eval()
    tokens = torch.randint(0, model.config.d_vocab, (2, 12))
    hooks = model.sparse_code_hooks([0, 1])
    with torch.inference_mode():
        logits, cache = model.run_with_cache(tokens, names_filter=hooks)
        with kernels.use_backend("reference"):
            ref_logits, ref_cache = model.run_with_cache(tokens, names_filter=hooks)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    for name in hooks:
        if cache[name].dtype == torch.int64:
            assert torch.equal(cache[name], ref_cache[name]), name
        else:
            torch.testing.assert_close(cache[name], ref_cache[name], rtol=1e-5, atol=1e-5)
