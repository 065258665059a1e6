"""The training loop: optimizer groups, data order, bitwise resume, checkpoints, divergence, time limit."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.architectures.transformer import load_model
from circuitlab.errors import UserError
from circuitlab.training.guard import DivergenceError
from circuitlab.training.batches import WindowSampler, parameter_groups
from circuitlab.training.compile import default_compile_mode
from circuitlab.training.resume import CheckpointMismatchError, find_checkpoint
from circuitlab.training.settings import TrainConfig
from circuitlab.training.trainer import Trainer

SEQ_LEN = 32


@pytest.fixture(autouse=True)
def one_thread():
    """Bitwise comparisons need one fixed reduction order; one thread also avoids oversubscription."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def synthetic_windows(n: int, vocab: int = 512, seed: int = 0) -> torch.Tensor:
    """Windows with learnable structure: each token is the previous plus a small seeded step."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (n, 1), generator=generator)
    steps = torch.randint(1, 4, (n, SEQ_LEN), generator=generator)
    return torch.cat([starts, starts + steps.cumsum(1)], dim=1).remainder(vocab).to(torch.int32)


def make_trainer(out, preset: str = "tiny-legible", model_seed: int = 0, **settings) -> Trainer:
    defaults = dict(steps=10, batch_size=4, seq_len=SEQ_LEN, lr=3e-3, warmup=2, eval_every=5, eval_sequences=8,
                    ckpt_every=0, guard_window=4)
    defaults.update(settings)
    model = CircuitTransformer(ModelConfig.preset(preset))
    model.reset_parameters(seed=model_seed)
    windows = synthetic_windows(72)
    return Trainer(model, TrainConfig(**defaults), windows[:64], windows[64:], out, progress=False)


def log_records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


DETERMINISTIC_FIELDS = ("step", "loss", "lr", "grad_norm", "selectivity", "running_loss", "tokens_seen", "eval_loss")


def comparable(records: list[dict]) -> list[dict]:
    return [{k: r.get(k) for k in DETERMINISTIC_FIELDS} for r in records]


def test_parameter_groups_decay_matrices_and_embeddings_only():
    model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, undecayed = parameter_groups(model, 0.1)
    decayed_names = {names[id(p)] for p in decayed["params"]}
    undecayed_names = {names[id(p)] for p in undecayed["params"]}
    assert decayed["weight_decay"] == 0.1 and undecayed["weight_decay"] == 0.0
    assert "W_E" in decayed_names and "blocks.0.attn.W_A" in decayed_names and "blocks.1.mlp.W_out" in decayed_names
    assert {"ln_final.w", "blocks.0.ln1.w", "blocks.0.attn.q_norm.w", "blocks.0.mlp.decay_logit"} <= undecayed_names
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in undecayed["params"])
    # zero-size W_V (every head is Boolean) is left out; everything else is in exactly one group
    all_names = {n for n, p in model.named_parameters() if p.numel() > 0}
    assert decayed_names | undecayed_names == all_names and not decayed_names & undecayed_names
    _, no_embed = parameter_groups(model, 0.1, decay_embeddings=False)
    assert "W_E" in {names[id(p)] for p in no_embed["params"]}


def test_weight_decay_reaches_only_the_decayed_group():
    """With zero gradients an AdamW step only shrinks decayed weights, by exactly (1 - lr * wd)."""
    model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.1), lr=0.5)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, param in model.named_parameters():
        expected = before[name] * (1 - 0.5 * 0.1) if param.dim() >= 2 else before[name]
        torch.testing.assert_close(param.detach(), expected, rtol=0, atol=1e-7)


def test_window_sampler_is_a_pure_function_of_seed_and_step():
    sampler = WindowSampler(n_windows=10, batch_size=4, seed=3)
    batches = [sampler.batch_indices(step) for step in range(5)]  # 20 samples = 2 epochs
    flat = torch.cat(batches)
    assert sorted(flat[:10].tolist()) == list(range(10)) and sorted(flat[10:].tolist()) == list(range(10))
    assert flat[:10].tolist() != flat[10:].tolist()  # a fresh permutation each epoch
    fresh = WindowSampler(n_windows=10, batch_size=4, seed=3)
    assert torch.equal(fresh.batch_indices(3), batches[3])  # no hidden state: step 3 without steps 0-2
    assert not torch.equal(WindowSampler(10, 4, seed=4).batch_indices(0), batches[0])


def test_resume_reproduces_the_uninterrupted_losses_bitwise(tmp_path):
    whole = make_trainer(tmp_path / "whole", ckpt_every=3)
    whole_result = whole.fit()
    assert whole_result.step == 10 and whole_result.stopped == "completed"

    first = make_trainer(tmp_path / "split", ckpt_every=3)
    assert first.fit(stop_at=5).stopped == "stopped"
    assert find_checkpoint(tmp_path / "split").name == "step_00000005"
    # another init seed: everything must come from the checkpoint, not from the constructor
    second = make_trainer(tmp_path / "split", model_seed=123, ckpt_every=3)
    resumed = second.fit(resume=True)
    assert resumed.step == 10

    expected, got = comparable(log_records(tmp_path / "whole")), comparable(log_records(tmp_path / "split"))
    assert [r["step"] for r in got] == list(range(1, 11))
    assert got == expected  # float equality of every logged number, steps 6-10 included
    assert any(r["selectivity"] > 0 for r in got)  # tiny-legible's crispness pressure is part of the loss
    assert resumed.eval_loss == whole_result.eval_loss
    for (name, a), b in zip(whole.base_model.state_dict().items(), second.base_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_checkpoint_folder_is_a_model_folder_and_never_pickled(tmp_path):
    trainer = make_trainer(tmp_path, steps=4, ckpt_every=2, keep_checkpoints=1)
    trainer.fit()
    checkpoints = tmp_path / "checkpoints"
    # kept 1, and the weights of the best evaluation (circuitlab.training.selection)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.safetensors", "latest.json", "step_00000004"]
    folder = checkpoints / "step_00000004"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "model.safetensors", "optimizer.safetensors", "rng.safetensors", "trainer_state.json"]
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["step"] == 4 and state["tokens_seen"] == 4 * 4 * SEQ_LEN
    assert state["data"]["samples_consumed"] == 16
    reloaded = load_model(folder)
    for name, tensor in trainer.base_model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_interrupted_checkpoint_write_leaves_the_previous_one_usable(tmp_path):
    make_trainer(tmp_path, ckpt_every=3).fit(stop_at=3)
    # a write killed half way: a temporary folder with a partial file, never renamed into place
    partial = tmp_path / "checkpoints" / ".tmp-step_00000006-999"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)
    resumed = make_trainer(tmp_path, ckpt_every=3)
    resumed.fit(resume=True)
    assert resumed.step == 10 and not partial.exists()
    assert [r["step"] for r in log_records(tmp_path)] == list(range(1, 11))


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    make_trainer(tmp_path, ckpt_every=3).fit(stop_at=3)
    optimizer_file = tmp_path / "checkpoints" / "step_00000003" / "optimizer.safetensors"
    optimizer_file.write_bytes(optimizer_file.read_bytes()[:100])
    with pytest.raises(CheckpointMismatchError, match="optimizer.safetensors.*damaged"):
        make_trainer(tmp_path, ckpt_every=3).fit(resume=True)


def test_resume_with_other_settings_is_refused(tmp_path):
    make_trainer(tmp_path, ckpt_every=3).fit(stop_at=3)
    with pytest.raises(CheckpointMismatchError, match="lr: checkpoint 0.003 vs now 0.001"):
        make_trainer(tmp_path, ckpt_every=3, lr=1e-3).fit(resume=True)
    with pytest.raises(CheckpointMismatchError, match="model config differs"):
        make_trainer(tmp_path, preset="tiny-gelu", ckpt_every=3).fit(resume=True)
    # settings that change no update may differ
    make_trainer(tmp_path, ckpt_every=2, eval_every=3).fit(resume=True)


def test_non_finite_loss_aborts_and_saves_the_state_before_the_bad_step(tmp_path):
    trainer = make_trainer(tmp_path, preset="tiny-gelu")
    calls = {"n": 0}

    def poison(module, inputs, output):
        calls["n"] += 1
        if calls["n"] == 4:  # the 4th training forward (step 4) returns NaN logits
            return output * float("nan")
        return output

    trainer.base_model.blocks[1].register_forward_hook(lambda m, i, o: (poison(m, i, o[0]), *o[1:]))
    with pytest.raises(DivergenceError, match="non-finite loss at step 4") as caught:
        trainer.fit()
    saved = tmp_path / "checkpoints" / "diverged_step_00000004"
    assert caught.value.checkpoint == str(saved) and str(saved) in str(caught.value)
    assert json.loads((saved / "trainer_state.json").read_text())["step"] == 3
    weights = load_model(saved).state_dict()
    assert all(torch.isfinite(t).all() for t in weights.values())
    for name, tensor in trainer.base_model.state_dict().items():
        assert torch.equal(weights[name], tensor), name  # the poisoned step never updated the weights
    assert find_checkpoint(tmp_path) is None  # a diverged state is not something to resume from


def test_rising_running_loss_aborts_through_the_guard(tmp_path):
    """A learning rate too high for the model: the loss first falls, then climbs and stays up; the guard
    stops the run on the rising running loss (the loss never becomes NaN)."""
    trainer = make_trainer(tmp_path, preset="tiny-gelu", steps=80, lr=0.1, warmup=5, guard_window=8,
                           guard_factor=1.5, grad_clip=0.0, eval_every=0)
    with pytest.raises(DivergenceError, match="running perplexity rose") as caught:
        trainer.fit()
    records = log_records(tmp_path)
    assert records[-1]["step"] == caught.value.step < 80  # the step that tripped the guard is logged
    running = [r["running_loss"] for r in records if r["running_loss"] is not None]
    assert running[-1] - min(running) > math.log(1.5)  # the logged running loss shows the rise
    assert all(math.isfinite(r["loss"]) for r in records)  # a rise, not a NaN
    saved = json.loads((tmp_path / "checkpoints" / f"diverged_step_{caught.value.step:08d}" / "trainer_state.json").read_text())
    assert saved["step"] == caught.value.step


def test_time_limit_stops_cleanly_and_the_run_resumes_to_the_same_losses(tmp_path):
    full = make_trainer(tmp_path / "full")
    full.fit()
    limited = make_trainer(tmp_path / "limited", max_minutes=1e-9)
    result = limited.fit()
    assert result.stopped == "time limit" and result.step == 1 and math.isfinite(result.eval_loss)
    assert find_checkpoint(tmp_path / "limited").name == "step_00000001"
    make_trainer(tmp_path / "limited", max_minutes=None).fit(resume=True)
    assert comparable(log_records(tmp_path / "limited")) == comparable(log_records(tmp_path / "full"))


def test_fit_to_time_ends_the_decay_with_the_time_budget(tmp_path):
    """With --fit-to-time a run that cannot reach its steps in the budget still decays: the rate falls
    monotonically after warm-up and is near zero at the last step; a plain time limit stops at the peak rate."""
    settings = dict(preset="tiny-gelu", steps=1_000_000, warmup=2, eval_every=0, max_minutes=0.1, lr=1e-3)
    result = make_trainer(tmp_path / "fit", fit_to_time=True, **settings).fit()
    assert result.stopped == "time budget" and 10 < result.step < 1_000_000
    rates = [r["lr"] for r in log_records(tmp_path / "fit") if "lr" in r]
    assert rates[2] == pytest.approx(1e-3)  # warm-up counts optimizer steps; the decay starts at 80% of the budget
    assert all(later <= earlier for earlier, later in zip(rates[2:], rates[3:]))
    assert rates[-1] < 0.35e-3 and min(rates[2:]) < rates[2]
    plain = make_trainer(tmp_path / "plain", **settings).fit()
    assert plain.stopped == "time limit" and [r for r in log_records(tmp_path / "plain") if "lr" in r][-1]["lr"] == pytest.approx(1e-3)


def test_gradient_accumulation_matches_the_whole_batch(tmp_path):
    whole = make_trainer(tmp_path / "a", steps=3, eval_every=0)
    whole.fit()
    accumulated = make_trainer(tmp_path / "b", steps=3, eval_every=0, grad_accum=2)
    accumulated.fit()
    for a, b in zip(log_records(tmp_path / "a"), log_records(tmp_path / "b")):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for (name, a), b in zip(whole.base_model.state_dict().items(), accumulated.base_model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)


def test_running_out_of_memory_halves_the_picked_micro_batch(tmp_path):
    """A model that runs out of GPU memory above 1 sequence per call: the trainer retries each step at smaller
    micro-batches and lands on the same updates as asking for grad_accum=4 (the effective batch is kept)."""
    calls: list[int] = []
    trainer = make_trainer(tmp_path / "a", steps=3, eval_every=0)
    forward = trainer.forward_model

    def forward_that_fits_one_sequence(tokens, **kwargs):
        calls.append(tokens.shape[0])
        if trainer.base_model.training and tokens.shape[0] > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(tokens, **kwargs)

    trainer.forward_model = forward_that_fits_one_sequence
    trainer.fit()
    assert trainer.micro_batch == 1
    assert calls[:3] == [4, 2, 1], calls  # batch 4: tried 4, then 2, then 1 sequence per micro-batch
    make_trainer(tmp_path / "b", steps=3, eval_every=0, grad_accum=4).fit()
    for a, b in zip(log_records(tmp_path / "a"), log_records(tmp_path / "b")):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)


def test_running_out_of_memory_under_cuda_graphs_recompiles_without_them(tmp_path, monkeypatch):
    """The graphs recorded at the larger micro-batch would keep their memory pool: after running out of memory
    the trainer compiles again in torch's default mode (torch.compile is stood in for here: no GPU)."""
    modes: list[str | None] = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: modes.append(mode) or model)
    trainer = make_trainer(tmp_path, steps=2, eval_every=0)
    forward = trainer.model
    trainer.compiled, trainer.cuda_graphs, trainer.compile_mode = True, True, "reduce-overhead"

    def forward_that_fits_two_sequences(tokens, **kwargs):
        if trainer.base_model.training and tokens.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(tokens, **kwargs)

    trainer.forward_model = forward_that_fits_two_sequences
    trainer.fit()
    assert trainer.micro_batch == 2 and modes == ["default"]
    assert trainer.compile_mode == "default" and not trainer.cuda_graphs


