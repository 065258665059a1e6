"""CircuitTransformer: the one decoder-only skeleton every circuitlab architecture shares.

    h = embed(tokens) (+ learned positions)
    for each block:  h = h + attn(norm1(h));  h = h + [bottleneck](ffn(norm2(h)))
    logits = norm_final(h) @ W_U        (W_U = W_E^T when tied)

Every named quantity passes through a TransformerLens HookPoint (docs/hooks.md), so run_with_cache,
run_with_hooks and TransformerLens' patching utilities work unchanged. As in TransformerLens,
hook_resid_mid = hook_resid_pre + hook_attn_out and hook_resid_post = hook_resid_mid + hook_mlp_out, where
hook_mlp_out is the block's whole FFN write (after the parity bottleneck, when there is one).

Each layer declares its own circuits (architectures/code_layer.py); `sparse_codes` and the analyses ask
the blocks' layers rather than testing their types.

Letters: B batch, T position, D d_model, V vocabulary.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from circuitlab.architectures.attention.layer import Attention
from circuitlab.architectures.code_layer import CodeLayer
from circuitlab.architectures.components import make_norm
from circuitlab.architectures.generation import GenerationMixin
from circuitlab.architectures.tl_api import TransformerLensAPI
from circuitlab.architectures.tl_cache import CircuitActivationCache
from circuitlab.architectures.weights import CONFIG_FILE, CheckpointError, read_model_folder, save_model
from circuitlab.codes import SparseCode
from circuitlab.config import ModelConfig
from circuitlab.errors import UserError


RETURN_TYPES = ("logits", "loss", "both", None)


class ContextLengthError(UserError):
    """A prompt longer than the model's context."""


class Block(nn.Module):
    hook_out_is_single_residual_stream = True  # TransformerLens' logit lens reads hook_resid_post as the stream

    def __init__(self, config: ModelConfig, layer_index: int = 0):
        super().__init__()
        self.ln1 = make_norm(config.norm, config.d_model, config.norm_eps)
        self.attn = Attention(config)
        self.ln2 = make_norm(config.norm, config.d_model, config.norm_eps)
        self.mlp = config.feedforward.build(config)
        self.bottleneck = config.bottleneck.build(config) if config.bottleneck is not None else None
        for layer in self.code_layers():
            layer.layer_index = layer_index
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()  # the whole FFN write: after the bottleneck, when there is one
        self.hook_resid_post = HookPoint()

    def code_layers(self) -> list[CodeLayer]:
        """Its layers in forward order: attention, the FFN, the parity bottleneck when there is one."""
        return [self.attn, self.mlp] + ([self.bottleneck] if self.bottleneck is not None else [])

    @property
    def ffn_code_layer(self) -> CodeLayer:
        """The layer whose code is the block's FFN circuit: the last stage of its FFN write."""
        return self.bottleneck if self.bottleneck is not None else self.mlp

    def ffn_description(self) -> str:
        """The FFN write's design, e.g. 'sgatlin' or 'mlp + parity bottleneck'."""
        return " + ".join([self.mlp.kind] + ([f"{self.bottleneck.kind} bottleneck"] if self.bottleneck is not None else []))

    def forward(
        self, h_BxTxD: Float[Tensor, "batch pos d_model"]
    ) -> tuple[Tensor, list[dict[str, Tensor]], Tensor | None]:
        """(the residual stream after the block, its selectivity penalties by name, and the bottleneck's
        (relative reconstruction error of the FFN write, usage balance of its code) or None)."""
        penalties = []
        reconstruction = None
        h_BxTxD = self.hook_resid_pre(h_BxTxD)
        attn_out, penalty = self.attn(self.ln1(h_BxTxD))
        penalties.append(penalty)
        h_BxTxD = self.hook_resid_mid(h_BxTxD + self.hook_attn_out(attn_out))
        write_BxTxD, penalty = self.mlp(self.ln2(h_BxTxD))
        penalties.append(penalty)
        if self.bottleneck is not None:
            write_BxTxD, reconstruction, balance = self.bottleneck.reconstruct_with_usage(write_BxTxD)
            reconstruction = (reconstruction, balance)
        h_BxTxD = self.hook_resid_post(h_BxTxD + self.hook_mlp_out(write_BxTxD))
        return h_BxTxD, [p for p in penalties if p is not None], reconstruction


