"""Direct logit attribution: exact sums on every architecture, an independent check through the model's own
forward, promote signatures against brute force, and the CLI verb.

Tiny random models (seeded), float32, with norm weights perturbed away from 1 so the frozen-norm algebra is
exercised. Tolerance: parts sum to the logit within 1e-4 (observed ~1e-7).
"""

from __future__ import annotations

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.analysis.attribution import direct_logit_attribution, dla_figures, dla_overview_figure
from circuitlab.cli import main

TOL = 1e-4
CONFIGS = {
    "tiny-sgatlin": ModelConfig.preset("tiny-sgatlin"),
    "tiny-gelu": ModelConfig.preset("tiny-gelu"),
    "tiny-swiglu": ModelConfig.preset("tiny-swiglu"),
    "tiny-legible": ModelConfig.preset("tiny-legible"),
    "tiny-membership": ModelConfig.preset("tiny-membership"),
    "tiny-parity": ModelConfig.preset("tiny-parity"),
    "tiny-parity-linear": ModelConfig.preset("tiny-parity-linear"),
    # LayerNorm (mean subtraction and bias), learned positions, untied unembedding
    "layernorm-learned-untied": ModelConfig.preset("tiny-legible", norm="layernorm", positional="learned", tied_embeddings=False),
    "layernorm-sgatlin": ModelConfig.preset("tiny-sgatlin", norm="layernorm"),
}
PROMPT = torch.randint(0, 512, (9,), generator=torch.Generator().manual_seed(0))


def make_model(config: ModelConfig, seed: int = 0) -> CircuitTransformer:
    model = CircuitTransformer(config)
    model.reset_parameters(seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith((".w", ".b")):
                param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model.eval()


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request):
    return make_model(CONFIGS[request.param])


def model_logits(model, tokens=PROMPT, hooks=()):
    with torch.no_grad():
        return model.run_with_hooks(tokens[None], fwd_hooks=list(hooks))[0]


def test_components_sum_to_the_logit_and_units_to_their_ffn(model):
    table = direct_logit_attribution(model, PROMPT)
    logits = model_logits(model)
    target = int(logits[-1].argmax())
    assert table.attrs["target_id"] == target
    components = table[table["level"] == "component"]
    assert abs(components["value"].sum() - float(logits[-1, target])) < TOL
    assert abs(table.attrs["logit"] - float(logits[-1, target])) < 1e-6
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    assert (components["kind"] == "attn_head").sum() == n_layers * n_heads
    assert (components["kind"] == "ffn").sum() == n_layers
    assert ((components["kind"] == "positional").sum() == 1) == (model.config.positional == "learned")
    assert ((components["kind"] == "norm_bias").sum() == 1) == (model.config.norm == "layernorm")
    units = table[table["level"] == "unit"]
    for layer in range(n_layers):
        ffn_value = components[(components["kind"] == "ffn") & (components["layer"] == layer)]["value"].item()
        assert abs(units[units["layer"] == layer]["value"].sum() - ffn_value) < TOL


def test_logit_difference_at_an_earlier_position(model):
    table = direct_logit_attribution(model, PROMPT, target=3, baseline_token=4, position=4)
    logits = model_logits(model)
    expected = float(logits[4, 3] - logits[4, 4])
    assert abs(table[table["level"] == "component"]["value"].sum() - expected) < TOL
    assert table.attrs["position"] == 4 and table.attrs["baseline_id"] == 4


def _frozen_hook(model, name):
    with torch.no_grad():
        _, cache = model.run_with_cache(PROMPT[None], names_filter=lambda n: n == name)
    value = cache[name].clone()
    return (name, lambda activation, hook: value)


