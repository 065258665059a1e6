"""Issue 8, bad inputs: a model folder whose tokenizer does not match, a database queried with another model, a
config with impossible sizes, a corpus that is empty or not UTF-8, a prompt longer than the context. Each is a
clear error from the API, and through the CLI one line on stderr with exit status 2 and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from circuitlab import CheckpointError, CircuitTransformer, ContextLengthError, ModelConfig, load_model
from circuitlab.cli import main
from circuitlab.data import DataError

LONG_TEXT = "Lily had a red ball and she liked to play with it in the park. " * 30  # far over 128 tokens


def tokenizer(seed: int, vocab_size: int = 300):
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    return train_tokenizer([s.text for s in generate_stories(40, seed=seed)], vocab_size=vocab_size, show_progress=False)


def save(folder: Path, preset: str, tok) -> Path:
    model = CircuitTransformer(ModelConfig.preset(preset).replace(d_vocab=tok.vocab_size), tokenizer=tok)
    model.reset_parameters(seed=0)
    model.save(folder)
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Model folders, a circuit database built with one of them, and bad files, made once."""
    root = tmp_path_factory.mktemp("bad_inputs")
    own, same_size, smaller = tokenizer(1), tokenizer(2), tokenizer(1, vocab_size=280)
    paths = {
        "model": save(root / "model", "tiny-gelu", own),
        "other_architecture": save(root / "other_architecture", "tiny-sgatlin", own),
        "other_tokenizer": save(root / "other_tokenizer", "tiny-gelu", same_size),
        "legible": save(root / "legible", "tiny-legible", own),
    }
    for name, replacement in (("smaller_tokenizer", smaller), ("swapped_tokenizer", same_size)):
        folder = save(root / name, "tiny-gelu", own)
        replacement.save(folder / "tokenizer.json")
        paths[name] = folder
    assert main(["db", "build", "--model", str(paths["model"]), "--stories", "2", "--out", str(root / "db"),
                 "--index", "none", "--quiet"]) == 0
    paths["db"] = root / "db"
    files = {
        "empty.txt": b"", "blank.txt": b"  \n\n\t\n", "latin.txt": "Un café noir.".encode("latin-1"),
        "empty.jsonl": b"", "latin.jsonl": '{"text": "café"}\n'.encode("latin-1"), "long.txt": LONG_TEXT.encode(),
        "half.jsonl": b'{"text": "fine"}\n{"text": "cut sh', "bom16.txt": "hello".encode("utf-16"),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
        paths[name] = root / name
    (root / "folder_without_text").mkdir()
    paths["folder_without_text"] = root / "folder_without_text"
    base = ModelConfig.preset("tiny-gelu").to_dict()
    configs = {
        "zero_width": dict(base, d_model=0), "negative_depth": dict(base, n_layers=-2), "no_context": dict(base, n_ctx=0),
        "odd_rope_head": dict(base, d_head=31), "no_vocabulary": dict(base, d_vocab=0),
        "huge": dict(base, d_model=10**9, d_head=5 * 10**8),  # one 2 TB embedding: refused before any allocation
        "unknown_key": dict(base, d_modle=64),
    }
    for name, config in configs.items():
        (root / f"{name}.json").write_text(json.dumps(config))
        paths[f"config_{name}"] = root / f"{name}.json"
    return root, paths


def one_line_error(capsys, argv: list[str], expected: str) -> str:
    """Run the CLI; it must exit 2 with exactly one error line (the last one on stderr), holding `expected`."""
    threads = torch.get_num_threads()
    try:
        status = main(argv)
    finally:
        torch.set_num_threads(threads)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.strip().splitlines() if line.strip()]
    assert status == 2, (argv, status, captured.err[-2000:])
    assert lines and "error" in lines[-1] and expected in lines[-1], (argv, lines[-3:])
    assert sum("error" in line for line in lines) == 1 and "Traceback" not in captured.err, (argv, captured.err[-2000:])
    return lines[-1]


# ------------------------------------------------------------------------------- tokenizer mismatch


@pytest.mark.parametrize(
    "folder, expected",
    [("smaller_tokenizer", "tokenizer vocab 280 != model d_vocab 300"), ("swapped_tokenizer", "tokenizer sha256")],
)
def test_a_model_folder_whose_tokenizer_does_not_match(world, capsys, folder, expected):
    root, paths = world
    with pytest.raises(CheckpointError, match=expected):
        load_model(paths[folder])
    model = str(paths[folder])
    for argv in (["summary", model], ["dla", model, "The dog"], ["patch", model],
                 ["db", "build", "--model", model, "--stories", "2", "--out", str(root / f"db_{folder}"), "--quiet"],
                 ["demo", model, "--runs", str(root / "runs"), "--no-serve", "--fast", "--quiet"]):
        line = one_line_error(capsys, argv, expected)
        assert "tokenizer.json" in line
    assert not (root / f"db_{folder}").exists() and not (root / "runs").exists()


# -------------------------------------------------------------------------- database, another model


