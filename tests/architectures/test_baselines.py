"""The seed 000 baselines, PEER and the coarse top-k MoE: routing against brute force, outputs against an
explicit per-token sum, hooks, codes, save/load, and a tiny model that learns."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from circuitlab import CircuitTransformer, ModelConfig, ladder_config, load_model
from circuitlab.config import ConfigError

B, T = 2, 7


def model_of(preset: str, seed: int = 0) -> CircuitTransformer:
    torch.manual_seed(seed)
    return CircuitTransformer(ModelConfig.preset(preset)).eval()


def test_peer_routing_equals_brute_force_over_all_experts():
    model = model_of("tiny-peer")
    layer = model.blocks[0].mlp
    z = torch.randn(B, T, model.config.d_model)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.randint(0, 512, (B, T)))
        z = cache["blocks.0.ln2.hook_normalized"]
    indices, scores = cache["blocks.0.mlp.hook_gate_indices"], cache["blocks.0.mlp.hook_gate_scores"]
    n, half = layer.n_keys, layer.d_key // 2
    for c in range(layer.n_channels):
        query = z @ layer.W_query[:, c]  # [B, T, Q]
        keys_1, keys_2 = layer.W_key[:, 0, c], layer.W_key[:, 1, c]  # [Q/2, n]
        # every expert i = i1 * n + i2 scored explicitly: q1 . K1[i1] + q2 . K2[i2]
        all_scores = torch.stack([query[..., :half] @ keys_1[:, i // n] + query[..., half:] @ keys_2[:, i % n]
                                  for i in range(layer.d_ffw)], -1)
        top_scores, top_experts = all_scores.topk(layer.k, dim=-1)
        torch.testing.assert_close(scores[:, :, c], top_scores, rtol=1e-5, atol=1e-5)
        assert torch.equal(indices[:, :, c].sort(-1).values, top_experts.sort(-1).values)
    torch.testing.assert_close(cache["blocks.0.mlp.hook_gate_values"], scores.softmax(-1))


def test_peer_output_equals_the_explicit_sum_over_heads_and_experts():
    model = model_of("tiny-peer", seed=1)
    layer = model.blocks[1].mlp
    z = torch.randn(B, T, model.config.d_model)
    with torch.no_grad():
        out, _ = layer(z)
        query = torch.einsum("btd,dcq->btcq", z, layer.W_query)
        half = layer.d_key // 2
        expected = torch.zeros_like(out)
        for b, t, c in itertools.product(range(B), range(T), range(layer.n_channels)):
            scores = torch.tensor([float(query[b, t, c, :half] @ layer.W_key[:, 0, c, i // layer.n_keys]
                                         + query[b, t, c, half:] @ layer.W_key[:, 1, c, i % layer.n_keys])
                                   for i in range(layer.d_ffw)])
            top, experts = scores.topk(layer.k)
            for gate, i in zip(top.softmax(0), experts):
                u, v = layer.experts[0, i], layer.experts[1, i]
                expected[b, t] += gate * F.gelu(u @ z[b, t]) * v
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-6)


def test_peer_expert_dot_gradients_equal_autograd_through_the_gather():
    from circuitlab.architectures.feedforward.peer import ExpertDot

    generator = torch.Generator().manual_seed(4)
    z = torch.randn(2, 3, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(9, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    indices = torch.randint(0, 9, (2, 3, 2, 4), generator=generator)
    indices[0, 0, 1] = indices[0, 0, 0]  # duplicates accumulate
    assert torch.autograd.gradcheck(ExpertDot.apply, (z, indices, weight))
    grad = torch.randn(2, 3, 2, 4, dtype=torch.float64, generator=generator)
    direct = torch.einsum("btd,btckd->btck", z, weight[indices])
    expected = torch.autograd.grad(direct, (z, weight), grad)
    actual = torch.autograd.grad(ExpertDot.apply(z, indices, weight), (z, weight), grad)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


def test_moe_routing_and_output_equal_a_per_token_loop():
    model = model_of("tiny-moe", seed=2)
    layer = model.blocks[0].mlp
    z = torch.randn(B, T, model.config.d_model)
    with torch.no_grad():
        out, _ = layer(z)
        expected = torch.zeros_like(out)
        for b, t in itertools.product(range(B), range(T)):
            logits = z[b, t] @ layer.W_router
            top, experts = logits.topk(layer.k)
            assert set(experts.tolist()) == set(logits.argsort(descending=True)[: layer.k].tolist())
            for weight, e in zip(top.softmax(0), experts):
                hidden = F.silu(z[b, t] @ layer.W_gate[e]) * (z[b, t] @ layer.W_in[e])
                expected[b, t] += weight * hidden @ layer.W_out[e]
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-6)


def test_moe_gradients_reach_only_the_chosen_experts():
    model = model_of("tiny-moe", seed=3)
    layer = model.blocks[0].mlp
    z = torch.randn(1, 1, model.config.d_model)
    out, _ = layer(z)
    out.sum().backward()
    chosen = set((z[0, 0] @ layer.W_router).topk(layer.k).indices.tolist())
    touched = {e for e in range(layer.n_experts) if layer.W_out.grad[e].abs().sum() > 0}
    assert touched == chosen and len(chosen) == layer.k



def test_moe_dense_dispatch_equals_grouped_in_outputs_hooks_and_gradients():
    """The GPU default (every expert on every token, then the chosen) against the grouped per-expert matmuls,
    in float64: same output, same hooked activations, same gradients for every parameter and the input."""
    model = model_of("tiny-moe", seed=5).double()
    layer = model.blocks[0].mlp
    z = torch.randn(B, T, model.config.d_model, dtype=torch.float64)
    results = {}
    for dispatch in ("grouped", "dense"):
        layer.dispatch = dispatch
        layer.zero_grad()
        x = z.clone().requires_grad_(True)
        seen = {}
        layer.hook_post.add_hook(lambda act, hook: seen.update(post=act.detach().clone()))
        out, _ = layer(x)
        layer.hook_post.remove_hooks()
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        results[dispatch] = (out.detach(), seen["post"], x.grad, *(p.grad.clone() for p in layer.parameters()))
    for grouped, dense in zip(results["grouped"], results["dense"], strict=True):
        torch.testing.assert_close(dense, grouped, rtol=1e-10, atol=1e-12)
    layer.dispatch = "sparse"
    with pytest.raises(ValueError, match="dispatch must be"):
        layer(z)
    layer.dispatch = "auto"  # on CPU, auto is grouped
    assert not layer._dense(z)


HOOKS = {
    "tiny-peer": {
        "hook_query": ("B", "T", "C", "Q"), "hook_subkey_scores": ("B", "T", 2, "C", "n"),
        "hook_gate_indices": ("B", "T", "C", "K"), "hook_gate_scores": ("B", "T", "C", "K"),
        "hook_gate_values": ("B", "T", "C", "K"), "hook_neuron_pre": ("B", "T", "C", "K"),
        "hook_neuron_post": ("B", "T", "C", "K"),
    },
    "tiny-moe": {
        "hook_router_logits": ("B", "T", "E"), "hook_expert_indices": ("B", "T", "K"),
        "hook_expert_weights": ("B", "T", "K"), "hook_pre": ("B", "T", "K", "F"),
        "hook_pre_linear": ("B", "T", "K", "F"), "hook_post": ("B", "T", "K", "F"),
    },
}


@pytest.mark.parametrize("preset", sorted(HOOKS))
def test_hooks_have_their_documented_shapes_and_hooking_changes_nothing(preset):
    model = model_of(preset)
    ffn = model.config.feedforward
    size = dict(B=B, T=T, F=ffn.d_ffw, K=ffn.k)
    if ffn.type == "peer":
        size.update(C=ffn.n_channels, Q=ffn.d_key, n=int(ffn.d_ffw**0.5))
    else:
        size.update(E=ffn.n_experts)
    tokens = torch.randint(0, model.config.d_vocab, (B, T))
    with torch.no_grad():
        plain = model(tokens)
        hooked, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(plain, hooked)
    for layer in range(model.config.n_layers):
        for hook, shape in HOOKS[preset].items():
            expected = tuple(size[s] if isinstance(s, str) else s for s in shape)
            assert tuple(cache[f"blocks.{layer}.mlp.{hook}"].shape) == expected, hook
    assert model.cfg.d_mlp == model.blocks[0].ffn_code_layer.sparse_code(cache).size


def test_peer_code_is_the_softmax_gates_with_head_offset_ids():
    model = model_of("tiny-peer")
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.randint(0, 512, (B, T)))
    code = model.sparse_codes(cache)[1]
    ffn = model.config.feedforward
    assert code.nnz == ffn.n_channels * ffn.k and code.size == ffn.n_channels * ffn.d_ffw
    torch.testing.assert_close(code.values.view(B, T, ffn.n_channels, ffn.k).sum(-1), torch.ones(B, T, ffn.n_channels))
    heads = code.indices.view(B, T, ffn.n_channels, ffn.k) // ffn.d_ffw
    assert torch.equal(heads, torch.arange(ffn.n_channels)[:, None].expand_as(heads))


def test_moe_code_lies_inside_the_chosen_experts():
    model = model_of("tiny-moe")
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.randint(0, 512, (B, T)))
    code = model.sparse_codes(cache)[0]
    chosen = cache["blocks.0.mlp.hook_expert_indices"]
    experts_of_code = code.indices // model.config.feedforward.d_ffw
    assert code.nnz == model.config.feedforward.code_k
    assert bool((experts_of_code[..., :, None] == chosen[..., None, :]).any(-1).all())


@pytest.mark.parametrize("preset", ["tiny-peer", "tiny-moe"])
def test_save_load_round_trip_is_bit_exact(tmp_path, preset):
    model = model_of(preset)
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.config == model.config
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    tokens = torch.randint(0, 512, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded.eval()(tokens))


@pytest.mark.parametrize("preset", ["tiny-peer", "tiny-moe"])
def test_a_tiny_model_learns_a_repeating_sequence(preset):
    model = model_of(preset).train()
    tokens = torch.arange(32).repeat(2, 2)[:, :40] % 20  # period-20 sequences: predictable after one period
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses[::5]


def test_sgatlin_nonlinearity_ablation_applies_the_activation_to_each_neuron():
    config = ModelConfig.preset("tiny-sgatlin")
    torch.manual_seed(5)
    ablated = CircuitTransformer(config.replace(feedforward={**config.feedforward.model_dump(), "activation": "gelu"}))
    layer = ablated.blocks[0].mlp
    z = torch.randn(B, T, ablated.config.d_model)
    with torch.no_grad():
        out, _ = layer(z)
        _, cache = ablated.run_with_cache(torch.randint(0, 512, (B, T)))
    channel = torch.arange(layer.n_channels)[:, None]
    from circuitlab.kernels.reference import sgatlin_route

    indices, gates = sgatlin_route(torch.einsum("btq,qscn->btscn", z @ layer.W_query, layer.W_key), layer.k)
    w_in, w_out = layer.experts[0][channel, indices], layer.experts[1][channel, indices]
    expected = torch.einsum("btck,btckd->btd", gates * F.gelu(torch.einsum("btd,btckd->btck", z, w_in)), w_out)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-5, atol=1e-6)
    post, pre = cache["blocks.0.mlp.hook_neuron_post"], cache["blocks.0.mlp.hook_neuron_pre"]
    torch.testing.assert_close(post, F.gelu(pre) * cache["blocks.0.mlp.hook_gate_values"])
    with pytest.raises(ValueError, match="no linear circuit matrix"):
        layer.circuit_matrix(indices[0, 0], gates[0, 0])
    assert layer.layout()["activation"] == "gelu" and "activation" not in CircuitTransformer(config).blocks[0].mlp.layout()


def test_sgatlin_with_peers_router_equals_brute_force_routing():
    """Seed 000's router swap: a query per channel, each half against its own subkeys, top-k over all n*n
    neurons, softmax over the k chosen scores; the experts stay sgatlin's (linear, per channel)."""
    config = ModelConfig.preset("tiny-sgatlin")
    torch.manual_seed(6)
    swapped = CircuitTransformer(config.replace(feedforward={**config.feedforward.model_dump(), "router": "peer"}))
    layer = swapped.blocks[0].mlp
    C, Q, n = layer.n_channels, layer.W_query.shape[-1], layer.n_keys
    assert layer.W_query.shape == (swapped.config.d_model, C, Q) and layer.W_key.shape == (Q // 2, 2, C, n)
    z = torch.randn(B, T, swapped.config.d_model)
    with torch.no_grad():
        out, _ = layer(z)
        query = torch.einsum("btd,dcq->btcq", z, layer.W_query)
        first = torch.einsum("btch,hcn->btcn", query[..., : Q // 2], layer.W_key[:, 0])
        second = torch.einsum("btch,hcn->btcn", query[..., Q // 2 :], layer.W_key[:, 1])
        scores = (first[..., :, None] + second[..., None, :]).flatten(-2)  # [B, T, C, n*n], i = i1 * n + i2
        top, indices = scores.topk(layer.k, dim=-1)
        gates = top.softmax(-1)
        channel = torch.arange(C)[:, None]
        w_in, w_out = layer.experts[0][channel, indices], layer.experts[1][channel, indices]
        expected = torch.einsum("btck,btckd->btd", gates * torch.einsum("btd,btckd->btck", z, w_in), w_out)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    # still linear given its gates: the circuit matrix reproduces one token's write
    _, cache = swapped.run_with_cache(torch.randint(0, 512, (B, T)))
    gate_values = cache["blocks.0.mlp.hook_gate_values"]
    torch.testing.assert_close(gate_values.sum(-1), torch.ones_like(gate_values.sum(-1)))  # softmax gates
    assert layer.layout()["router"] == "peer" and "router" not in CircuitTransformer(config).blocks[0].mlp.layout()
    # the plain design is written and hashed as before the field existed; the swap costs PEER's router
    assert "router" not in config.to_dict()["feedforward"] and config.hash() == ModelConfig.from_dict(config.to_dict()).hash()
    plain, peer_routed = (ladder_config(1, "sgatlin"), ladder_config(1, "sgatlin", feedforward=dict(
        ladder_config(1, "sgatlin").feedforward.model_dump(), router="peer")))
    from circuitlab import count_flops

    d, c, q, keys = 128, 16, 128, 28
    extra = (d * c * q + (q // 2) * 2 * c * keys) - (d * q + q * 2 * c * keys)  # PEER's router minus sgatlin's, per layer
    assert count_flops(peer_routed, 256).active_parameters - count_flops(plain, 256).active_parameters == 2 * extra
    with pytest.raises(ConfigError, match="d_key must be even"):
        ModelConfig.preset("tiny-sgatlin", feedforward=dict(type="sgatlin", d_ffw=64, k=4, d_key=9, router="peer"))


def test_ladder_configs_follow_seed_000():
    peer, moe = ladder_config(2, "peer"), ladder_config(2, "moe")
    assert (peer.d_model, peer.n_layers, peer.feedforward.d_ffw) == (256, 4, (32 + 48) ** 2)
    assert (peer.feedforward.n_channels, peer.feedforward.k, peer.feedforward.d_key) == (16, 8, 128)
    assert (moe.feedforward.d_ffw, moe.feedforward.n_experts, moe.feedforward.k) == (256, 16, 2)
    for arch in ("mlp", "swiglu", "sgatlin", "peer", "moe"):
        assert ladder_config(1, arch).feedforward.type == arch
    with pytest.raises(ConfigError, match="perfect square"):
        ModelConfig.preset("tiny-peer", feedforward=dict(type="peer", d_ffw=60))
    with pytest.raises(ConfigError, match="k=5 must satisfy"):
        ModelConfig.preset("tiny-moe", feedforward=dict(type="moe", n_experts=4, k=5))


@pytest.mark.parametrize("preset", ["tiny-peer", "tiny-moe"])
def test_circuit_database_usage_and_dla_run_on_the_baselines(preset):
    from pathlib import Path

    from circuitlab import CircuitDB
    from circuitlab.analysis.attribution import direct_logit_attribution
    from circuitlab.analysis.usage import database_usage
    from circuitlab.data.tokenizer import CircuitTokenizer

    tokenizer = CircuitTokenizer.from_file(Path(__file__).resolve().parents[2] / "models/sgatlin-stories/tokenizer.json")
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer).eval()
    texts = ["Once upon a time there was a dog named Max.", "The turtle was slow and the cat was fast."]
    db = CircuitDB.build(model, texts, index=None, progress=False)
    n_tokens = sum(len(tokenizer.encode(text)) for text in texts)
    assert sorted(database_usage(db)) == [0, 1]
    table = direct_logit_attribution(model, "The turtle was")
    units = table[table.level == "unit"]
    ffn = table[(table.level == "component") & (table.kind == "ffn")].set_index("layer").value
    # the units of each layer sum to that layer's FFN component
    for layer, value in units.groupby("layer").value.sum().items():
        assert value == pytest.approx(ffn[layer], abs=1e-4)
    assert set(units.kind) == {"neuron" if preset == "tiny-peer" else "ffn_unit"}
    assert n_tokens > 10 and "circuits" in repr(db)
