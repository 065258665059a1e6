"""The presets (the shipped story models, seed 000's and seed 002's reference models, the pressure regimes of
seed 002, tiny models for tests) and seed 000's scaling ladder (appendix B.2), as ModelConfig dictionaries."""

from __future__ import annotations

from typing import Any

from circuitlab.config import ConfigError, ModelConfig

LADDER_FFN_TYPES = ("mlp", "swiglu", "sgatlin", "peer", "moe")
# seed 000's Table 1 ablation on the ladder: sgatlin with a GELU on each neuron (base design, config changes)
LADDER_ABLATIONS = {"sgatlin-gelu": ("sgatlin", {"activation": "gelu"})}


def scaling_ladder(scale: int, ffn_type: str) -> tuple[int, int, int]:
    """(d_model, n_layers, d_ffw) of seed 000, appendix B.2 (listing 2). For sgatlin and peer, d_ffw is
    the number of neurons per channel."""
    if not isinstance(scale, int) or scale < 1:
        raise ConfigError(f"scale must be a positive integer, got {scale!r}")
    d_model = 128 * scale
    n_layers = 2 * scale
    if ffn_type in ("swiglu", "mlp"):
        d_ffw = int(8 / 3 * d_model / 256) * 256
    elif ffn_type == "moe":
        d_ffw = d_model
    elif ffn_type == "peer":
        d_ffw = (32 + 24 * scale) ** 2
    elif ffn_type == "sgatlin":
        d_ffw = (16 + 12 * scale) ** 2
    else:
        raise ConfigError(f"unknown feedforward type {ffn_type!r} (known: mlp, swiglu, moe, peer, sgatlin)")
    return d_model, n_layers, d_ffw


def ladder_config(scale: int, ffn_type: str, d_vocab: int = 50257, **overrides: Any) -> ModelConfig:
    """A ModelConfig on the scaling ladder (seed 000, appendix B.1.1: head size 64; sgatlin and PEER with 16
    channels, k 8, d_key 128; the MoE with 16 SwiGLU experts of width d_model, top-2)."""
    if ffn_type not in LADDER_FFN_TYPES:
        raise ConfigError(f"ladder configs exist for {', '.join(LADDER_FFN_TYPES)}, not {ffn_type!r}")
    d_model, n_layers, d_ffw = scaling_ladder(scale, ffn_type)
    feedforward: dict[str, Any] = dict(type=ffn_type, d_ffw=d_ffw)
    if ffn_type in ("sgatlin", "peer"):
        feedforward.update(n_channels=16, k=8, d_key=128)
    elif ffn_type == "moe":
        feedforward.update(n_experts=16, k=2)
    config = dict(
        d_vocab=d_vocab, d_model=d_model, n_layers=n_layers, n_heads=d_model // 64, d_head=64, n_ctx=2048,
        feedforward=feedforward, name=f"ladder-{ffn_type}-{scale}",
    )
    config.update(overrides)
    return ModelConfig.from_dict(config)


_STORIES = dict(d_vocab=4096, d_model=256, n_layers=4, n_heads=4, d_head=64, n_ctx=512)
_TINY = dict(d_vocab=512, d_model=64, n_layers=2, n_heads=2, d_head=32, n_ctx=128)
_CRISP = dict(attn_crispness=3e-3, ffn_crispness=3e-3)
_LEGIBLE = dict(
    _STORIES, n_layers=6, attention=dict(value_mode="boolean", n_special=4),
    feedforward=dict(type="ncffn", d_ffw=1024, rho=0.75, n_quantifiers=32, centre_operands=True),
)
# the calibrated pressures of circuitlab.training.pressure (its rule; kept here so config has no torch import)
CALIBRATED_CRISPNESS = 0.2
CALIBRATED_RAMP_STEPS = 200
CALIBRATED_CAP = 0.25


def calibrated_selectivity(sparsity: bool, crispness: bool, crispness_lambda: float = CALIBRATED_CRISPNESS) -> dict[str, Any]:
    """SelectivityConfig fields of one of seed 002's regimes under the calibration rule, on both surfaces:
    mean normalisation, lambda_c = crispness_lambda, lambda_s = lambda_c / 3 (seed 002's 1e-3 : 3e-3)."""
    on = sparsity or crispness
    lambda_s = crispness_lambda / 3 if sparsity else 0.0
    lambda_c = crispness_lambda if crispness else 0.0
    return dict(attn_sparsity=lambda_s, attn_crispness=lambda_c, ffn_sparsity=lambda_s, ffn_crispness=lambda_c,
                normalization="mean", ramp_steps=CALIBRATED_RAMP_STEPS if on else 0, cap=CALIBRATED_CAP if on else 0.0)


