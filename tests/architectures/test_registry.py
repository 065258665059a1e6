"""The registry of designs: a design added from outside the package (tests/architectures/relu_squared_design.py,
one file) with one `register_design` line is accepted by configs, built, counted, described, laddered, saved
and loaded, trained and analysed like the shipped ones."""

import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from circuitlab import CircuitTransformer, ModelConfig, count_flops, load_model
from circuitlab.config import ConfigError, ladder_config, ladder_designs, register_design, unregister_design
from circuitlab.training.card import write_card

sys.path.insert(0, str(Path(__file__).parent))
from relu_squared_design import ReLUSquared, ReLUSquaredConfig  # noqa: E402



@pytest.fixture(autouse=True, scope="module")
def registered():
    register_design(ReLUSquaredConfig)  # the one registry line
    yield
    unregister_design(ReLUSquaredConfig)  # the other test modules see the shipped designs only

BASE = dict(d_vocab=64, d_model=32, n_layers=2, n_heads=2, d_head=16, n_ctx=32)


def relu2_config() -> ModelConfig:
    return ModelConfig.from_dict(dict(BASE, feedforward=dict(type="relu2", d_ffw=48)))


def test_a_registered_design_is_a_config_section_like_the_shipped_ones():
    config = relu2_config()
    assert isinstance(config.feedforward, ReLUSquaredConfig)
    assert ModelConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["feedforward"] == {"type": "relu2", "d_ffw": 48, "code_k": 16}
    with pytest.raises(ConfigError, match="relu2"):  # listed among the choices of an unknown type
        ModelConfig.from_dict(dict(BASE, feedforward=dict(type="relu3")))
    with pytest.raises(ConfigError, match="feedforward.d_ffw must be a positive integer"):
        ModelConfig.from_dict(dict(BASE, feedforward=dict(type="relu2", d_ffw=0)))
    # registering it again is harmless; another class under its name is refused
    register_design(ReLUSquaredConfig)
    clash = type("Clash", (ReLUSquaredConfig,), {"__module__": __name__})
    with pytest.raises(ValueError, match="already registered"):
        register_design(clash)


def test_taking_it_back_leaves_the_shipped_designs():
    unregister_design(ReLUSquaredConfig)
    try:
        with pytest.raises(ConfigError, match="feedforward.type must be one of"):
            relu2_config()
    finally:
        register_design(ReLUSquaredConfig)
    assert isinstance(relu2_config().feedforward, ReLUSquaredConfig)


def test_its_layer_builds_runs_and_sums_to_the_block_write():
    torch.manual_seed(0)
    model = CircuitTransformer(relu2_config()).eval()
    assert isinstance(model.blocks[0].mlp, ReLUSquared)
    tokens = torch.randint(0, 64, (2, 9))
    logits, cache = model.run_with_cache(tokens)
    post = cache["blocks.1.mlp.hook_post"]
    assert (post >= 0).all() and torch.equal(post, torch.relu(cache["blocks.1.mlp.hook_pre"]) ** 2)
    codes = model.sparse_codes(cache)
    assert codes[1].indices.shape == (2, 9, 16)
    write = cache["blocks.1.hook_mlp_out"][0, 4].double()
    units = model.blocks[1].mlp.unit_writes(lambda name: cache[name][0, 4].double())
    torch.testing.assert_close(units.writes_NxD.sum(0), write, rtol=1e-6, atol=1e-6)


def test_its_cost_description_and_ladder_come_from_its_module():
    config = relu2_config()
    model = CircuitTransformer(config).eval()
    count = count_flops(config, 16)
    assert count.total_parameters == sum(p.numel() for p in model.parameters())
    assert count.active_parameters == model.active_parameters_per_token()
    hooks = [(f"blocks.{layer}.attn.hook_pattern", lambda activation, hook: activation) for layer in range(2)]
    with model.hooks(fwd_hooks=hooks), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 64, (3, 16)))
    assert count.forward_per_token == counter.get_total_flops() / 48
    assert "FFN: relu2, width 48" in config.describe()
    assert "relu2" in ladder_designs()
    assert ladder_config(2, "relu2", d_vocab=100).feedforward.d_ffw == 4 * 256


def test_it_trains_saves_and_loads(tmp_path):
    torch.manual_seed(1)
    model = CircuitTransformer(relu2_config())
    tokens = torch.randint(0, 64, (4, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.5  # it learns the batch
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    torch.testing.assert_close(loaded(tokens), model.eval()(tokens))
    card = write_card(tmp_path / "m", command="test", seed=1, tokens_seen=1, wall_seconds=1.0, device="cpu",
                      held_out_ppl=1.0, fact_accuracy=None).read_text()
    assert "FFN: relu2, width 48" in card
