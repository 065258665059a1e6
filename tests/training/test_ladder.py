"""`circuitlab ladder`: the plan (one FLOP budget per scale), the verdicts, and the sweep end to end on the CPU."""

import json
from pathlib import Path

import pytest

from circuitlab import count_flops, ladder_config
from circuitlab.cli import main
from circuitlab.errors import UserError
from circuitlab.training.ladder import (
    RESULTS_FILE, TABLE_FILE, LadderSettings, arch_config, budget_for, plan_runs, reusable,
)
from circuitlab.training.ladder_report import load_results, markdown_table, seed_spread, verdicts

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = str(ROOT / "models" / "sgatlin-stories" / "tokenizer.json")


def test_plan_gives_every_design_of_a_scale_the_same_budget():
    settings = LadderSettings(scales=(1, 2, 3), seeds=(0, 1), tokenizer=TOKENIZER, natural=None)
    runs = plan_runs(settings, d_vocab=8192)
    assert len(runs) == 5 * 3 + 5 + 2  # the second seed and the sgatlin + GELU ablation at the smallest scale only
    assert {(run.arch, run.seed) for run in runs if run.arch == "sgatlin-gelu"} == {("sgatlin-gelu", 0), ("sgatlin-gelu", 1)}
    assert all(run.scale == 1 and run.config["feedforward"]["activation"] == "gelu" for run in runs if run.arch == "sgatlin-gelu")
    assert [run.scale for run in runs] == sorted((run.scale for run in runs), reverse=True)  # longest first
    assert {(run.arch, run.seed) for run in runs if run.scale == 1} == {
        (a, s) for a in (*settings.archs, "sgatlin-gelu") for s in (0, 1)}
    for run in runs:
        per_token = count_flops(arch_config(run.scale, run.arch, d_vocab=8192, n_ctx=256), 256).training_per_token
        assert run.training_flops_per_token == per_token and run.budget_flops == budget_for(run.scale)
        spent = run.tokens * per_token
        # rounding to whole steps of batch x 256 tokens: within half a step of the budget
        assert abs(spent - run.budget_flops) <= 0.5 * settings.batch_size * 256 * per_token
    assert budget_for(3) == 16 * budget_for(1)


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError, match="--archs"):
        plan_runs(LadderSettings(archs=("ncffn",), tokenizer=TOKENIZER, natural=None), 8192)
    with pytest.raises(UserError, match="--budget-scale"):
        plan_runs(LadderSettings(budget_scale=float("inf"), tokenizer=TOKENIZER, natural=None), 8192)
    with pytest.raises(UserError, match="--tokenizer"):
        plan_runs(LadderSettings(tokenizer="no/such/tokenizer.json", natural=None), 8192)


def fake_results(losses: dict[tuple[str, int, int], float]) -> dict:
    runs = [dict(arch=arch, scale=scale, seed=seed, status="done", stopped="completed", natural_loss=loss)
            for (arch, scale, seed), loss in losses.items()]
    return {"runs": runs}


def by_claim(results):
    found = verdicts(results)
    assert [v.claim.split()[0] for v in found] == ["sgatlin", "PEER's", "adding"]
    return found


def test_verdicts_follow_the_numbers():
    base = {("mlp", 1, 0): 3.00, ("mlp", 1, 1): 3.02, ("swiglu", 1, 0): 2.95, ("swiglu", 1, 1): 2.97,
            ("peer", 1, 0): 3.10, ("peer", 1, 1): 3.12, ("sgatlin", 1, 0): 2.80, ("sgatlin", 1, 1): 2.82,
            ("mlp", 2, 0): 2.60, ("swiglu", 2, 0): 2.55, ("peer", 2, 0): 2.70, ("sgatlin", 2, 0): 2.40}
    dense, peer, nonlinear = by_claim(fake_results(base))
    assert seed_spread(fake_results(base))["sgatlin"] == pytest.approx(0.01414, abs=1e-4)
    assert dense.verdict == "supported" and "scale 1: sgatlin -0.150 nats vs swiglu" in dense.detail
    assert peer.verdict == "supported"  # PEER is worse: its router does not help
    assert nonlinear.verdict == "not measured" and "indirect" in nonlinear.detail
    worse = {**base, ("sgatlin", 1, 0): 3.30, ("sgatlin", 1, 1): 3.32, ("sgatlin", 2, 0): 2.90}
    assert by_claim(fake_results(worse))[0].verdict == "contradicted"
    tied = {**base, ("sgatlin", 1, 0): 2.95, ("sgatlin", 1, 1): 2.97, ("sgatlin", 2, 0): 2.56}
    assert by_claim(fake_results(tied))[0].verdict == "within noise"
    mixed = {**base, ("sgatlin", 2, 0): 2.90}
    assert by_claim(fake_results(mixed))[0].verdict == "mixed"
    peer_better = {**base, ("peer", 1, 0): 2.5, ("peer", 1, 1): 2.52, ("peer", 2, 0): 2.1}
    assert by_claim(fake_results(peer_better))[1].verdict == "contradicted"
    # the nonlinearity ablation, when the sweep ran it, decides the third claim
    ablated = {**base, ("sgatlin-gelu", 1, 0): 2.95, ("sgatlin-gelu", 1, 1): 2.97}
    nonlinear = by_claim(fake_results(ablated))[2]
    assert nonlinear.verdict == "supported" and "scale 1: sgatlin -0.150 nats vs sgatlin-gelu" in nonlinear.detail
    helped = {**base, ("sgatlin-gelu", 1, 0): 2.60, ("sgatlin-gelu", 1, 1): 2.62}
    assert by_claim(fake_results(helped))[2].verdict == "contradicted"


