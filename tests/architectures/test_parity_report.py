"""`circuitlab report parity` on tiny randomly initialised models: every figure against its definition."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.data.tokenizer import CircuitTokenizer
from circuitlab.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "models" / "sgatlin-stories" / "tokenizer.json"


def _script():
    """The measuring module, with `main(argv)` running `circuitlab report parity ARGV` as the command line does."""
    from types import SimpleNamespace

    import circuitlab.analysis.parity_measure as parity_measure
    from circuitlab.cli import main

    return SimpleNamespace(main=lambda argv: main(["report", "parity", *argv]), report=parity_measure.report,
                           natural_windows=parity_measure.natural_windows)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    tokenizer = CircuitTokenizer.from_file(TOKENIZER)
    folders = {}
    for name in ("tiny-parity", "tiny-gelu"):
        model = CircuitTransformer(ModelConfig.preset(name, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
        model.reset_parameters(seed=0)
        folders[name] = tmp_path_factory.mktemp(name)
        model.save(folders[name])
    return folders


def test_report_figures_follow_their_definitions(tiny_models, tmp_path, capsys):
    report = _script()
    out = tmp_path / "report.json"
    assert report.main([str(tiny_models["tiny-parity"]), "--gelu", str(tiny_models["tiny-gelu"]), "--tokens", "600",
                        "--seq-len", "100", "--batch-size", "3", "--beams", "2", "32", "--device", "cpu",
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "| layer | recon" in printed and "target reconstruction" in printed
    assert result["tokens"] == 600  # 6 windows of 100 next-token predictions

    # recompute the figures of layer 1 from a cache of the same windows
    from circuitlab.architectures.transformer import load_model

    model = load_model(tiny_models["tiny-parity"]).eval()
    windows = report.natural_windows(model, ROOT / "data" / "natural", 600, 100)
    with torch.no_grad():
        logits, cache = model.run_with_cache(windows[:, :-1])
    x, x_hat = cache["blocks.1.bottleneck.hook_in"], cache["blocks.1.bottleneck.hook_recon"]
    row = result["layers"][1]
    assert row["reconstruction"] == pytest.approx(((x - x_hat).pow(2).sum() / x.pow(2).sum()).item(), rel=1e-4)
    ratio = cache["blocks.1.hook_mlp_out"].norm(dim=-1) / cache["blocks.1.hook_resid_mid"].norm(dim=-1)
    assert row["write_over_residual"] == pytest.approx(ratio.mean().item(), rel=1e-4)
    indices = cache["blocks.1.bottleneck.hook_code_indices"].flatten()
    counts = torch.bincount(indices, minlength=1024)
    assert row["distinct_features"] == int((counts > 0).sum())
    assert row["top100_share"] == pytest.approx((counts.sort(descending=True).values[:100].sum() / counts.sum()).item())
    assert row["coherence"] == pytest.approx(model.blocks[1].bottleneck.coherence())
    # per window (for intervals over windows): each window's own sums, which add up to the layer's error
    by_window = ((x - x_hat).pow(2).sum(dim=(1, 2)), x.pow(2).sum(dim=(1, 2)))
    assert row["window_error"] == pytest.approx(by_window[0].tolist(), rel=1e-4)
    assert row["window_norm"] == pytest.approx(by_window[1].tolist(), rel=1e-4)
    assert sum(row["window_error"]) / sum(row["window_norm"]) == pytest.approx(row["reconstruction"], rel=1e-9)
    # beam 32 = every column pattern of the tiny code: the fast encoder is the exhaustive one
    assert row["by_beam"]["32"] == {"agreement": 1.0, "certified": 1.0}
    assert 0 < row["by_beam"]["2"]["agreement"] < 1
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()).item()
    assert result["parity"]["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["parity"]["loss_writes_zeroed"] != pytest.approx(loss, rel=1e-6)
    window_nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="none")
    windows_kept = result["parity"]["window_losses"]
    assert windows_kept["loss"] == pytest.approx(window_nats.view(6, 100).sum(1).tolist(), rel=1e-5)
    for key in ("loss", "loss_writes_zeroed", "loss_writes_mean_ablated"):  # each run's windows add up to its loss
        assert len(windows_kept[key]) == 6 and sum(windows_kept[key]) / 600 == pytest.approx(result["parity"][key], rel=1e-9)
    from circuitlab.analysis.parity_report import check_parity_report

    damaged = json.loads(out.read_text())  # a report whose windows disagree in number is refused by name
    damaged["layers"][1]["window_norm"] = damaged["layers"][1]["window_norm"][:5]
    with pytest.raises(UserError, match="per-window lists differ.*layers.1.window_norm 5"):
        check_parity_report(damaged)
    gelu = result["gelu"]
    share = (result["parity"]["loss_writes_zeroed"] - loss) / (gelu["loss_writes_zeroed"] - gelu["loss"])
    assert result["ablation_share"] == pytest.approx(share, rel=1e-3)  # a ratio of small differences of sums
    assert result["perplexity_ratio"] == pytest.approx(math.exp(loss - gelu["loss"]), rel=1e-5)
    assert result["loss_ratio"] == pytest.approx(loss / gelu["loss"], rel=1e-5)
    assert result["targets"]["agreement"]["measured"] == min(r["agreement"] for r in result["layers"])

    # the usage diagnostics of layer 1, from the counts by definition
    n_tokens = windows[:, :-1].numel()
    p = counts.double() / counts.sum()
    used = p[p > 0]
    assert row["features"] == 1024
    assert row["effective_features"] == pytest.approx(math.exp(-(used * used.log()).sum().item()), rel=1e-9)
    assert row["top_feature_share"] == pytest.approx(counts.max().item() / n_tokens, rel=1e-12)
    assert row["over_10_percent"] == int((counts.double() / n_tokens > 0.1).sum())
    assert row["dead_share"] == pytest.approx((counts == 0).double().mean().item(), rel=1e-12)
    histogram = row["firing_histogram"]
    assert histogram["dead"] == int((counts == 0).sum()) and sum(histogram["counts"]) == row["distinct_features"]
    # participation ratio (sum lambda)^2 / sum lambda^2 of the covariance of the writes the bottleneck codes
    writes = x.reshape(-1, x.shape[-1]).double()
    eigenvalues = torch.linalg.eigvalsh(torch.cov(writes.T, correction=0)).clamp_min(0)
    assert row["participation_ratio"] == pytest.approx((eigenvalues.sum() ** 2 / eigenvalues.pow(2).sum()).item(), rel=1e-4)
    # the error over the writes' variation around their mean, and that variation's share of the writes
    spread = (writes - writes.mean(0)).pow(2).sum()
    assert row["centred_reconstruction"] == pytest.approx(((x - x_hat).pow(2).sum() / spread).item(), rel=1e-4)
    assert row["variance_share"] == pytest.approx((spread / writes.pow(2).sum()).item(), rel=1e-6)
    assert row["centred_reconstruction"] > row["reconstruction"]  # a share of a smaller sum
    by_spread = (x.double() - writes.mean(0)).pow(2).sum(dim=(1, 2))  # per window, about the mean of all tokens
    assert row["window_spread"] == pytest.approx(by_spread.tolist(), rel=1e-6)
    assert sum(row["window_error"]) / sum(row["window_spread"]) == pytest.approx(row["centred_reconstruction"], rel=1e-6)
    gelu_model = load_model(tiny_models["tiny-gelu"]).eval()
    with torch.no_grad():
        gelu_writes = gelu_model.run_with_cache(windows[:, :-1])[1]["blocks.0.hook_mlp_out"].reshape(-1, 64).double()
    gelu_share = (gelu_writes - gelu_writes.mean(0)).pow(2).sum() / gelu_writes.pow(2).sum()
    assert gelu["variance_share"][0] == pytest.approx(gelu_share.item(), rel=1e-6)
    assert "| layer | write variation share |" in printed

    # mean ablation of layer 1: its write replaced by the mean write over these tokens, by hand
    mean_write = cache["blocks.1.hook_mlp_out"].reshape(-1, x.shape[-1]).double().mean(0).float()
    with torch.no_grad():
        ablated = model.run_with_hooks(windows[:, :-1], fwd_hooks=[
            ("blocks.1.hook_mlp_out", lambda value, hook: mean_write.expand_as(value))])
    ablated_loss = torch.nn.functional.cross_entropy(ablated.flatten(0, 1), windows[:, 1:].flatten()).item()
    assert result["parity"]["mean_ablated_by_layer"][1] == pytest.approx(ablated_loss - loss, rel=1e-3, abs=1e-5)
    mean_cost = result["parity"]["loss_writes_mean_ablated"] - result["parity"]["loss"]
    gelu_mean_cost = gelu["loss_writes_mean_ablated"] - gelu["loss"]
    assert result["mean_ablation_share"] == pytest.approx(mean_cost / gelu_mean_cost, rel=1e-9)
    assert "| layer | features used | effective features" in printed and "target mean_ablation_share" in printed


def test_a_model_without_a_bottleneck_is_a_clear_error(tiny_models):
    with pytest.raises(UserError, match="no parity bottleneck"):
        _script().report(str(tiny_models["tiny-gelu"]), None, 100, ROOT / "data" / "natural", 50, 2, "cpu", [])


def test_encoder_overrides_run_the_trained_model_with_other_settings(tiny_models, tmp_path):
    """--beam, --pursuit-rounds and --k change what the encoder does (recorded in the result), not the weights:
    the reconstruction is that of the model's layers run with those settings."""
    report = _script()
    out = tmp_path / "report.json"
    assert report.main([str(tiny_models["tiny-parity"]), "--tokens", "300", "--seq-len", "100", "--batch-size", "3",
                        "--beams", "2", "--device", "cpu", "--beam", "2", "--pursuit-rounds", "1", "--k", "4",
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["encoder_overrides"] == {"beam": 2, "pursuit_rounds": 1, "k": 4}
    assert result["natural"] == "data/natural"  # the default folder, recorded relative to the repository
    assert result["design"]["beam"] == 2 and result["design"]["pursuit_rounds"] == 1 and result["design"]["k"] == 4

    from circuitlab.architectures.transformer import load_model

    model = load_model(tiny_models["tiny-parity"]).eval()
    for block in model.blocks:
        block.bottleneck.beam, block.bottleneck.pursuit_rounds, block.bottleneck.k = 2, 1, 4
    windows = report.natural_windows(model, ROOT / "data" / "natural", 300, 100)
    with torch.no_grad():
        _, cache = model.run_with_cache(windows[:, :-1])
    x, x_hat = cache["blocks.0.bottleneck.hook_in"], cache["blocks.0.bottleneck.hook_recon"]
    assert cache["blocks.0.bottleneck.hook_code_indices"].shape[-1] == 4
    expected = ((x - x_hat).pow(2).sum() / x.pow(2).sum()).item()
    assert result["layers"][0]["reconstruction"] == pytest.approx(expected, rel=1e-4)
    assert result["layers"][0]["by_beam"]["2"]["agreement"] == result["layers"][0]["agreement"]
    # the configured settings (beam 8, two rounds) reconstruct differently on the same windows
    default = tmp_path / "default.json"
    report.main([str(tiny_models["tiny-parity"]), "--tokens", "300", "--seq-len", "100", "--batch-size", "3",
                 "--beams", "2", "--device", "cpu", "--json", str(default)])
    assert json.loads(default.read_text())["layers"][0]["reconstruction"] != pytest.approx(expected, rel=1e-4)
    with pytest.raises(UserError, match="positive integers"):
        report.report(str(tiny_models["tiny-parity"]), None, 300, ROOT / "data" / "natural", 100, 3, "cpu", [2],
                      {"beam": 0})
