"""`circuitlab train` on one plain-text file (split into documents) and on the mixture of natural and
generated stories with its two held-out sets, and the text split modes behind `--text`."""

from __future__ import annotations

import json

import numpy as np

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from circuitlab.architectures.transformer import load_model
from circuitlab.cli import main
from circuitlab.data._io import DataError
from circuitlab.data.loaders import load_text_files
from circuitlab.data.natural import split_of

QUICK = ["--steps", "4", "--batch-size", "4", "--seq-len", "32", "--held-out-stories", "20", "--vocab-size", "400",
         "--eval-every", "0", "--ckpt-every", "0", "--threads", "1", "--quiet"]


def train(args: list[str]) -> int:
    threads = torch.get_num_threads()
    try:
        return main(["train", *args])
    finally:
        torch.set_num_threads(threads)


def test_text_split_modes(tmp_path):
    marked = tmp_path / "marked.txt"
    marked.write_text("First doc.\n\nstill first<|endoftext|>Second doc.<|endoftext|>\n")
    assert load_text_files(marked, split_documents="eot") == ["First doc.\n\nstill first", "Second doc."]
    assert load_text_files(marked, split_documents="auto") == ["First doc.\n\nstill first", "Second doc."]
    book = tmp_path / "book.txt"
    words = [f"word{i}" for i in range(300)]
    book.write_text(" ".join(words[:150]) + "\n\n" + " ".join(words[150:]))
    windows = load_text_files(book, split_documents="window", window_chars=100)
    assert all(len(w) <= 100 for w in windows) and " ".join(windows).split() == words  # nothing lost, no word cut
    auto = load_text_files(book, split_documents="auto", window_chars=100)
    # paragraphs first, then windows inside each: no window spans the paragraph break
    assert all(("word149" not in w) or ("word150" not in w) for w in auto) and " ".join(auto).split() == words
    assert load_text_files(book, split_documents="auto", window_chars=10**6) == [" ".join(words[:150]), " ".join(words[150:])]
    unbroken = tmp_path / "unbroken.txt"
    unbroken.write_text("x" * 25)
    assert load_text_files(unbroken, split_documents="window", window_chars=10) == ["x" * 10, "x" * 10, "x" * 5]
    with pytest.raises(DataError, match="window_chars=0"):
        load_text_files(book, split_documents="window", window_chars=0)