def test_a_file_that_is_not_ladder_results_is_a_user_error(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"steps": 3}))
    with pytest.raises(UserError, match="not a ladder results file"):
        load_results(tmp_path / "other.json")
    with pytest.raises(UserError, match="cannot read ladder results"):
        load_results(tmp_path / "missing.json")


def test_runs_stopped_by_the_time_limit_are_not_compared():
    results = fake_results({("mlp", 1, 0): 3.0, ("sgatlin", 1, 0): 2.0})
    results["runs"][1]["stopped"] = "time limit"
    assert by_claim(results)[0].verdict == "not measured"


def check_sweep(out, archs, seeds):
    results = load_results(out)
    runs = results["runs"]
    assert sorted((run["arch"], run["seed"]) for run in runs) == sorted((a, s) for a in archs for s in seeds)
    for run in runs:
        assert run["status"] == "done" and run["scale"] == 1
        assert run["steps"] == 2 and run["tokens"] == 2 * 2 * 32  # --smoke: 2 steps of 2 x 32 tokens
        assert run["training_flops"] == run["tokens"] * run["flops"]["training_per_token"]
        assert 0 < run["generated_loss"] < 10 and run["natural_loss"] is None
        assert not (out / "runs" / run["name"] / "model.safetensors").exists()  # weights dropped
    assert (out / "ladder_loss_vs_flops.html").stat().st_size > 1000
    assert markdown_table(results) == (out / TABLE_FILE).read_text()
    return results


SMOKE = ["--smoke", "--device", "cpu", "--no-natural", "--tokenizer", TOKENIZER, "--quiet", "--ablations"]


def test_ladder_sweep_end_to_end_in_process(tmp_path):
    out = tmp_path / "ladder"
    argv = ["ladder", "--out", str(out), *SMOKE, "--archs", "moe", "--in-process"]
    assert main(argv + ["--seeds", "0"]) == 0
    check_sweep(out, ["moe"], [0])
    assert "| MoE (top-2 of 16) | 1 | 128 x 2 | 128 |" in (out / TABLE_FILE).read_text()
    # again with a second seed: the finished run is skipped, only the new one trains
    finished = (out / "runs" / "moe-s1-seed0" / "metrics.json").stat().st_mtime_ns
    assert main(argv + ["--seeds", "0", "1"]) == 0
    assert (out / "runs" / "moe-s1-seed0" / "metrics.json").stat().st_mtime_ns == finished
    check_sweep(out, ["moe"], [0, 1])
    # a run the time limit stopped is trained again by the next call (it never reached its budget)
    metrics_file = out / "runs" / "moe-s1-seed1" / "metrics.json"
    metrics = json.loads(metrics_file.read_text())
    metrics["stopped"] = "time limit"
    metrics_file.write_text(json.dumps(metrics))
    assert main(argv + ["--seeds", "0", "1"]) == 0
    assert json.loads(metrics_file.read_text())["stopped"] == "completed"
    assert (out / "runs" / "moe-s1-seed0" / "metrics.json").stat().st_mtime_ns == finished


def test_only_completed_runs_on_the_same_mixture_are_reused():
    metrics = {"stopped": "completed", "data": {"train_tokens": 1000}}
    assert reusable(metrics, 1000)
    assert not reusable(metrics, 1001)  # the story generator changed: another mixture
    assert not reusable({**metrics, "stopped": "time limit"}, 1000)
    assert not reusable(None, 1000)


@pytest.mark.slow
def test_ladder_sweep_end_to_end_as_concurrent_processes(tmp_path):
    """The GPU sweep's path: `circuitlab train` processes, two at a time."""
    out = tmp_path / "ladder"
    argv = ["ladder", "--out", str(out), *SMOKE, "sgatlin-gelu", "--archs", "peer", "--seeds", "0", "--jobs", "2"]
    assert main(argv) == 0
    results = check_sweep(out, ["peer", "sgatlin-gelu"], [0])
    assert all((out / "runs" / f"{run['name']}.log").exists() for run in results["runs"])
    assert "| sgatlin + GELU (ablation) | 1 | 128 x 2 | 784 |" in (out / TABLE_FILE).read_text()
