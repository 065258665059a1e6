import json

import pytest
import torch
from safetensors.torch import save_file

from circuitlab import CheckpointError, CircuitTransformer, ModelConfig, load_model


@pytest.mark.parametrize("preset", ["tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-parity-linear"])
def test_save_load_round_trip_is_bit_exact(tmp_path, preset):
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset))
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.config == model.config
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    tokens = torch.randint(0, 512, (2, 9))
    assert torch.equal(model(tokens), loaded(tokens))
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]


def test_refuses_pickles(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    ModelConfig.preset("tiny-gelu").to_json(folder / "config.json")
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_model(folder)


def test_mismatched_weights_name_the_tensor_and_both_shapes(tmp_path):
    model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    model.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["feedforward"]["d_ffw"] = 96
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"blocks\.0\.mlp\.W_in.*\(64, 128\).*\(64, 96\)"):
        load_model(tmp_path / "m")


def test_truncated_and_corrupted_weights_are_clear_errors(tmp_path):
    model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    model.save(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*truncated"):
        load_model(tmp_path / "m")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["W_E"][0, 0] = float("nan")
    save_file(state, weights)
    with pytest.raises(CheckpointError, match="W_E.*NaN"):
        load_model(tmp_path / "m")


def test_missing_folder_and_bad_config(tmp_path):
    with pytest.raises(CheckpointError, match="no model folder"):
        load_model(tmp_path / "nothing-here")
    folder = tmp_path / "m"
    CircuitTransformer(ModelConfig.preset("tiny-gelu")).save(folder)
    (folder / "config.json").write_text('{"d_vocab": 10, "n_heads": -1}')
    with pytest.raises(CheckpointError, match="n_heads"):
        load_model(folder)
