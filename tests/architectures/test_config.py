import json

import pytest

from circuitlab.architectures.feedforward.ncffn import ncffn_partition
from circuitlab.config import ConfigError, ModelConfig, ladder_config, scaling_ladder
from circuitlab.presets import PRESETS


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
        (dict(feedforward=dict(type="transformer")), "feedforward.type"),
        (dict(feedforward=dict(type="moe", n_experts=4, k=5)), "k=5 must satisfy"),
        (dict(feedforward=dict(type="peer", d_ffw=100, d_key=15)), "d_key=15 must be even"),
        (dict(d_model=96, bottleneck=dict(n_bits=12, grid=[8, 8], k=4, beam=4)), "must hold d_model=96"),
        (dict(bottleneck=dict(n_bits=16, beam=512)), "beam=512 must lie in"),
        (dict(bottleneck=dict(design="prefix", n_bits=16)), "bottleneck.design"),
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


def first_format(config: ModelConfig) -> dict:
    """The config as circuitlab 0.1 wrote it: every FFN and attention field, whatever the type."""
    data = config.to_dict()
    data["feedforward"] = dict(dict(type="mlp", d_ffw=1024, n_channels=8, k=8, d_key=128, rho=0.75,
                                    n_quantifiers=32, code_k=32), **data["feedforward"])
    data["attention"] = dict(dict(value_mode="standard", n_special=0, qk_norm=True), **data["attention"])
    # its selectivity section held the four lambdas only (normalization, ramp and cap came later)
    data["selectivity"] = {key: data["selectivity"][key]
                           for key in ("attn_sparsity", "attn_crispness", "ffn_sparsity", "ffn_crispness")}
    if data.get("bottleneck") is not None:  # the parity section held the first parity design's fields, null,
        # and not the fields added since (the bias path, the usage balance, the reconstruction reference)
        data["bottleneck"] = {key: value for key, value in dict(data["bottleneck"], bits_per_level=None, beams=None).items()
                              if key not in ("bias", "lambda_balance", "recon_reference")}
    return data


@pytest.mark.parametrize("name", ["tiny-gelu", "tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-membership"])
def test_first_format_configs_load_with_their_old_hash(name):
    import hashlib

    config = ModelConfig.preset(name)
    old = first_format(config)
    loaded = ModelConfig.from_json(json.dumps(old))
    assert loaded == config
    # the hash the first format's code computed: sha256 of its sorted JSON without the name
    del old["name"]
    assert loaded.hash() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()


def test_each_ffn_type_has_its_own_fields():
    from circuitlab.architectures.feedforward.mlp import MLPConfig
    from circuitlab.architectures.feedforward.ncffn import NCFFNConfig
    from circuitlab.architectures.feedforward.sgatlin import SgatlinConfig

    assert isinstance(ModelConfig.preset("tiny-sgatlin").feedforward, SgatlinConfig)
    assert isinstance(ModelConfig.preset("tiny-legible").feedforward, NCFFNConfig)
    assert isinstance(ModelConfig.preset("tiny-gelu").feedforward, MLPConfig)
    assert set(ModelConfig.preset("tiny-gelu").to_dict()["feedforward"]) == {"type", "d_ffw", "code_k"}
    base = dict(d_vocab=100, d_model=64, n_layers=1, n_heads=2, d_head=32)
    with pytest.raises(ConfigError, match="feedforward has no field 'n_channels'"):
        ModelConfig.from_dict(dict(base, feedforward=dict(type="mlp", d_ffw=64, n_channels=4)))
    with pytest.raises(ConfigError, match="attention.n_special must be one of 0, got 2"):
        ModelConfig.from_dict(dict(base, attention=dict(value_mode="standard", n_special=2)))
    with pytest.raises(ConfigError, match="attention.value_mode must be one of"):
        ModelConfig.from_dict(dict(base, attention=dict(value_mode="fuzzy")))
    with pytest.raises(ConfigError, match="n_heads must be an integer, got 2.5"):
        ModelConfig.from_dict(dict(base, n_heads=2.5))
    with pytest.raises(ConfigError, match="must be one of"):
        ModelConfig.from_dict(dict(base, norm="batchnorm"))


def test_configs_are_immutable_and_replace_validates():
    from circuitlab.config import SelectivityConfig

    config = ModelConfig.preset("tiny-gelu")
    with pytest.raises(Exception, match="frozen"):
        config.d_model = 128
    pressed = config.replace(selectivity=SelectivityConfig(attn_crispness=3e-3))
    assert pressed.selectivity.attn_crispness == 3e-3 and pressed.hash() != config.hash()
    assert config.replace(feedforward=dict(type="swiglu", d_ffw=64)).feedforward.type == "swiglu"
    with pytest.raises(ConfigError, match="perfect square"):
        config.replace(feedforward=dict(type="sgatlin", d_ffw=60, k=2))
