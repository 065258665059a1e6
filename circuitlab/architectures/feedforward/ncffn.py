"""NC-FFN: a feed-forward layer of named fuzzy operators (docs/designs/legible.md; the companion paper's full
text was not available, so this layout is circuitlab's design).

Hidden pre-activations pre = z W_in are split [GELU | A | B | quantifiers]:
  GELU units            gelu(pre)                                      (the rho fraction, for stability)
  operator pairs (a,b)  A = sigmoid(a), B = sigmoid(b); outputs A*B (and) and A*(1-B) (and-not)
  quantifiers           M_t = sigmoid(pre_t); first half soft existential E_t = max(M_t, g E_(t-1)),
                        second half soft proportion P_t = (1 - g) M_t + g P_(t-1); g = sigmoid(theta)
and W_out reads [gelu | and | and-not | exists | proportion]. Both weight matrices keep the dense MLP's
shapes; the only extra parameters are one decay logit per quantifier unit.

Operand centring (`centre_operands`, on in the legible presets): the operand pre-activations a, b become
a - c_a, b - c_b, with c a per-channel running mean of the training batches (a buffer, saved with the
weights). Why: in the 6-layer crispness-only model trained without it, the operand channels sat at a mean
offset of 4-7 standard deviations from 0 (median |mean| / sd per layer, held-out natural text), so crispness
was met by pushing whole channels to a rail: 58-75% never ON, 6-22% always ON. With the centre removed,
a channel can only be crisp by separating tokens. The forward pass subtracts the running centre in both
modes, so training and evaluation compute the same function and no token sees another token's value; in
training the gradient is that of subtracting the batch's own mean, so the loss cannot move a channel's
mean (pressing it against a rail) through the operands.

Its code is the `code_k` most active named operators of a token (everything but the GELU units); its
bounded channels are the operands A, B, their and / and-not, and the quantifiers' memberships and outputs.

Letters: B batch, T position, D d_model, F hidden, P operator pairs, U quantifier units.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from pydantic import model_validator
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

import circuitlab.kernels as kernels
from circuitlab.architectures.code_layer import Cache, ChannelGroup, code_hook_error
from circuitlab.architectures.components import selectivity_penalty
from circuitlab.architectures.design import CountInt, FeedForwardPart, LayerCost, ModelShape, Number, PositiveInt
from circuitlab.architectures.feedforward.hidden import HiddenUnitFFN
from circuitlab.codes import SparseCode


# sticky start: decays spread over [0.9, 0.99], half-lives of about 7 to 69 tokens
INITIAL_DECAY_RANGE = (0.9, 0.99)
# weight of each training batch's mean in the running operand centre (about 20 steps of memory)
CENTRE_MOMENTUM = 0.05


class NCFFNConfig(FeedForwardPart):
    """NC-FFN (seed 002's companion; circuitlab's layout): `d_ffw` hidden units, a GELU fraction `rho`, and
    `n_quantifiers` sequence quantifiers (half existential, half proportion); the rest are operator pairs.
    Its sparse code keeps the `code_k` most active operator outputs."""

    type: Literal["ncffn"] = "ncffn"
    d_ffw: PositiveInt = 1024
    rho: Number = 0.75
    n_quantifiers: CountInt = 32
    code_k: PositiveInt = 32
    # operand pre-activations minus a running per-channel centre (see the module docstring)
    centre_operands: bool = False
    label = "NC-FFN"
    bounded_channels = True

    @model_validator(mode="after")
    def _partition(self) -> NCFFNConfig:
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"ncffn rho (GELU fraction) must lie in [0, 1], got {self.rho}")
        if self.n_quantifiers % 2:
            raise ValueError(
                f"ncffn n_quantifiers must be even (half existential, half proportion), got {self.n_quantifiers}"
            )
        return self  # quantifiers beyond the non-GELU units are clipped by ncffn_partition

    def serialized(self) -> dict[str, Any]:
        data = super().serialized()
        if not data["centre_operands"]:
            del data["centre_operands"]  # NC-FFN is written (and hashed) as before operand centring
        return data

    def build(self, config: ModelShape) -> NCFFN:
        return NCFFN(config)

    def cost(self, d_model: int) -> LayerCost:
        """W_in and W_out, and one decay per quantifier unit (read per token, outside the matrix products)."""
        n_quant = ncffn_partition(self)[2]
        return LayerCost(matmul_weights=2 * d_model * self.d_ffw, total_parameters=2 * d_model * self.d_ffw + n_quant,
                         other_parameters=n_quant)

    def describe(self) -> str:
        n_gelu, n_pairs, n_quant = ncffn_partition(self)
        return (f"NC-FFN width {self.d_ffw} (rho {self.rho:g}): {n_gelu} GELU units, {n_pairs} AND/AND-NOT operator "
                f"pairs, {n_quant} sequence quantifiers" + (", centred operands" if self.centre_operands else ""))


def ncffn_partition(ffn: NCFFNConfig) -> tuple[int, int, int]:
    """(GELU units, operator pairs, quantifier units) of an NC-FFN hidden layer of width d_ffw.

    Layout of the hidden units: [GELU | operand A of each pair | operand B of each pair | quantifiers].
    The non-GELU remainder after the quantifiers must be even; a leftover odd unit goes to GELU.
    """
    n_gelu = int(round(ffn.rho * ffn.d_ffw))
    n_quant = min(ffn.n_quantifiers, max(ffn.d_ffw - n_gelu, 0))
    n_quant -= n_quant % 2
    remainder = ffn.d_ffw - n_gelu - n_quant
    n_gelu += remainder % 2
    return n_gelu, (ffn.d_ffw - n_gelu - n_quant) // 2, n_quant


class NCFFN(HiddenUnitFFN):
    kind = "ncffn"

    def __init__(self, config: ModelShape):
        super().__init__(config)
        d_model, d_ffw = config.d_model, config.feedforward.d_ffw
        self.n_gelu, self.n_pairs, self.n_quant = ncffn_partition(config.feedforward)
        self.W_in = nn.Parameter(torch.empty(d_model, d_ffw))
        self.W_out = nn.Parameter(torch.empty(d_ffw, d_model))
        self.decay_logit = nn.Parameter(torch.empty(self.n_quant))
        self.reset_decays()
        self.centre_operands = config.feedforward.centre_operands
        if self.centre_operands:
            self.register_buffer("operand_centre", torch.zeros(2 * self.n_pairs))

        self.hook_pre = HookPoint()  # [B, T, F]
        self.hook_gelu = HookPoint()  # [B, T, F_gelu]
        self.hook_operand_a = HookPoint()  # [B, T, P]
        self.hook_operand_b = HookPoint()  # [B, T, P]
        self.hook_and = HookPoint()  # [B, T, P]
        self.hook_andnot = HookPoint()  # [B, T, P]
        self.hook_quant_in = HookPoint()  # [B, T, U] memberships M_t
        self.hook_exists = HookPoint()  # [B, T, U/2]
        self.hook_proportion = HookPoint()  # [B, T, U/2]
        self.hook_post = HookPoint()  # [B, T, F]: [gelu | and | and-not | exists | proportion]

    def reset_decays(self) -> None:
        low, high = INITIAL_DECAY_RANGE
        decays = torch.linspace(low, high, self.n_quant) if self.n_quant > 1 else torch.full((self.n_quant,), high)
        with torch.no_grad():
            self.decay_logit.copy_(torch.logit(decays))

    def reset_own_parameters(self) -> None:
        self.reset_decays()
        if self.centre_operands:
            self.operand_centre.zero_()

    @property
    def decay(self) -> Float[Tensor, "unit"]:
        return torch.sigmoid(self.decay_logit)

    def half_lives(self) -> Float[Tensor, "unit"]:
        """Tokens until a quantifier's memory halves: ln(1/2) / ln(decay)."""
        return math.log(0.5) / torch.log(self.decay.detach())

    def forward(self, z_BxTxD: Float[Tensor, "batch pos d_model"]) -> tuple[Tensor, dict[str, Tensor] | None]:
        pre_BxTxF = self.hook_pre(z_BxTxD @ self.W_in)
        g, p, u = self.n_gelu, self.n_pairs, self.n_quant
        gelu = self.hook_gelu(F.gelu(pre_BxTxF[..., :g]))
        operand_pre = pre_BxTxF[..., g : g + 2 * p]
        if self.centre_operands:
            operand_pre = self.centred(operand_pre)
        a_BxTxP = self.hook_operand_a(torch.sigmoid(operand_pre[..., :p]))
        b_BxTxP = self.hook_operand_b(torch.sigmoid(operand_pre[..., p:]))
        conj = self.hook_and(a_BxTxP * b_BxTxP)
        andnot = self.hook_andnot(a_BxTxP * (1 - b_BxTxP))
        parts = [gelu, conj, andnot]
        if u:
            membership_BxTxU = self.hook_quant_in(torch.sigmoid(pre_BxTxF[..., g + 2 * p :].float()))
            decay_U = self.decay.float()
            half = u // 2
            exists = self.hook_exists(kernels.existential_scan(membership_BxTxU[..., :half], decay_U[:half]))
            proportion = self.hook_proportion(kernels.proportion_scan(membership_BxTxU[..., half:], decay_U[half:]))
            parts += [exists.to(pre_BxTxF.dtype), proportion.to(pre_BxTxF.dtype)]
        post_BxTxF = self.hook_post(torch.cat(parts, dim=-1))
        penalty = selectivity_penalty([a_BxTxP, b_BxTxP], "ffn", self.config.selectivity, self.config.n_layers)
        return post_BxTxF @ self.W_out, penalty

    def centred(self, pre_BxTxO: Float[Tensor, "batch pos operand"]) -> Float[Tensor, "batch pos operand"]:
        """pre - running centre; in training the gradient is that of pre - batch mean, and the centre then
        moves CENTRE_MOMENTUM of the way to the batch mean (see the module docstring)."""
        centred = pre_BxTxO - self.operand_centre.to(pre_BxTxO.dtype)
        if not self.training:
            return centred
        batch_mean_O = pre_BxTxO.float().mean(dim=(0, 1))
        centred = centred - (batch_mean_O - batch_mean_O.detach()).to(pre_BxTxO.dtype)  # value 0, gradient -1/N
        with torch.no_grad():
            self.operand_centre.lerp_(batch_mean_O.detach(), CENTRE_MOMENTUM)
        return centred

    def unit_kinds(self) -> list[str]:
        """The operation of each hidden unit, in hook_post / W_out order."""
        half = self.n_quant // 2
        return (
            ["gelu"] * self.n_gelu + ["and"] * self.n_pairs + ["andnot"] * self.n_pairs
            + ["exists"] * half + ["proportion"] * (self.n_quant - half)
        )

    def operator_slice(self) -> slice:
        """Columns of hook_post that hold named operators (everything but GELU)."""
        return slice(self.n_gelu, self.W_out.shape[0])

    # --- its code and channels (see CodeLayer) --------------------------------------------------------

    def sparse_code(self, cache: Cache) -> SparseCode:
        """The `code_k` largest operator outputs per token (ids count from the first operator)."""
        try:
            post_BxTxF = cache[self.hook_name(self.hook_post)].float()
        except KeyError as error:
            raise code_hook_error(self, error) from None
        operators = post_BxTxF[..., self.operator_slice()]
        values, indices = operators.topk(min(self.code_k, operators.shape[-1]), dim=-1)
        return SparseCode(indices, values, operators.shape[-1])

    def design_label(self) -> str:
        return f"NC-FFN {round(100 * (1 - self.n_gelu / self.W_out.shape[0]))}% operators"

    def bounded_channels(self) -> list[ChannelGroup]:
        def group(hook: HookPoint, role: str, operand: bool, combined: bool) -> ChannelGroup:
            return ChannelGroup("ffn", self.layer_index, self.hook_name(hook), role, operand, combined)

        groups = [
            group(self.hook_operand_a, "operand_a", True, False),
            group(self.hook_operand_b, "operand_b", True, False),
            group(self.hook_and, "and", False, True),
            group(self.hook_andnot, "andnot", False, True),
        ]
        if self.n_quant > 0:
            groups += [
                group(self.hook_quant_in, "quant_in", True, False),
                group(self.hook_exists, "exists", False, True),
                group(self.hook_proportion, "proportion", False, True),
            ]
        return groups
