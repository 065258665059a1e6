"""TransformerLens hook semantics, asserted as identities on every design's cache.

resid_mid = resid_pre + attn_out and resid_post = resid_mid + mlp_out (mlp_out: the block's whole FFN
write, the parity bottleneck included); hook_q / hook_k are the projections before QK-norm and RoPE,
hook_rot_q / hook_rot_k what the scores read after them (RoPE models only).
"""

import math

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig

DESIGNS = ["tiny-gelu", "tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-parity-linear"]
EXACT = dict(rtol=0, atol=0)
CLOSE = dict(rtol=1e-5, atol=1e-5)


def run(preset: str, **changes):
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset(preset).replace(**changes)).eval()
    tokens = torch.randint(0, model.config.d_vocab, (2, 9))
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    return model, logits, cache


@pytest.mark.parametrize("preset", DESIGNS)
def test_residual_stream_is_the_sum_of_the_block_writes(preset):
    model, _, cache = run(preset)
    for layer in range(model.config.n_layers):
        block = f"blocks.{layer}"
        torch.testing.assert_close(
            cache[f"{block}.hook_resid_mid"], cache[f"{block}.hook_resid_pre"] + cache[f"{block}.hook_attn_out"], **EXACT
        )
        torch.testing.assert_close(
            cache[f"{block}.hook_resid_post"], cache[f"{block}.hook_resid_mid"] + cache[f"{block}.hook_mlp_out"], **EXACT
        )
        torch.testing.assert_close(cache[f"{block}.attn.hook_result"].sum(2), cache[f"{block}.hook_attn_out"], **CLOSE)


@pytest.mark.parametrize("preset", DESIGNS)
def test_mlp_out_is_the_whole_ffn_write(preset):
    model, _, cache = run(preset)
    for layer, block in enumerate(model.blocks):
        mlp_out = cache[f"blocks.{layer}.hook_mlp_out"]
        if block.bottleneck is not None:
            # the bottleneck is part of the FFN write: it reads the FFN's output and writes its reconstruction
            torch.testing.assert_close(mlp_out, cache[f"blocks.{layer}.bottleneck.hook_recon"], **EXACT)
            ffn_write = cache[f"blocks.{layer}.mlp.hook_post"] @ block.mlp.W_out
            torch.testing.assert_close(cache[f"blocks.{layer}.bottleneck.hook_in"], ffn_write, **CLOSE)
            assert (mlp_out - ffn_write).abs().max() > 1e-3  # the code is lossy: the two hooks differ
        elif preset == "tiny-sgatlin":
            neurons = block.ffn_code_layer.unit_writes(lambda name: cache[name][0, -1].double())
            torch.testing.assert_close(neurons.writes_NxD.sum(0), mlp_out[0, -1].double(), **CLOSE)
        else:
            torch.testing.assert_close(mlp_out, cache[f"blocks.{layer}.mlp.hook_post"] @ block.mlp.W_out, **CLOSE)


@pytest.mark.parametrize("preset", DESIGNS)
def test_q_and_k_are_hooked_before_qk_norm_and_rope_and_rotated_after(preset):
    model, _, cache = run(preset)
    for layer, block in enumerate(model.blocks):
        attn, prefix = block.attn, f"blocks.{layer}.attn"
        x = cache[f"blocks.{layer}.ln1.hook_normalized"]
        q, k = cache[f"{prefix}.hook_q"], cache[f"{prefix}.hook_k"]
        torch.testing.assert_close(q, torch.einsum("btd,hde->bthe", x, attn.W_Q), **CLOSE)
        torch.testing.assert_close(k, torch.einsum("btd,hde->bthe", x, attn.W_K), **CLOSE)
        rot_q, rot_k = cache[f"{prefix}.hook_rot_q"], cache[f"{prefix}.hook_rot_k"]
        torch.testing.assert_close(rot_q, attn.rotary(attn.q_norm(q)), **EXACT)
        torch.testing.assert_close(rot_k, attn.rotary(attn.k_norm(k)), **EXACT)
        assert (rot_q[:, 1:] - attn.q_norm(q)[:, 1:]).abs().max() > 1e-3  # RoPE moved every later position
        scores = torch.einsum("bqhe,bkhe->bhqk", rot_q, rot_k) / math.sqrt(model.config.d_head)
        future = torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)
        torch.testing.assert_close(cache[f"{prefix}.hook_attn_scores"], scores.masked_fill(future, float("-inf")), **CLOSE)


def test_without_rope_there_are_no_rotated_hooks_and_the_scores_read_q_and_k():
    model, _, cache = run("tiny-gelu", positional="learned", attention=dict(qk_norm=False))
    assert not any("hook_rot" in name for name in model.hook_dict)
    q, k = cache["blocks.1.attn.hook_q"], cache["blocks.1.attn.hook_k"]
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(model.config.d_head)
    future = torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)
    torch.testing.assert_close(cache["blocks.1.attn.hook_attn_scores"], scores.masked_fill(future, float("-inf")), **CLOSE)


def test_hook_q_is_read_by_qk_norm_and_rope():
    """Scaling hook_q changes nothing (QK-norm, after the hook, divides the scale out again); reversing its
    channels changes the logits (the patch flows through QK-norm and RoPE into the pattern)."""
    model, logits, _ = run("tiny-gelu")
    tokens = torch.randint(0, model.config.d_vocab, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        clean = model(tokens)
        scaled = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_q", lambda q, hook: q * 3.0)])
        reversed_ = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_q", lambda q, hook: q.flip(-1))])
    torch.testing.assert_close(scaled, clean, **CLOSE)
    assert (reversed_ - clean).abs().max() > 1e-4


@pytest.mark.parametrize("name", ["gelu-stories", "legible-stories", "parity-stories", "sgatlin-stories"])
def test_shipped_models_load_and_give_the_logits_recorded_before_the_hook_changes(name):
    """Moving hooks (hook_q before RoPE, hook_mlp_out after the bottleneck) changed no computation: the
    shipped models give the logits recorded with the code before it. Models replaced later were recorded when
    they were shipped (scripts/record_shipped_logits.py), so the entries pin their weights and the forward pass."""
    import json
    from pathlib import Path

    from circuitlab import load_model

    recorded = json.loads((Path(__file__).resolve().parents[1] / "data" / "shipped_model_logits.json").read_text())
    model = load_model(name)
    tokens = torch.arange(3, 27).reshape(2, 12) * 37 % model.config.d_vocab
    with torch.no_grad():
        logits = model(tokens)
    assert logits.argmax(-1).tolist() == recorded["argmax"][name]
    expected = torch.tensor(recorded["logits_at_last_position_first_16"][name])
    torch.testing.assert_close(logits[:, -1, :16], expected, rtol=0, atol=1e-5)
