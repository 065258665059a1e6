"""count_flops: against torch's FLOP counter where every FLOP is a matrix product torch sees, by hand for the
sparse layers, and its parameter counts against the models built from the same configs."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from circuitlab import CircuitTransformer, ModelConfig, count_flops, ladder_config
from circuitlab.errors import UserError

SEQ = 16


def counted_by_torch(config: ModelConfig, batch: int = 3) -> float:
    """Forward FLOPs per token as FlopCounterMode counts them. The attention pattern is hooked so attention
    runs as explicit einsums (the CPU's fused kernel is not counted by FlopCounterMode)."""
    torch.manual_seed(0)
    model = CircuitTransformer(config).eval()
    tokens = torch.randint(0, config.d_vocab, (batch, SEQ))
    hooks = [(f"blocks.{layer}.attn.hook_pattern", lambda activation, hook: activation) for layer in range(config.n_layers)]
    with model.hooks(fwd_hooks=hooks), FlopCounterMode(display=False) as counter:
        model(tokens)
    return counter.get_total_flops() / (batch * SEQ)


DENSE = [
    ModelConfig.preset("tiny-gelu"),
    ModelConfig.preset("tiny-swiglu"),
    ModelConfig.preset("tiny-gelu", tied_embeddings=False, positional="learned", norm="layernorm"),
    ladder_config(1, "swiglu", d_vocab=1000, n_ctx=64),
    # the MoE computes only the chosen experts, each as a matrix product torch sees
    ModelConfig.preset("tiny-moe"),
    # Boolean heads (two half-width operands) and the NC-FFN (its quantifier scans are element-wise)
    ModelConfig.preset("tiny-legible"),
]


@pytest.mark.parametrize("config", DENSE, ids=lambda c: f"{c.name or 'custom'}-{c.feedforward.type}-{c.norm}")
def test_forward_flops_equal_torchs_count(config):
    assert count_flops(config, SEQ).forward_per_token == counted_by_torch(config)


def test_sparse_layers_by_hand():
    # ladder scale 1: D 128, 2 layers, 2 heads of 64, vocabulary 8192, sequences of 256
    sgatlin = count_flops(ladder_config(1, "sgatlin", d_vocab=8192), 256)
    attention = 2 * (2 * 4 * 128 * 128) + 2 * (4 * 256 * 2 * 64)  # projections + scores, two layers
    router = 128 * 128 + 128 * 2 * 16 * 28  # shared query D x d_key, subkeys d_key x 2 x C x sqrt(784)
    neurons = 2 * 16 * 8 * 128  # w_in and w_out rows of the C*k = 128 chosen neurons
    unembedding = 2 * 128 * 8192
    assert sgatlin.parts["feedforward"] == 2 * 2 * (router + neurons) == 655_360
    assert sgatlin.forward_per_token == attention + 2 * 2 * (router + neurons) + unembedding == 3_276_800
    assert sgatlin.training_per_token == 3 * 3_276_800
    peer = count_flops(ladder_config(1, "peer", d_vocab=8192), 256)
    peer_router = 128 * 16 * 128 + 64 * 2 * 16 * 56  # a query projection per head, half-width subkeys
    assert peer.parts["feedforward"] == 2 * 2 * (peer_router + neurons)
    moe = count_flops(ladder_config(1, "moe", d_vocab=8192), 256)
    assert moe.parts["feedforward"] == 2 * 2 * (128 * 16 + 2 * 3 * 128 * 128)  # router + 2 SwiGLU experts of 128
    # sgatlin's cost grows with sqrt(N), not N: scale 8 has 16x the neurons per channel of scale 2
    small, large = (count_flops(ladder_config(s, "sgatlin"), 256).parts["feedforward"] for s in (2, 8))
    assert large / small < 16


@pytest.mark.parametrize("preset", ["tiny-gelu", "tiny-swiglu", "tiny-sgatlin", "tiny-peer", "tiny-moe", "tiny-legible"])
def test_parameter_counts_equal_the_models(preset):
    config = ModelConfig.preset(preset)
    model = CircuitTransformer(config)
    count = count_flops(config, SEQ)
    assert count.total_parameters == sum(p.numel() for p in model.parameters())
    assert count.active_parameters == model.active_parameters_per_token()
    assert (count.active_parameters < count.total_parameters) == (preset in ("tiny-sgatlin", "tiny-peer", "tiny-moe"))


def test_unsupported_designs_and_bad_lengths_are_user_errors():
    with pytest.raises(UserError, match="parity bottleneck"):
        count_flops(ModelConfig.preset("tiny-parity"), SEQ)
    with pytest.raises(UserError, match="seq_len"):
        count_flops(ModelConfig.preset("tiny-gelu"), 0)
