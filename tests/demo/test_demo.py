"""`circuitlab demo`: run-folder names and paths, the cached pipeline and what it writes, the dashboard's
input handlers (including property tests over random text), and localhost binding."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitlab.atomic import atomic_write
from circuitlab.demo import (
    RUN_MANIFEST,
    RunFolder,
    RunFolderError,
    Sizes,
    attribute_prompt,
    check_run_name,
    check_text,
    custom_patch_pair,
    dla_tables,
    load_usage_reports,
    lookup_circuits,
    model_identity,
    nie_for_parquet,
    nie_from_parquet,
    run_custom_patch,
    run_folder_path,
    run_pipeline,
)
from circuitlab.cli.demo import dashboard_command, is_loopback
from demo_fixtures import build_runs

ODD_TEXTS = [
    "", "   \n\t ", "🙂🚀 émoji and ünïcödé ✓", "\x00\x01 control \x7f", "\ud800 lone surrogate", "中文 العربية עברית",
    "a" * 25_000, "The turtle was " * 100, "\u200b\u200d", "<|endoftext|>", "'); DROP TABLE runs; --",
]


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    return build_runs(tmp_path_factory.getbasetemp() / "circuitlab-demo")


@pytest.fixture(scope="session")
def sgatlin(demo_runs):
    from circuitlab import load_model
    from circuitlab.analysis.circuitdb import CircuitDB

    _, models, runs = demo_runs
    model = load_model(models["tiny-sgatlin"])
    db = CircuitDB.load(runs["tiny-sgatlin"] / "circuitdb", model=model)
    return model, db, RunFolder.open(runs["tiny-sgatlin"])


# ------------------------------------------------------------------------------------------- run names


@pytest.mark.parametrize("name", ["sgatlin-stories", "tiny_1.2", "Model+v2", "a"])
def test_good_run_names_are_kept_as_given(tmp_path, name):
    assert check_run_name(name) == name
    assert run_folder_path(tmp_path, name) == tmp_path.resolve() / name


@pytest.mark.parametrize(
    "name", ["..", "../evil", "a/b", "a\\b", "/etc", "runs/../../x", ".hidden", "", "x" * 101, "has space", "nul\x00", "a..b"]
)
def test_run_names_that_could_escape_or_hide_are_refused(tmp_path, name):
    with pytest.raises(RunFolderError):
        run_folder_path(tmp_path, name)


def test_a_symlinked_run_folder_pointing_outside_is_refused(tmp_path):
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    runs.mkdir()
    outside.mkdir()
    (runs / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RunFolderError, match="outside the runs folder"):
        run_folder_path(runs, "evil")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=30))
def test_any_accepted_name_is_a_direct_child_of_the_runs_folder(tmp_path, name):
    try:
        folder = run_folder_path(tmp_path, name)
    except RunFolderError:
        return
    assert folder.parent == tmp_path.resolve() and folder.name == name and ".." not in name


def test_cli_refuses_an_escaping_name_without_touching_the_disk(demo_runs, tmp_path, capsys):
    from circuitlab.cli import main

    _, models, _ = demo_runs
    runs = tmp_path / "runs"
    status = main(["demo", str(models["tiny-sgatlin"]), "--runs", str(runs), "--name", "../escaped", "--no-serve", "--quiet"])
    assert status == 2
    assert "path separator" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not runs.exists()


def test_a_model_folder_name_that_cannot_name_a_run_asks_for_name(demo_runs, tmp_path, capsys):
    from circuitlab.cli import main

    _, models, _ = demo_runs
    odd = tmp_path / "my model"
    shutil.copytree(models["tiny-sgatlin"], odd)
    assert main(["demo", str(odd), "--runs", str(tmp_path / "runs"), "--no-serve", "--quiet"]) == 2
    assert "--name" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "my model").exists()


# ------------------------------------------------------------------------------- localhost binding


def test_dashboard_and_demo_bind_to_localhost_unless_told_otherwise(tmp_path):
    from circuitlab.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["dashboard"]).host == "127.0.0.1"
    assert parser.parse_args(["demo", "--no-serve"]).host == "127.0.0.1"
    command = dashboard_command(tmp_path)
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.headless") + 1] == "true"
    assert command[-2:] == ["--run", str(tmp_path)]
    elsewhere = dashboard_command(tmp_path, host="0.0.0.0", port=9000)
    assert elsewhere[elsewhere.index("--server.address") + 1] == "0.0.0.0"
    assert elsewhere[elsewhere.index("--server.port") + 1] == "9000"


@pytest.mark.parametrize("host", ["", "a b", "$(reboot)", "host;ls", "x" * 300])
def test_bad_hosts_are_refused_by_the_cli(host, capsys):
    from circuitlab.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["dashboard", "--host", host])
    assert exit_info.value.code == 2


@settings(max_examples=200, deadline=None)
@given(host=st.text(max_size=40), port=st.text(max_size=8))
def test_dashboard_arguments_parse_or_exit_2(host, port):
    from circuitlab.cli import build_parser

    try:
        args = build_parser().parse_args(["dashboard", "--host", host, "--port", port])
    except SystemExit as exit_info:
        assert exit_info.code == 2
        return
    try:
        command = dashboard_command(Path("runs/x"), args.host, args.port)
    except ValueError as error:
        assert "--port" in str(error)
        return
    assert command[command.index("--server.address") + 1] == host


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")


def test_dashboard_verb_on_a_folder_that_is_not_a_run_says_how_to_make_one(tmp_path, capsys):
    from circuitlab.cli import main

    assert main(["dashboard", "--run", str(tmp_path / "nothing")]) == 2
    assert "circuitlab demo" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- run folder files


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "table.parquet"
    target.write_text("previous")

    def failing(temporary: Path) -> None:
        temporary.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, failing)
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.parquet"]


def test_a_damaged_manifest_is_a_clear_error(tmp_path):
    (tmp_path / RUN_MANIFEST).write_text("{not json")
    with pytest.raises(RunFolderError, match="not readable JSON"):
        RunFolder.open(tmp_path)
    (tmp_path / RUN_MANIFEST).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(RunFolderError, match="not a circuitlab run manifest"):
        RunFolder.open(tmp_path)
    with pytest.raises(RunFolderError, match="circuitlab demo"):
        RunFolder.open(tmp_path / "missing")


def test_nie_tables_survive_parquet_with_mixed_layer_and_position_types(tmp_path):
    table = pd.DataFrame({"layer": [0, 1, 10, "all"], "position": ["noun", 3, "final", "all"], "nie": [0.1, 0.2, 0.3, 0.4]})
    table["layer"] = table["layer"].astype(object)
    nie_for_parquet(table).to_parquet(tmp_path / "nie.parquet")
    back = nie_from_parquet(pd.read_parquet(tmp_path / "nie.parquet"))
    assert list(back["layer"]) == [0, 1, 10, "all"] and list(back["position"]) == ["noun", 3, "final", "all"]


# ------------------------------------------------------------------------------ what the demo writes


def test_the_run_folder_records_every_artifact_with_its_params(demo_runs):
    _, models, runs = demo_runs
    manifest = json.loads((runs["tiny-sgatlin"] / RUN_MANIFEST).read_text())
    assert manifest["model"] == str(models["tiny-sgatlin"])
    assert set(manifest["artifacts"]) == {"card", "corpus", "circuitdb", "semantic", "umap", "usage", "nie", "legibility", "dla"}
    assert manifest["artifacts"]["corpus"]["params"]["stories"] == Sizes.fast().stories
    assert "bounded value channels" in manifest["artifacts"]["legibility"]["skipped"]
    assert "skipped" not in manifest["artifacts"]["usage"]
    legible = json.loads((runs["tiny-legible"] / RUN_MANIFEST).read_text())
    assert "dense activations" in legible["artifacts"]["usage"]["skipped"]
    assert "skipped" not in legible["artifacts"]["legibility"]
    parity = json.loads((runs["tiny-parity"] / RUN_MANIFEST).read_text())
    assert "skipped" not in parity["artifacts"]["usage"] and "skipped" in parity["artifacts"]["legibility"]
    gelu = json.loads((runs["tiny-gelu"] / RUN_MANIFEST).read_text())
    assert {key for key, entry in gelu["artifacts"].items() if entry.get("skipped")} == {"usage", "legibility"}
    for entry in manifest["artifacts"].values():
        for name in entry["files"]:
            assert (runs["tiny-sgatlin"] / name).exists(), name
    assert (runs["tiny-sgatlin"] / "card.md").read_text().startswith("# tiny-sgatlin")


def test_corpus_and_circuit_database_cover_the_held_out_stories(sgatlin):
    from circuitlab.data.stories import held_out_stories, read_corpus

    model, db, run = sgatlin
    texts = [story.text for story in read_corpus(run.file("corpus.jsonl"))]
    assert texts == [story.text for story in held_out_stories(Sizes.fast().stories)]
    assert len(db) == sum(len(model.tokenizer.encode(text)) for text in texts)
    assert db.layers == list(range(model.config.n_layers))


def test_umap_and_usage_artifacts_match_the_database(sgatlin):
    from circuitlab.analysis.embedding import frequent_token_circuits
    from circuitlab.analysis.usage import activation_counts

    model, db, run = sgatlin
    sizes = Sizes.fast()
    expected_ids = frequent_token_circuits(db, sizes.umap_tokens, sizes.umap_points, seed=0)
    for layer in db.layers:
        frame = pd.read_parquet(run.file(f"umap_L{layer}.parquet"))
        assert np.array_equal(np.sort(frame["circuit_id"].to_numpy()), np.sort(expected_ids))
        assert np.isfinite(frame[["x", "y"]].to_numpy()).all()
    reports = load_usage_reports(run)
    for layer in db.layers:
        counts = activation_counts(db.codes[layer])
        assert np.array_equal(reports[layer].counts, counts)
        assert reports[layer].fraction_used == pytest.approx((counts > 0).mean(), abs=1e-12)
        assert reports[layer].size == model.config.feedforward.n_channels * model.config.feedforward.d_ffw


def test_umap_layout_of_every_demo_database_starts_without_a_spectral_failure(demo_runs):
    """UMAP's spectral start failed ("Spectral initialisation failed", then a random start) on the random
    tiny-gelu model's second layer; the layout now starts from the codes' truncated SVD on every database."""
    import warnings

    from circuitlab import load_model
    from circuitlab.analysis.circuitdb import CircuitDB
    from circuitlab.analysis.embedding import embed_layer

    _, models, runs = demo_runs
    sizes = Sizes.fast()
    for name in ("tiny-gelu", "tiny-sgatlin"):
        db = CircuitDB.load(runs[name] / "circuitdb", model=load_model(models[name]))
        for layer in db.layers:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                frame = embed_layer(db, layer, n_tokens=sizes.umap_tokens, max_points=sizes.umap_points, use_cache=False)
            assert not [w for w in caught if "Spectral initialisation failed" in str(w.message)], (name, layer)
            assert np.isfinite(frame[["x", "y"]].to_numpy()).all()


def test_nie_artifact_is_the_full_grid_over_the_fact_pairs(sgatlin):
    model, _, run = sgatlin
    table = nie_from_parquet(pd.read_parquet(run.file("nie.parquet")))
    n_pairs = run.entry("nie")["n_pairs"]
    assert n_pairs == Sizes.fast().nie_pairs
    assert len(table) == n_pairs * (model.config.n_layers + 1) * 3
    assert set(table["layer"]) == {0, 1, "all"} and set(table["position"]) == {"noun", "final", "all"}
    defined = table["m_patch"] != table["m_clean"]
    recomputed = (table["m_patched"] - table["m_clean"]) / (table["m_patch"] - table["m_clean"])
    assert np.allclose(table.loc[defined, "nie"], recomputed[defined], rtol=1e-9, atol=1e-12)


def test_dla_artifact_parts_sum_to_the_models_own_logit(sgatlin):
    from circuitlab.demo import DLA_PROMPTS

    model, _, run = sgatlin
    tables = dla_tables(pd.read_parquet(run.file("dla.parquet")))
    assert list(tables) == list(DLA_PROMPTS)
    for prompt, table in tables.items():
        tokens = model.to_tokens(prompt)
        with torch.no_grad():
            logits = model(tokens)[0, -1].double()
        target = table.attrs["target_id"]
        assert target == int(logits.argmax())
        assert table.attrs["logit"] == pytest.approx(float(logits[target]), abs=1e-4)
        assert table.loc[table["level"] == "component", "value"].sum() == pytest.approx(table.attrs["logit"], abs=1e-4)
        assert all(isinstance(t, list) for t in table.loc[table["promote_tokens"].notna(), "promote_tokens"])


def test_legibility_artifact_matches_a_fresh_measurement(demo_runs):
    from circuitlab import load_model
    from circuitlab.analysis.legibility import legibility_stats
    from circuitlab.data.stories import read_corpus
    from circuitlab.demo import corpus_windows

    _, models, runs = demo_runs
    model = load_model(models["tiny-legible"])
    run = RunFolder.open(runs["tiny-legible"])
    stored = pd.read_parquet(run.file("legibility_channels.parquet"))
    tokens = corpus_windows(model, [s.text for s in read_corpus(run.file("corpus.jsonl"))], Sizes.fast().legibility_seq_len)
    fresh = legibility_stats(model, tokens, progress=False)
    assert len(stored) == len(fresh)
    assert np.allclose(stored["variance"], fresh["variance"], atol=1e-12)
    assert list(stored["regime"]) == list(fresh["regime"])
    assert "label" in stored and stored.loc[stored["combined"], "label"].notna().all()


# ------------------------------------------------------------------------------------------ caching


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and p.name != RUN_MANIFEST}


def _rerun(model_folder: Path, run_path: Path, sizes: Sizes):
    from circuitlab import load_model

    model = load_model(model_folder)
    return run_pipeline(model, RunFolder(run_path), model_identity(model, str(model_folder), model_folder), sizes, progress=False)


def test_second_run_recomputes_nothing(demo_runs, tmp_path):
    _, models, runs = demo_runs
    copy = tmp_path / "tiny-sgatlin"
    shutil.copytree(runs["tiny-sgatlin"], copy)
    before = _snapshot(copy)
    report = _rerun(models["tiny-sgatlin"], copy, Sizes.fast())
    assert report.computed == []
    assert set(report.actions.values()) == {"cached", "skipped"}
    assert _snapshot(copy) == before


def test_a_changed_parameter_or_a_deleted_file_recomputes_only_what_depends_on_it(demo_runs, tmp_path):
    import dataclasses

    _, models, runs = demo_runs
    copy = tmp_path / "tiny-sgatlin"
    shutil.copytree(runs["tiny-sgatlin"], copy)
    report = _rerun(models["tiny-sgatlin"], copy, dataclasses.replace(Sizes.fast(), umap_points=500))
    assert report.computed == ["umap"]
    assert len(pd.read_parquet(copy / "umap_L0.parquet")) <= 500
    (copy / "semantic.parquet").unlink()
    report = _rerun(models["tiny-sgatlin"], copy, dataclasses.replace(Sizes.fast(), umap_points=500))
    assert report.computed == ["semantic"]
    report = _rerun(models["tiny-sgatlin"], copy, dataclasses.replace(Sizes.fast(), stories=30, umap_points=500))
    assert report.computed == ["corpus", "circuitdb", "semantic", "umap", "usage"]


def test_new_weights_invalidate_every_artifact(demo_runs, tmp_path):
    from circuitlab import load_model

    _, models, runs = demo_runs
    model_copy = tmp_path / "models" / "tiny-sgatlin"
    shutil.copytree(models["tiny-sgatlin"], model_copy)
    run_copy = tmp_path / "runs" / "tiny-sgatlin"
    shutil.copytree(runs["tiny-sgatlin"], run_copy)
    model = load_model(model_copy)
    with torch.no_grad():
        model.W_E.mul_(1.5)
    model.save(model_copy)
    report = _rerun(model_copy, run_copy, Sizes.fast())
    assert report.computed == ["card", "corpus", "circuitdb", "semantic", "umap", "usage", "nie", "dla"]
    assert report.actions["legibility"] == "skipped"


def test_demo_cli_twice_says_everything_was_cached(demo_runs, capsys):
    from circuitlab.cli import main

    runs_root, models, _ = demo_runs
    assert main(["demo", str(models["tiny-sgatlin"]), "--runs", str(runs_root), "--fast", "--no-serve", "--quiet"]) == 0
    assert "made nothing (every artifact was cached)" in capsys.readouterr().out


# ------------------------------------------------------------------------------ dashboard text inputs


def test_check_text_explains_every_odd_input(sgatlin):
    model, _, _ = sgatlin
    assert "empty" in check_text(model, "").message
    assert "empty" in check_text(model, " \n\t").message
    assert "must be text" in check_text(model, None).message
    assert "not valid Unicode" in check_text(model, "abc \ud800").message
    assert "characters" in check_text(model, "a" * 25_000).message
    long = check_text(model, "The turtle was slow. " * 60)
    assert long.token_ids is None and f"{model.config.n_ctx} tokens" in long.message
    emoji = check_text(model, "🙂 émoji ✓")
    assert emoji.ok and model.tokenizer.decode(emoji.token_ids) == "🙂 émoji ✓"


def test_lookup_returns_k_sorted_neighbours_per_token_equal_to_the_database_search(sgatlin):
    model, db, _ = sgatlin
    text = "Lily had a red ball."
    hits, message = lookup_circuits(db, model, text, layer=1, k=4)
    assert message is None
    n_tokens = len(model.tokenizer.encode(text))
    assert len(hits) == 4 * n_tokens
    for _, rows in hits.groupby("query_position"):
        assert list(rows["rank"]) == [1, 2, 3, 4]
        assert np.all(np.diff(rows["distance"].to_numpy()) >= -1e-12)
    reference = db.search(text, layer=1, k=4)
    assert np.array_equal(hits["circuit_id"].to_numpy(), reference["circuit_id"].to_numpy())
    _, message = lookup_circuits(db, model, text, layer=7, k=4)
    assert "layer 7" in message


def _two_facts(model):
    from circuitlab.data.facts import single_token_facts

    first, second = single_token_facts(model.tokenizer)[:2]
    return first, second


def test_attribution_handler_targets_and_messages(sgatlin):
    model, _, _ = sgatlin
    fact, _ = _two_facts(model)
    prompt = f"The {fact.noun} was"
    table, message = attribute_prompt(model, prompt, fact.adjective)
    assert message is None
    answer_id = model.tokenizer.encode(" " + fact.adjective)[0]
    assert table.attrs["target_id"] == answer_id
    with torch.no_grad():
        logit = float(model(model.to_tokens(prompt))[0, -1, answer_id])
    assert table.loc[table["level"] == "component", "value"].sum() == pytest.approx(logit, abs=1e-4)
    _, message = attribute_prompt(model, prompt, "unbelievablyextraordinary")
    assert "single tokens" in message
    _, message = attribute_prompt(model, "", "")
    assert "empty" in message


def test_custom_patch_pair_positions_and_messages(sgatlin):
    model, _, _ = sgatlin
    clean, patch = _two_facts(model)
    clean_prompt, patch_prompt = f"The {clean.noun} was", f"The {patch.noun} was"
    pair, positions, message = custom_patch_pair(model, clean_prompt, patch_prompt, clean.adjective, patch.adjective)
    assert message is None
    assert pair.clean_tokens[0] == model.tokenizer.eos_id and len(pair.clean_tokens) == 1 + len(model.tokenizer.encode(clean_prompt))
    assert positions == list(range(len(pair.clean_tokens))) + ["all"]
    grid, note = run_custom_patch(model, pair, positions)
    assert len(grid) == (model.config.n_layers + 1) * len(positions)
    m_clean, m_patch = grid["m_clean"].iloc[0], grid["m_patch"].iloc[0]
    # random weights tell the prompts apart by little: a note says so when the difference is below 0.5 nats
    assert (note is None) == (abs(m_patch - m_clean) >= 0.5)
    assert note is None or f"{m_patch - m_clean:+.3f} nats, below 0.5" in note
    assert np.allclose(grid["nie"], (grid["m_patched"] - m_clean) / (m_patch - m_clean))
    _, positions, message = custom_patch_pair(model, clean_prompt, "Once upon a time " + patch_prompt, clean.adjective, patch.adjective)
    assert message is None and positions == ["final"]
    assert "same token" in custom_patch_pair(model, clean_prompt, patch_prompt, clean.adjective, " " + clean.adjective)[2]
    assert "empty" in custom_patch_pair(model, clean_prompt, "", clean.adjective, patch.adjective)[2]
    assert "empty" in custom_patch_pair(model, clean_prompt, patch_prompt, "", patch.adjective)[2]


odd_text = st.one_of(st.text(max_size=200), st.sampled_from(ODD_TEXTS), st.text(alphabet=st.characters(codec="utf-8"), max_size=40))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=odd_text, k=st.integers(min_value=-3, max_value=50))
def test_lookup_handler_never_raises(sgatlin, text, k):
    model, db, _ = sgatlin
    hits, message = lookup_circuits(db, model, text, layer=db.layers[-1], k=k)
    assert (hits is None) != (message is None)
    if hits is not None:
        assert len(hits) > 0 and hits["distance"].between(-1e-6, 1 + 1e-6).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=odd_text, target=odd_text)
def test_attribution_handler_never_raises(sgatlin, text, target):
    model, _, _ = sgatlin
    table, message = attribute_prompt(model, text, target)
    assert (table is None) != (message is None)
    if table is not None:
        assert math.isfinite(table.attrs["logit"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(clean=odd_text, patch=odd_text, clean_answer=odd_text, patch_answer=odd_text)
def test_patch_pair_handler_never_raises(sgatlin, clean, patch, clean_answer, patch_answer):
    model, _, _ = sgatlin
    pair, positions, message = custom_patch_pair(model, clean, patch, clean_answer, patch_answer)
    assert (pair is None) != (message is None)
    if pair is not None:
        assert len(pair.clean_tokens) <= model.config.n_ctx and positions


def test_run_folder_relative_command_names_the_model_and_flags(demo_runs):
    _, models, runs = demo_runs
    command = RunFolder.open(runs["tiny-sgatlin"]).demo_command()
    assert command.startswith(f"circuitlab demo {models['tiny-sgatlin']} --no-serve")
    assert command.endswith("--fast") and "--runs" in command
    assert os.path.basename(str(models["tiny-sgatlin"])) == "tiny-sgatlin"
