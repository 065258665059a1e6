"""Seed 002 layers: bounded attention values and the NC-FFN."""

import math

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.kernels.reference import existential_loop, existential_scan, proportion_loop, proportion_scan

BASE = dict(d_vocab=97, d_model=48, n_layers=2, n_heads=3, d_head=16, n_ctx=64)


def build(**changes):
    torch.manual_seed(0)
    config = dict(BASE)
    config.update(changes)
    return CircuitTransformer(ModelConfig.from_dict(config))


def attention_params(model):
    return sum(p.numel() for n, p in model.named_parameters() if ".attn." in n)


def test_membership_values_lie_in_unit_interval_and_standard_heads_are_unbounded():
    model = build(attention=dict(value_mode="membership", n_special=2))
    with torch.no_grad():
        model.blocks[0].attn.W_V.mul_(50)  # push pre-activations far out: sigmoid must still bound them
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, 20)))
    v = cache["blocks.0.attn.hook_v"]
    assert v[:, :, :2].min() >= 0 and v[:, :, :2].max() <= 1
    assert v[:, :, 2:].abs().max() > 1  # the standard head stays unbounded


def test_boolean_values_are_and_and_andnot_of_operands():
    model = build(attention=dict(value_mode="boolean", n_special=2))
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, 20)))
    a, b, v = (cache[f"blocks.1.attn.hook_{n}"] for n in ("operand_a", "operand_b", "v"))
    torch.testing.assert_close(v[:, :, :2, :8], a * b)
    torch.testing.assert_close(v[:, :, :2, 8:], a * (1 - b))
    assert v[:, :, :2].min() >= 0 and v[:, :, :2].max() <= 1


@pytest.mark.parametrize("n_special", [0, 1, 3])
def test_bounded_heads_are_parameter_neutral(n_special):
    standard = attention_params(build())
    assert attention_params(build(attention=dict(value_mode="boolean", n_special=n_special))) == standard
    assert attention_params(build(attention=dict(value_mode="membership", n_special=n_special))) == standard


def test_ncffn_weight_matrices_match_the_gelu_mlp_exactly():
    mlp = build(feedforward=dict(type="mlp", d_ffw=96)).blocks[0].mlp
    ncffn = build(feedforward=dict(type="ncffn", d_ffw=96, rho=0.5, n_quantifiers=8)).blocks[0].mlp
    mlp_params = sum(p.numel() for p in mlp.parameters())
    # W_in and W_out keep the dense shapes; the only extra parameters are the 8 decay logits
    assert ncffn.W_in.shape == mlp.W_in.shape and ncffn.W_out.shape == mlp.W_out.shape
    assert sum(p.numel() for p in ncffn.parameters()) == mlp_params + 8
    assert sum(p.numel() for n, p in ncffn.named_parameters() if n != "decay_logit") == mlp_params


def test_ncffn_hidden_layout_and_operators():
    model = build(feedforward=dict(type="ncffn", d_ffw=96, rho=0.5, n_quantifiers=8))
    layer = model.blocks[0].mlp
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, 30)))
    pre = cache["blocks.0.mlp.hook_pre"]
    g, p, u = layer.n_gelu, layer.n_pairs, layer.n_quant
    a, b = torch.sigmoid(pre[..., g : g + p]), torch.sigmoid(pre[..., g + p : g + 2 * p])
    torch.testing.assert_close(cache["blocks.0.mlp.hook_and"], a * b)
    torch.testing.assert_close(cache["blocks.0.mlp.hook_andnot"], a * (1 - b))
    membership = torch.sigmoid(pre[..., g + 2 * p :])
    decay = layer.decay.detach()
    torch.testing.assert_close(cache["blocks.0.mlp.hook_exists"], existential_loop(membership[..., :4], decay[:4]))
    torch.testing.assert_close(cache["blocks.0.mlp.hook_proportion"], proportion_loop(membership[..., 4:], decay[4:]))
    kinds = layer.unit_kinds()
    assert len(kinds) == 96 and kinds.count("and") == p and kinds.count("exists") == 4
    post = cache["blocks.0.mlp.hook_post"]
    torch.testing.assert_close(post[..., g : g + p], cache["blocks.0.mlp.hook_and"])


CENTRED = dict(feedforward=dict(type="ncffn", d_ffw=96, rho=0.5, n_quantifiers=8, centre_operands=True))


def test_centred_operands_subtract_the_running_centre_in_evaluation():
    model = build(**CENTRED).eval()
    layer = model.blocks[0].mlp
    with torch.no_grad():
        layer.operand_centre.copy_(torch.linspace(-3, 3, 2 * layer.n_pairs))
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, 30)))
    pre = cache["blocks.0.mlp.hook_pre"]
    g, p = layer.n_gelu, layer.n_pairs
    torch.testing.assert_close(cache["blocks.0.mlp.hook_operand_a"], torch.sigmoid(pre[..., g : g + p] - layer.operand_centre[:p]))
    torch.testing.assert_close(cache["blocks.0.mlp.hook_operand_b"], torch.sigmoid(pre[..., g + p : g + 2 * p] - layer.operand_centre[p:]))
    # the GELU units and the quantifiers are not centred
    torch.testing.assert_close(cache["blocks.0.mlp.hook_quant_in"], torch.sigmoid(pre[..., g + 2 * p :]))


