"""TransformerLens' own tools run on circuitlab models unchanged."""

import pandas as pd
import torch
from transformer_lens import ActivationCache
from transformer_lens.patching import generic_activation_patch, layer_pos_patch_setter

from circuitlab import CircuitTransformer, ModelConfig


def test_generic_activation_patch_and_activation_cache():
    torch.manual_seed(0)
    model = CircuitTransformer(ModelConfig.preset("tiny-sgatlin")).eval()
    clean = torch.randint(0, 512, (1, 6))
    corrupted = torch.randint(0, 512, (1, 6))
    _, clean_cache = model.run_with_cache(clean)
    assert isinstance(clean_cache, ActivationCache)
    target = int(model(clean)[0, -1].argmax())

    def metric(logits):
        return logits[0, -1, target]

    index_df = pd.DataFrame([(layer, pos) for layer in range(2) for pos in range(6)], columns=["layer", "pos"])
    result = generic_activation_patch(
        model, corrupted, clean_cache, metric, layer_pos_patch_setter, "resid_pre", index_df=index_df
    )
    # brute force: patch one (layer, position) of the residual stream by hand
    for row, (layer, pos) in enumerate(index_df.itertuples(index=False)):
        def patch(activation, hook, pos=pos, layer=layer):
            activation[:, pos] = clean_cache[f"blocks.{layer}.hook_resid_pre"][:, pos]
            return activation

        logits = model.run_with_hooks(corrupted, fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", patch)])
        assert abs(float(result[row]) - float(metric(logits))) < 1e-5
    assert result.shape == (12,)

    # the cache's TransformerLens helpers read model.cfg
    stacked = clean_cache.stack_activation("resid_post")
    assert stacked.shape == (2, 1, 6, model.config.d_model)
    assert model.tokens_to_residual_directions(torch.tensor(7)).shape == (model.config.d_model,)
    torch.testing.assert_close(model.tokens_to_residual_directions(7), model.W_E[7])
