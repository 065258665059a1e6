"""Causal patching (NIE): invariants, batching, role alignment, and agreement with TransformerLens.

Tiny random models (seeded), float32. Tolerances: logit differences m(.) agree to 1e-5 absolute; NIE
invariants hold to 1e-5.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from transformer_lens import patching as tl_patching

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.analysis.patching import PatchPair, as_patch_pair, natural_code_hooks, nie_grid, nie_heatmap, nie_summary, run_interventions
from circuitlab.cli import main

PRESETS = ("tiny-sgatlin", "tiny-gelu", "tiny-swiglu", "tiny-legible", "tiny-membership", "tiny-parity", "tiny-parity-linear")
N_POS = 6
TOL = 1e-5


def make_model(preset: str, seed: int = 0) -> CircuitTransformer:
    model = CircuitTransformer(ModelConfig.preset(preset))
    model.reset_parameters(seed=seed)
    return model.eval()


def random_pairs(n_pairs: int = 3, seed: int = 1, n_pos: int = N_POS) -> list[PatchPair]:
    generator = torch.Generator().manual_seed(seed)
    pairs = []
    for index in range(n_pairs):
        clean = torch.randint(0, 512, (n_pos,), generator=generator).tolist()
        patch = torch.randint(0, 512, (n_pos,), generator=generator).tolist()
        answers = torch.randperm(512, generator=generator)[:2].tolist()
        pairs.append(PatchPair(clean, patch, answers[0], answers[1], roles={"noun": (2, 2)}, name=f"p{index}"))
    return pairs


def logit_difference(model: CircuitTransformer, tokens: list[int], pair: PatchPair, position: int, hooks=()) -> float:
    with torch.no_grad():
        logits = model.run_with_hooks(torch.tensor([tokens]), fwd_hooks=list(hooks))
    return float(logits[0, position, pair.clean_answer_id] - logits[0, position, pair.patch_answer_id])


@pytest.fixture(scope="module", params=PRESETS)
def model(request):
    return make_model(request.param)


def test_empty_intervention_is_the_clean_run_and_nie_zero(model):
    pairs = random_pairs()
    rows = [(i, ()) for i in range(len(pairs))]
    m_rows, m_patch = run_interventions(model, pairs, rows, progress=False)
    for i, pair in enumerate(pairs):
        assert m_rows[i].item() == pytest.approx(logit_difference(model, list(pair.clean_tokens), pair, -1), abs=TOL)
        assert m_patch[i].item() == pytest.approx(logit_difference(model, list(pair.patch_tokens), pair, -1), abs=TOL)


def test_patch_that_cannot_reach_the_final_position_has_nie_zero(model):
    # the last layer's FFN write at the noun position is read by nothing at the final position (causal mask)
    last = model.cfg.n_layers - 1
    table = nie_grid(model, random_pairs(), layers=[last], positions=["noun"], progress=False)
    assert table["nie"].abs().max() < TOL


def test_patching_the_whole_residual_stream_before_layer_0_gives_nie_one(model):
    table = nie_grid(model, random_pairs(), layers=[0], positions=["all"], hooks="blocks.{layer}.hook_resid_pre", progress=False)
    assert len(table) == 3
    assert (table["nie"] - 1).abs().max() < TOL
    assert (table["m_patched"] - table["m_patch"]).abs().max() < TOL


def test_batched_interventions_equal_running_each_alone(model):
    pairs = random_pairs(n_pairs=3) + [
        PatchPair([5, 6, 7, 8, 9], [5, 1, 2, 7, 8, 9], 3, 4, roles={"noun": (1, 2)}, name="ragged")
    ]
    batched = nie_grid(model, pairs, positions=["noun", "final"], batch_size=64, progress=False)
    alone = nie_grid(model, pairs, positions=["noun", "final"], batch_size=1, progress=False)
    assert len(batched) == 4 * (model.cfg.n_layers + 1) * 2
    assert (batched["m_patched"] - alone["m_patched"]).abs().max() < TOL
    assert (batched["m_clean"] - alone["m_clean"]).abs().max() < TOL
    # and a small batch size that splits the pairs' rows across several forwards
    split = nie_grid(model, pairs, positions=["noun", "final"], batch_size=3, progress=False)
    assert (split["m_patched"] - alone["m_patched"]).abs().max() < TOL


def test_natural_code_hooks_per_architecture():
    assert natural_code_hooks(make_model("tiny-sgatlin"), 1) == ["blocks.1.mlp.hook_gate_indices", "blocks.1.mlp.hook_gate_values"]
    assert natural_code_hooks(make_model("tiny-parity"), 0) == [
        "blocks.0.bottleneck.hook_code_indices", "blocks.0.bottleneck.hook_code_values"]
    assert natural_code_hooks(make_model("tiny-legible"), 0) == ["blocks.0.mlp.hook_post"]
    assert natural_code_hooks(make_model("tiny-gelu"), 1) == ["blocks.1.mlp.hook_post"]


def _copy_hook(source: torch.Tensor, positions: list[tuple[int, int]], index: int | None = None):
    """Reference patch: overwrite the clean activation at each clean position with the source's."""
    def hook(activation, hook):
        activation = activation.clone()
        for clean_pos, patch_pos in positions:
            if index is None:
                activation[0, clean_pos] = source[0, patch_pos]
            else:
                activation[0, clean_pos, index] = source[0, patch_pos, index]
        return activation
    return hook