def test_centred_operands_train_without_a_gradient_on_the_channel_mean():
    """In training the loss cannot move an operand channel's mean: the gradient reaching the operand
    pre-activations sums to zero over the batch's tokens, channel by channel (not so without centring)."""
    tokens = torch.randint(0, 97, (3, 20))
    for centre, expect_zero in ((True, True), (False, False)):
        model = build(feedforward=dict(type="ncffn", d_ffw=96, rho=0.5, n_quantifiers=8, centre_operands=centre)).train()
        layer = model.blocks[0].mlp
        grads = []

        def keep_gradient(tensor, hook):
            tensor.register_hook(grads.append)

        layer.hook_pre.add_hook(keep_gradient)
        logits = model(tokens)
        logits.float().logsumexp(-1).sum().backward()
        g, p = layer.n_gelu, layer.n_pairs
        per_channel = grads[0][..., g : g + 2 * p].sum(dim=(0, 1))
        scale = grads[0][..., g : g + 2 * p].abs().sum(dim=(0, 1))
        assert (per_channel.abs() <= 1e-5 * scale + 1e-9).all() == expect_zero


def test_running_centre_moves_to_the_batch_mean_with_its_momentum():
    from circuitlab.architectures.feedforward.ncffn import CENTRE_MOMENTUM

    model = build(**CENTRED).train()
    layer = model.blocks[0].mlp
    tokens = torch.randint(0, 97, (2, 16))
    _, cache = model.run_with_cache(tokens)  # one training forward
    g, p = layer.n_gelu, layer.n_pairs
    batch_mean = cache["blocks.0.mlp.hook_pre"][..., g : g + 2 * p].mean(dim=(0, 1))
    torch.testing.assert_close(layer.operand_centre, CENTRE_MOMENTUM * batch_mean)
    model.eval()
    model(tokens)  # evaluation leaves it alone
    torch.testing.assert_close(layer.operand_centre, CENTRE_MOMENTUM * batch_mean)


def test_uncentred_ncffn_configs_keep_their_layout_and_hash():
    plain = ModelConfig.preset("legible-stories-v1")
    assert "centre_operands" not in plain.to_dict()["feedforward"]
    centred = ModelConfig.preset("legible-stories")
    assert centred.feedforward.centre_operands and centred.to_dict()["feedforward"]["centre_operands"] is True
    assert centred.hash() != centred.replace(feedforward={**centred.to_dict()["feedforward"], "centre_operands": False}).hash()
    plain_layer = build(feedforward=dict(type="ncffn", d_ffw=96)).blocks[0].mlp
    assert "operand_centre" not in dict(plain_layer.named_buffers())  # old weight files load unchanged


def test_quantifier_decays_start_sticky():
    layer = build(feedforward=dict(type="ncffn", d_ffw=96, rho=0.5, n_quantifiers=8)).blocks[0].mlp
    assert layer.decay.min() >= 0.9 - 1e-6 and layer.decay.max() < 1
    expected_half_life = math.log(0.5) / math.log(0.9)
    assert layer.half_lives().min().item() == pytest.approx(expected_half_life, rel=1e-4)


@pytest.mark.parametrize("n_pos", [1, 2, 7, 64, 129])
def test_quantifier_scans_equal_step_by_step_loops(n_pos):
    generator = torch.Generator().manual_seed(n_pos)
    membership = torch.rand(3, n_pos, 5, generator=generator, dtype=torch.float64)
    decay = torch.rand(5, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(existential_scan(membership, decay), existential_loop(membership, decay), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(proportion_scan(membership, decay), proportion_loop(membership, decay), rtol=1e-12, atol=1e-12)


def test_selectivity_penalty_matches_definition():
    model = build(attention=dict(value_mode="membership", n_special=1),
                  selectivity=dict(attn_sparsity=1e-3, attn_crispness=3e-3))
    tokens = torch.randint(0, 97, (2, 11))
    _, aux = model(tokens, return_aux=True)
    _, cache = model.run_with_cache(tokens)
    expected = 0.0
    for layer in range(2):
        v = cache[f"blocks.{layer}.attn.hook_v"][:, :, :1]
        expected += (1e-3 * v.sum() + 3e-3 * (v * (1 - v)).sum()) / 22
    assert aux["selectivity"].item() == pytest.approx(expected.item(), rel=1e-5)
    _, aux_off = build()(tokens, return_aux=True)
    assert aux_off["selectivity"].item() == 0.0