@dataclass
class LensConfig:
    """What TransformerLens' tools read from `model.cfg` (a view of the circuitlab ModelConfig)."""

    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    d_vocab_out: int
    n_ctx: int
    d_mlp: int
    normalization_type: str
    positional_embedding_type: str
    device: Any = "cpu"
    n_key_value_heads: int | None = None
    attn_only: bool = False
    use_split_qkv_input: bool = False
    use_attn_in: bool = False
    use_attn_result: bool = True
    use_hook_mlp_in: bool = False
    default_prepend_bos: bool = False
    tokenizer_prepends_bos: bool = False
    original_architecture: str = "CircuitTransformer"
    model_name: str = "circuitlab"
    act_fn: str = "gelu"
    final_rms: bool = False
    gated_mlp: bool = False


class CircuitTransformer(TransformerLensAPI, GenerationMixin, HookedRootModule):
    def __init__(self, config: ModelConfig, tokenizer: Any = None):
        super().__init__()
        config.validate()
        self.config = config
        self.tokenizer = tokenizer
        self.W_E = nn.Parameter(torch.empty(config.d_vocab, config.d_model))
        if config.positional == "learned":
            self.W_pos = nn.Parameter(torch.empty(config.n_ctx, config.d_model))  # read through the W_pos property
        self.blocks = nn.ModuleList([Block(config, layer) for layer in range(config.n_layers)])
        self.ln_final = make_norm(config.norm, config.d_model, config.norm_eps)
        self.W_U_untied = None if config.tied_embeddings else nn.Parameter(torch.empty(config.d_model, config.d_vocab))
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.reset_parameters()
        self.setup()

    # --- parameters ------------------------------------------------------------------------------------

    def reset_parameters(self, seed: int | None = None) -> None:
        """GPT-2-style init: weights N(0, init_std), residual writes scaled by 1/sqrt(2 n_layers); the
        sgatlin router N(0, 1/fan_in) so its subkey scores start O(1) and the top-k is not a tie."""
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.config.init_std
        write_std = std / math.sqrt(2 * self.config.n_layers)

        def normal_(tensor: Tensor, scale: float) -> None:
            with torch.no_grad():
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * scale)

        for name, param in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "w":
                nn.init.ones_(param)
            elif leaf in ("b",):
                nn.init.zeros_(param)
            elif leaf == "decay_logit":
                continue
            elif leaf in ("W_O", "W_out"):
                normal_(param, write_std)
            elif leaf == "experts":
                normal_(param[0], std)
                normal_(param[1], write_std)
            elif leaf == "W_query":
                normal_(param, 1 / math.sqrt(param.shape[0]))
            elif leaf == "W_key":
                normal_(param, 1 / math.sqrt(param.shape[0]))
            else:
                normal_(param, std)
        for block in self.blocks:
            for layer in block.code_layers():
                layer.reset_own_parameters()

    @property
    def W_U(self) -> Float[Tensor, "d_model d_vocab"]:
        """Unembedding (the embedding's transpose when tied), the accessor DLA reads."""
        return self.W_E.T if self.W_U_untied is None else self.W_U_untied

    @property
    def cfg(self) -> LensConfig:
        c = self.config
        return LensConfig(
            n_layers=c.n_layers, n_heads=c.n_heads, d_model=c.d_model, d_head=c.d_head, d_vocab=c.d_vocab,
            d_vocab_out=c.d_vocab, n_ctx=c.n_ctx,
            d_mlp=c.feedforward.hidden_units(),
            normalization_type="RMS" if c.norm == "rmsnorm" else "LN",
            positional_embedding_type="rotary" if c.positional == "rope" else "standard",
            device=self.W_E.device, gated_mlp=c.feedforward.gated,
        )

    # --- forward ---------------------------------------------------------------------------------------

    @property
    def W_pos(self) -> Float[Tensor, "n_ctx d_model"]:
        """Learned positional embeddings, added to the token embeddings (`positional="learned"`; `hook_pos_embed`).
        RoPE models (`positional="rope"`, the default and every shipped model) have none: they rotate queries and
        keys by position inside attention (`attn.hook_rot_q` / `hook_rot_k`), so asking for W_pos there is an
        error that says so, rather than None."""
        if "W_pos" not in self._parameters:
            from circuitlab.architectures.tl_api import NotInThisArchitecture

            raise NotInThisArchitecture(
                "model.W_pos: this model uses rotary position embeddings (RoPE), which rotate queries and keys by "
                "position inside attention (blocks.{l}.attn.hook_rot_q / hook_rot_k); it has no positional "
                "embedding matrix. A model with positional=\"learned\" has one."
            )
        return self._parameters["W_pos"]

    def forward(
        self,
        input: Int[Tensor, "batch pos"] | str | list[str],
        return_type: str | None = "logits",
        loss_per_token: bool = False,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        return_aux: bool = False,
    ) -> Any:
        """Logits [batch, pos, d_vocab] of token ids, or, as in TransformerLens, of a string or a list of strings
        (tokenized with `to_tokens(input, prepend_bos, padding_side)`).

        return_type: "logits" (default), "loss" (mean next-token cross-entropy; [batch, pos - 1] per token with
        `loss_per_token`), "both" ((logits, loss)) or None (nothing: run for the hooks). `return_aux` (training)
        returns (logits, aux) with the selectivity pressures and the bottleneck's reconstruction error."""
        if return_type not in RETURN_TYPES:
            raise UserError(f"return_type must be one of {', '.join(map(repr, RETURN_TYPES))}, got {return_type!r}")
        if isinstance(input, (str, list)) and (isinstance(input, str) or all(isinstance(x, str) for x in input)):
            input = self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)
        tokens = self._check_tokens(input)
        logits_BxTxV, aux = self._logits(tokens, need_aux=return_aux)
        if return_aux:
            return logits_BxTxV, aux
        if return_type is None:
            return None
        if return_type == "logits":
            return logits_BxTxV
        loss = self.next_token_loss(logits_BxTxV, tokens, per_token=loss_per_token)
        return loss if return_type == "loss" else (logits_BxTxV, loss)

    @staticmethod
    def next_token_loss(
        logits_BxTxV: Float[Tensor, "batch pos d_vocab"], tokens_BxT: Int[Tensor, "batch pos"], per_token: bool = False
    ) -> Tensor:
        """Cross-entropy of each next token (nats): the mean, or [batch, pos - 1] with `per_token`."""
        if tokens_BxT.shape[1] < 2:
            raise UserError("a loss needs at least two tokens (it predicts each next one)")
        losses = torch.nn.functional.cross_entropy(
            logits_BxTxV[:, :-1].float().transpose(1, 2), tokens_BxT[:, 1:], reduction="none")
        return losses if per_token else losses.mean()

    def _logits(self, tokens: Tensor, need_aux: bool) -> tuple[Tensor, dict[str, Any] | None]:
        h_BxTxD = self.hook_embed(self.W_E[tokens])
        if "W_pos" in self._parameters:
            # hooked as [B, T, D], the shape TransformerLens' cache helpers expect
            h_BxTxD = h_BxTxD + self.hook_pos_embed(self.W_pos[: tokens.shape[1]].expand_as(h_BxTxD))
        terms: dict[str, Tensor] = {}  # selectivity pressures by surface and kind, e.g. ffn_crispness
        reconstructions: list[Tensor] = []
        for block in self.blocks:
            h_BxTxD, block_penalties, reconstruction = block(h_BxTxD)
            for penalty in block_penalties:
                for name, value in penalty.items():
                    terms[name] = terms[name] + value if name in terms else value
            if reconstruction is not None:
                reconstructions.append(reconstruction)
        logits_BxTxV = (self.ln_final(h_BxTxD) @ self.W_U).float()
        if not need_aux:
            return logits_BxTxV, None
        selectivity = torch.stack(list(terms.values())).sum() if terms else logits_BxTxV.new_zeros(())
        aux = {"selectivity": selectivity, "selectivity_terms": terms}
        if reconstructions:
            # mean over layers of ||x - x_hat||^2 / ||x||^2 of each bottleneck's FFN write (bottleneck/parity.py)
            # and of the usage balance of its code (bottleneck/usage.py)
            aux["reconstruction"] = torch.stack([error for error, _ in reconstructions]).mean()
            aux["balance"] = torch.stack([balance for _, balance in reconstructions]).mean()
        return logits_BxTxV, aux

    def _check_tokens(self, tokens: Tensor) -> Tensor:
        if not isinstance(tokens, Tensor):
            tokens = torch.as_tensor(tokens)
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise UserError(
                f"tokens must be an integer tensor [batch, pos], got {tuple(tokens.shape)} {tokens.dtype}"
                " (use model.to_tokens(text) for strings)"
            )
        if tokens.shape[1] > self.config.n_ctx:
            raise ContextLengthError(
                f"prompt of {tokens.shape[1]} tokens is longer than the model's context n_ctx={self.config.n_ctx};"
                " shorten it or split it into windows"
            )
        # range check on host tensors only (on the GPU it would force a sync every training step), and not
        # while torch.compile traces (a data-dependent branch would break the graph)
        if tokens.device.type == "cpu" and not torch.compiler.is_compiling() and tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.d_vocab):
            raise UserError(
                f"token ids must lie in [0, d_vocab={self.config.d_vocab}), got [{int(tokens.min())}, "
                f"{int(tokens.max())}] (was the text tokenized with another tokenizer?)"
            )
        return tokens.to(self.W_E.device).long()

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[Any, ActivationCache]:
        """Like TransformerLens: returns (output, ActivationCache) indexable by hook name."""
        remove_batch_dim = kwargs.get("remove_batch_dim", False)
        output, cache_dict = super().run_with_cache(*model_args, **kwargs)
        return output, CircuitActivationCache(cache_dict, self, has_batch_dim=not remove_batch_dim)

    # --- circuits ---------------------------------------------------------------------------------------

    def sparse_code_hooks(self, layers: list[int] | None = None) -> list[str]:
        """The hook names `sparse_codes` reads (cache only these to collect codes cheaply)."""
        return [name for layer in self._layers(layers) for name in self.blocks[layer].ffn_code_layer.code_hooks()]

    def sparse_codes(self, cache: ActivationCache | dict[str, Tensor], layers: list[int] | None = None) -> dict[int, SparseCode]:
        """Per-token codes per layer, each from the last stage of the block's FFN write: parity codes where
        there is a bottleneck, else sgatlin gates (ids offset by channel: c * N + i), else NC-FFN's
        top-`code_k` operator outputs, else the dense FFN's top-`code_k` |activations| (a baseline)."""
        return {layer: self.blocks[layer].ffn_code_layer.sparse_code(cache) for layer in self._layers(layers)}

    def _layers(self, layers: list[int] | None) -> list[int]:
        return list(range(self.config.n_layers)) if layers is None else list(layers)

    # --- parameters per part ----------------------------------------------------------------------------

    def parameter_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, param in self.named_parameters():
            parts = name.split(".")
            part = f"{parts[2]}" if parts[0] == "blocks" else parts[0]
            counts[part] = counts.get(part, 0) + param.numel()
        counts["total"] = sum(p.numel() for p in self.parameters())
        return counts

    def active_parameters_per_token(self) -> int:
        """Parameters one token touches: one embedding row, the whole unembedding, and of each layer what
        it says it reads per token (for sgatlin only the router and the C*k chosen neurons)."""
        layers = [layer for block in self.blocks for layer in block.code_layers()]
        in_layers = {id(param) for layer in layers for param in layer.parameters()}
        total = sum(layer.active_parameters_per_token() for layer in layers)
        for name, param in self.named_parameters():
            if id(param) in in_layers:
                continue
            if name == "W_E":
                # tied: the unembedding reads every row (the embedded one included)
                total += param.numel() if self.config.tied_embeddings else self.config.d_model
            elif name == "W_pos":
                total += self.config.d_model
            else:
                total += param.numel()
        return total

    # --- persistence (circuitlab.architectures.weights; load_model below reads it back) -------------------

    def save(self, folder: Any, dtype: torch.dtype | None = None) -> None:
        save_model(self, folder, dtype=dtype)


