"""Every layer declares its own circuits (CodeLayer): the answers agree with the cache and with each other."""

import typing

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.analysis.collect import layer_layout
from circuitlab.analysis.patching import natural_code_hooks
from circuitlab.architectures.code_layer import CodeLayer
from circuitlab.architectures.registry import FEEDFORWARDS
from circuitlab.config import FeedForwardConfig

DESIGNS = ["tiny-gelu", "tiny-swiglu", "tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-parity-linear", "tiny-membership", "tiny-peer",
           "tiny-moe"]


def run(preset: str):
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset)).eval()
    tokens = torch.randint(0, model.config.d_vocab, (2, 7))
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    return model, cache


def test_every_ffn_type_has_one_config_class_and_one_layer_class():
    config_classes = typing.get_args(typing.get_args(FeedForwardConfig)[0])
    tags = [cls.model_fields["type"].default for cls in config_classes]
    assert sorted(tags) == sorted(FEEDFORWARDS) == ["mlp", "moe", "ncffn", "peer", "sgatlin", "swiglu"]
    base = ModelConfig.preset("tiny-gelu")
    for tag, section in FEEDFORWARDS.items():
        config = base.replace(feedforward=dict(type=tag))
        layer = config.feedforward.build(config)
        assert isinstance(layer, CodeLayer) and layer.kind == tag


@pytest.mark.parametrize("preset", DESIGNS)
def test_unit_writes_sum_to_the_block_writes(preset):
    model, cache = run(preset)
    for layer, block in enumerate(model.blocks):
        for position in (0, 6):
            def read(name, position=position):
                return cache[name][1, position].double()

            heads = block.attn.unit_writes(read)
            assert heads.ids == list(range(model.config.n_heads)) and len(heads.labels) == model.config.n_heads
            torch.testing.assert_close(heads.writes_NxD.sum(0), read(f"blocks.{layer}.hook_attn_out"), rtol=1e-5, atol=1e-5)
            units = block.ffn_code_layer.unit_writes(read)
            torch.testing.assert_close(units.writes_NxD.sum(0), read(f"blocks.{layer}.hook_mlp_out"), rtol=1e-5, atol=1e-5)
            assert len(units.ids) == len(units.labels) == len(units.operations) == units.writes_NxD.shape[0]


@pytest.mark.parametrize("preset", DESIGNS)
def test_codes_come_from_the_layers_code_hooks(preset):
    model, cache = run(preset)
    codes = model.sparse_codes(cache)
    for layer, block in enumerate(model.blocks):
        code_layer = block.ffn_code_layer
        hooks = code_layer.code_hooks()
        assert hooks == natural_code_hooks(model, layer) and all(name in model.hook_dict for name in hooks)
        assert all(name.startswith(f"blocks.{layer}.") for name in hooks)
        # the code needs nothing but its hooks
        alone = code_layer.sparse_code({name: cache[name] for name in hooks})
        assert torch.equal(alone.indices, codes[layer].indices) and torch.equal(alone.values, codes[layer].values)
        assert int(codes[layer].indices.max()) < codes[layer].size
        assert layer_layout(model, layer) == code_layer.layout() and code_layer.layout()["kind"] == code_layer.kind
        assert block.attn.code_hooks() == [] and block.attn.sparse_code(cache) is None


def test_unit_ids_name_the_same_units_as_the_code():
    """sgatlin, PEER and parity: the units DLA lists are exactly the code's non-zeros, under the same ids."""
    for preset in ("tiny-sgatlin", "tiny-peer", "tiny-parity"):
        model, cache = run(preset)
        code = model.sparse_codes(cache)[1]
        units = model.blocks[1].ffn_code_layer.unit_writes(lambda name: cache[name][0, 3].double())
        assert units.ids == code.indices[0, 3].tolist()
        assert model.blocks[1].ffn_code_layer.sparse_by_construction


@pytest.mark.parametrize("preset", DESIGNS)
def test_bounded_channels_are_bounded_and_named_by_their_layer(preset):
    model, cache = run(preset)
    groups = [g for block in model.blocks for layer in block.code_layers() for g in layer.bounded_channels()]
    expected_surfaces = {
        "tiny-legible": {"attention", "ffn"}, "tiny-membership": {"attention"},
    }.get(preset, set())
    assert {g.surface for g in groups} == expected_surfaces
    for group in groups:
        assert group.hook in model.hook_dict and group.hook.startswith(f"blocks.{group.layer}.")
        values = group.take(cache[group.hook])
        assert values.numel() > 0 and float(values.min()) >= 0 and float(values.max()) <= 1


def test_a_layer_outside_a_model_says_its_hooks_have_no_names():
    from circuitlab.architectures.feedforward.mlp import MLP

    with pytest.raises(RuntimeError, match="inside a CircuitTransformer"):
        MLP(ModelConfig.preset("tiny-gelu")).code_hooks()


def test_active_parameters_count_what_each_layer_reads_per_token():
    dense = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    # tied embeddings: the unembedding reads all of W_E, and a dense layer reads all of its weights
    assert dense.active_parameters_per_token() == sum(p.numel() for p in dense.parameters())
    routed = CircuitTransformer(ModelConfig.preset("tiny-sgatlin"))
    ffn, c = routed.config.feedforward, routed.config
    experts = sum(block.mlp.experts.numel() for block in routed.blocks)
    unread = experts - c.n_layers * 2 * ffn.n_channels * ffn.k * c.d_model  # all but the C*k chosen rows
    assert routed.active_parameters_per_token() == sum(p.numel() for p in routed.parameters()) - unread