@pytest.mark.parametrize("config_name", ["tiny-legible", "layernorm-learned-untied", "tiny-parity", "tiny-parity-linear"])
def test_last_layer_parts_equal_their_ablation_with_the_scale_frozen(config_name):
    """Independent of the decomposition code: removing a last-layer part's write at the attributed position
    (final norm scale frozen, and for heads the FFN write after them frozen too, so only the direct path
    changes) lowers the model's own logit by exactly that part's value."""
    model = make_model(CONFIGS[config_name])
    table = direct_logit_attribution(model, PROMPT, target=17)
    last = model.cfg.n_layers - 1
    freeze = _frozen_hook(model, "ln_final.hook_scale")
    full = float(model_logits(model, hooks=[freeze])[-1, 17])

    def zero_at_last_position(activation, hook, head=None):
        activation = activation.clone()
        if head is None:
            activation[:, -1] = 0
        else:
            activation[:, -1, head] = 0
        return activation

    ffn_hook = f"blocks.{last}.hook_mlp_out"  # the whole FFN write, parity bottleneck included
    freeze_ffn = _frozen_hook(model, ffn_hook)
    ablated = float(model_logits(model, hooks=[freeze, (ffn_hook, zero_at_last_position)])[-1, 17])
    ffn_row = table[(table["kind"] == "ffn") & (table["layer"] == last)]["value"].item()
    assert full - ablated == pytest.approx(ffn_row, abs=TOL)
    for head in range(model.cfg.n_heads):
        hook = (f"blocks.{last}.attn.hook_result", lambda a, hook, head=head: zero_at_last_position(a, hook, head))
        ablated = float(model_logits(model, hooks=[freeze, freeze_ffn, hook])[-1, 17])
        head_row = table[(table["kind"] == "attn_head") & (table["layer"] == last) & (table["head"] == head)]["value"].item()
        assert full - ablated == pytest.approx(head_row, abs=TOL)


def test_promote_signature_of_a_dense_unit_matches_brute_force():
    model = make_model(CONFIGS["tiny-gelu"])
    table = direct_logit_attribution(model, PROMPT, target=42, n_promote=5, promote_units_per_layer=3)
    with torch.no_grad():
        _, cache = model.run_with_cache(PROMPT[None])
    scale = 1 / cache["ln_final.hook_scale"][0, -1]
    units = table[(table["level"] == "unit") & table["target_rank"].notna()]
    assert len(units) == 3 * model.cfg.n_layers
    for row in units.itertuples():
        post = cache[f"blocks.{row.layer}.mlp.hook_post"][0, -1, row.unit]
        write = post * model.blocks[row.layer].mlp.W_out[row.unit]
        promote = ((write * scale * model.ln_final.w) @ model.W_U).detach()
        assert row.promote_tokens == [f"#{t}" for t in promote.topk(5).indices.tolist()]
        assert row.target_rank == 1 + int((promote > promote[42]).sum())
        # the sign of the activation decides the direction; positive units read (w_out * w_ln) @ W_U
        if post > 0:
            raw = ((model.blocks[row.layer].mlp.W_out[row.unit] * model.ln_final.w) @ model.W_U).detach()
            assert row.promote_tokens[0] == f"#{int(raw.argmax())}"
    # the units kept for promote signatures are each layer's largest |value|
    for layer in range(model.cfg.n_layers):
        layer_units = table[(table["level"] == "unit") & (table["layer"] == layer)]
        largest = layer_units["value"].abs().nlargest(3).index
        assert set(largest) == set(layer_units[layer_units["target_rank"].notna()].index)


def test_unit_labels_per_architecture():
    sgatlin = make_model(CONFIGS["tiny-sgatlin"])
    table = direct_logit_attribution(sgatlin, PROMPT)
    with torch.no_grad():
        _, cache = sgatlin.run_with_cache(PROMPT[None])
    codes = sgatlin.sparse_codes(cache)
    ffn = sgatlin.config.feedforward
    for layer in range(sgatlin.cfg.n_layers):
        units = table[(table["level"] == "unit") & (table["layer"] == layer)]
        assert len(units) == ffn.n_channels * ffn.k and set(units["kind"]) == {"neuron"}
        assert sorted(units["unit"]) == sorted(codes[layer].indices[0, -1].tolist())

    legible = make_model(CONFIGS["tiny-legible"])
    table = direct_logit_attribution(legible, PROMPT)
    kinds = legible.blocks[0].mlp.unit_kinds()
    units = table[(table["level"] == "unit") & (table["layer"] == 0)]
    assert list(units["operation"]) == kinds
    assert {"gelu", "and", "andnot", "exists", "proportion"} == set(kinds)
    heads = table[table["kind"] == "attn_head"]
    assert set(heads["operation"]) == {"boolean"}

    parity = make_model(CONFIGS["tiny-parity"])
    table = direct_logit_attribution(parity, PROMPT)
    with torch.no_grad():
        _, cache = parity.run_with_cache(PROMPT[None])
    units = table[(table["level"] == "unit") & (table["layer"] == 1)]
    assert set(units["kind"]) == {"parity_feature"}
    assert list(units["unit"]) == cache["blocks.1.bottleneck.hook_code_indices"][0, -1].tolist()


