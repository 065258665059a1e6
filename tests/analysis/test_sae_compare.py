"""circuitlab.analysis.sae_compare on tiny random models: every figure of the comparison against its definition,
recomputed by hand from a cache and from hand-written run_with_hooks calls on the same windows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.analysis.code_probe import ProbeSplit, code_matrix, labelled_tokens, majority_accuracy, probe_accuracy
from circuitlab.analysis.code_usage import usage_figures
from circuitlab.analysis.parity_measure import natural_windows
from circuitlab.analysis.sae import SAEConfig, TopKSAE
from circuitlab.analysis.sae_compare import compare
from circuitlab.data.tokenizer import CircuitTokenizer

ROOT = Path(__file__).resolve().parents[2]
NATURAL = ROOT / "data" / "natural"


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    tokenizer = CircuitTokenizer.from_file(ROOT / "models" / "sgatlin-stories" / "tokenizer.json")
    models = {}
    for name, seed in (("tiny-parity", 0), ("tiny-gelu", 1)):
        model = CircuitTransformer(ModelConfig.preset(name, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
        model.reset_parameters(seed=seed)
        models[name] = model.eval()
    gelu, parity = models["tiny-gelu"], models["tiny-parity"]
    windows = natural_windows(parity, NATURAL, 300, 100)
    with torch.no_grad():
        _, cache = gelu.run_with_cache(windows[:, :-1])
    saes = []
    for layer in range(2):
        sae = TopKSAE(SAEConfig(d_model=64, n_latents=1024, k=8, k_aux=32, seed=layer))
        sae.init_from_data_(cache[f"blocks.{layer}.hook_mlp_out"].flatten(0, 1))
        saes.append(sae.eval())
    result = compare(parity, gelu, saes, parity_dir="tiny-parity", gelu_dir="tiny-gelu",
                     sae_dir=tmp_path_factory.mktemp("sae"), natural=NATURAL, n_tokens=300, seq_len=100, batch_size=3,
                     device=torch.device("cpu"), probe_stories=12)
    return result, parity, gelu, saes, windows


def _loss(model, windows, hooks=()) -> float:
    with torch.no_grad():
        logits = model.run_with_hooks(windows[:, :-1], fwd_hooks=list(hooks))
    return F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()).item()


def test_the_autoencoders_figures_follow_their_definitions(compared):
    result, _, gelu, saes, windows = compared
    assert result["tokens"] == 300 and result["kind"] == "sae_comparison"
    with torch.no_grad():
        _, cache = gelu.run_with_cache(windows[:, :-1])
    for layer in range(2):
        row = result["layers"][layer]["sae"]
        x = cache[f"blocks.{layer}.hook_mlp_out"].flatten(0, 1)
        with torch.no_grad():
            indices, values = saes[layer].encode(x)
            x_hat = saes[layer](x)
        assert row["reconstruction"] == pytest.approx(((x - x_hat).pow(2).sum() / x.pow(2).sum()).item(), rel=1e-4)
        counts = torch.bincount(indices[values > 0], minlength=1024)
        expected = usage_figures(counts, x.shape[0])
        assert row["firing_histogram"] == expected["firing_histogram"]
        for key in ("features", "distinct_features", "over_10_percent"):
            assert row[key] == expected[key], key
        for key in ("effective_features", "top_feature_share", "dead_share"):
            assert row[key] == pytest.approx(expected[key], rel=1e-12), key


def test_spliced_in_losses_equal_hand_run_with_hooks(compared):
    result, _, gelu, saes, windows = compared
    clean = _loss(gelu, windows)
    assert result["gelu"]["loss"] == pytest.approx(clean, rel=1e-5)
    for layer in range(2):
        spliced = _loss(gelu, windows, [(f"blocks.{layer}.hook_mlp_out", lambda value, hook, sae=saes[layer]: sae(value))])
        assert result["layers"][layer]["sae"]["loss_added"] == pytest.approx(spliced - clean, rel=1e-3, abs=2e-5)
    every = _loss(gelu, windows, [(f"blocks.{layer}.hook_mlp_out", lambda value, hook, sae=saes[layer]: sae(value))
                                  for layer in range(2)])
    assert result["gelu"]["loss_spliced"] == pytest.approx(every, rel=1e-5)
    assert result["gelu"]["loss_added"] == pytest.approx(every - clean, rel=1e-3, abs=2e-5)


def test_the_bottlenecks_figures_and_uncoded_losses_follow_their_definitions(compared):
    result, parity, _, _, windows = compared
    with torch.no_grad():
        _, cache = parity.run_with_cache(windows[:, :-1])
    coded = _loss(parity, windows)
    assert result["parity"]["loss"] == pytest.approx(coded, rel=1e-5)
    for layer in range(2):
        row = result["layers"][layer]["parity"]
        x, x_hat = cache[f"blocks.{layer}.bottleneck.hook_in"], cache[f"blocks.{layer}.bottleneck.hook_recon"]
        assert row["reconstruction"] == pytest.approx(((x - x_hat).pow(2).sum() / x.pow(2).sum()).item(), rel=1e-4)
        counts = torch.bincount(cache[f"blocks.{layer}.bottleneck.hook_code_indices"].flatten(), minlength=1024)
        assert row["effective_features"] == pytest.approx(usage_figures(counts, 300)["effective_features"], rel=1e-12)
        kept = {}
        uncoded = _loss(parity, windows, [
            (f"blocks.{layer}.bottleneck.hook_in", lambda value, hook: kept.__setitem__("x", value)),
            (f"blocks.{layer}.hook_mlp_out", lambda value, hook: kept["x"])])
        assert uncoded != pytest.approx(coded, rel=1e-7)  # the bottleneck changes the write
        assert row["loss_added"] == pytest.approx(coded - uncoded, rel=1e-3, abs=2e-5)
    # every bottleneck skipped: the FFN writes go to the stream uncoded
    kept_by_layer = [{} for _ in range(2)]
    hooks = []
    for layer, kept in enumerate(kept_by_layer):
        hooks += [(f"blocks.{layer}.bottleneck.hook_in", lambda value, hook, kept=kept: kept.__setitem__("x", value)),
                  (f"blocks.{layer}.hook_mlp_out", lambda value, hook, kept=kept: kept["x"])]
    assert result["parity"]["loss_uncoded"] == pytest.approx(_loss(parity, windows, hooks), rel=1e-5)


def test_the_probes_are_the_code_probe_on_the_labelled_tokens(compared):
    result, parity, gelu, saes, _ = compared
    tokens = labelled_tokens(parity.tokenizer, 12, parity.config.n_ctx)
    split = ProbeSplit.of(tokens.n_tokens, 0, 0.2)
    probe = result["probe"]
    assert (probe["train_tokens"], probe["test_tokens"]) == (split.train.size, split.test.size)
    assert probe["majority"] == majority_accuracy(tokens.labels_N, split)
    valid = tokens.valid_SxT.flatten()
    with torch.no_grad():
        _, gelu_cache = gelu.run_with_cache(tokens.windows_SxT)
        _, parity_cache = parity.run_with_cache(tokens.windows_SxT)
        raw = gelu_cache["blocks.1.hook_mlp_out"].flatten(0, 1)[valid]
        indices, values = saes[1].encode(raw)
    row = result["layers"][1]
    assert row["sae"]["probe"] == probe_accuracy(code_matrix(indices, values, 1024), tokens.labels_N, split)
    assert row["sae"]["raw_probe"] == probe_accuracy(raw.numpy(), tokens.labels_N, split)
    code_indices = parity_cache["blocks.1.bottleneck.hook_code_indices"].flatten(0, 1)[valid]
    code_values = parity_cache["blocks.1.bottleneck.hook_code_values"].flatten(0, 1)[valid]
    assert row["parity"]["probe"] == probe_accuracy(code_matrix(code_indices, code_values, 1024), tokens.labels_N, split)
    parity_raw = parity_cache["blocks.1.bottleneck.hook_in"].flatten(0, 1)[valid].numpy()
    assert row["parity"]["raw_probe"] == probe_accuracy(parity_raw, tokens.labels_N, split)
    assert probe["majority"] < min(row["sae"]["raw_probe"], row["parity"]["raw_probe"])
