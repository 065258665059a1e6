"""Issue 8, faults in model folders and training checkpoints: damaged files are errors that name the file (never
a crash inside a library, never a model that quietly computes something else), a tokenizer or config that is
not the one the weights were saved with is refused, and a training run killed with SIGKILL in the middle of
writing a checkpoint resumes from the previous one to the losses of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from circuitlab import CheckpointError, CircuitTransformer, ModelConfig, load_model
from circuitlab.architectures.weights import load_tensors, save_tensors, tensors_sha256

TESTS = Path(__file__).resolve().parent


def story_tokenizer(seed: int, vocab_size: int = 300):
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    return train_tokenizer([s.text for s in generate_stories(40, seed=seed)], vocab_size=vocab_size, show_progress=False)


def saved_model(folder: Path, preset: str = "tiny-gelu", tokenizer=None) -> CircuitTransformer:
    config = ModelConfig.preset(preset)
    if tokenizer is not None:
        config = config.replace(d_vocab=tokenizer.vocab_size)
    model = CircuitTransformer(config, tokenizer=tokenizer)
    model.reset_parameters(seed=0)
    model.save(folder)
    return model


def safetensors_data_offset(path: Path) -> int:
    """Where the tensor bytes start: 8 bytes of header length, then the JSON header."""
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


# ------------------------------------------------------------------------------------ model folders


@pytest.mark.parametrize("damage", ["half", "empty", "header-garbage", "header-length", "flipped-weight"])
def test_damaged_weights_are_an_error_naming_the_file(tmp_path, damage):
    saved_model(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "half":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    elif damage == "header-garbage":
        data[8:40] = b"\xff" * 32
    elif damage == "header-length":
        data[:8] = (1 << 40).to_bytes(8, "little")
    else:  # one bit of one weight: the file still parses, every shape still matches
        data[safetensors_data_offset(weights) + 1001] ^= 0x04
    weights.write_bytes(bytes(data))
    expected = "the tensors differ from the sha256" if damage == "flipped-weight" else "is not a readable safetensors file"
    with pytest.raises(CheckpointError, match=expected) as error:
        load_model(tmp_path / "m")
    assert str(error.value).startswith(str(weights)), error.value


def test_the_recorded_digest_is_over_names_dtypes_shapes_and_bytes():
    base = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    digest = tensors_sha256(base)
    assert tensors_sha256({"b": base["b"].clone(), "a": base["a"].clone()}) == digest  # order-free
    variants = [
        {"a": base["a"].reshape(3, 2), "b": base["b"]},
        {"a": base["a"].to(torch.int32), "b": base["b"]},
        {"a2": base["a"], "b": base["b"]},
        {"a": base["a"], "b": torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16)},
    ]
    assert len({digest, *map(tensors_sha256, variants)}) == 5


def test_save_and_load_tensors_round_trip_with_metadata(tmp_path):
    tensors = {"w": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), "n": torch.tensor(7)}
    save_tensors(tensors, tmp_path / "t.safetensors", {"note": "kept"})
    loaded, metadata = load_tensors(tmp_path / "t.safetensors")
    assert metadata["note"] == "kept" and metadata["circuitlab.sha256"] == tensors_sha256(tensors)
    assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]  # no temporary file left behind


def test_a_swapped_tokenizer_of_the_same_size_is_refused(tmp_path):
    own, other = story_tokenizer(seed=1), story_tokenizer(seed=2)
    assert own.vocab_size == other.vocab_size and own.hash() != other.hash()
    saved_model(tmp_path / "m", tokenizer=own)
    assert load_model(tmp_path / "m").tokenizer.hash() == own.hash()
    other.save(tmp_path / "m" / "tokenizer.json")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: tokenizer sha256 .* another tokenizer"):
        load_model(tmp_path / "m")
    assert load_model(tmp_path / "m", load_tokenizer=False).tokenizer is None  # the weights alone still load


def test_a_config_of_another_architecture_with_the_same_shapes_is_refused(tmp_path):
    model = saved_model(tmp_path / "m", preset="tiny-sgatlin")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["rope_base"] = 500.0  # same parameter shapes, different function
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    tokens = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(0))
    edited = CircuitTransformer(ModelConfig.from_dict(config))
    edited.load_state_dict(model.state_dict())
    assert not torch.equal(edited(tokens), model(tokens))  # loading it would change the logits
    with pytest.raises(CheckpointError, match=r"config\.json: config hash .* another architecture"):
        load_model(tmp_path / "m")
    config["name"] = "renamed"  # the name is not part of the architecture
    config["rope_base"] = 10000.0
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert load_model(tmp_path / "m").config.name == "renamed"


def test_folders_without_records_are_checked_against_the_training_metrics(tmp_path):
    """Folders saved before the weights carried hashes (or by other tools): metrics.json has them."""
    own, other = story_tokenizer(seed=1), story_tokenizer(seed=2)
    model = saved_model(tmp_path / "m", tokenizer=own)
    weights = tmp_path / "m" / "model.safetensors"
    tensors = {name: tensor.clone() for name, tensor in load_tensors(weights)[0].items()}
    save_file(tensors, weights, metadata={"format": "pt"})  # no circuitlab records
    metrics = {"config_hash": model.config.hash(), "tokenizer_hash": own.hash(), "held_out_ppl": 9.9}
    (tmp_path / "m" / "metrics.json").write_text(json.dumps(metrics))
    assert load_model(tmp_path / "m").tokenizer.hash() == own.hash()
    other.save(tmp_path / "m" / "tokenizer.json")
    with pytest.raises(CheckpointError, match="recorded in .*metrics.json"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "metrics.json").write_text("{not json")  # a broken report checks nothing, breaks nothing
    assert load_model(tmp_path / "m").tokenizer.hash() == other.hash()


def test_shipped_models_agree_with_their_recorded_hashes():
    from circuitlab.resources import models_root

    shipped = [p for p in sorted(models_root().glob("*")) if (p / "model.safetensors").is_file() and (p / "metrics.json").is_file()]
    if not shipped:
        pytest.skip("no shipped model folders in this checkout")
    for folder in shipped:
        metrics = json.loads((folder / "metrics.json").read_text())
        model = load_model(folder)
        assert model.config.hash() == metrics["config_hash"] and model.tokenizer.hash() == metrics["tokenizer_hash"]


@pytest.mark.parametrize(
    "config, message",
    [
        ("{\"d_vocab\": 512, \"feedforward\": null}", "config.json"),
        ("[1, 2, 3]", "config.json"),
        ("{\"d_vocab\": \"many\"}", "config.json"),
        ("\xff\xfe{}", "config.json"),
        ("{\"d_vocab\": 512, \"d_model\": 64, \"n_layers\": 2, \"n_heads\": 2, \"d_head\": 32, \"n_ctx\": 0}", "n_ctx"),
    ],
)
def test_a_malformed_config_json_is_an_error_naming_it(tmp_path, config, message):
    saved_model(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_bytes(config.encode("latin-1"))
    with pytest.raises(CheckpointError, match=message):
        load_model(tmp_path / "m")


def test_a_damaged_tokenizer_json_is_an_error_naming_it(tmp_path):
    saved_model(tmp_path / "m", tokenizer=story_tokenizer(seed=1))
    path = tmp_path / "m" / "tokenizer.json"
    path.write_text(path.read_text()[:500])
    with pytest.raises(CheckpointError, match=r"tokenizer\.json cannot be read as a tokenizer"):
        load_model(tmp_path / "m")


# ------------------------------------------------------------------------------- training checkpoints

SEQ_LEN = 16
TRAINER_SETTINGS = dict(steps=10, batch_size=4, seq_len=SEQ_LEN, lr=3e-3, warmup=2, eval_every=5, eval_sequences=8,
                        ckpt_every=3, guard_window=4)
DETERMINISTIC = ("step", "loss", "lr", "grad_norm", "selectivity", "running_loss", "tokens_seen", "eval_loss")


def make_trainer(out: Path):
    """A tiny-legible trainer on seeded synthetic windows (the same in every process)."""
    from circuitlab.training.settings import TrainConfig
    from circuitlab.training.trainer import Trainer

    generator = torch.Generator().manual_seed(0)
    starts = torch.randint(0, 512, (48, 1), generator=generator)
    windows = torch.cat([starts, starts + torch.randint(1, 4, (48, SEQ_LEN), generator=generator).cumsum(1)], 1) % 512
    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    model.reset_parameters(seed=0)
    return Trainer(model, TrainConfig(**TRAINER_SETTINGS), windows[:40].int(), windows[40:].int(), out, progress=False)


def logged(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in DETERMINISTIC if k in r} for r in records]


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order, so losses compare bitwise across processes
    yield
    torch.set_num_threads(threads)


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    sys.path[:0] = [{tests!r}, {tests!r} + "/.."]
    import circuitlab.architectures.weights as checkpoint
    from test_faults_checkpoint import make_trainer

    real_save_tensors = checkpoint.save_tensors

    def dying_save_tensors(tensors, path, metadata=None):
        path = Path(path)
        if path.name == "optimizer.safetensors" and path.parent.name.startswith(".tmp-step_00000006"):
            path.write_bytes(b"half an optimizer file")
            os.kill(os.getpid(), signal.SIGKILL)  # no finally, no atexit: as if the machine lost power
        return real_save_tensors(tensors, path, metadata)

    checkpoint.save_tensors = dying_save_tensors
    make_trainer(Path({out!r})).fit()
    """
)