def test_errors_and_figures():
    model = make_model(CONFIGS["tiny-sgatlin"])
    with pytest.raises(ValueError, match="outside the prompt"):
        direct_logit_attribution(model, PROMPT, position=20)
    with pytest.raises(ValueError, match="no tokenizer"):
        direct_logit_attribution(model, "some text")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        direct_logit_attribution(model, PROMPT, target=10_000)
    with pytest.raises(ValueError, match="equals the target"):
        direct_logit_attribution(model, PROMPT, target=5, baseline_token=5)
    table = direct_logit_attribution(model, PROMPT)
    overview = dla_overview_figure(table)
    heads_and_ffn = table[table["kind"].isin(["attn_head", "ffn"])]
    assert list(overview.data[0].x) == ["H0", "H1", "FFN"]
    assert overview.data[0].z[1][2] == pytest.approx(heads_and_ffn[(heads_and_ffn["layer"] == 1) & (heads_and_ffn["kind"] == "ffn")]["value"].item())
    figures = dla_figures(table, top=5)
    assert sorted(figures) == [0, 1]
    assert len(figures[0].data[0].x) == 2 + 1 + 5


def test_cli_dla(tmp_path, capsys):
    out = tmp_path / "dla.csv"
    code = main(["dla", "preset:tiny-legible", "1,2,3,4,5", "--tokens", "--target-id", "9", "--out", str(out), "--figure", str(tmp_path / "dla.html")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "logit('#9') at position 4" in printed and "largest FFN units" in printed
    assert (tmp_path / "dla.html").exists() and (tmp_path / "dla_layer1.html").exists()
    assert out.exists()
    assert main(["dla", "preset:tiny-legible", "1,x", "--tokens"]) == 2
    assert main(["dla", "preset:tiny-legible", "1,2", "--tokens", "--target", "a", "--target-id", "3"]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_text_prompt_and_token_strings_with_a_tokenizer():
    from circuitlab.data.stories import generate_stories
    from circuitlab.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([story.text for story in generate_stories(150, seed=5)], vocab_size=1024, show_progress=False)
    model = CircuitTransformer(ModelConfig.preset("tiny-legible", d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
    model.reset_parameters(seed=0)
    model.eval()
    table = direct_logit_attribution(model, "The sun was", target=" hot", baseline_token=" cold" if len(tokenizer.encode(" cold")) == 1 else 5)
    hot = tokenizer.encode(" hot")[0]
    assert table.attrs["target_id"] == hot and table.attrs["target"] == " hot"
    logits = model_logits(model, torch.tensor(tokenizer.encode("The sun was")))
    expected = float(logits[-1, hot] - logits[-1, table.attrs["baseline_id"]])
    assert abs(table[table["level"] == "component"]["value"].sum() - expected) < TOL
    embedding = table[table["kind"] == "embedding"].iloc[0]
    assert all(isinstance(token, str) and not token.startswith("#") for token in embedding["promote_tokens"])
    with pytest.raises(ValueError, match="tokens; give a single token"):
        direct_logit_attribution(model, "The sun was", target=" hot and cold")
    # empty text is bad input (UserError: the CLI exits 2 with one line), not a crash
    from circuitlab.errors import UserError

    with pytest.raises(UserError, match="target is empty"):
        direct_logit_attribution(model, "The sun was", target="")
    with pytest.raises(UserError, match="the prompt is empty"):
        direct_logit_attribution(model, "", target=" hot")