def test_an_explicit_micro_batch_never_shrinks(tmp_path):
    trainer = make_trainer(tmp_path, steps=1, eval_every=0, micro_batch=2)
    assert (trainer.micro_batch, trainer.micro_batch_picked, trainer.compiled) == (2, False, False)

    def out_of_memory(tokens, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    trainer.forward_model = out_of_memory
    with pytest.raises(torch.cuda.OutOfMemoryError):
        trainer.fit()
    with pytest.raises(ValueError, match="micro_batch 3 must divide the 4 sequences"):
        TrainConfig(batch_size=4, micro_batch=3).validate()


def test_settings_are_validated():
    with pytest.raises(ValueError, match="divisible by ranks x grad_accum = 1 x 3"):
        TrainConfig(batch_size=4, grad_accum=3).validate()
    with pytest.raises(ValueError, match="seq_len 256 exceeds the model's context n_ctx=128"):
        model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
        windows = torch.zeros(4, 257, dtype=torch.int32)
        Trainer(model, TrainConfig(seq_len=256), windows, windows, "unused", progress=False)
    with pytest.raises(ValueError, match=r"shape \[n, seq_len \+ 1 = 33\]"):
        model = CircuitTransformer(ModelConfig.preset("tiny-gelu"))
        Trainer(model, TrainConfig(seq_len=32), torch.zeros(4, 32, dtype=torch.int32),
                torch.zeros(4, 33, dtype=torch.int32), "unused", progress=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_autocast_on_cuda_keeps_float32_weights(tmp_path):
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin"))
    windows = synthetic_windows(40)
    trainer = Trainer(model, TrainConfig(steps=5, batch_size=4, seq_len=SEQ_LEN, warmup=1, eval_every=0),
                      windows[:32], windows[32:], tmp_path, device="cuda", progress=False)
    result = trainer.fit()
    assert math.isfinite(result.eval_loss)
    assert all(p.dtype == torch.float32 for p in trainer.base_model.parameters())
    assert os.path.exists(tmp_path / "train_log.jsonl")


def test_a_compilation_that_fails_on_the_first_step_falls_back_to_eager(tmp_path, capsys):
    """The compiled forward raises on its first call: the trainer warns, trains eager, and lands on the same
    losses as a run that never compiled; a failure after a compiled step has run is not swallowed."""
    trainer = make_trainer(tmp_path / "a", steps=3, eval_every=0)

    def compiled_forward_that_fails(tokens, **kwargs):
        raise RuntimeError("backend compiler failed (simulated)")

    trainer.compiled = True
    trainer.forward_model = compiled_forward_that_fails
    trainer.fit()
    assert "torch.compile failed on the first step" in capsys.readouterr().err
    assert trainer.compiled is False
    make_trainer(tmp_path / "b", steps=3, eval_every=0).fit()
    for a, b in zip(log_records(tmp_path / "a"), log_records(tmp_path / "b"), strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-6)

    later = make_trainer(tmp_path / "c", steps=3, eval_every=0)
    forward, calls = later.forward_model, []

    def fails_on_the_second_step(tokens, **kwargs):
        calls.append(1)
        if len(calls) > 1 and later.base_model.training:
            raise RuntimeError("a real error after compiling worked")
        return forward(tokens, **kwargs)

    later.compiled = True
    later.forward_model = fails_on_the_second_step
    with pytest.raises(RuntimeError, match="a real error"):
        later.fit()


def test_an_unknown_compile_mode_is_refused():
    with pytest.raises(UserError, match="compile_mode must be one of"):
        TrainConfig(compile_mode="fast").validate()


def test_cuda_graphs_are_the_default_only_where_every_layer_can_be_captured():
    from circuitlab import kernels

    def model(preset):
        return CircuitTransformer(ModelConfig.preset(preset))

    assert default_compile_mode(model("tiny-legible"), "cuda") == "reduce-overhead"
    assert default_compile_mode(model("tiny-sgatlin"), "cuda") == "reduce-overhead"
    # the parity bottleneck only while every solve runs in the fused kernel (the batched LU refuses capture)
    assert default_compile_mode(model("tiny-parity"), "cuda") == "reduce-overhead"
    wide = ModelConfig.preset("tiny-parity")
    wide = wide.replace(bottleneck={**wide.bottleneck.model_dump(), "k": 40})  # the pursuit's 2k = 80 > 64 features
    assert default_compile_mode(CircuitTransformer(wide), "cuda") == "default"
    with kernels.use_backend("reference"):  # no fused solves: the batched LU
        assert default_compile_mode(model("tiny-parity"), "cuda") == "default"
    assert default_compile_mode(model("tiny-legible"), "cuda", distributed=True) == "default"
    # eq. 1's linear design keeps its materialised dictionary between forwards: never captured
    assert default_compile_mode(model("parity-stories"), "cuda") == "default"
    assert default_compile_mode(model("tiny-legible"), "cpu") == "default"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_training_with_accumulation_equals_the_same_compiled_steps_without_graphs(tmp_path):
    """The default compile mode on one GPU replays CUDA graphs, whose outputs (gradients included) live in
    buffers the next replay reuses. With two micro-batches a step, a run with CUDA graphs must give the losses
    and gradient norms of the same compiled model run without them: a first micro-batch's gradient overwritten
    by the second one's replay would change the gradient norm by far more than the tolerance (an H200 run
    differed by at most 7e-5 relative, step 3's gradient norm). Weights are not compared entry by entry:
    AdamW turns rounding-level differences of near-zero gradients into whole steps of either sign."""
    logs = {}
    for mode in ("default", "reduce-overhead"):
        model = CircuitTransformer(ModelConfig.preset("tiny-legible"))
        model.reset_parameters(seed=0)
        windows = synthetic_windows(72)
        config = TrainConfig(steps=4, batch_size=4, seq_len=SEQ_LEN, lr=3e-3, warmup=1, eval_every=2, eval_sequences=8,
                             ckpt_every=0, grad_accum=2, compile=True, compile_mode=mode)
        trainer = Trainer(model, config, windows[:64], windows[64:], tmp_path / mode, device="cuda", progress=False)
        trainer.fit()
        assert trainer.compiled and trainer.cuda_graphs == (mode == "reduce-overhead")  # no fallback to eager
        logs[mode] = comparable(log_records(tmp_path / mode))
    assert len(logs["default"]) == len(logs["reduce-overhead"]) == 4
    for plain, graphs in zip(logs["default"], logs["reduce-overhead"]):
        for key in ("loss", "grad_norm", "eval_loss"):
            assert (plain[key] is None) == (graphs[key] is None), (key, plain, graphs)
            if plain[key] is not None:
                assert graphs[key] == pytest.approx(plain[key], rel=1e-3), (key, plain, graphs)


def _interrupting(trainer: Trainer, at_step: int, signals: int = 1) -> None:
    """Make `trainer` receive `signals` SIGINTs (Ctrl-C) while it computes step `at_step` (0-based)."""
    import os
    import signal

    original = trainer._train_step

    def step_with_ctrl_c(step: int):
        if step == at_step:
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGINT)
        return original(step)

    trainer._train_step = step_with_ctrl_c


def test_ctrl_c_stops_after_the_step_with_a_checkpoint_that_resumes_bitwise(tmp_path):
    import signal

    from circuitlab.training.interrupt import TrainingInterrupted

    handler = signal.getsignal(signal.SIGINT)
    whole = make_trainer(tmp_path / "whole")
    whole.fit()
    interrupted = make_trainer(tmp_path / "split")  # no periodic checkpoints: only Ctrl-C writes one
    _interrupting(interrupted, at_step=6)
    with pytest.raises(TrainingInterrupted) as caught:
        interrupted.fit()
    assert caught.value.step == 7 and find_checkpoint(tmp_path / "split").name == "step_00000007"
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C means KeyboardInterrupt again after fit
    assert [r["step"] for r in log_records(tmp_path / "split")] == list(range(1, 8))
    resumed = make_trainer(tmp_path / "split", model_seed=9).fit(resume=True)
    assert resumed.step == 10
    assert comparable(log_records(tmp_path / "split")) == comparable(log_records(tmp_path / "whole"))


def test_a_second_ctrl_c_stops_at_once_without_a_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path)
    _interrupting(trainer, at_step=2, signals=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert find_checkpoint(tmp_path) is None


def _scripted_evaluations(trainer: Trainer, losses: list[float]) -> None:
    """The periodic evaluations of `trainer` return `losses` in turn (the final one, over all windows, is real)."""
    original, scripted = trainer.evaluate, iter(losses)
    trainer.evaluate = lambda max_windows=None: next(scripted) if max_windows is not None else original()


def test_the_run_ends_with_the_weights_of_its_lowest_validation_loss(tmp_path):
    reference = make_trainer(tmp_path / "reference", steps=8, eval_every=2)
    _scripted_evaluations(reference, [3.0, 2.0])
    assert reference.fit(stop_at=4).selected_step is None  # the best is the last step: nothing to restore
    at_step_4 = {name: tensor.clone() for name, tensor in reference.base_model.state_dict().items()}

    trainer = make_trainer(tmp_path / "run", steps=8, eval_every=2)
    _scripted_evaluations(trainer, [3.0, 2.0, 2.5, 2.7])
    result = trainer.fit()
    assert result.step == 8 and result.selected_step == 4
    for name, tensor in trainer.base_model.state_dict().items():
        assert torch.equal(tensor, at_step_4[name]), name
    assert result.eval_loss == pytest.approx(trainer.evaluate())  # the returned loss is the kept weights'

    last = make_trainer(tmp_path / "last", steps=8, eval_every=2, select_best=False)
    _scripted_evaluations(last, [3.0, 2.0, 2.5, 2.7])
    assert last.fit().selected_step is None and not (tmp_path / "last" / "checkpoints" / "best.safetensors").exists()
    assert any(not torch.equal(a, at_step_4[name]) for name, a in last.base_model.state_dict().items())


def test_a_resumed_run_still_chooses_among_all_its_evaluations(tmp_path):
    first = make_trainer(tmp_path, steps=8, eval_every=2, ckpt_every=2)
    _scripted_evaluations(first, [3.0, 2.0, 2.5])
    first.fit(stop_at=6)
    second = make_trainer(tmp_path, steps=8, eval_every=2, ckpt_every=2)
    _scripted_evaluations(second, [2.7])
    assert second.fit(resume=True).selected_step == 4  # step 4's 2.0, from before the resume, is still the best