def test_one_book_without_blank_lines_trains(tmp_path):
    from circuitlab.data import iter_stories

    book = tmp_path / "book.txt"
    book.write_text(" ".join(story.text.replace("\n\n", " ") for story in iter_stories(150, seed=3)))  # one paragraph
    assert len(load_text_files(book, split_documents="blank_line")) == 1
    out = tmp_path / "book_run"
    assert train(["--preset", "tiny-gelu", *QUICK, "--out", str(out), "--text", str(book), "--window-chars", "1000",
                  "--held-out-fraction", "0.1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    n_windows = len(load_text_files(book, split_documents="auto", window_chars=1000))
    assert n_windows > 20
    data = metrics["data"]
    assert data["train_documents"] + data["validation_documents"] + data["held_out_documents"] == n_windows
    assert data["held_out_documents"] == round(0.1 * n_windows)
    assert data["validation_documents"] == max(1, round(0.02 * n_windows))


def _natural_folder(tmp_path, n: int = 60):
    from circuitlab.data import iter_stories

    folder = tmp_path / "natural"
    (folder / "stories").mkdir(parents=True)
    prompts = [json.dumps({"id": i, "noun": "dog", "verb": "run", "adjective": "big", "features": []}) for i in range(n)]
    (folder / "prompts.jsonl").write_text("\n".join(prompts) + "\n")
    texts = [story.text for story in iter_stories(n, seed=11)]
    (folder / "stories" / "part_0000.txt").write_text("".join(f"### {i}\n{text}\n\n" for i, text in enumerate(texts)))
    return folder, texts


def test_mixture_trains_and_reports_both_held_out_sets(tmp_path):
    folder, texts = _natural_folder(tmp_path)
    n_held = sum(split_of(i) == "held_out" for i in range(len(texts)))
    n_validation = sum(split_of(i) == "validation" for i in range(len(texts)))
    assert 2 <= n_held <= 15 and 1 <= n_validation <= 10
    out = tmp_path / "mix"
    assert train(["--preset", "tiny-gelu", *QUICK, "--out", str(out), "--n-stories", "150", "--natural", str(folder),
                  "--natural-upsample", "3"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    data = metrics["data"]
    assert data["train_documents"] == 150 + 3 * (len(texts) - n_held - n_validation)
    assert data["held_out_sets"]["natural"]["documents"] == n_held
    assert data["held_out_sets"]["generated"]["documents"] == 20
    assert data["held_out_documents"] == n_held + 20
    assert data["validation_sets"]["natural"]["documents"] == n_validation
    assert data["validation_sets"]["generated"]["documents"] == 200  # --validation-stories' default
    # the natural held-out stories read one at a time, with an interval over stories, and the per-story numbers
    per_story = metrics["natural_held_out_per_story"]
    saved = np.load(out / "held_out_stories.npz")
    assert per_story["stories"] == n_held == len(saved["ids"]) and per_story["tokens"] == int(saved["tokens"].sum())
    assert per_story["loss"] == pytest.approx(saved["nll"].sum() / saved["tokens"].sum())
    assert per_story["ci95"][0] < per_story["loss"] < per_story["ci95"][1]
    assert "each story read alone" in (out / "card.md").read_text()
    # the passes over the training data, and so over each natural story (3 copies each), are on record
    assert metrics["natural_story_passes"] == pytest.approx(3 * metrics["epochs"])
    assert metrics["epochs"] == pytest.approx(metrics["tokens_seen"] / data["train_tokens"])
    # the reported losses, recomputed from the stored windows independently of the trainer
    (windows_file,) = (out / "data").glob("windows-*.safetensors")
    stored = load_file(windows_file)
    model = load_model(out)
    for name in ("natural", "generated"):
        windows = stored[f"held_out/{name}"].long()
        with torch.no_grad():
            logits = model(windows[:, :-1])
        loss = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)))
        assert metrics[f"{name}_held_out_loss"] == pytest.approx(loss, abs=2e-3)
        assert metrics["held_out_sets"][name]["tokens"] == windows[:, 1:].numel()
    # a 400-token vocabulary splits the fact words, so neither accuracy can be measured here
    assert metrics["fact_accuracy"] is None and metrics["fact_accuracy_distant"] is None
    assert "not measured" in metrics["fact_accuracy_detail"]
    card = (out / "card.md").read_text()
    assert "natural held-out loss" in card and "generated held-out loss" in card
    # each held-out set has its own perplexity in the headline row, never their blend
    header = next(line for line in card.splitlines() if "fact accuracy" in line and line.startswith("|"))
    assert header.startswith("| natural perplexity | generated perplexity | fact accuracy")
    row = card.splitlines()[card.splitlines().index(header) + 2].split("|")
    assert float(row[1]) == pytest.approx(metrics["held_out_sets"]["natural"]["ppl"], abs=1e-3)
    assert float(row[2]) == pytest.approx(metrics["held_out_sets"]["generated"]["ppl"], abs=1e-3)
    assert "the natural held-out split and" in card and "generator seed the training corpus never used" not in card


def test_mixture_errors(tmp_path, capsys):
    folder, _ = _natural_folder(tmp_path, n=3)
    assert train(["--preset", "tiny-gelu", *QUICK, "--out", str(tmp_path / "a"), "--natural", str(tmp_path / "none")]) == 2
    assert "no prompts file" in capsys.readouterr().err
    assert train(["--preset", "tiny-gelu", *QUICK, "--out", str(tmp_path / "b"), "--natural", str(folder),
                  "--natural-upsample", "0"]) == 2
    assert "--natural-upsample must be a positive" in capsys.readouterr().err
    assert train(["--preset", "tiny-gelu", *QUICK, "--out", str(tmp_path / "c"), "--natural", str(folder),
                  "--text", str(folder / "stories" / "part_0000.txt")]) == 2
    assert "cannot go with" in capsys.readouterr().err