PRESETS: dict[str, dict[str, Any]] = {
    # seed 000's TinyStories model (appendix B.1.2): 4 layers, d 256, 4 heads of 64, N 1024 x 8 channels, k 8.
    "seed000-tinystories": dict(
        _STORIES, d_vocab=8192, n_ctx=1024,
        feedforward=dict(type="sgatlin", d_ffw=1024, n_channels=8, k=8, d_key=128),
    ),
    # seed 002's end-to-end model (section 3.7/3.8): 12 x 768, learned positions, Boolean attention on every
    # head, NC-FFN with rho 0.75, crispness alone on both surfaces.
    "seed002-e2e": dict(
        d_vocab=50257, d_model=768, n_layers=12, n_heads=12, d_head=64, n_ctx=1024, positional="learned",
        norm="layernorm", attention=dict(value_mode="boolean", n_special=12, qk_norm=False),
        feedforward=dict(type="ncffn", d_ffw=3072, rho=0.75, n_quantifiers=64), selectivity=_CRISP,
    ),
    # the four shipped story models (models/): one skeleton, four FFN designs.
    "sgatlin-stories": dict(_STORIES, feedforward=dict(type="sgatlin", d_ffw=1024, n_channels=8, k=8, d_key=128)),
    "gelu-stories": dict(_STORIES, feedforward=dict(type="mlp", d_ffw=1024)),
    # seed 002's end-to-end design at 6 layers, under the calibrated pressures (circuitlab.training.pressure):
    # crispness alone (the shipped model) and the other regimes of seed 002, sections 4 and 5.3
    "legible-stories": dict(_LEGIBLE, selectivity=calibrated_selectivity(sparsity=False, crispness=True)),
    "legible-stories-none": dict(_LEGIBLE, selectivity=calibrated_selectivity(sparsity=False, crispness=False)),
    "legible-stories-sparse": dict(_LEGIBLE, selectivity=calibrated_selectivity(sparsity=True, crispness=False)),
    "legible-stories-both": dict(_LEGIBLE, selectivity=calibrated_selectivity(sparsity=True, crispness=True)),
    # crispness alone at 5x the rule's lambda (at most 0.25 nats/token per surface): the sweep's second point
    "legible-stories-strong": dict(_LEGIBLE, selectivity=calibrated_selectivity(False, True, 5 * CALIBRATED_CRISPNESS)),
    # the 4-layer legible model shipped before the calibration (seed 002's summed form, 3e-3 crispness)
    "legible-stories-v1": dict(
        _STORIES, attention=dict(value_mode="boolean", n_special=4),
        feedforward=dict(type="ncffn", d_ffw=1024, rho=0.75, n_quantifiers=32), selectivity=_CRISP,
    ),
    # k 16 at beam 16 without a pursuit round since 2026-12-02 (k 32, beam 64 and 2 rounds before: bench_gpu.py's
    # parity-stories-b64r2 times those settings; the model card says why they changed)
    "parity-stories": dict(
        _STORIES, feedforward=dict(type="mlp", d_ffw=1024),
        bottleneck=dict(design="product", n_bits=16, k=16, grid=[16, 16], beam=16, pursuit_rounds=1, lambda_recon=1.0),
    ),
    # tiny versions for tests and CPU experiments.
    "tiny-sgatlin": dict(_TINY, feedforward=dict(type="sgatlin", d_ffw=64, n_channels=2, k=4, d_key=16)),
    "tiny-gelu": dict(_TINY, feedforward=dict(type="mlp", d_ffw=128)),
    "tiny-swiglu": dict(_TINY, feedforward=dict(type="swiglu", d_ffw=128)),
    "tiny-peer": dict(_TINY, feedforward=dict(type="peer", d_ffw=64, n_channels=2, k=4, d_key=16)),
    "tiny-moe": dict(_TINY, feedforward=dict(type="moe", d_ffw=32, n_experts=4, k=2, code_k=16)),
    "tiny-membership": dict(_TINY, attention=dict(value_mode="membership", n_special=1),
                            feedforward=dict(type="mlp", d_ffw=128),
                            selectivity=dict(attn_sparsity=1e-3, attn_crispness=3e-3)),
    "tiny-legible": dict(
        _TINY, attention=dict(value_mode="boolean", n_special=2),
        feedforward=dict(type="ncffn", d_ffw=128, rho=0.5, n_quantifiers=16, code_k=16), selectivity=_CRISP,
    ),
    "tiny-parity": dict(
        _TINY, feedforward=dict(type="mlp", d_ffw=128),
        bottleneck=dict(design="product", n_bits=10, k=8, grid=[8, 8], beam=8, pursuit_rounds=2),
    ),
}