def load_model(
    name_or_path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    load_tokenizer: bool = True,
) -> CircuitTransformer:
    """Load a model folder (or a shipped model by name) into a CircuitTransformer, in evaluation mode (every
    file checked: circuitlab.architectures.weights.read_model_folder)."""
    found = read_model_folder(name_or_path, load_tokenizer)
    config, state, weights = found.config, found.tensors, found.weights_file
    model = CircuitTransformer(config, tokenizer=found.tokenizer)
    expected = model.state_dict()
    for name, tensor in expected.items():
        if name not in state:
            raise CheckpointError(f"{weights}: missing tensor {name!r} (expected shape {tuple(tensor.shape)})")
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{weights}: tensor {name!r} has shape {tuple(state[name].shape)} but {CONFIG_FILE} implies "
                f"{tuple(tensor.shape)}"
            )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise CheckpointError(f"{weights}: tensors {unexpected[:5]} are not part of the configured model")
    if found.recorded_config_hash is not None and config.hash() != found.recorded_config_hash:
        raise CheckpointError(
            f"{found.folder / CONFIG_FILE}: config hash {config.hash()[:12]} != {found.recorded_config_hash[:12]} "
            f"recorded in {found.recorded_where}: the weights were saved with another architecture of the same "
            "shapes; put back the config.json the model was saved with"
        )
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{weights}: tensor {name!r} holds NaN or infinite values (corrupted?)")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})
    # loaded models are for analysis: evaluation mode (TransformerLens' tools insist on it); train() to train
    return model.to(device=device, dtype=dtype).eval()
