import itertools

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.kernels.reference import sgatlin_combine, sgatlin_route


@pytest.mark.parametrize("n_keys, k", [(8, 4), (13, 5), (32, 8)])
def test_product_topk_equals_brute_force(n_keys, k):
    generator = torch.Generator().manual_seed(n_keys)
    scores = torch.randn(3, 7, 2, 4, n_keys, generator=generator)
    neurons, gates = sgatlin_route(scores, k)
    all_sums = (scores[:, :, 0, :, :, None] + scores[:, :, 1, :, None, :]).flatten(-2)  # [B,T,C,N], id i1*n+i2
    brute_values, brute_neurons = all_sums.topk(k, dim=-1)
    torch.testing.assert_close(gates, brute_values, rtol=0, atol=0)
    assert torch.equal(neurons.sort(-1).values, brute_neurons.sort(-1).values)
    # every token gets exactly k distinct neurons per channel
    assert all(len(set(row)) == k for row in neurons.reshape(-1, k).tolist())
    assert torch.equal(all_sums.gather(-1, neurons), gates)


def test_sgatlin_output_equals_explicit_circuit_matrix():
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin"))
    layer = model.blocks[0].mlp
    z = torch.randn(2, 5, model.config.d_model)
    out, _ = layer(z)
    query = z @ layer.W_query
    indices, gates = sgatlin_route(torch.einsum("btq,qscn->btscn", query, layer.W_key), layer.k)
    for b, t in itertools.product(range(2), range(5)):
        circuit = layer.circuit_matrix(indices[b, t], gates[b, t])
        assert torch.linalg.matrix_rank(circuit) <= layer.n_channels * layer.k
        torch.testing.assert_close(out[b, t], circuit @ z[b, t], rtol=1e-5, atol=1e-6)


def test_hooked_gather_path_equals_fused_call():
    torch.manual_seed(1)
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin"))
    tokens = torch.randint(0, model.config.d_vocab, (2, 9))
    plain = model(tokens)
    hooked, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(plain, hooked, rtol=1e-5, atol=1e-5)
    post = cache["blocks.0.mlp.hook_neuron_post"]
    torch.testing.assert_close(post, cache["blocks.0.mlp.hook_neuron_pre"] * cache["blocks.0.mlp.hook_gate_values"])


def test_reference_combine_handles_duplicate_indices():
    torch.manual_seed(2)
    experts = torch.randn(2, 3, 16, 8)
    z = torch.randn(1, 2, 8)
    indices = torch.tensor([[[[5, 5], [0, 15], [7, 7]], [[1, 2], [3, 3], [4, 4]]]])
    gates = torch.randn(1, 2, 3, 2)
    out = sgatlin_combine(z, indices, gates, experts)
    expected = torch.zeros(1, 2, 8)
    for t, c, j in itertools.product(range(2), range(3), range(2)):
        i = indices[0, t, c, j]
        expected[0, t] += gates[0, t, c, j] * (experts[0, c, i] @ z[0, t]) * experts[1, c, i]
    torch.testing.assert_close(out, expected)
