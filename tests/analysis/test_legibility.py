"""Legibility metrics: the regime classifier on synthetic channels of known regime, statistics against
brute force, a hand-built model whose channels are SELECTIVE / FUZZY / CONSTANT by construction, naming by
frequency-corrected decisive firings, aggregates, figures and the CLI verb."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.analysis.channel_names import max_activating_contexts, name_channels, rank_firing_tokens
from circuitlab.analysis.legibility import (
    ChannelAccumulator,
    NoBoundedChannelsError,
    channel_family,
    channel_statistics,
    classify_regime,
    is_alive,
    legibility_by_head,
    legibility_by_layer,
    legibility_stats,
    legibility_summary,
    legibility_table,
)
from circuitlab.analysis.legibility_figures import head_selectivity_heatmap, regimes_by_layer_figure
from circuitlab.cli import main
from circuitlab.errors import UserError

FIRING = set(range(10, 30))  # the tokens the hand-built channel detects


def synthetic_channels(n_tokens: int = 4000, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    generator = torch.Generator().manual_seed(seed)
    noise = torch.rand(n_tokens, generator=generator) * 0.04
    on = torch.rand(n_tokens, generator=generator) < 0.3
    columns = {
        "CONSTANT": 0.5 + 0.01 * (torch.rand(n_tokens, generator=generator) - 0.5),  # context-free
        "CONSTANT_dead": 0.01 + 0.0 * noise,  # crisp but never on: the collapse mode
        "SELECTIVE": torch.where(on, 0.99 - noise, 0.01 + noise),  # crisp and contextual
        "FUZZY": 0.2 + 0.6 * torch.rand(n_tokens, generator=generator),  # varies, never decisive
        "FUZZY_half_crisp": torch.where(torch.arange(n_tokens) % 2 == 0, torch.where(on, 0.95, 0.05), torch.full((n_tokens,), 0.5)),
    }
    return torch.stack(list(columns.values()), dim=1), [name.split("_")[0] for name in columns]


def test_regime_classifier_on_channels_of_known_regime():
    values, expected = synthetic_channels()
    stats = channel_statistics(values)
    assert list(stats["regime"]) == expected
    # the seed's thresholds at their edges: variance 0.003 counts as varying; crispness must exceed 0.5
    assert classify_regime([0.003, 0.0029999, 0.01, 0.01], [0.9, 0.9, 0.5, 0.5001]) == ["SELECTIVE", "CONSTANT", "FUZZY", "SELECTIVE"]


def test_statistics_match_brute_force_and_stream():
    values, _ = synthetic_channels(n_tokens=1003, seed=3)
    stats = channel_statistics(values)
    array = values.double().numpy()
    np.testing.assert_allclose(stats["mean"], array.mean(0), atol=1e-12)
    np.testing.assert_allclose(stats["variance"], array.var(0), atol=1e-12)
    np.testing.assert_allclose(stats["crispness"], (np.minimum(array, 1 - array) < 0.1).mean(0), atol=1e-12)
    np.testing.assert_allclose(stats["on_fraction"], (array > 0.9).mean(0), atol=1e-12)
    streamed = ChannelAccumulator(values.shape[1])
    for chunk in torch.split(values, [1, 500, 2, 500]):
        streamed.update(chunk)
    result = streamed.result()
    np.testing.assert_allclose(result["variance"], array.var(0), atol=1e-12)
    np.testing.assert_allclose(result["mean"], array.mean(0), atol=1e-12)
    assert result["n_tokens"] == 1003


def hand_built_membership_model() -> CircuitTransformer:
    """Layer 0, head 0 (membership): channel 0 fires crisply on FIRING tokens (SELECTIVE), channel 2 reads the
    same feature softly (FUZZY), every other channel is sigmoid(0) = 0.5 everywhere (CONSTANT)."""
    model = CircuitTransformer(ModelConfig.preset("tiny-membership"))
    model.reset_parameters(seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        embed = 0.05 * torch.randn(model.W_E.shape, generator=generator)
        embed[:, 0] = -1.0
        embed[sorted(FIRING), 0] = 1.0
        model.W_E.copy_(embed)
        W_V = model.blocks[0].attn.W_V
        W_V[0].zero_()
        W_V[0, 0, 0] = 3.0  # x_0 is about +-7.4 after RMSNorm: sigmoid(+-22)
        W_V[0, 0, 2] = 0.15  # sigmoid(+-1.1): 0.75 / 0.25
    return model.eval()


def held_out_tokens(n_seq: int = 24, n_pos: int = 32, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, 100, (n_seq, n_pos), generator=torch.Generator().manual_seed(seed))


def test_hand_built_channels_get_their_designed_regimes():
    model = hand_built_membership_model()
    tokens = held_out_tokens()
    stats = legibility_stats(model, tokens, batch_size=5, progress=False)
    head0 = stats[(stats["layer"] == 0) & (stats["head"] == 0)].set_index("channel")
    assert len(head0) == model.config.d_head and set(head0["role"]) == {"membership"}
    assert head0.loc[0, "regime"] == "SELECTIVE"
    assert head0.loc[2, "regime"] == "FUZZY"
    assert (head0.drop(index=[0, 2])["regime"] == "CONSTANT").all()
    fraction_firing = float(torch.isin(tokens, torch.tensor(sorted(FIRING))).double().mean())
    assert head0.loc[0, "on_fraction"] == pytest.approx(fraction_firing, abs=1e-12)
    assert head0.loc[0, "mean"] == pytest.approx(fraction_firing, abs=1e-6)
    assert head0.loc[0, "crispness"] == 1.0 and head0.loc[2, "crispness"] == 0.0
    assert head0.loc[5, "variance"] == 0.0 and head0.loc[5, "mean"] == 0.5
    assert head0.loc[0, "n_tokens"] == tokens.numel()
    # membership values are both the atom and the combined value
    assert head0["operand"].all() and head0["combined"].all()

    named = name_channels(model, tokens, stats[(stats["layer"] == 0) & (stats["head"] == 0) & (stats["channel"].isin([0, 2, 5]))],
                          min_count=3, top=6, batch_size=7, progress=False)
    row = named.set_index("channel").loc[0]
    assert len(row["top_tokens"]) == 6
    assert {int(t.lstrip("#")) for t in row["top_tokens"]} <= FIRING and row["top_p_fire"] == [1.0] * 6
    assert row["fires"] == int(torch.isin(tokens, torch.tensor(sorted(FIRING))).sum())
    assert named.set_index("channel").loc[5, "label"] == "(never fires decisively)"

    contexts = max_activating_contexts(model, tokens, "blocks.0.attn.hook_v", 0, head=0, min_count=3, top=5, window=3, progress=False)
    assert len(contexts) == 5
    assert all(int(tok.lstrip("#")) in FIRING for tok in contexts["token"])
    assert all(ctx.endswith(f"[{tok}]") for ctx, tok in zip(contexts["context"], contexts["token"]))
    assert (contexts["p_fire"] == 1.0).all() and (contexts["value"] > 0.9).all()
    assert contexts["lift"].iloc[0] == pytest.approx(1.0 / fraction_firing)

    by_head = legibility_by_head(stats)
    layer0 = by_head[(by_head["layer"] == 0) & (by_head["head"] == 0)].iloc[0]
    assert layer0["selective"] == pytest.approx(1 / 32) and layer0["fuzzy"] == pytest.approx(1 / 32)
    assert layer0["constant"] == pytest.approx(30 / 32)


def test_ranking_is_frequency_corrected():
    count = torch.zeros(10)
    fires = torch.zeros(10)
    count[1], fires[1] = 300, 30  # a frequent token that fires sometimes: a naive readout's favourite
    count[2], fires[2] = 20, 20  # a token the channel always fires on
    count[3], fires[3] = 2, 2  # always fires, but too rare to trust
    count[4], fires[4] = 40, 10
    ranked = rank_firing_tokens(count, fires, min_count=5)
    assert list(ranked["token_id"]) == [2, 4, 1]
    assert list(ranked["p_fire"]) == [1.0, 0.25, 0.1]
    overall = 62 / 362
    np.testing.assert_allclose(ranked["lift"], [1.0 / overall, 0.25 / overall, 0.1 / overall])
    assert list(rank_firing_tokens(count, fires, min_count=1)["token_id"])[:2] == [2, 3]


def test_channel_inventory_of_a_legible_model_and_combined_values():
    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    model.reset_parameters(seed=0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("W_A", "W_B", "W_in")):
                param.mul_(60)  # saturate the sigmoids so the regimes are not all CONSTANT
    model.eval()
    tokens = held_out_tokens(8, 16)
    stats = legibility_stats(model, tokens, progress=False)
    counts = stats.groupby(["layer", "surface", "role"]).size()
    d_half = model.config.d_head // 2
    mlp = model.blocks[0].mlp
    assert counts[(0, "attention", "operand_a")] == 2 * d_half and counts[(0, "attention", "and")] == 2 * d_half
    assert counts[(0, "ffn", "operand_b")] == mlp.n_pairs and counts[(0, "ffn", "quant_in")] == mlp.n_quant
    assert counts[(1, "ffn", "exists")] == mlp.n_quant // 2
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    a = cache["blocks.1.attn.hook_operand_a"][:, :, 1, 3].double()
    b = cache["blocks.1.attn.hook_operand_b"][:, :, 1, 3].double()
    and_row = stats[(stats["layer"] == 1) & (stats["head"] == 1) & (stats["role"] == "and") & (stats["channel"] == 3)]
    andnot_row = stats[(stats["layer"] == 1) & (stats["head"] == 1) & (stats["role"] == "andnot") & (stats["channel"] == 3 + d_half)]
    assert and_row["mean"].item() == pytest.approx(float((a * b).mean()), abs=1e-6)
    assert andnot_row["mean"].item() == pytest.approx(float((a * (1 - b)).mean()), abs=1e-6)
    ffn_and = cache["blocks.0.mlp.hook_and"][..., 5].double()
    row = stats[(stats["layer"] == 0) & (stats["surface"] == "ffn") & (stats["role"] == "and") & (stats["channel"] == 5)]
    assert row["variance"].item() == pytest.approx(float(ffn_and.var(unbiased=False)), abs=1e-6)

    summary = legibility_summary(stats, "tiny-legible")
    assert list(summary["design"]) == ["boolean head-100", "NC-FFN 50% operators", "NC-FFN quantifiers"]
    # seed 002, Table 5 reads the FFN's A and B only: the quantifiers' memberships are a row of their own
    ffn = stats[stats["surface"] == "ffn"]
    ab = ffn[ffn["role"].isin(["operand_a", "operand_b"])]
    memberships = ffn[ffn["role"] == "quant_in"]
    assert summary.iloc[1]["on_percent"] == pytest.approx(round(100 * ab["on_fraction"].mean(), 2))
    assert summary.iloc[1]["n_operands"] == len(ab) and summary.iloc[2]["n_operands"] == len(memberships)
    assert summary.iloc[2]["atom_crisp"] == pytest.approx(round(100 * memberships["crispness"].mean(), 2))
    attention = stats[stats["surface"] == "attention"]
    operands, combined = attention[attention["operand"]], attention[attention["combined"]]
    first = summary.iloc[0]
    assert first["atom_crisp"] == pytest.approx(round(100 * operands["crispness"].mean(), 2))
    assert first["on_percent"] == pytest.approx(round(100 * operands["on_fraction"].mean(), 2))
    assert first["selective"] == pytest.approx(round(100 * (combined["regime"] == "SELECTIVE").mean(), 2))
    assert first["constant"] + first["selective"] + first["fuzzy"] == pytest.approx(100, abs=0.02)
    table = legibility_table({"a": stats, "b": stats})
    assert list(table["model"]) == ["a", "a", "a", "b", "b", "b"]

    by_layer = legibility_by_layer(stats)
    figure = regimes_by_layer_figure(stats)
    selective_attention = [trace for trace in figure.data if trace.name == "SELECTIVE"][0]
    expected = 100 * by_layer[by_layer["surface"] == "attention"]["selective"]
    np.testing.assert_allclose(selective_attention.y, expected)
    heatmap = head_selectivity_heatmap(stats)
    by_head = legibility_by_head(stats)
    assert heatmap.data[0].z[1][0] == pytest.approx(100 * by_head[(by_head["layer"] == 1) & (by_head["head"] == 0)]["selective"].item())


@pytest.mark.parametrize("preset", ["tiny-sgatlin", "tiny-gelu", "tiny-swiglu", "tiny-parity"])
def test_architectures_without_bounded_channels_are_refused(preset):
    model = CircuitTransformer(ModelConfig.preset(preset)).eval()
    with pytest.raises(NoBoundedChannelsError, match="no bounded channels"):
        legibility_stats(model, held_out_tokens(2, 8), progress=False)


def test_ffn_only_model_has_no_head_view():
    config = ModelConfig.preset("tiny-legible", attention=dict(value_mode="standard", n_special=0))
    model = CircuitTransformer(config).eval()
    stats = legibility_stats(model, held_out_tokens(2, 8), progress=False)
    assert set(stats["surface"]) == {"ffn"}
    with pytest.raises(NoBoundedChannelsError, match="attention"):
        legibility_by_head(stats)


def test_cli_legibility(tmp_path, capsys):
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text(json.dumps(held_out_tokens(4, 16).tolist()))
    out = tmp_path / "stats.csv"
    code = main(["legibility", "preset:tiny-legible", "--tokens-file", str(tokens_file), "--quiet", "--name", "2",
                 "--out", str(out), "--figure", str(tmp_path / "regimes.html"), "--head-figure", str(tmp_path / "heads.html")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "legibility over 64 held-out tokens" in printed and "boolean head-100" in printed
    assert len(pd.read_csv(out)) == 512 and (tmp_path / "heads.html").exists()
    assert main(["legibility", "preset:tiny-gelu", "--tokens-file", str(tokens_file)]) == 2
    err = capsys.readouterr().err
    assert "no bounded channels" in err and err.count("\n") == 1


def test_cli_legibility_on_text_with_a_tokenizer(tmp_path, capsys):
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    texts = [story.text for story in generate_stories(60, seed=9)]
    tokenizer = train_tokenizer(texts[:40], vocab_size=512, show_progress=False)
    model = CircuitTransformer(ModelConfig.preset("tiny-legible", d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
    model.reset_parameters(seed=0)
    model.save(tmp_path / "model")
    (tmp_path / "held_out.txt").write_text("\n\n".join(texts[40:]))
    code = main(["legibility", str(tmp_path / "model"), "--text", str(tmp_path / "held_out.txt"), "--seq-len", "64",
                 "--batches", "2", "--batch-size", "4", "--quiet"])
    assert code == 0
    assert "legibility over 512 held-out tokens" in capsys.readouterr().out


# --- ON rate, alive, families and shares on constructed activations ---------------------------------------------


def test_on_rate_and_alive_on_channels_with_known_firing_counts():
    """Channel j is decisively on (0.95) for exactly counts[j] of 1000 tokens and 0.02 otherwise."""
    counts = [0, 9, 10, 500, 990, 991, 1000]
    values = torch.full((1000, len(counts)), 0.02)
    for j, count in enumerate(counts):
        values[:count, j] = 0.95
    stats = channel_statistics(values)
    assert list(stats["on_fraction"]) == pytest.approx([c / 1000 for c in counts], abs=1e-12)
    assert list(stats["crispness"]) == [1.0] * len(counts)  # both 0.95 and 0.02 lie within 0.1 of a rail
    # alive: ON for 1% to 99% of tokens, bounds included; 0.9% is dead, 99.1% is stuck on
    assert list(stats["alive"]) == [False, False, True, True, True, False, False]
    assert is_alive([0.0099999, 0.01, 0.99, 0.9900001]) == [False, True, True, False]
    # on at exactly 0.9 is not decisive (v > 0.9), and a rail distance of exactly 0.1 is not crisp (< 0.1)
    edge = channel_statistics(torch.tensor([[0.9], [0.1], [0.0]]))
    assert edge["on_fraction"][0] == 0.0 and edge["crispness"][0] == pytest.approx(1 / 3)


def constructed_stats() -> pd.DataFrame:
    """A statistics table with known answers: 2 layers; attention 2 heads x 4 operand channels (ON fractions
    below) and 4 combined channels per head; FFN 4 operand channels and 2 quantifier memberships per layer."""
    rows = []

    def add(surface, layer, head, role, operand, combined, on, regime, crisp=0.9):
        rows.append(dict(surface=surface, family=channel_family(role), layer=layer, head=head, channel=len(rows), role=role, operand=operand,
                         combined=combined, hook="h", mean=0.5, variance=0.01, crispness=crisp, on_fraction=on,
                         alive=is_alive(on)[0], regime=regime, n_tokens=100))

    for layer in range(2):
        for head in range(2):
            # attention operands: layer 0 all dead (ON 0), layer 1 head 0: 3 of 4 alive, head 1: all stuck on
            ons = [0.0] * 4 if layer == 0 else ([0.2, 0.3, 0.5, 0.005] if head == 0 else [1.0] * 4)
            for on in ons:
                add("attention", layer, head, "operand_a", True, False, on, "FUZZY")
            regimes = ["CONSTANT"] * 4 if layer == 0 else (["SELECTIVE", "SELECTIVE", "SELECTIVE", "FUZZY"] if head == 0 else ["CONSTANT"] * 4)
            for regime in regimes:
                add("attention", layer, head, "and", False, True, 0.0, regime)
        for on, regime in zip([0.5, 0.5, 0.0, 1.0], ["SELECTIVE", "SELECTIVE", "CONSTANT", "CONSTANT"]):
            add("ffn", layer, None, "operand_b", True, False, on, regime)
        add("ffn", layer, None, "and", False, True, 0.0, "CONSTANT")
        for on in (0.4, 0.4):  # quantifier memberships: alive, and must not count as FFN operands
            add("ffn", layer, None, "quant_in", True, False, on, "FUZZY", crisp=0.2)
        add("ffn", layer, None, "exists", False, True, 0.0, "SELECTIVE")
    table = pd.DataFrame(rows)
    table["head"] = table["head"].astype("Int64")
    return table


def test_shares_per_layer_per_head_and_per_family_on_constructed_statistics():
    stats = constructed_stats()
    by_layer = legibility_by_layer(stats).set_index(["surface", "family", "layer"])
    attention1 = by_layer.loc[("attention", "operator", 1)]
    assert attention1["n_operands"] == 8 and attention1["alive"] == pytest.approx(3 / 8)
    assert attention1["dead"] == pytest.approx(1 / 8) and attention1["stuck_on"] == pytest.approx(4 / 8)
    assert attention1["selective"] == pytest.approx(3 / 8) and attention1["constant"] == pytest.approx(4 / 8)
    assert attention1["fuzzy"] == pytest.approx(1 / 8)
    assert by_layer.loc[("attention", "operator", 0), "alive"] == 0.0
    assert by_layer.loc[("attention", "operator", 0), "constant"] == 1.0
    ffn = by_layer.loc[("ffn", "operator", 0)]
    assert ffn["n_operands"] == 4 and ffn["alive"] == pytest.approx(0.5)
    assert ffn["on_fraction"] == pytest.approx(0.5) and ffn["atom_crisp"] == pytest.approx(0.9)
    assert ffn["selective_operands"] == pytest.approx(0.5) and ffn["constant_operands"] == pytest.approx(0.5)
    quantifiers = by_layer.loc[("ffn", "quantifier", 0)]
    assert quantifiers["n_operands"] == 2 and quantifiers["alive"] == 1.0 and quantifiers["atom_crisp"] == pytest.approx(0.2)
    assert quantifiers["selective"] == 1.0  # its one combined channel (exists)

    by_head = legibility_by_head(stats).set_index(["layer", "head"])
    assert by_head.loc[(1, 0), "alive"] == pytest.approx(3 / 4) and by_head.loc[(1, 0), "selective"] == pytest.approx(3 / 4)
    assert by_head.loc[(1, 1), "stuck_on"] == 1.0 and by_head.loc[(1, 1), "constant"] == 1.0

    summary = legibility_summary(stats).set_index("design")
    assert list(summary.index) == ["attention", "ffn", "NC-FFN quantifiers"]  # no design labels in attrs here
    assert summary.loc["attention", "alive"] == pytest.approx(100 * 3 / 16)
    assert summary.loc["ffn", "alive"] == pytest.approx(50.0) and summary.loc["ffn", "n_operands"] == 8
    assert summary.loc["NC-FFN quantifiers", "alive"] == 100.0
    from circuitlab.analysis.legibility_report import on_rate_histogram

    histogram = on_rate_histogram(stats)
    assert histogram["edges"][:2] == [0.0, 0.01] and len(histogram["attention operator"]) == len(histogram["edges"]) - 1
    # attention operands ON: 8 x 0.0 and 0.005 (dead), 0.2, 0.3, 0.5 (alive), 4 x 1.0 (stuck on)
    assert histogram["attention operator"] == [9, 0, 0, 2, 1, 0, 0, 4]
    assert histogram["ffn quantifier"] == [0, 0, 0, 4, 0, 0, 0, 0]
    # a table saved before the family column existed gets it from the roles
    assert legibility_by_layer(stats.drop(columns=["family"])).equals(legibility_by_layer(stats))


def test_legible_share_of_the_attribution_equals_the_per_prediction_readout():
    """legible_attribution_share over windows = the mean, over positions, of direct_logit_attribution's
    bounded-head + named-unit magnitude share (the notebook 05 reading), computed one prediction at a time."""
    from circuitlab.analysis.attribution import direct_logit_attribution, legible_attribution_share

    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    model.reset_parameters(seed=0)
    model.eval()
    tokens = held_out_tokens(2, 5, seed=4)
    got = legible_attribution_share(model, tokens, batch_size=1, progress=False)
    shares, weaker, pooled = [], [], np.zeros(2)
    for b in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            table = direct_logit_attribution(model, tokens[b, : t + 1])
            components, units = table[table["level"] == "component"], table[table["level"] == "unit"]
            heads = components[components["kind"] == "attn_head"]
            embedding = components[components["kind"].isin(["embedding", "positional"])]
            legible = heads.loc[heads["operation"] != "standard", "value"].abs().sum() + \
                units.loc[~units["operation"].isin(["gelu"]), "value"].abs().sum()
            total = heads["value"].abs().sum() + units["value"].abs().sum() + embedding["value"].abs().sum()
            shares.append(legible / total)
            weaker.append(heads["value"].abs().max() < units["value"].max())
            pooled += [legible, total]
    assert got["n_positions"] == tokens.numel()
    assert got["share_mean"] == pytest.approx(np.mean(shares), rel=1e-6)
    assert got["share_pooled"] == pytest.approx(pooled[0] / pooled[1], rel=1e-6)
    assert sum(got["parts_mean"].values()) == pytest.approx(1.0)
    assert got["parts_mean"]["standard_heads"] == 0.0  # every head of tiny-legible is Boolean
    # attention weaker than the largest FFN unit, decided per prediction as the one-prompt readout does
    assert got["attention_weaker_mean"] == pytest.approx(np.mean(weaker), abs=1e-12)
    assert 0.0 < np.mean(weaker) < 1.0  # both outcomes occur, so the count is not trivially 0 or all
    # a GELU model has no legible part at all, and its neurons are units of the same readout
    gelu = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    gelu.reset_parameters(seed=0)
    got = legible_attribution_share(gelu.eval(), tokens, progress=False)
    assert got["share_mean"] == 0.0
    weaker = []
    for b in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            table = direct_logit_attribution(gelu.eval(), tokens[b, : t + 1])
            heads = table[(table["level"] == "component") & (table["kind"] == "attn_head")]
            weaker.append(heads["value"].abs().max() < table.loc[table["level"] == "unit", "value"].max())
    assert got["attention_weaker_mean"] == pytest.approx(np.mean(weaker), abs=1e-12)


def test_promote_signatures_for_named_and_requested_units():
    from circuitlab.analysis.attribution import direct_logit_attribution

    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    model.reset_parameters(seed=0)
    model.eval()
    prompt = held_out_tokens(1, 6, seed=5)[0]
    table = direct_logit_attribution(model, prompt, promote_units_per_layer=2)
    units = table[table["level"] == "unit"]
    named = units[units["operation"] != "gelu"]
    assert named["promote_tokens"].map(lambda tokens: isinstance(tokens, list)).all()
    gelu_with_signature = units[(units["operation"] == "gelu") & units["promote_tokens"].notna()]
    assert len(gelu_with_signature) <= 2 * model.cfg.n_layers  # only the top units per layer among the opaque ones
    # a requested GELU unit gets one; its rank agrees with a brute-force readout of its write
    quiet = units[(units["operation"] == "gelu") & units["promote_tokens"].isna()].iloc[0]
    again = direct_logit_attribution(model, prompt, promote_units_per_layer=2, promote_units=[(int(quiet["layer"]), int(quiet["unit"]))])
    row = again[(again["level"] == "unit") & (again["layer"] == quiet["layer"]) & (again["unit"] == quiet["unit"])].iloc[0]
    assert isinstance(row["promote_tokens"], list) and len(row["promote_tokens"]) == 10
    names = {"blocks.{}.mlp.hook_post".format(int(quiet["layer"])), "ln_final.hook_scale"}
    _, cache = model.run_with_cache(prompt[None], names_filter=lambda name: name in names)
    post = cache[f"blocks.{int(quiet['layer'])}.mlp.hook_post"][0, -1, int(quiet["unit"])].double()
    write = post * model.blocks[int(quiet["layer"])].mlp.W_out[int(quiet["unit"])].detach().double()
    logits = (write / cache["ln_final.hook_scale"][0, -1].double().reshape(())) * model.ln_final.w.detach().double() @ model.W_U.detach().double()
    target = again.attrs["target_id"]
    assert row["target_rank"] == 1 + int((logits > logits[target]).sum())
    with pytest.raises(UserError, match="no unit"):
        direct_logit_attribution(model, prompt, promote_units=[(0, 10**6)])