def test_sgatlin_gate_patch_equals_hand_written_do_intervention():
    model = make_model("tiny-sgatlin")
    pair = random_pairs(1, seed=5)[0]
    names = ["blocks.0.mlp.hook_gate_indices", "blocks.0.mlp.hook_gate_values"]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([pair.patch_tokens]))
    hooks = [(name, _copy_hook(cache[name], [(2, 2)])) for name in names]
    expected = logit_difference(model, list(pair.clean_tokens), pair, -1, hooks)
    table = nie_grid(model, [pair], layers=[0], positions=["noun"], progress=False)
    assert table["m_patched"].iloc[0] == pytest.approx(expected, abs=TOL)
    # the gates really were patched: the intervention changes m unless the two runs chose the same gates
    same_gates = torch.equal(cache[names[0]][0, 2], model.run_with_cache(torch.tensor([pair.clean_tokens]))[1][names[0]][0, 2])
    assert same_gates or abs(table["m_patched"].iloc[0] - table["m_clean"].iloc[0]) > 1e-6


def test_positions_align_by_role_for_prompts_of_different_length():
    model = make_model("tiny-gelu")
    # the patch prompt has an extra token before the noun: noun 1 -> 2, final 4 -> 5
    pair = PatchPair([7, 20, 30, 40, 50], [7, 9, 21, 30, 40, 50], 11, 12, roles={"noun": (1, 2)}, name="shifted")
    name = "blocks.0.hook_resid_post"
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([pair.patch_tokens]))
    for role, aligned in (("noun", [(1, 2)]), ("final", [(4, 5)])):
        expected = logit_difference(model, list(pair.clean_tokens), pair, 4, [(name, _copy_hook(cache[name], aligned))])
        table = nie_grid(model, [pair], layers=[0], positions=[role], hooks="blocks.{layer}.hook_resid_post", progress=False)
        assert table["m_patched"].iloc[0] == pytest.approx(expected, abs=TOL)
    m_patch = nie_grid(model, [pair], layers=[0], positions=["noun"], progress=False)["m_patch"].iloc[0]
    assert m_patch == pytest.approx(logit_difference(model, list(pair.patch_tokens), pair, 5), abs=TOL)
    with pytest.raises(ValueError, match="equal length"):
        nie_grid(model, [pair], positions=["all"], progress=False)
    alignment = [(0, 0), (1, 2), (2, 3), (3, 4), (4, 5)]
    aligned_pair = PatchPair(pair.clean_tokens, pair.patch_tokens, 11, 12, roles=pair.roles, alignment=alignment)
    expected = logit_difference(model, list(pair.clean_tokens), pair, 4, [(name, _copy_hook(cache[name], alignment))])
    table = nie_grid(model, [aligned_pair], layers=[0], positions=["all"], hooks="blocks.{layer}.hook_resid_post", progress=False)
    assert table["m_patched"].iloc[0] == pytest.approx(expected, abs=TOL)


def test_per_head_patches_match_a_hand_written_hook():
    model = make_model("tiny-legible")
    pair = random_pairs(1, seed=3)[0]
    name = "blocks.0.attn.hook_result"
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([pair.patch_tokens]))
    table = nie_grid(model, [pair], layers=[0], positions=["noun"], hooks="blocks.{layer}.attn.hook_result", heads="each", progress=False)
    assert list(table["head"]) == [0, 1]
    for head in (0, 1):
        expected = logit_difference(model, list(pair.clean_tokens), pair, -1, [(name, _copy_hook(cache[name], [(2, 2)], head))])
        assert table.loc[table["head"] == head, "m_patched"].iloc[0] == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize("preset", ["tiny-sgatlin", "tiny-legible", "tiny-parity"])