def test_a_database_queried_with_another_model(world, capsys):
    from circuitlab.analysis.circuitdb import CircuitDB, DatabaseMismatchError

    _, paths = world
    for other, expected in (("other_architecture", "model config hash"), ("other_tokenizer", "tokenizer hash")):
        with pytest.raises(DatabaseMismatchError, match=expected):
            CircuitDB.load(paths["db"], model=load_model(paths[other]))
        one_line_error(capsys, ["db", "query", str(paths["db"]), "The dog", "--model", str(paths[other])], expected)
    with pytest.warns(UserWarning, match="tokenizer hash"):
        assert main(["db", "query", str(paths["db"]), "The dog", "--model", str(paths["other_tokenizer"]),
                     "--allow-mismatch", "-k", "2"]) == 0
    assert "exact search" in capsys.readouterr().out  # the documented escape hatch still works
    assert main(["db", "query", str(paths["db"]), "The dog", "-k", "2"]) == 0  # the model it was built with


# ------------------------------------------------------------------------------- impossible configs


@pytest.mark.parametrize(
    "name, expected",
    [("zero_width", "d_model must be a positive integer"), ("negative_depth", "n_layers must be a positive integer"),
     ("no_context", "n_ctx must be a positive integer"), ("odd_rope_head", "even d_head"),
     ("no_vocabulary", "d_vocab must be a positive integer"), ("unknown_key", "unknown model config keys")],
)
def test_a_config_with_impossible_sizes(world, capsys, name, expected):
    root, paths = world
    config = str(paths[f"config_{name}"])
    with pytest.raises(ValueError, match=expected):
        ModelConfig.from_json(config)
    one_line_error(capsys, ["summary", config], expected)
    out = root / f"train_{name}"
    one_line_error(capsys, ["train", "--config", config, "--out", str(out), "--seq-len", "8", "--n-stories", "20"], expected)
    assert not out.exists()  # refused before any data work


def test_a_config_too_large_for_the_machine(world, capsys):
    """Valid sizes, but about 2 TB of weights: refused at once with the sizes, not a crash of the allocator."""
    root, paths = world
    config = str(paths["config_huge"])
    one_line_error(capsys, ["summary", config], "out of memory")
    out = root / "train_huge"
    line = one_line_error(capsys, ["train", "--config", config, "--out", str(out), "--seq-len", "16", "--n-stories", "20",
                                   "--held-out-stories", "4", "--vocab-size", "300", "--device", "cpu"],
                          "training needs at least")
    assert "GiB" in line and "parameters" in line
    assert not (out / "data").exists()  # refused before the corpus was generated and tokenized


def test_the_training_memory_floor_counts_parameters_exactly(monkeypatch):
    from circuitlab.training import run as train_run

    config = ModelConfig.preset("tiny-sgatlin")
    real = CircuitTransformer(config.replace(d_vocab=257))
    expected = sum(p.numel() for p in real.parameters())
    cpu = torch.device("cpu")
    monkeypatch.setattr(train_run, "device_memory_bytes", lambda device: 16 * expected)  # just enough for one process
    assert train_run.check_model_fits(config, cpu) == expected
    with pytest.raises(ValueError, match=f"at least {expected:,} parameters"):
        train_run.check_model_fits(config, cpu, world_size=2)  # two processes share the machine's memory
    assert train_run.check_model_fits(config, cpu, world_size=2, fsdp=True) == expected  # each holds half
    monkeypatch.setattr(train_run, "device_memory_bytes", lambda device: 16 * expected - 1)
    with pytest.raises(ValueError, match="reduce d_model"):
        train_run.check_model_fits(config, cpu)


@pytest.mark.parametrize("changes", [{"feedforward": None}, {"n_heads": 2.5}, {"attention": [1]}])
def test_a_config_with_fields_of_the_wrong_type(tmp_path, capsys, changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(ModelConfig.preset("tiny-gelu").to_dict(), **changes)))
    one_line_error(capsys, ["summary", str(path)], "config")


# ---------------------------------------------------------------------------------- corpora


@pytest.mark.parametrize(
    "source, file, expected",
    [
        ("--text", "empty.txt", "empty corpus"), ("--text", "blank.txt", "empty corpus"),
        ("--text", "latin.txt", "latin.txt is not valid UTF-8: byte offset 6"),
        ("--text", "bom16.txt", "bom16.txt is not valid UTF-8"),
        ("--text", "folder_without_text", "no .txt files"), ("--jsonl", "empty.jsonl", "empty corpus"),
        ("--jsonl", "latin.jsonl", "latin.jsonl is not valid UTF-8"), ("--jsonl", "half.jsonl", "line 2: not valid JSON"),
        ("--hf-dataset", "missing.jsonl", "missing.jsonl: no such file"),
    ],
)
def test_a_corpus_that_is_empty_or_not_utf8(world, capsys, source, file, expected):
    from circuitlab.data import load_documents

    root, paths = world
    path = paths.get(file, root / file)
    if source != "--hf-dataset":
        with pytest.raises(DataError, match=expected.split(" is not")[0] if "UTF-8" in expected else expected):
            load_documents(path)
    out = root / f"train_{file}"
    one_line_error(capsys, ["train", "--preset", "tiny-gelu", "--out", str(out), source, str(path), "--quiet"], expected)
    assert not out.exists()  # a run that failed before writing anything leaves no folder behind
    if source == "--text":
        one_line_error(capsys, ["tokenizer", "--corpus", str(path), "--out", str(root / "t.json"), "--quiet"], expected)
        one_line_error(capsys, ["db", "build", "--model", str(paths["model"]), "--corpus", str(path), "--out",
                                str(root / f"db_{file}"), "--quiet"], expected.split(":")[0])


