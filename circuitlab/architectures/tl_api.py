"""TransformerLens' model surface on circuitlab models: stacked weights, factored circuits, tokenizer helpers.

TransformerLens users open a model and reach for `model.W_Q`, `model.OV`, `model.to_string(...)` and the
`ActivationCache` helpers before anything else. `TransformerLensAPI` (a mixin of CircuitTransformer) gives
those names TransformerLens' shapes and meanings; where a notion does not exist for an architecture (a dense
`W_in` for sgatlin, neurons that write the residual stream for parity) it raises `NotInThisArchitecture`,
which says so and names what to use instead.

Beginning of text (BOS): circuitlab tokenizers have one special token, "<|endoftext|>" (`tokenizer.eos_id`).
Training packs documents separated by it, so in front of a text it means "a new document starts here"; it
is the BOS, the EOS and the padding token at once. `prepend_bos` defaults to False (`cfg.default_prepend_bos`):
text is tokenized exactly as written, which is how every circuitlab analysis tokenizes prompts.

Biases: circuitlab layers have none, so `b_Q`, `b_K`, `b_V`, `b_O`, `b_in`, `b_out`, `b_U` are zero tensors
of TransformerLens' shapes and `accumulated_bias` is zero (a LayerNorm's own bias lives in `ln*.b`).

Letters: L layers, H heads, S special (bounded) heads, D d_model, E d_head, F FFN hidden units, C channels,
N neurons per channel, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, FactoredMatrix  # ActivationCache: annotations

from circuitlab.architectures.feedforward.sgatlin import Sgatlin


class NotInThisArchitecture(AttributeError):
    """A TransformerLens notion this architecture does not have (the message says what to use instead)."""


class TransformerLensAPI:
    """Mixin for CircuitTransformer (reads `self.blocks`, `self.config`, `self.tokenizer`, `self.W_E`)."""

    def __getattr__(self, name: str) -> Any:
        # Python answers a property that raised AttributeError by calling __getattr__, and nn.Module's then
        # says only "has no attribute": re-run the property so its own message reaches the user.
        attribute = getattr(type(self), name, None)
        if isinstance(attribute, property):
            return attribute.fget(self)
        return super().__getattr__(name)

    # --- attention weights -------------------------------------------------------------------------------

    def _stacked(self, weight_of: Any) -> Tensor:
        return torch.stack([weight_of(block) for block in self.blocks])

    def _zeros(self, *shape: int) -> Tensor:
        return torch.zeros(*shape, dtype=self.W_E.dtype, device=self.W_E.device)

    @property
    def W_Q(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Query weights: q = ln1(x) W_Q, then QK-norm (if configured) and RoPE (if configured)."""
        return self._stacked(lambda block: block.attn.W_Q)

    @property
    def W_K(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Key weights: k = ln1(x) W_K, then QK-norm (if configured) and RoPE (if configured)."""
        return self._stacked(lambda block: block.attn.W_K)

    @property
    def W_V(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Value weights of every head (special heads first, as in `hook_v`).

        standard heads: v = ln1(x) W_V. Membership heads: v = sigmoid(ln1(x) W_V). Boolean heads: W_V is
        [W_operand_a | W_operand_b] (each d_head/2 wide), so ln1(x) W_V = [a | b] are the operands' logits and
        the value is [sigmoid(a) sigmoid(b) ; sigmoid(a) (1 - sigmoid(b))] (seed 002, eq. 2). For bounded
        heads the value is not linear in W_V: OV = W_V W_O is their pre-sigmoid map, not the head's output.
        """
        return self._stacked(lambda block: _value_weights(block.attn))

    @property
    def W_O(self) -> Float[Tensor, "n_layers n_heads d_head d_model"]:
        """Output weights: the head's write is z W_O (free in every value mode)."""
        return self._stacked(lambda block: block.attn.W_O)

    @property
    def W_operand_a(self) -> Float[Tensor, "n_layers n_special d_model half_d_head"]:
        """Boolean heads' first operand projection: A = sigmoid(ln1(x) W_operand_a) (`attn.hook_operand_a`)."""
        return self._stacked(lambda block: _boolean_attention(block.attn, "W_operand_a").W_A)

    @property
    def W_operand_b(self) -> Float[Tensor, "n_layers n_special d_model half_d_head"]:
        """Boolean heads' second operand projection: B = sigmoid(ln1(x) W_operand_b) (`attn.hook_operand_b`)."""
        return self._stacked(lambda block: _boolean_attention(block.attn, "W_operand_b").W_B)

    @property
    def b_Q(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        return self._zeros(self.config.n_layers, self.config.n_heads, self.config.d_head)

    @property
    def b_K(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        return self._zeros(self.config.n_layers, self.config.n_heads, self.config.d_head)

    @property
    def b_V(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        return self._zeros(self.config.n_layers, self.config.n_heads, self.config.d_head)

    @property
    def b_O(self) -> Float[Tensor, "n_layers d_model"]:
        return self._zeros(self.config.n_layers, self.config.d_model)

    @property
    def QK(self) -> FactoredMatrix:
        """W_Q W_K^T per layer and head [L, H, D, D]. Without QK-norm and RoPE, attention scores are
        ln1(x_q) QK ln1(x_k)^T / sqrt(d_head); with them (the default) it is the position-free, pre-norm
        bilinear form, as TransformerLens reports for rotary models."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """W_V W_O per layer and head [L, H, D, D]: what a standard head writes for each unit of attention
        (see W_V for what it means in bounded heads)."""
        return FactoredMatrix(self.W_V, self.W_O)

    # --- FFN weights -------------------------------------------------------------------------------------

    def _dense_ffn_weight(self, name: str, weight_of: Any) -> Tensor:
        ffn_type = self.config.feedforward.type
        if ffn_type == "sgatlin":
            raise NotInThisArchitecture(
                f"model.{name}: sgatlin layers have no dense {name}; each token uses the C*k expert neurons its "
                "gates choose. Use model.W_expert_in / W_expert_out [n_layers, C, N, d_model] for the expert "
                "tables, or model.token_circuit_weights(cache, layer, pos) for one token's effective W_in / W_out"
            )
        if ffn_type in ("peer", "moe"):
            raise NotInThisArchitecture(
                f"model.{name}: {ffn_type} layers have no dense {name}; their expert weights are "
                f"model.blocks[l].mlp's parameters ({', '.join(n for n, _ in self.blocks[0].mlp.named_parameters())})"
            )
        return self._stacked(lambda block: weight_of(block.mlp))

    @property
    def W_in(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        """FFN input weights: pre = ln2(x) W_in (SwiGLU: the linear branch; NC-FFN: every unit's
        pre-activation, laid out [GELU | A | B | quantifiers]). With a parity bottleneck the FFN's output
        passes through `blocks[l].bottleneck` before reaching the residual stream."""
        return self._dense_ffn_weight("W_in", lambda mlp: mlp.W_in)

    @property
    def W_out(self) -> Float[Tensor, "n_layers d_mlp d_model"]:
        """FFN output weights: the FFN writes hook_post W_out (then the parity bottleneck, if any)."""
        return self._dense_ffn_weight("W_out", lambda mlp: mlp.W_out)

    @property
    def W_gate(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        """SwiGLU gate weights: post = silu(ln2(x) W_gate) * (ln2(x) W_in)."""
        if self.config.feedforward.type != "swiglu":
            raise NotInThisArchitecture(
                f"model.W_gate: only SwiGLU FFNs have a gate; this model's FFN is {self.config.feedforward.type!r}"
                " (use model.W_in / W_out)"
            )
        return self._stacked(lambda block: block.mlp.W_gate)

    @property
    def b_in(self) -> Float[Tensor, "n_layers d_mlp"]:
        return self._dense_ffn_weight("b_in", lambda mlp: torch.zeros_like(mlp.W_out[:, 0]))

    @property
    def b_out(self) -> Float[Tensor, "n_layers d_model"]:
        return self._dense_ffn_weight("b_out", lambda mlp: torch.zeros_like(mlp.W_out[0]))

    def _sgatlin_weight(self, name: str, weight_of: Any) -> Tensor:
        if self.config.feedforward.type != "sgatlin":
            raise NotInThisArchitecture(
                f"model.{name}: only sgatlin FFNs have expert tables and a router; this model's FFN is "
                f"{self.config.feedforward.type!r} (use model.W_in / W_out)"
            )
        return self._stacked(lambda block: weight_of(block.mlp))

    @property
    def W_expert_in(self) -> Float[Tensor, "n_layers channel neuron d_model"]:
        """sgatlin input rows w_in of every neuron (`mlp.experts[0]`): neuron_pre = w_in . ln2(x)."""
        return self._sgatlin_weight("W_expert_in", lambda mlp: mlp.experts[0])

    @property
    def W_expert_out(self) -> Float[Tensor, "n_layers channel neuron d_model"]:
        """sgatlin output rows w_out of every neuron (`mlp.experts[1]`): the FFN writes sum g (w_in . z) w_out."""
        return self._sgatlin_weight("W_expert_out", lambda mlp: mlp.experts[1])

    @property
    def W_router_query(self) -> Float[Tensor, "n_layers d_model d_key"]:
        """sgatlin router query projection: query = ln2(x) W_router_query (`mlp.hook_query`)."""
        return self._sgatlin_weight("W_router_query", lambda mlp: mlp.W_query)

    @property
    def W_router_key(self) -> Float[Tensor, "n_layers d_key 2 channel n_keys"]:
        """sgatlin subkeys: subkey scores = query W_router_key (`mlp.hook_subkey_scores`)."""
        return self._sgatlin_weight("W_router_key", lambda mlp: mlp.W_key)

    def token_circuit_weights(
        self, cache: ActivationCache | dict[str, Tensor], layer: int, pos: int, batch: int = 0
    ) -> tuple[Float[Tensor, "d_model circuit"], Float[Tensor, "circuit d_model"]]:
        """One token's sgatlin circuit as dense weights (seed 000: given the gates the layer is linear).

        Returns (W_in [D, C*k], W_out [C*k, D]) with columns w_in_ci and rows g_ci w_out_ci, so the layer's
        output at that token is ln2(x) W_in W_out, a matrix of rank <= C*k. Needs the layer's
        `mlp.hook_gate_indices` and `mlp.hook_gate_values` in the cache.
        """
        mlp = self.blocks[layer].mlp
        if not isinstance(mlp, Sgatlin):
            raise NotInThisArchitecture(
                f"token_circuit_weights: layer {layer} is not sgatlin; a dense FFN's weights are model.W_in / W_out"
            )
        indices_CxK = cache[f"blocks.{layer}.mlp.hook_gate_indices"][batch, pos].long()
        gates_CxK = cache[f"blocks.{layer}.mlp.hook_gate_values"][batch, pos]
        channel_C = torch.arange(mlp.n_channels, device=indices_CxK.device)[:, None]
        w_in_CxKxD = mlp.experts[0][channel_C, indices_CxK]
        w_out_CxKxD = mlp.experts[1][channel_C, indices_CxK] * gates_CxK[..., None].to(mlp.experts.dtype)
        return w_in_CxKxD.flatten(0, 1).T, w_out_CxKxD.flatten(0, 1)

    @property
    def quantifier_decay(self) -> Float[Tensor, "n_layers quantifier"]:
        """NC-FFN per-unit decays g = sigmoid(theta) of the sequence quantifiers (existential half first)."""
        if self.config.feedforward.type != "ncffn":
            raise NotInThisArchitecture(
                f"model.quantifier_decay: only NC-FFN layers have sequence quantifiers; this model's FFN is "
                f"{self.config.feedforward.type!r}"
            )
        return self._stacked(lambda block: block.mlp.decay)

    @property
    def parity_code(self) -> Int[Tensor, "n_layers d_model n_bits"]:
        """The parity bottleneck's code matrix M in F2^(d x r) per layer (regenerated from its seed)."""
        self._require_bottleneck("parity_code")
        return self._stacked(lambda block: block.bottleneck.code)

    def parity_feature_directions(self, layer: int, indices: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        """phi_i of parity features at one layer: the bottleneck writes sum a_i phi_i (`hook_code_values`)."""
        self._require_bottleneck("parity_feature_directions")
        return self.blocks[layer].bottleneck.feature_directions(torch.as_tensor(indices, device=self.W_E.device))

    def _require_bottleneck(self, name: str) -> None:
        if self.config.bottleneck is None:
            raise NotInThisArchitecture(f"model.{name}: this model has no parity bottleneck")

    # --- unembedding and biases --------------------------------------------------------------------------

    @property
    def b_U(self) -> Float[Tensor, "d_vocab"]:
        return self._zeros(self.config.d_vocab)

    @property
    def unembed(self) -> Unembed:
        """The readout logits = ln_final(x) @ W_U + b_U, as a component (TransformerLens' logit lens asks for it)."""
        return Unembed(self.W_U, self.b_U)

    def accumulated_bias(
        self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True
    ) -> Float[Tensor, "d_model"]:
        """Sum of the bias terms written to the residual stream before `layer`: zero (no biases)."""
        if not 0 <= layer <= self.config.n_layers:
            raise ValueError(f"layer must lie in [0, n_layers={self.config.n_layers}], got {layer}")
        return self._zeros(self.config.d_model)

    def tokens_to_residual_directions(self, tokens: int | str | Tensor) -> Float[Tensor, "... d_model"]:
        """The residual direction(s) that raise the logit of token(s): W_U[:, t] times the final norm's
        weight (TransformerLens folds that weight into W_U; circuitlab keeps it in ln_final.w), so
        `cache.logit_attrs` of a full decomposition sums to the logit (less b @ W_U for LayerNorm)."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        tokens = torch.as_tensor(tokens, device=self.W_E.device)
        return self.W_U[:, tokens].movedim(0, -1) * self.ln_final.w

    def all_head_labels(self) -> list[str]:
        return [f"L{layer}H{head}" for layer in range(self.config.n_layers) for head in range(self.config.n_heads)]

    # --- tokenizer -------------------------------------------------------------------------------------

    def _require_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise ValueError(
                "this model has no tokenizer: load it from a folder with tokenizer.json, or set model.tokenizer"
            )
        return self.tokenizer

    def to_tokens(
        self,
        input: str | list[str],
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        move_to_device: bool = True,
        truncate: bool = False,
    ) -> Int[Tensor, "batch pos"]:
        """Tokenize text, TransformerLens' signature. No special tokens unless `prepend_bos` (default
        `cfg.default_prepend_bos`, False) puts "<|endoftext|>" in front (see the module docstring). A list
        is padded with the same token on `padding_side` ("right" by default). `truncate=True` keeps the first
        n_ctx tokens; unlike TransformerLens the default is False, so an over-long prompt is refused by the
        forward pass with its length instead of being cut silently."""
        tokenizer = self._require_tokenizer()
        prepend_bos = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
        padding_side = padding_side or "right"
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        texts = [input] if isinstance(input, str) else list(input)
        if not texts or not all(isinstance(text, str) for text in texts):
            raise ValueError("to_tokens takes a string or a non-empty list of strings (token ids need no tokenizing)")
        ids = [([tokenizer.eos_id] if prepend_bos else []) + tokenizer.encode(text) for text in texts]
        if any(len(seq) == 0 for seq in ids):
            raise ValueError("cannot run the model on empty text: give at least one character, or prepend_bos=True")
        if truncate:
            ids = [seq[: self.config.n_ctx] for seq in ids]
        width = max(len(seq) for seq in ids)
        batch = torch.full((len(ids), width), tokenizer.eos_id, dtype=torch.long)
        for row, seq in enumerate(ids):
            if padding_side == "right":
                batch[row, : len(seq)] = torch.tensor(seq)
            else:
                batch[row, width - len(seq) :] = torch.tensor(seq)
        return batch.to(self.W_E.device) if move_to_device else batch

    def to_string(self, tokens: Int[Tensor, "... pos"] | list[int] | Any) -> str | list[str]:
        """Decode token ids: one sequence [pos] gives a string, a batch [batch, pos] a list of strings."""
        tokenizer = self._require_tokenizer()
        tokens = torch.as_tensor(tokens)
        if tokens.dim() <= 1:
            return tokenizer.decode(tokens.reshape(-1).tolist())
        if tokens.dim() == 2:
            return [tokenizer.decode(row.tolist()) for row in tokens]
        raise ValueError(f"to_string takes token ids [pos] or [batch, pos], got shape {tuple(tokens.shape)}")

    def to_str_tokens(
        self, input: str | list | Tensor | Any, prepend_bos: bool | None = None, padding_side: str | None = None
    ) -> list[str] | list[list[str]]:
        """Each token as text: a string (tokenized with `prepend_bos`), token ids [pos] or [1, pos], or a
        list of either (giving a list of lists)."""
        tokenizer = self._require_tokenizer()
        if isinstance(input, list) and input and not isinstance(input[0], int):
            return [self.to_str_tokens(item, prepend_bos, padding_side) for item in input]
        if isinstance(input, str):
            ids = self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)[0]
        else:
            ids = torch.as_tensor(input).squeeze()
            if ids.dim() > 1:
                raise ValueError(f"to_str_tokens takes one sequence of ids, got shape {tuple(ids.shape)}")
        return [tokenizer.token_str(int(i)) for i in ids.reshape(-1)]

    def to_single_token(self, string: str) -> int:
        """The id of a string that is exactly one token (no BOS)."""
        ids = self.to_tokens(string, prepend_bos=False)[0]
        if ids.numel() != 1:
            pieces = self.to_str_tokens(ids)
            raise ValueError(f"{string!r} is {ids.numel()} tokens {pieces}, not one; pass a single-token string")
        return int(ids[0])

    def to_single_str_token(self, int_token: int) -> str:
        return self._require_tokenizer().token_str(int(int_token))

    def get_token_position(
        self,
        single_token: str | int,
        input: str | Tensor,
        mode: str = "first",
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
    ) -> int:
        """Position of a token in a text or a sequence of ids ([pos] or [1, pos]); "first" or "last" match."""
        if isinstance(input, str):
            tokens = self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)
        else:
            tokens = torch.as_tensor(input)
        if tokens.dim() == 2:
            if tokens.shape[0] != 1:
                raise ValueError(f"token ids must be [pos] or [1, pos], got shape {tuple(tokens.shape)}")
            tokens = tokens[0]
        token_id = self.to_single_token(single_token) if isinstance(single_token, str) else int(single_token)
        positions = (tokens == token_id).nonzero().flatten()
        if positions.numel() == 0:
            raise ValueError(f"token {token_id} ({self.to_single_str_token(token_id)!r}) does not occur in the input")
        if mode not in ("first", "last"):
            raise ValueError(f"mode must be 'first' or 'last', not {mode!r}")
        return int(positions[0] if mode == "first" else positions[-1])


class Unembed:
    """W_U and b_U as one callable: residual [..., d_model] (after ln_final) -> logits [..., d_vocab]."""

    def __init__(self, W_U: Tensor, b_U: Tensor):
        self.W_U, self.b_U = W_U, b_U

    def __call__(self, normalized: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
        return normalized @ self.W_U + self.b_U


def _value_weights(attn: Any) -> Tensor:
    if attn.value_mode == "boolean" and attn.n_special > 0:
        special = torch.cat([attn.W_A, attn.W_B], dim=-1)
        return torch.cat([special, attn.W_V], dim=0)
    return attn.W_V


def _boolean_attention(attn: Any, name: str) -> Any:
    if attn.value_mode != "boolean" or attn.n_special == 0:
        raise NotInThisArchitecture(
            f"model.{name}: only Boolean attention heads have operand projections; this model's value mode is "
            f"{attn.value_mode!r} (its values are model.W_V)"
        )
    return attn
