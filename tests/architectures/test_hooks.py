"""Every documented hook name exists with its documented shape; hooks change what is downstream only."""

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig

B, T = 2, 7

COMMON = {
    "hook_embed": ("B", "T", "D"),
    "blocks.{l}.hook_resid_pre": ("B", "T", "D"),
    "blocks.{l}.hook_resid_mid": ("B", "T", "D"),
    "blocks.{l}.hook_resid_post": ("B", "T", "D"),
    "blocks.{l}.attn.hook_q": ("B", "T", "H", "E"),
    "blocks.{l}.attn.hook_k": ("B", "T", "H", "E"),
    "blocks.{l}.attn.hook_rot_q": ("B", "T", "H", "E"),  # every preset here uses RoPE
    "blocks.{l}.attn.hook_rot_k": ("B", "T", "H", "E"),
    "blocks.{l}.attn.hook_v": ("B", "T", "H", "E"),
    "blocks.{l}.attn.hook_attn_scores": ("B", "H", "T", "T"),
    "blocks.{l}.attn.hook_pattern": ("B", "H", "T", "T"),
    "blocks.{l}.attn.hook_z": ("B", "T", "H", "E"),
    "blocks.{l}.attn.hook_result": ("B", "T", "H", "D"),
    "blocks.{l}.hook_attn_out": ("B", "T", "D"),
    "blocks.{l}.hook_mlp_out": ("B", "T", "D"),
    "ln_final.hook_normalized": ("B", "T", "D"),
    "ln_final.hook_scale": ("B", "T", 1),
}
SPECIFIC = {
    "tiny-gelu": {"blocks.{l}.mlp.hook_pre": ("B", "T", "F"), "blocks.{l}.mlp.hook_post": ("B", "T", "F")},
    "tiny-swiglu": {"blocks.{l}.mlp.hook_pre": ("B", "T", "F"), "blocks.{l}.mlp.hook_post": ("B", "T", "F")},
    "tiny-sgatlin": {
        "blocks.{l}.mlp.hook_query": ("B", "T", "Q"),
        "blocks.{l}.mlp.hook_subkey_scores": ("B", "T", 2, "C", "n"),
        "blocks.{l}.mlp.hook_gate_indices": ("B", "T", "C", "K"),
        "blocks.{l}.mlp.hook_gate_values": ("B", "T", "C", "K"),
        "blocks.{l}.mlp.hook_neuron_pre": ("B", "T", "C", "K"),
        "blocks.{l}.mlp.hook_neuron_post": ("B", "T", "C", "K"),
    },
    "tiny-legible": {
        "blocks.{l}.attn.hook_operand_a": ("B", "T", "S", "E/2"),
        "blocks.{l}.attn.hook_operand_b": ("B", "T", "S", "E/2"),
        "blocks.{l}.mlp.hook_pre": ("B", "T", "F"),
        "blocks.{l}.mlp.hook_gelu": ("B", "T", "G"),
        "blocks.{l}.mlp.hook_operand_a": ("B", "T", "P"),
        "blocks.{l}.mlp.hook_operand_b": ("B", "T", "P"),
        "blocks.{l}.mlp.hook_and": ("B", "T", "P"),
        "blocks.{l}.mlp.hook_andnot": ("B", "T", "P"),
        "blocks.{l}.mlp.hook_quant_in": ("B", "T", "U"),
        "blocks.{l}.mlp.hook_exists": ("B", "T", "U/2"),
        "blocks.{l}.mlp.hook_proportion": ("B", "T", "U/2"),
        "blocks.{l}.mlp.hook_post": ("B", "T", "F"),
    },
    "tiny-parity": {
        "blocks.{l}.mlp.hook_post": ("B", "T", "F"),
        "blocks.{l}.bottleneck.hook_in": ("B", "T", "D"),
        "blocks.{l}.bottleneck.hook_code_indices": ("B", "T", "k"),
        "blocks.{l}.bottleneck.hook_code_values": ("B", "T", "k"),
        "blocks.{l}.bottleneck.hook_recon": ("B", "T", "D"),
    },
}
SPECIFIC["tiny-parity-linear"] = SPECIFIC["tiny-parity"]