def test_a_missing_data_file_is_never_looked_up_on_the_hub(tmp_path, monkeypatch, capsys):
    """'stories.json' that does not exist is a typo, not a Hugging Face dataset name: no network, a clear error."""
    datasets = pytest.importorskip("datasets")
    from circuitlab.data import load_documents, load_hf_dataset

    def no_hub(*args, **kwargs):
        raise AssertionError(f"asked the hub for {args[0]!r}")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.chdir(tmp_path)
    for name in ("stories.json", "data/train.parquet", "corpus.csv", "missing.jsonl"):
        with pytest.raises(DataError, match=f"{name}: no such file"):
            load_hf_dataset(name) if not name.endswith(".jsonl") else load_documents(name)
    one_line_error(capsys, ["tokenizer", "--corpus", "stories.json", "--out", "t.json", "--quiet"], "stories.json: no such file")
    one_line_error(capsys, ["train", "--preset", "tiny-gelu", "--out", "run", "--hf-dataset", "corpus.csv", "--quiet"],
                   "corpus.csv: no such file")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline")))
    with pytest.raises(DataError, match="cannot load the Hugging Face dataset 'someone/stories'.*offline"):
        load_hf_dataset("someone/stories")  # a real hub name that cannot be reached: still a DataError


@pytest.mark.parametrize("argv", [["db", "build", "--model", "{model}", "--corpus", "{latin_jsonl}", "--out", "{root}/db_latin"],
                                  ["legibility", "{legible}", "--text", "{latin_txt}"]])
def test_other_verbs_name_a_file_that_is_not_utf8(world, capsys, argv):
    root, paths = world
    filled = [a.format(model=paths["model"], legible=paths["legible"], root=root, latin_jsonl=paths["latin.jsonl"], latin_txt=paths["latin.txt"])
              for a in argv]
    one_line_error(capsys, filled, "latin")


# ----------------------------------------------------------------------------- prompt too long


def test_a_prompt_longer_than_the_context(world, capsys):
    from circuitlab.analysis.circuitdb import CircuitDB

    _, paths = world
    model = load_model(paths["model"])
    tokens = torch.tensor([model.tokenizer.encode(LONG_TEXT)])
    assert tokens.shape[1] > model.config.n_ctx
    with pytest.raises(ContextLengthError, match=f"prompt of {tokens.shape[1]} tokens is longer than the model's context n_ctx=128"):
        model(tokens)
    with pytest.raises(ContextLengthError, match="longer than"):
        model.run_with_cache(tokens[:, : model.config.n_ctx + 1])
    model(tokens[:, : model.config.n_ctx])  # exactly the context is fine
    db = CircuitDB.load(paths["db"], model=model)
    with pytest.raises(ValueError, match="longer than the model's context"):
        db.search(LONG_TEXT, 0, k=3)
    one_line_error(capsys, ["dla", str(paths["model"]), LONG_TEXT], "longer than the model's context")
    ids = ",".join(["5"] * (model.config.n_ctx + 1))
    one_line_error(capsys, ["dla", str(paths["model"]), ids, "--tokens"], "129 tokens is longer than the model's context")
    one_line_error(capsys, ["db", "query", str(paths["db"]), LONG_TEXT], "longer than the model's context")
    pairs = paths["long.txt"].parent / "long_pairs.json"
    pairs.write_text(json.dumps([{"clean_tokens": [5] * 130, "patch_tokens": [6] * 130, "clean_answer_id": 1,
                                  "patch_answer_id": 2}]))
    one_line_error(capsys, ["patch", str(paths["model"]), "--pairs", str(pairs), "--positions", "final"], "longer than")


# -------------------------------------------------------------------------- a mistyped model name


def test_a_mistyped_model_name_gets_the_closest_name_suggested(tmp_path, capsys, monkeypatch):
    from circuitlab.architectures.weights import shipped_models

    monkeypatch.chdir(tmp_path)  # no folder of these names here
    assert "sgatlin-stories" in shipped_models()
    with pytest.raises(CheckpointError, match="did you mean 'parity-stories'"):
        load_model("parity-storys")
    one_line_error(capsys, ["summary", "sgatlin-stoires"], "did you mean 'sgatlin-stories'")
    one_line_error(capsys, ["summary", "preset:tiny-sgatln"], "did you mean 'tiny-sgatlin'")
    one_line_error(capsys, ["demo", "gelu-storys", "--no-serve", "--quiet"], "did you mean 'gelu-stories'")
    line = one_line_error(capsys, ["summary", "zebra"], "is neither a model folder")
    assert "did you mean" not in line  # nothing close: no guess
