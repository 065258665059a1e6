"""FLOPs and active parameters per token, from a model config alone (no model is built).

    from circuitlab import count_flops, ladder_config
    count = count_flops(ladder_config(2, "sgatlin", d_vocab=8192), seq_len=256)
    count.forward_per_token, count.training_per_token, count.active_parameters, count.parts

Conventions (seed 000 does not spell out its FLOP formula; these follow its Table 2 and appendix A.2):
- A matrix product counts 2 FLOPs per multiply-add; element-wise work (norms, RoPE, activations, softmax,
  gate products, top-k selection) is not counted. This is what `torch.utils.flop_counter.FlopCounterMode`
  counts, and the tests check the dense models against it exactly.
- Active parameters are the parameters one token's forward pass reads (seed 000: "less than 0.1% of
  feedforward layer parameters are activated per token"): everything for dense layers; for sparse layers
  the router plus the chosen experts only. Each FFN design counts its own layer (its config section's
  `cost`: sgatlin the shared query projection, every channel's subkeys and the C*k chosen neurons' w_in and
  w_out rows; PEER every head's query projection and subkeys and the chosen experts; MoE the router matrix
  and the k chosen SwiGLU experts' three matrices). The same count as
  `CircuitTransformer.active_parameters_per_token()` (the tied embedding counts once, as the unembedding).
- Attention is included: the Q, K, V, O projections (2 FLOPs per weight) and the scores and value mixing,
  4 * seq_len * n_heads * d_head per token, counted over the full seq_len x seq_len square as
  FlopCounterMode counts the fused causal kernel (no discount for the causal mask).
- Training costs 3x the forward pass (backward = 2x forward), the usual 6N-per-token rule extended to
  attention.

Letters as in the layers: D d_model, F hidden width, C channels/heads, K chosen per channel, Q d_key,
n keys per half (n*n = N neurons), E experts, V vocabulary, T seq_len.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from circuitlab.errors import UserError

TRAINING_MULTIPLIER = 3


@dataclass(frozen=True)
class FlopCount:
    """Per-token costs of a model config at one sequence length."""

    forward_per_token: int  # FLOPs of one token's forward pass
    active_parameters: int  # parameters one token's forward pass reads (see the module docstring)
    total_parameters: int
    seq_len: int
    parts: dict[str, int] = field(default_factory=dict)  # forward FLOPs per token by part (they sum to the total)

    @property
    def training_per_token(self) -> int:
        """Forward + backward: 3x the forward pass."""
        return TRAINING_MULTIPLIER * self.forward_per_token

    def training_tokens(self, budget_flops: float) -> int:
        """Tokens a training budget of `budget_flops` pays for."""
        return int(budget_flops // self.training_per_token)

    def to_dict(self) -> dict[str, Any]:
        return {
            "forward_per_token": self.forward_per_token, "training_per_token": self.training_per_token,
            "active_parameters": self.active_parameters, "total_parameters": self.total_parameters,
            "seq_len": self.seq_len, "parts": dict(self.parts),
        }


def count_flops(config: Any, seq_len: int) -> FlopCount:
    """Forward FLOPs per token (training: `.training_per_token`, 3x), active and total parameters of the model
    `config` (a ModelConfig) at `seq_len` tokens of context. See the module docstring for the conventions."""
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UserError(f"seq_len must be a positive integer, got {seq_len!r}")
    if config.bottleneck is not None:
        raise UserError("count_flops does not cover the parity bottleneck (its beam search is not matrix products)")
    D, L, V, H, E = config.d_model, config.n_layers, config.d_vocab, config.n_heads, config.d_head
    norm_width = D * (2 if config.norm == "layernorm" else 1)  # scale (and bias) of one norm
    qk_norm = 2 * E if config.attention.qk_norm else 0

    attention_weights = 4 * D * H * E  # Q, K, V (or the Boolean operands A, B of half width each), O
    ffn = config.feedforward.cost(D)  # the design's own count (circuitlab.architectures.design.LayerCost)
    ffn_matmul, ffn_other, ffn_total = ffn.matmul_weights, ffn.other_parameters, ffn.total_parameters
    unembedding = D * V

    parts = {
        "attention_projections": 2 * L * attention_weights,
        "attention_scores": L * 4 * seq_len * H * E,
        "feedforward": 2 * L * ffn_matmul,
        "unembedding": 2 * unembedding,
    }
    block_other = 2 * norm_width + qk_norm
    embedding_read = 0 if config.tied_embeddings else D  # tied: the unembedding reads W_E whole
    positions = D if config.positional == "learned" else 0
    active = L * (attention_weights + ffn_matmul + ffn_other + block_other) + norm_width + unembedding + embedding_read + positions
    total = (
        L * (attention_weights + ffn_total + block_other) + norm_width + V * D
        + (0 if config.tied_embeddings else unembedding) + (config.n_ctx * D if positions else 0)
    )
    return FlopCount(
        forward_per_token=sum(parts.values()), active_parameters=active, total_parameters=total, seq_len=seq_len,
        parts=parts,
    )