def sizes(model):
    c = model.config
    mlp = model.blocks[0].mlp
    ffn = c.feedforward
    out = dict(B=B, T=T, D=c.d_model, H=c.n_heads, E=c.d_head, F=ffn.d_ffw, S=c.attention.n_special, **{"E/2": c.d_head // 2})
    if ffn.type == "sgatlin":
        out.update(Q=ffn.d_key, C=ffn.n_channels, K=ffn.k, n=int(ffn.d_ffw**0.5))
    if hasattr(mlp, "n_pairs"):
        out.update(G=mlp.n_gelu, P=mlp.n_pairs, U=mlp.n_quant, **{"U/2": mlp.n_quant // 2})
    if c.bottleneck is not None:
        out["k"] = c.bottleneck.k
    return out


@pytest.mark.parametrize("preset", sorted(SPECIFIC))
def test_every_documented_hook_is_cached_with_its_shape(preset):
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset))
    _, cache = model.run_with_cache(torch.randint(0, model.config.d_vocab, (B, T)))
    size = sizes(model)
    for template, shape in {**COMMON, **SPECIFIC[preset]}.items():
        for layer in range(model.config.n_layers):
            name = template.format(l=layer)
            assert name in cache, f"{preset}: {name} missing"
            expected = tuple(size[s] if isinstance(s, str) else s for s in shape)
            assert tuple(cache[name].shape) == expected, f"{preset}: {name} {tuple(cache[name].shape)} != {expected}"


@pytest.mark.parametrize("preset", sorted(SPECIFIC))
def test_zeroing_a_hook_changes_downstream_only(preset):
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset))
    tokens = torch.randint(0, model.config.d_vocab, (B, T))
    _, clean = model.run_with_cache(tokens)
    target = "blocks.1.hook_attn_out"

    def zero(activation, hook):
        return torch.zeros_like(activation)

    with model.hooks(fwd_hooks=[(target, zero)]):
        logits, patched = model.run_with_cache(tokens)
    torch.testing.assert_close(patched["blocks.0.hook_resid_post"], clean["blocks.0.hook_resid_post"])
    torch.testing.assert_close(patched["blocks.1.hook_resid_pre"], clean["blocks.1.hook_resid_pre"])
    assert (patched["blocks.1.hook_resid_mid"] - clean["blocks.1.hook_resid_mid"]).abs().max() > 1e-4
    assert (logits - model(tokens)).abs().max() > 1e-5


def test_position_t_does_not_see_the_future():
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    tokens = torch.randint(0, 512, (1, 10))
    changed = tokens.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 512
    torch.testing.assert_close(model(tokens)[:, :6], model(changed)[:, :6])


def test_sparse_codes_of_each_architecture():
    torch.manual_seed(0)
    tokens = torch.randint(0, 512, (B, T))
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin"))
    _, cache = model.run_with_cache(tokens, names_filter=model.sparse_code_hooks())
    code = model.sparse_codes(cache)[1]
    gates = cache["blocks.1.mlp.hook_gate_indices"]
    n = model.config.feedforward.d_ffw
    assert code.size == 2 * n and code.indices.shape == (B, T, 8)
    assert torch.equal(code.indices[..., 4:] - n, gates[..., 1, :])  # channel 1 ids are offset by N
    assert torch.equal(code.values, cache["blocks.1.mlp.hook_gate_values"].flatten(-2))

    legible = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    _, cache = legible.run_with_cache(tokens)
    code = legible.sparse_codes(cache)[0]
    operators = cache["blocks.0.mlp.hook_post"][..., legible.blocks[0].mlp.operator_slice()]
    torch.testing.assert_close(code.values, operators.topk(16, dim=-1).values)
    with pytest.raises(KeyError, match="sparse_code_hooks"):
        legible.sparse_codes({})
