"""Two CPU processes with gloo (DDP, and FSDP2) train exactly like one process on the same global batch.

The single-process reference accumulates two micro-batches, each the slice one rank sees; DDP averages the
ranks' gradients, which is the same sum, so the weights after a few AdamW steps agree to float rounding
(tolerance 1e-6; in practice they are bitwise equal).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.distributed import DistributedContext
from circuitlab.training.settings import TrainConfig
from circuitlab.training.trainer import Trainer

SEQ_LEN = 32
SETTINGS = dict(steps=3, batch_size=8, seq_len=SEQ_LEN, lr=3e-3, warmup=1, eval_every=0, ckpt_every=2, eval_sequences=8)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def windows() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 512, (56, SEQ_LEN + 1), generator=generator).to(torch.int32)


def rank_worker(rank: int, world_size: int, port: int, out: str, preset: str, fsdp: bool) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = CircuitTransformer(ModelConfig.preset(preset))
        model.reset_parameters(seed=0)
        data = windows()
        trainer = Trainer(model, TrainConfig(**SETTINGS, fsdp=fsdp), data[:48], data[48:], out,
                          context=DistributedContext(rank, world_size, rank, "gloo"), progress=False)
        result = trainer.fit()
        state = trainer.full_model_state()
        if rank == 0:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(out, "final.safetensors"))
            Path(out, "result.json").write_text(json.dumps({"held_out_loss": result.eval_loss}))
        # both ranks tear the group down together: a rank that left while rank 0 was still writing aborted once
        # in gloo's teardown ("terminate called without an active exception", 2026-12-01, CI on 2 cores)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def single_process(out: Path, preset: str) -> tuple[dict[str, torch.Tensor], float]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = CircuitTransformer(ModelConfig.preset(preset))
        model.reset_parameters(seed=0)
        data = windows()
        trainer = Trainer(model, TrainConfig(**SETTINGS, grad_accum=2), data[:48], data[48:], out, progress=False)
        result = trainer.fit()
        return trainer.base_model.state_dict(), result.eval_loss
    finally:
        torch.set_num_threads(threads)


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("preset", "fsdp"), [
    ("tiny-sgatlin", False),
    pytest.param("tiny-legible", True, marks=pytest.mark.slow),  # FSDP2 on gloo: ~15-25 s
])
def test_two_gloo_ranks_equal_one_process_on_the_same_global_batch(tmp_path, preset, fsdp):
    mp.spawn(rank_worker, args=(2, free_port(), str(tmp_path / "ddp"), preset, fsdp), nprocs=2, join=True)
    reference, reference_loss = single_process(tmp_path / "single", preset)
    distributed = load_file(tmp_path / "ddp" / "final.safetensors")
    assert sorted(distributed) == sorted(reference)
    for name, tensor in reference.items():
        torch.testing.assert_close(distributed[name], tensor, rtol=0, atol=1e-6, msg=name)
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "single"), rel=0, abs=1e-6)
    held_out = json.loads((tmp_path / "ddp" / "result.json").read_text())["held_out_loss"]
    assert held_out == pytest.approx(reference_loss, abs=1e-5)
    # rank 0 alone wrote the log and the (unsharded) checkpoint
    assert len(losses(tmp_path / "ddp")) == 3
    checkpoint = load_file(tmp_path / "ddp" / "checkpoints" / "step_00000002" / "model.safetensors")
    assert checkpoint["W_E"].shape == reference["W_E"].shape


@pytest.mark.slow
def test_torchrun_cli_matches_single_process_cli(tmp_path):
    """The real launcher: `torchrun --nproc_per_node=2 -m circuitlab.cli train` vs `circuitlab train --grad-accum 2`."""
    common = ["--preset", "tiny-gelu", "--steps", "4", "--batch-size", "8", "--seq-len", "32", "--n-stories", "300",
              "--held-out-stories", "20", "--vocab-size", "512", "--eval-every", "0", "--ckpt-every", "2",
              "--device", "cpu", "--threads", "1", "--quiet", "--data-dir", str(tmp_path / "data")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run([sys.executable, "-m", "circuitlab.cli", "train", *common, "--grad-accum", "2",
                             "--out", str(tmp_path / "single")], capture_output=True, text=True, env=env, timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
         "-m", "circuitlab.cli", "train", *common, "--out", str(tmp_path / "ddp")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    a = load_file(tmp_path / "single" / "model.safetensors")
    b = load_file(tmp_path / "ddp" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=name)
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["command"].startswith("torchrun --nproc_per_node=2 -m circuitlab.cli train --preset tiny-gelu")