def test_resid_pre_grid_matches_transformer_lens(preset):
    model = make_model(preset)
    pair = random_pairs(1, seed=7, n_pos=5)[0]
    clean, patch = torch.tensor([pair.clean_tokens]), torch.tensor([pair.patch_tokens])
    with torch.no_grad():
        _, patch_cache = model.run_with_cache(patch)

    def metric(logits):
        return logits[0, -1, pair.clean_answer_id] - logits[0, -1, pair.patch_answer_id]

    n_layers, n_pos = model.cfg.n_layers, clean.shape[1]
    index_df = pd.DataFrame([(layer, pos) for layer in range(n_layers) for pos in range(n_pos)], columns=["layer", "pos"])
    with torch.no_grad():
        reference = tl_patching.generic_activation_patch(
            model, clean, patch_cache, metric, tl_patching.layer_pos_patch_setter, "resid_pre", index_df=index_df
        )
    ours = nie_grid(model, [pair], layers=list(range(n_layers)), positions=list(range(n_pos)),
                    hooks="blocks.{layer}.hook_resid_pre", progress=False)
    assert list(zip(ours["layer"], ours["position"])) == list(index_df.itertuples(index=False, name=None))
    assert torch.allclose(torch.tensor(ours["m_patched"].to_numpy()), reference.double(), atol=TOL, rtol=0)
    m_clean, m_patch = ours["m_clean"].iloc[0], ours["m_patch"].iloc[0]
    reference_nie = (reference.double() - m_clean) / (m_patch - m_clean)
    assert torch.allclose(torch.tensor(ours["nie"].to_numpy()), reference_nie, atol=1e-4, rtol=0)


def test_fact_pair_like_inputs_and_summary_and_heatmap():
    model = make_model("tiny-sgatlin")
    base = random_pairs(2, seed=11)
    fact_like = [
        SimpleNamespace(clean_tokens=list(p.clean_tokens), patch_tokens=list(p.patch_tokens), clean_answer_id=p.clean_answer_id,
                        patch_answer_id=p.patch_answer_id, noun_position=2, final_position=N_POS - 1, patch_noun_position=2,
                        patch_final_position=N_POS - 1, clean_noun="cat", patch_noun="dog")
        for p in base
    ]
    as_dicts = [vars(p) for p in fact_like]
    table = nie_grid(model, fact_like, progress=False, min_difference=0.0)  # random weights: small m differences
    assert table["pair_name"].iloc[0] == "cat->dog"
    assert set(table.columns) >= {"pair", "layer", "position", "nie", "m_clean", "m_patch", "m_patched"}
    assert list(dict.fromkeys(table["layer"])) == [0, 1, "all"]
    assert list(dict.fromkeys(table["position"])) == ["noun", "final", "all"]
    reference = nie_grid(model, base, progress=False)
    assert (table["nie"] - reference["nie"]).abs().max() < TOL
    assert (nie_grid(model, as_dicts, progress=False)["nie"] - reference["nie"]).abs().max() < TOL

    summary = nie_summary(table)
    cell = table[(table["layer"] == 0) & (table["position"] == "noun")]["nie"]
    assert summary[(summary["layer"] == 0) & (summary["position"] == "noun")]["nie"].iloc[0] == pytest.approx(cell.mean())
    figure = nie_heatmap(table)
    z = figure.data[0].z
    assert list(figure.data[0].y) == ["layer 0", "layer 1", "all layers"]
    assert z[0][0] == pytest.approx(cell.mean())


def test_clear_errors():
    model = make_model("tiny-gelu")
    pairs = random_pairs(1)
    with pytest.raises(ValueError, match="no hook"):
        nie_grid(model, pairs, hooks="blocks.{layer}.mlp.hook_gate_values", progress=False)
    with pytest.raises(ValueError, match="placeholder"):
        nie_grid(model, pairs, hooks="blocks.0.hook_resid_pre", progress=False)
    with pytest.raises(ValueError, match="not \\[batch, pos"):
        nie_grid(model, pairs, hooks="blocks.{layer}.attn.hook_pattern", progress=False)
    with pytest.raises(ValueError, match="lacks"):
        as_patch_pair({"clean_tokens": [1, 2]})
    with pytest.raises(ValueError, match="layers must be"):
        nie_grid(model, pairs, layers=[5], progress=False)


