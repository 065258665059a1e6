import json

import pytest

from circuitlab.config import PRESETS, ConfigError, ModelConfig, ladder_config, ncffn_partition, scaling_ladder


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name):
    config = ModelConfig.preset(name)
    again = ModelConfig.from_json(config.to_json())
    assert again == config
    assert again.hash() == config.hash()
    assert json.loads(config.to_json())["name"] == name


def test_hash_ignores_name_but_not_architecture():
    config = ModelConfig.preset("tiny-sgatlin")
    assert config.replace(name="renamed").hash() == config.hash()
    assert config.replace(d_model=128, d_head=64).hash() != config.hash()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(feedforward=dict(type="sgatlin", d_ffw=1000, k=8)), "perfect square"),
        (dict(feedforward=dict(type="sgatlin", d_ffw=64, k=8)), "k=8 must satisfy"),
        (dict(attention=dict(value_mode="boolean", n_special=5)), "n_special=5"),
        (dict(feedforward=dict(type="ncffn", rho=1.5)), "rho"),
        (dict(feedforward=dict(type="moe")), "feedforward.type"),
        (dict(d_model=96, bottleneck=dict(n_bits=12, beams=[4, 4])), "power of 2"),
        (dict(bottleneck=dict(n_bits=16, bits_per_level=3, beams=[4, 4])), "split into levels"),
        (dict(bottleneck=dict(n_bits=16, bits_per_level=4, beams=[4])), "one beam width per level"),
        (dict(n_heads=0), "n_heads must be a positive"),
        (dict(positional="alibi"), "positional"),
    ],
)
def test_invalid_configs_give_clear_errors(changes, message):
    base = dict(d_vocab=100, d_model=256, n_layers=1, n_heads=4, d_head=64)
    base.update(changes)
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict(base)


def test_unknown_keys_are_rejected():
    with pytest.raises(ConfigError, match="unknown model config keys"):
        ModelConfig.from_dict({"d_vocab": 10, "d_modle": 32})


@pytest.mark.parametrize(
    "scale, kind, expected",
    [
        (2, "sgatlin", (256, 4, 40**2)),
        (8, "sgatlin", (1024, 16, 112**2)),
        (2, "swiglu", (256, 4, 512)),
        (8, "mlp", (1024, 16, 2560)),
        (4, "moe", (512, 8, 512)),
        (3, "peer", (384, 6, 104**2)),
    ],
)
def test_scaling_ladder_matches_seed_appendix(scale, kind, expected):
    assert scaling_ladder(scale, kind) == expected


def test_ladder_config_builds_valid_models():
    config = ladder_config(8, "sgatlin")
    assert (config.d_model, config.n_layers, config.feedforward.d_ffw) == (1024, 16, 12544)
    assert config.n_heads * config.d_head == config.d_model
    with pytest.raises(ConfigError):
        scaling_ladder(2, "transformer")


def test_ncffn_partition_fills_the_hidden_layer():
    for d_ffw, rho, n_quant in [(1024, 0.75, 32), (128, 0.5, 16), (101, 0.3, 7 - 1), (64, 1.0, 8), (64, 0.0, 0)]:
        config = ModelConfig.from_dict(dict(d_vocab=10, d_model=32, n_layers=1, n_heads=1, d_head=32,
                                            feedforward=dict(type="ncffn", d_ffw=d_ffw, rho=rho, n_quantifiers=n_quant)))
        n_gelu, n_pairs, n_q = ncffn_partition(config.feedforward)
        assert n_gelu + 2 * n_pairs + n_q == d_ffw
        assert n_q % 2 == 0 and abs(n_gelu - rho * d_ffw) <= 1
