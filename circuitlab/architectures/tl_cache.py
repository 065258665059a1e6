"""TransformerLens' ActivationCache, taught the two FFN designs whose neurons it cannot read by itself.

TransformerLens decomposes an FFN's write into neurons as `hook_post[..., n] * W_out[n]`.
- sgatlin: each token uses only the C*k neurons its gates choose, so there is no dense `hook_post` and no
  `W_out`. The write is still an exact sum over neurons (seed 000, eq. 2), so the cache builds the dense
  activations [..., C*N] (zero for unchosen neurons, `hook_neuron_post` for chosen ones, neuron id c*N + i as
  in the sparse codes) and reads w_out rows from the experts. A stack holds C*N rows per layer: mostly zeros,
  and C times a dense MLP of the same N. For the chosen neurons alone, use circuitlab's DLA.
- parity: the FFN's neurons write into the bottleneck, whose output sum a_i phi_i is not linear in them, so
  there is no neuron decomposition of the residual stream; asking for one raises `NotInThisArchitecture`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformer_lens import ActivationCache
from transformer_lens.utilities import Slice

from circuitlab.architectures.feedforward.sgatlin import Sgatlin
from circuitlab.architectures.tl_api import NotInThisArchitecture


class CircuitActivationCache(ActivationCache):
    """What `CircuitTransformer.run_with_cache` returns (see the module docstring)."""

    def stack_neuron_results(
        self, layer: int, pos_slice: Any = None, neuron_slice: Any = None, return_labels: bool = False,
        incl_remainder: bool = False, apply_ln: bool = False, project_output_onto: Tensor | None = None,
        mlp_input: bool = False,
    ) -> Any:
        layers = range(self.model.cfg.n_layers if layer in (None, -1) else layer)
        self._refuse_bottlenecked_neurons(layers)
        if not any(isinstance(self.model.blocks[l].mlp, Sgatlin) for l in layers) or not (apply_ln and project_output_onto is not None):
            return super().stack_neuron_results(layer, pos_slice, neuron_slice, return_labels, incl_remainder,
                                                apply_ln, project_output_onto, mlp_input)
        # TransformerLens' fused LN + projection path reads hook_post and W_out directly: apply the same two
        # linear maps one after the other instead
        stack, labels = super().stack_neuron_results(layer, pos_slice, neuron_slice, True, incl_remainder,
                                                     False, None, mlp_input)
        stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice, mlp_input=mlp_input) @ project_output_onto
        return (stack, labels) if return_labels else stack

    def get_neuron_results(
        self, layer: int, neuron_slice: Any = None, pos_slice: Any = None, project_output_onto: Tensor | None = None
    ) -> Tensor:
        self._refuse_bottlenecked_neurons([layer])
        mlp = self.model.blocks[layer].mlp
        if not isinstance(mlp, Sgatlin):
            return super().get_neuron_results(layer, neuron_slice, pos_slice, project_output_onto)
        neuron_slice = neuron_slice if isinstance(neuron_slice, Slice) else Slice(neuron_slice)
        pos_slice = pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)
        acts = pos_slice.apply(self.sgatlin_neuron_acts(layer), dim=-2)
        acts = neuron_slice.apply(acts, dim=-1)
        W_out = neuron_slice.apply(mlp.experts[1].flatten(0, 1), dim=0)
        if project_output_onto is None:
            return acts[..., None] * W_out
        projected = W_out @ project_output_onto
        return acts * projected if project_output_onto.dim() == 1 else acts[..., None] * projected

    def sgatlin_neuron_acts(self, layer: int) -> Tensor:
        """Dense activations [..., C*N] of an sgatlin layer: g * (w_in . z) for the chosen neurons, else 0."""
        mlp = self.model.blocks[layer].mlp
        try:
            indices = self[f"blocks.{layer}.mlp.hook_gate_indices"].long()
            post = self[f"blocks.{layer}.mlp.hook_neuron_post"]
        except KeyError as error:
            raise KeyError(f"sgatlin neuron results need {error} in the cache (cache the layer's mlp hooks)") from None
        offsets = torch.arange(mlp.n_channels, device=indices.device)[:, None] * mlp.d_ffw
        dense = post.new_zeros(*post.shape[:-2], mlp.n_channels * mlp.d_ffw)
        return dense.scatter(-1, (indices + offsets).flatten(-2), post.flatten(-2))

    def _refuse_bottlenecked_neurons(self, layers: Any) -> None:
        for layer in layers:
            if self.model.blocks[layer].bottleneck is not None:
                raise NotInThisArchitecture(
                    f"layer {layer}'s FFN neurons write into the parity bottleneck, whose output sum a_i phi_i is not "
                    "linear in them, so they do not decompose the residual stream. Use expand_neurons=False for "
                    f"per-layer writes, or per-feature terms: blocks.{layer}.bottleneck.hook_code_values with "
                    "model.parity_feature_directions(layer, hook_code_indices)"
                )