def test_cli_patch(tmp_path, capsys):
    pairs = [dict(clean_tokens=list(p.clean_tokens), patch_tokens=list(p.patch_tokens), clean_answer_id=p.clean_answer_id,
                  patch_answer_id=p.patch_answer_id, noun_position=2) for p in random_pairs(2)]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    out = tmp_path / "nie.csv"
    code = main(["patch", "preset:tiny-sgatlin", "--pairs", str(tmp_path / "pairs.json"), "--quiet", "--out", str(out),
                 "--figure", str(tmp_path / "nie.html"), "--min-difference", "0"])  # a random model's m differ little
    assert code == 0
    written = pd.read_csv(out)
    assert len(written) == 2 * 3 * 3 and (tmp_path / "nie.html").exists()
    assert "NIE over 2 pairs" in capsys.readouterr().out
    assert main(["patch", "preset:tiny-sgatlin", "--pairs", str(tmp_path / "missing.json")]) == 2
    assert main(["patch", "preset:tiny-sgatlin"]) == 2  # no tokenizer, no --pairs
    err = capsys.readouterr().err
    assert "has no tokenizer" in err and err.count("\n") == 2
    assert main(["patch", "preset:tiny-sgatlin", "--pairs", str(tmp_path / "pairs.json"), "--layers", "each"]) == 2
    assert "--layers takes layer numbers or 'all', got 'each'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def story_model():
    """A tiny random sgatlin model with a BPE tokenizer trained on generated stories (fact words merged)."""
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([story.text for story in generate_stories(150, seed=5)], vocab_size=1024, show_progress=False)
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin", d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
    model.reset_parameters(seed=0)
    return model.eval()


def test_fact_pairs_from_the_data_module(story_model, tmp_path, capsys):
    from circuitlab.data.facts import build_fact_pairs

    pairs = build_fact_pairs(story_model.tokenizer, n_pairs=4, seed=0)
    table = nie_grid(story_model, pairs, progress=False)
    assert len(table) == 4 * 3 * 3
    assert table["pair_name"].iloc[0] == f"{pairs[0].clean_noun}->{pairs[0].patch_noun}"
    first = table.iloc[0]
    assert first["m_clean"] == pytest.approx(
        logit_difference(story_model, pairs[0].clean_tokens, as_patch_pair(pairs[0]), pairs[0].final_position), abs=TOL)
    # the whole-residual invariant holds on real prompts too
    whole = nie_grid(story_model, pairs, layers=[0], positions=["all"], hooks="blocks.{layer}.hook_resid_pre", progress=False)
    assert (whole["nie"] - 1).abs().max() < TOL

    story_model.save(tmp_path / "model")
    assert main(["patch", str(tmp_path / "model"), "--n-pairs", "3", "--quiet", "--positions", "noun", "final",
                 "--min-difference", "0"]) == 0  # a random model tells no pair apart by 0.5 nats
    assert "NIE over 3 pairs" in capsys.readouterr().out
    fact = pairs[0]  # the same prompts as text: the pair format puts the end-of-text id in front, as facts do
    text_pairs = [{"clean": fact.clean_prompt, "patch": fact.patch_prompt, "clean_answer": fact.clean_answer,
                   "patch_answer": fact.patch_answer, "noun_position": fact.noun_position}]
    (tmp_path / "text_pairs.json").write_text(json.dumps(text_pairs))
    out = tmp_path / "text_nie.csv"
    assert main(["patch", str(tmp_path / "model"), "--pairs", str(tmp_path / "text_pairs.json"), "--quiet",
                 "--out", str(out), "--min-difference", "0"]) == 0
    # the text pair is the fact pair: same tokens, so the same NIE from the CLI and from nie_grid (text or ids)
    from_text = pd.read_csv(out)
    from_facts = nie_grid(story_model, pairs[:1], progress=False)
    from_python_text = nie_grid(story_model, text_pairs, progress=False)
    assert np.allclose(from_text["nie"], from_facts["nie"], atol=1e-5, equal_nan=True)
    assert np.allclose(from_python_text["nie"], from_facts["nie"], atol=1e-5, equal_nan=True)