def test_sigkill_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path, one_thread):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    script = tmp_path / "killer.py"
    script.write_text(KILLER.format(tests=str(TESTS), out=str(killed)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    root = killed / "checkpoints"
    partial = [p.name for p in root.glob(".tmp-step_00000006-*")]
    assert len(partial) == 1 and not (root / "step_00000006").exists()
    assert json.loads((root / "latest.json").read_text())["step"] == 3
    assert [r["step"] for r in logged(killed)] == list(range(1, 7))  # steps 4-6 were logged, never checkpointed

    resumed = make_trainer(killed)
    assert resumed.fit(resume=True).step == 10
    make_trainer(whole).fit()
    assert logged(killed) == logged(whole)  # bitwise, the steps after the resume included
    assert not list(root.glob(".tmp-*"))  # the half-written checkpoint was cleaned up
    assert sorted(p.name for p in root.glob("step_*")) == ["step_00000006", "step_00000009"]


@pytest.mark.parametrize(
    "file, damage, message",
    [
        ("optimizer.safetensors", "flip", "optimizer.safetensors: the tensors differ from the sha256"),
        ("rng.safetensors", "truncate", "rng.safetensors is not a readable safetensors file"),
        ("model.safetensors", "flip", "model.safetensors: the tensors differ from the sha256"),
        ("trainer_state.json", "latin-1", "trainer_state.json cannot be read"),
        ("trainer_state.json", "list", "trainer_state.json is not a circuitlab training checkpoint"),
        ("trainer_state.json", "drop-key", "trainer_state.json lacks guard"),
    ],
)
def test_a_damaged_training_checkpoint_names_the_file(tmp_path, one_thread, file, damage, message):
    from circuitlab.training.resume import CheckpointMismatchError

    make_trainer(tmp_path).fit(stop_at=3)
    path = tmp_path / "checkpoints" / "step_00000003" / file
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[safetensors_data_offset(path) + 3] ^= 0x10
    elif damage == "truncate":
        data = data[: len(data) - 5]
    elif damage == "latin-1":
        data = bytearray("{\"format\": \"café\"}".encode("latin-1"))
    elif damage == "list":
        data = bytearray(b"[1, 2]")
    else:
        state = json.loads(data)
        del state["guard"]
        data = bytearray(json.dumps(state).encode())
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointMismatchError, match=message):
        make_trainer(tmp_path).fit(resume=True)


def test_a_damaged_checkpoint_through_the_cli_is_one_line_and_exit_2(tmp_path, capsys, one_thread):
    from circuitlab.cli import main

    args = ["train", "--preset", "tiny-gelu", "--out", str(tmp_path / "run"), "--data-dir", str(tmp_path / "data"),
            "--steps", "4", "--batch-size", "4", "--seq-len", "16", "--n-stories", "60", "--held-out-stories", "8",
            "--vocab-size", "300", "--eval-every", "0", "--ckpt-every", "2", "--max-minutes", "0.0001", "--quiet"]
    assert main(args) == 0  # the time limit stops it after the first step, with a checkpoint
    capsys.readouterr()
    (checkpoint,) = (tmp_path / "run" / "checkpoints").glob("step_*")
    rng = checkpoint / "rng.safetensors"
    rng.write_bytes(rng.read_bytes()[:40])
    assert main([*args[:-3], "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the data summary line, then the error
    assert err[-1].startswith("circuitlab train: error:") and "rng.safetensors" in err[-1], err
    assert not any("Traceback" in line for line in err) and sum("error" in line for line in err) == 1, err


# ------------------------------------------------------------------------------------------- caches


def test_a_damaged_windows_cache_is_rebuilt_to_the_same_windows(tmp_path):
    from circuitlab.training.corpus import DataSpec, prepare_data

    spec = DataSpec(n_stories=60, n_held_out=8, vocab_size=300)
    first = prepare_data(spec, 16, tmp_path, show_progress=False)
    (windows,) = tmp_path.glob("windows-*.safetensors")
    data = bytearray(windows.read_bytes())
    data[safetensors_data_offset(windows) + 7] ^= 0x01  # one token id silently off by a bit
    windows.write_bytes(bytes(data))
    (tokenizer,) = tmp_path.glob("tokenizer-*.json")
    tokenizer.write_text("{damaged")
    again = prepare_data(spec, 16, tmp_path, show_progress=False)
    assert torch.equal(again.train_windows, first.train_windows) and torch.equal(again.held_out_windows, first.held_out_windows)
    assert again.tokenizer.hash() == first.tokenizer.hash()
    assert load_tensors(windows)[0]["train"].equal(first.train_windows)  # the cache was rewritten whole


@pytest.mark.parametrize("damage", ["garbage", "truncate", "other-counts"])
def test_a_damaged_token_cache_is_rebuilt(tmp_path, damage):
    import numpy as np

    from circuitlab.data.loaders import tokenize_documents

    tokenizer = story_tokenizer(seed=1)
    texts = ["The turtle was slow.", "Lily had a red ball.", ""]
    expected = tokenize_documents(texts, tokenizer, cache_dir=tmp_path, show_progress=False)
    (cache,) = tmp_path.glob("tokens-*.npz")
    if damage == "garbage":
        cache.write_bytes(b"PK\x03\x04 not really a zip")
    elif damage == "truncate":
        cache.write_bytes(cache.read_bytes()[:60])
    else:
        np.savez(cache.with_suffix(""), ids=np.arange(5, dtype=np.int32), offsets=np.array([0, 5], dtype=np.int64))
    assert tokenize_documents(texts, tokenizer, cache_dir=tmp_path, show_progress=False) == expected
    assert expected == [tokenizer.encode(text) for text in texts]


def test_copying_a_model_folder_keeps_it_loadable(tmp_path):
    """The records travel with the files: a copied folder is the same model."""
    model = saved_model(tmp_path / "m", tokenizer=story_tokenizer(seed=1))
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    loaded = load_model(tmp_path / "copy")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
