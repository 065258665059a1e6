"""The training loop's settings (`TrainConfig`) and which of them a resumed run may change."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from circuitlab.settings import Settings

# torch.compile modes a run may ask for ("reduce-overhead": CUDA graphs)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class TrainConfig(Settings):
    """Everything that determines the sequence of updates (plus a few knobs that do not, see RESUMABLE_CHANGES).
    Checked when built; `validate(world_size)` checks how the batch splits over ranks."""

    ERROR_PREFIX = "invalid training settings: "

    steps: int = 1000
    batch_size: int = 32  # sequences per optimizer step, over all ranks and micro-batches
    seq_len: int = 256
    lr: float = 1e-3
    warmup: int = 100
    decay_fraction: float = 0.2  # seed 000: square-root decay over the last 20% of steps
    weight_decay: float = 0.1
    decay_embeddings: bool = True
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still logged)
    grad_accum: int = 1
    seed: int = 0
    eval_every: int = 200
    eval_sequences: int = 256  # evaluation (validation) windows per periodic evaluation (the final one uses all)
    select_best: bool = True  # end with the weights of the lowest evaluation loss (circuitlab.training.selection)
    eval_batch_size: int = 32
    ckpt_every: int = 500
    keep_checkpoints: int = 2
    guard_window: int = 50
    guard_factor: float = 2.0
    max_minutes: float | None = None
    # the learning-rate schedule runs on the time budget: its decay ends as max_minutes do (Trainer._schedule_step)
    fit_to_time: bool = False
    compile: bool | None = None  # torch.compile the model; None: on CUDA yes, on the CPU no
    compile_mode: str | None = None  # torch.compile mode; None: "reduce-overhead" on one CUDA device, else "default"
    micro_batch: int = 0  # sequences per forward/backward on each rank; 0: picked (see Trainer.micro_batch)
    fsdp: bool = False

    @model_validator(mode="after")
    def _in_range(self) -> TrainConfig:
        for key in ("steps", "batch_size", "seq_len", "grad_accum", "eval_batch_size", "keep_checkpoints"):
            if not int(getattr(self, key)) > 0:
                raise ValueError(f"{key} must be a positive integer, got {getattr(self, key)}")
        checks = [
            (self.lr > 0, f"lr must be positive, got {self.lr}"),
            (self.warmup >= 0, f"warmup must be >= 0, got {self.warmup}"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}"),
            (self.grad_clip >= 0, f"grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}"),
            (self.eval_every >= 0 and self.ckpt_every >= 0, "eval_every and ckpt_every must be >= 0 (0 = never)"),
            (self.max_minutes is None or self.max_minutes > 0, f"max_minutes must be positive, got {self.max_minutes}"),
            (not self.fit_to_time or self.max_minutes is not None, "fit_to_time needs max_minutes (the time budget)"),
            (self.compile_mode is None or self.compile_mode in COMPILE_MODES,
             f"compile_mode must be one of {', '.join(COMPILE_MODES)}, got {self.compile_mode!r}"),
            (self.micro_batch >= 0, f"micro_batch must be >= 0 (0 = picked for the device), got {self.micro_batch}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.validate(1)
        return self

    def validate(self, world_size: int = 1) -> None:  # type: ignore[override]
        """How the batch splits over `world_size` ranks (a UserError when it does not)."""
        from circuitlab.errors import UserError

        per_rank = self.batch_size // max(1, world_size)
        if not (self.micro_batch == 0 or per_rank % self.micro_batch == 0):
            raise UserError(f"{self.ERROR_PREFIX}micro_batch {self.micro_batch} must divide the {per_rank} sequences "
                            "each rank takes per step")
        if self.batch_size % (world_size * self.grad_accum):
            raise UserError(
                f"{self.ERROR_PREFIX}batch_size {self.batch_size} must be divisible by ranks x grad_accum = "
                f"{world_size} x {self.grad_accum}, so every micro-batch has the same number of sequences"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        unknown = sorted(set(data) - set(cls.model_fields))
        if unknown:
            raise ValueError(f"unknown training settings {unknown}; expected a subset of {sorted(cls.model_fields)}")
        return cls(**data)


# settings that may differ between a checkpoint and the run resuming it without changing any update
# (how a step is split into micro-batches changes float rounding only, not the update)
RESUMABLE_CHANGES = frozenset({"eval_every", "eval_sequences", "select_best", "eval_batch_size", "ckpt_every",
                               "keep_checkpoints", "max_minutes", "compile", "compile_mode", "micro_batch"})