def test_positions_for_keeps_what_every_pair_can_be_patched_at():
    from circuitlab.analysis.patching import positions_for

    equal = PatchPair([1, 2, 3, 4], [1, 5, 3, 4], 6, 7, roles={"noun": (1, 1)}, name="equal")
    longer = PatchPair([1, 2, 3, 4], [1, 9, 5, 3, 4], 6, 7, roles={"noun": (1, 2)}, name="longer")
    aligned = PatchPair(longer.clean_tokens, longer.patch_tokens, 6, 7, roles=longer.roles,
                        alignment=[(0, 0), (1, 2), (2, 3), (3, 4)], name="aligned")
    no_noun = PatchPair([1, 2, 3], [1, 5, 3], 6, 7, name="no noun")
    assert positions_for([equal, aligned]) == (["noun", "final", "all"], None)
    positions, note = positions_for([equal, longer, aligned])
    assert positions == ["noun", "final"]
    assert "1 of 3 pairs have prompts of different token lengths" in note and "longer, 4 and 5 tokens" in note
    assert '"alignment"' in note and "(clean_pos" not in note  # said in the pairs file's words, not Python's
    positions, note = positions_for([equal, no_noun])
    assert positions == ["final", "all"] and "position 'noun' left out: 1 of 2 pairs" in note


def test_cli_patch_says_why_when_no_pair_counts_and_writes_no_empty_figure(tmp_path, capsys):
    pairs = [dict(clean_tokens=list(p.clean_tokens), patch_tokens=list(p.patch_tokens), clean_answer_id=p.clean_answer_id,
                  patch_answer_id=p.patch_answer_id, noun_position=2) for p in random_pairs(2)]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    out, figure = tmp_path / "nie.csv", tmp_path / "nie.html"
    code = main(["patch", "preset:tiny-gelu", "--pairs", str(tmp_path / "pairs.json"), "--quiet",
                 "--min-difference", "1e6", "--out", str(out), "--figure", str(figure)])
    captured = capsys.readouterr()
    assert code == 2
    assert "no NIE to average: on all 2 pairs" in captured.err and "Empty DataFrame" not in captured.out
    assert not figure.exists()
    assert len(pd.read_csv(out)) == 2 * 3 * 3  # the per-pair m values are kept for the user to look at


def test_cli_patch_and_demo_treat_unequal_pairs_alike(tmp_path, capsys):
    from circuitlab.demo.pipeline import DemoInputs, PipelineContext, Sizes, _make_nie
    from circuitlab.demo.runfolder import RunFolder

    model = make_model("tiny-gelu")
    pairs = [dict(clean_tokens=[7, 20, 30, 40, 50], patch_tokens=[7, 9, 21, 30, 40, 50], clean_answer_id=11,
                  patch_answer_id=12, noun_position=1, patch_noun_position=2, name="shifted"),
             dict(clean_tokens=[7, 20, 30, 40], patch_tokens=[7, 21, 30, 40], clean_answer_id=11, patch_answer_id=13,
                  noun_position=1, name="same length")]
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(pairs))
    model.save(tmp_path / "model")
    out = tmp_path / "nie.csv"
    assert main(["patch", str(tmp_path / "model"), "--pairs", str(path), "--quiet", "--out", str(out),
                 "--min-difference", "0"]) == 0
    printed = capsys.readouterr().out
    assert "position 'all' left out: 1 of 2 pairs" in printed
    from_cli = pd.read_csv(out)
    assert set(from_cli["position"]) == {"noun", "final"} and len(from_cli) == 2 * 3 * 2
    # asking for "all" anyway is refused in the same words, naming the pair and its lengths
    assert main(["patch", str(tmp_path / "model"), "--pairs", str(path), "--positions", "all"]) == 2
    err = capsys.readouterr().err
    assert "shifted: position 'all' needs prompts of equal length, got 5 and 6 tokens" in err and "(clean_pos" not in err

    run = RunFolder(tmp_path / "run")
    ctx = PipelineContext(model=model, run=run, sizes=Sizes.fast(), progress=False, inputs=DemoInputs(pairs=str(path)))
    files, extra = _make_nie(ctx)
    assert any("position 'all' left out: 1 of 2 pairs" in note for note in extra["notes"])
    from circuitlab.demo.readers import nie_from_parquet

    from_demo = nie_from_parquet(pd.read_parquet(run.file("nie.parquet")))
    assert set(from_demo["position"]) == {"noun", "final"}
    assert np.allclose(sorted(from_demo["m_patched"]), sorted(from_cli["m_patched"]), atol=1e-6)
