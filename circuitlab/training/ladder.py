"""The iso-FLOP ladder (seed 000, section 3.1 and Figure 3): every FFN design trained at several ladder scales,
each scale with one training FLOP budget shared by all designs, loss recorded against FLOPs.

    from circuitlab.training.ladder import LadderSettings, plan_runs
    runs = plan_runs(LadderSettings(scales=(1, 2, 3), archs=("mlp", "swiglu", "sgatlin")), d_vocab=8192)
    runs = plan_runs(LadderSettings(scales=(1, 2), sizes=(1, 2, 3), seeds=(0, 1, 2)), d_vocab=8192)

Budgets: scale s gets `budget_scale * BASE_BUDGET * 4 ** (s - 1)` training FLOPs (count_flops convention:
3x the forward pass, attention included). A run's token count is its budget divided by its own training
FLOPs per token, so a design that costs less per token trains on more tokens: the comparison is at equal
compute, as in seed 000. By default each budget trains the model of its own scale; with `sizes`, every budget
trains the models of all those ladder scales (an iso-FLOP curve per design and budget: the smaller models see
more tokens), every seed at every budget and size, and a design's loss at a budget is that of its best size.
`lr_grid` adds runs at other peak learning rates at the smallest budget (first seed, every size and design).

Data: no run may see a natural story more than `max_natural_passes` times (tokens x natural_upsample / the
mixture's training tokens); `budget_scale="max"` picks the largest budgets for which every run stays within it
(`largest_budget_scale`), and a plan that breaks it is refused by name (`check_passes`).

All of it is tiny next to seed 000 (1e17 to 6e18 FLOPs, scales 2 to 8, GPT-2 vocabulary, sequences of 2048):
scales 1 to 3 here have 1.3M to 14M active parameters and sequences of 256, and the shipped stories allow
budgets up to about 2e14 FLOPs with sizes 1 to 3.

This module plans the sweep and reads its finished runs; `circuitlab ladder` (circuitlab.cli.ladder_runs) runs
it as `circuitlab train` processes (several at once on each GPU, round robin over the GPUs), skipping finished
runs (metrics.json present with the planned step count) when the sweep is run again. The results JSON holds
one record per run; circuitlab.training.ladder_report words seed 000's comparative claims from it
(`verdicts(results)`) and writes the table and the figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

import circuitlab.architectures.registry as registry
from circuitlab.config import ModelConfig, ladder_config, ladder_designs, scaling_ladder
from circuitlab.flops import count_flops
from circuitlab.presets import LADDER_ABLATIONS
from circuitlab.resources import natural_root
from circuitlab.settings import Settings

BASE_BUDGET = 6e13  # training FLOPs of scale 1 at --budget-scale 1; x4 per scale
RESULTS_FILE = "ladder_results.json"
TABLE_FILE = "ladder_table.md"
FIGURE_FILE = "ladder_loss_vs_flops.html"
LADDER_FFN_TYPES = ladder_designs()
ABLATIONS = LADDER_ABLATIONS  # run at the smallest scale, every seed
ALL_ARCHS = (*LADDER_FFN_TYPES, *ABLATIONS)
ARCH_LABELS = {name: registry.FEEDFORWARDS[name].label for name in LADDER_FFN_TYPES} | {
    "sgatlin-gelu": "sgatlin + GELU (ablation)", "sgatlin-peer-router": "sgatlin + PEER router (ablation)"}


def arch_config(scale: int, arch: str, **overrides: Any) -> ModelConfig:
    """The ladder config of a design (`ladder_config`) or of an ablation (a ladder design with changes)."""
    if arch not in ABLATIONS:
        return ladder_config(scale, arch, **overrides)
    base, changes = ABLATIONS[arch]
    config = ladder_config(scale, base, **overrides)
    return config.replace(feedforward={**config.feedforward.model_dump(), **changes}, name=f"ladder-{arch}-{scale}")


def base_arch(arch: str) -> str:
    return ABLATIONS[arch][0] if arch in ABLATIONS else arch


class LadderSettings(Settings):
    """What the sweep trains. `seeds`: every seed runs at the smallest scale, the first seed at the others
    (with `sizes`: every seed at every budget and size). Checked on construction (a UserError naming the
    option); immutable."""

    scales: tuple[int, ...] = (1, 2, 3)  # one FLOP budget per scale (BASE_BUDGET x 4^(scale-1) x budget_scale)
    sizes: tuple[int, ...] = ()  # ladder scales of the models trained at every budget; () = the budget's own
    archs: tuple[str, ...] = LADDER_FFN_TYPES
    ablations: tuple[str, ...] = tuple(ABLATIONS)  # at the smallest budget only, every seed (and size)
    seeds: tuple[int, ...] = (0, 1)
    budget_scale: float | Literal["max"] = 1.0  # "max": the largest the natural stories allow (max_natural_passes)
    lr_grid: tuple[float, ...] = ()  # other peak learning rates, run at the smallest budget (first seed)
    max_natural_passes: float | None = 2.0  # no run sees a natural training story more often (None: no limit)
    seq_len: int = 256
    batch_size: int = 64
    lr: float = 1e-3
    grad_clip: float = 1.0
    max_warmup: int = 100  # warmup = min(max_warmup, steps // 10)
    device: str = "auto"
    jobs_per_gpu: int = 10
    gpus: tuple[str, ...] = ()  # CUDA device ids to spread runs over; () = every visible GPU (or the CPU)
    max_minutes: float | None = 5.0  # per run: stop cleanly and record it (metrics say "time limit")
    natural: str | None = str(natural_root())
    # the shipped models' mixture (scripts/train_shipped.sh): the natural training split once, 60,000 generated
    natural_upsample: int = 1
    n_stories: int = 60000
    held_out_stories: int = 1000
    tokenizer: str | None = "models/sgatlin-stories/tokenizer.json"
    vocab_size: int = 8192  # used only when no tokenizer is given (one is trained on the mixture)
    keep_models: bool = False  # keep each run's model.safetensors (large for sgatlin and PEER)
    in_process: bool = False  # run each training in this process, one after the other (tests, debugging)
    # torch.compile each run: off by default, since runs of a minute or two would spend a good part of it
    # compiling (ten at once on the CPU cores), and the MoE's per-expert batch sizes change every step
    compile: bool = False
    min_steps: int = 2

    @model_validator(mode="after")
    def _checked(self) -> LadderSettings:
        """Every option in range (a ValueError naming it, which the constructor raises as a UserError)."""
        if not self.scales or any(not isinstance(s, int) or s < 1 for s in self.scales):
            raise ValueError(f"--scales must be positive integers, got {list(self.scales)}")
        unknown = [arch for arch in self.archs if arch not in LADDER_FFN_TYPES]
        if not self.archs or unknown:
            raise ValueError(f"--archs must name ladder designs ({', '.join(LADDER_FFN_TYPES)}), got {list(self.archs)}")
        if any(arch not in ABLATIONS for arch in self.ablations):
            raise ValueError(f"--ablations must name ablations ({', '.join(ABLATIONS)}), got {list(self.ablations)}")
        if not self.seeds:
            raise ValueError("--seeds needs at least one seed")
        if self.budget_scale != "max" and not 0 < self.budget_scale < float("inf"):
            raise ValueError(f"--budget-scale must be a positive number or 'max', got {self.budget_scale}")
        if any(not isinstance(s, int) or s < 1 for s in self.sizes):
            raise ValueError(f"--sizes must be positive integers (ladder scales), got {list(self.sizes)}")
        for lr in (self.lr, *self.lr_grid):
            if not 0 < lr < float("inf"):
                raise ValueError(f"--lr and --lr-grid must be positive numbers, got {lr}")
        if self.max_natural_passes is not None and not self.max_natural_passes > 0:
            raise ValueError(f"--max-natural-passes must be positive, got {self.max_natural_passes}")
        if self.budget_scale == "max" and (self.max_natural_passes is None or self.natural is None):
            raise ValueError("--budget-scale max needs the natural stories and --max-natural-passes (the largest "
                             "budget is set by how often a run may see each natural story)")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"--max-minutes must be positive, got {self.max_minutes}")
        if self.jobs_per_gpu < 1:
            raise ValueError(f"--jobs must be positive, got {self.jobs_per_gpu}")
        for name in ("seq_len", "batch_size", "min_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.tokenizer is not None and not Path(self.tokenizer).is_file():
            raise ValueError(f"--tokenizer {self.tokenizer}: no such file")
        if self.natural is not None and not Path(self.natural).is_dir():
            raise ValueError(f"--natural {self.natural}: no such folder")
        return self


def budget_for(scale: int, budget_scale: float = 1.0) -> float:
    """Training FLOPs of one run at `scale`."""
    return budget_scale * BASE_BUDGET * 4 ** (scale - 1)


@dataclass
class PlannedRun:
    arch: str
    scale: int  # the budget's ladder scale
    seed: int
    name: str
    budget_flops: float
    training_flops_per_token: int
    steps: int
    warmup: int
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    flops: dict[str, Any] = field(repr=False, default_factory=dict)
    size: int = 0  # the model's ladder scale (0: the budget's own)
    lr: float = 1e-3

    def __post_init__(self) -> None:
        self.size = self.size or self.scale

    @property
    def tokens(self) -> int:
        return self.steps * self.flops["tokens_per_step"]


def natural_passes(tokens: float, train_tokens: int, natural_upsample: int) -> float:
    """How often a run of `tokens` sees each natural training story: every pass over the mixture holds each
    natural story `natural_upsample` times."""
    return tokens * natural_upsample / max(train_tokens, 1)


def _sizes(settings: LadderSettings, scale: int) -> tuple[int, ...]:
    return tuple(sorted(set(settings.sizes))) if settings.sizes else (scale,)


def _steps(settings: LadderSettings, budget: float, per_token: int) -> int:
    return max(settings.min_steps, round(budget / (per_token * settings.batch_size * settings.seq_len)))


def _lr_name(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def plan_runs(settings: LadderSettings, d_vocab: int, budget_scale: float | None = None) -> list[PlannedRun]:
    """Every run of the sweep, largest budget first (the longest runs start first). `budget_scale` replaces
    the settings' (needed when that is "max": `largest_budget_scale` computes it)."""
    budget_scale = settings.budget_scale if budget_scale is None else budget_scale
    if budget_scale == "max":
        raise ValueError("budget_scale 'max' is resolved by largest_budget_scale once the mixture is known")
    smallest = min(settings.scales)
    curves = bool(settings.sizes)
    tokens_per_step = settings.batch_size * settings.seq_len
    runs = []
    for scale in sorted(set(settings.scales), reverse=True):
        seeds = settings.seeds if scale == smallest or curves else settings.seeds[:1]
        archs = list(settings.archs) + (list(settings.ablations) if scale == smallest else [])
        grid = [(settings.lr, seed) for seed in seeds]
        if scale == smallest:
            grid += [(lr, settings.seeds[0]) for lr in dict.fromkeys(settings.lr_grid) if lr != settings.lr]
        for lr, seed in grid:
            for size in _sizes(settings, scale):
                for arch in archs:
                    if lr != settings.lr and arch in settings.ablations:
                        continue
                    config = arch_config(size, arch, d_vocab=d_vocab, n_ctx=settings.seq_len)
                    count = count_flops(config, settings.seq_len)
                    budget = budget_for(scale, budget_scale)
                    steps = _steps(settings, budget, count.training_per_token)
                    name = f"{arch}-b{scale}-s{size}" if curves else f"{arch}-s{scale}"
                    name += f"-seed{seed}" + ("" if lr == settings.lr else f"-lr{_lr_name(lr)}")
                    runs.append(PlannedRun(
                        arch=arch, scale=scale, seed=seed, name=name, budget_flops=budget,
                        training_flops_per_token=count.training_per_token, steps=steps,
                        warmup=min(settings.max_warmup, steps // 10), config=config.to_dict(),
                        flops={**count.to_dict(), "tokens_per_step": tokens_per_step}, size=size, lr=lr,
                    ))
    return runs


def largest_budget_scale(settings: LadderSettings, d_vocab: int, train_tokens: int) -> float:
    """The largest `budget_scale` at which no planned run sees a natural story more than
    `max_natural_passes` times: the run that reads the most tokens per FLOP sets it."""
    allowed_tokens = settings.max_natural_passes * train_tokens / settings.natural_upsample
    runs = plan_runs(settings, d_vocab, budget_scale=1.0)
    exact = min(allowed_tokens * run.training_flops_per_token / run.budget_flops for run in runs)
    # three significant digits, rounded down, with room for the half step that rounding the steps can add
    digits = 2 - math.floor(math.log10(exact))
    return math.floor(exact * 0.999 * 10**digits) / 10**digits


def check_passes(runs: list[PlannedRun], settings: LadderSettings, train_tokens: int) -> None:
    """Refuse a plan in which a run sees a natural story more than `max_natural_passes` times."""
    if settings.max_natural_passes is None or settings.natural is None:
        return
    over = [(run.name, natural_passes(run.tokens, train_tokens, settings.natural_upsample)) for run in runs]
    over = [(name, passes) for name, passes in over if passes > settings.max_natural_passes + 1e-9]
    if over:
        from circuitlab.errors import UserError

        worst = max(over, key=lambda item: item[1])
        raise UserError(
            f"{len(over)} ladder runs would see each natural story more than {settings.max_natural_passes:g} times "
            f"(the worst, {worst[0]}, {worst[1]:.2f} times: {train_tokens:,} training tokens in the mixture); lower "
            "--budget-scale, pass --budget-scale max, or raise --max-natural-passes")


# --- records of finished runs ----------------------------------------------------------------------------


def finished_metrics(folder: Path, run: PlannedRun) -> dict[str, Any] | None:
    """The run's metrics when it finished with the planned settings (else None)."""
    try:
        metrics = json.loads((folder / "metrics.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    planned = metrics.get("train_settings", {}).get("steps") == run.steps and metrics.get("seed") == run.seed
    return metrics if planned and metrics.get("config_hash") == ModelConfig.from_dict(run.config).hash() else None


def reusable(metrics: dict[str, Any] | None, train_tokens: int) -> bool:
    """A finished run is kept by a later call only when it reached its budget (not stopped by the time
    limit) on the same training mixture (same token count: a changed story generator retrains it)."""
    return (metrics is not None and metrics.get("stopped") == "completed"
            and metrics.get("data", {}).get("train_tokens") == train_tokens)


def run_record(run: PlannedRun, metrics: dict[str, Any] | None, status: str,
               passes_per_token: float | None = None) -> dict[str, Any]:
    """One run's record; `passes_per_token`: natural passes per training token (natural_upsample / the
    mixture's training tokens), to record how often the run saw each natural story."""
    d_model, n_layers, d_ffw = scaling_ladder(run.size, base_arch(run.arch))
    record: dict[str, Any] = {
        "arch": run.arch, "scale": run.scale, "size": run.size, "lr": run.lr, "seed": run.seed, "name": run.name,
        "status": status,
        "d_model": d_model, "n_layers": n_layers, "d_ffw": d_ffw, "budget_flops": run.budget_flops,
        "planned_steps": run.steps, "warmup": run.warmup, "flops": run.flops, "config": run.config,
    }
    if metrics is not None:
        tokens = int(metrics["tokens_seen"])
        record.update(
            steps=metrics["steps"], tokens=tokens, training_flops=tokens * run.training_flops_per_token,
            natural_loss=metrics.get("natural_held_out_loss"),
            # without the natural stories the one held-out set is the generated stories'
            generated_loss=metrics.get("generated_held_out_loss", None if metrics.get("held_out_sets") else metrics["held_out_loss"]),
            held_out_loss=metrics["held_out_loss"], stopped=metrics["stopped"], train_seconds=metrics["train_seconds"],
            wall_seconds=metrics["wall_seconds"], device=metrics["device"], parameters=metrics["parameters"],
        )
        if passes_per_token is not None:
            record["natural_passes"] = tokens * passes_per_token
    return record
