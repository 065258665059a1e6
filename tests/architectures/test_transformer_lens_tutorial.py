"""The first cells of TransformerLens' main demo, run on every shipped model as a TransformerLens user types
them: load, run on a string, the loss, run_with_cache on a string, the logit lens, and activation patching with
TransformerLens' own utilities; each number checked against a computation done by hand."""

import pytest
import torch
from transformer_lens import patching, utilities

from circuitlab import load_model
from circuitlab.architectures.tl_api import NotInThisArchitecture

SHIPPED = ["sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories"]
PROMPT = "Once upon a time, the little turtle was"
CORRUPT = "Once upon a time, the little rabbit was"
# two forward passes of one input agree to float32 rounding (the CPU kernels reduce in thread order)
CLOSE = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module", params=SHIPPED)
def model(request):
    return load_model(request.param)


def test_strings_and_lists_of_strings_run_like_their_tokens(model):
    tokens = model.to_tokens(PROMPT)
    torch.testing.assert_close(model(PROMPT), model(tokens), **CLOSE)
    batch = model(["The turtle was", "Once upon a time"], padding_side="right")
    assert batch.shape[:2] == (2, model.to_tokens("Once upon a time").shape[1])
    torch.testing.assert_close(batch[0, :3], model("The turtle was")[0], **CLOSE)
    with_bos = model(PROMPT, prepend_bos=True)
    assert with_bos.shape[1] == tokens.shape[1] + 1


def test_return_types_are_transformer_lens_ones(model):
    tokens = model.to_tokens(PROMPT)
    logits = model(tokens)
    by_hand = torch.nn.functional.cross_entropy(logits[0, :-1], tokens[0, 1:], reduction="none")
    torch.testing.assert_close(model(PROMPT, return_type="loss"), by_hand.mean(), **CLOSE)
    torch.testing.assert_close(model(PROMPT, return_type="loss", loss_per_token=True), by_hand[None], **CLOSE)
    both_logits, both_loss = model(PROMPT, return_type="both")
    torch.testing.assert_close(both_logits, logits, **CLOSE)
    torch.testing.assert_close(both_loss, by_hand.mean(), **CLOSE)
    assert model(PROMPT, return_type=None) is None
    with pytest.raises(Exception, match="return_type must be one of"):
        model(PROMPT, return_type="probs")


def test_run_with_cache_and_hooks_take_strings(model):
    logits, cache = model.run_with_cache(PROMPT)
    torch.testing.assert_close(logits, model(PROMPT), **CLOSE)
    n_pos = model.to_tokens(PROMPT).shape[1]
    assert cache["blocks.0.hook_resid_post"].shape == (1, n_pos, model.config.d_model)
    seen = []
    model.run_with_hooks(PROMPT, fwd_hooks=[("blocks.1.hook_resid_pre", lambda act, hook: seen.append(act.shape))])
    assert seen == [(1, n_pos, model.config.d_model)]
    loss = model.run_with_hooks(PROMPT, return_type="loss", fwd_hooks=[])
    torch.testing.assert_close(loss, model(PROMPT, return_type="loss"), **CLOSE)


def test_the_logit_lens_ends_at_the_models_own_logits(model):
    logits, cache = model.run_with_cache(PROMPT)
    resid, labels = cache.accumulated_resid(apply_ln=True, return_labels=True, pos_slice=-1)
    assert len(labels) == model.config.n_layers + 1
    lens_logits = model.unembed(resid)  # [layers + 1, batch, d_vocab]
    # the last entry of the lens is the model's own readout at the last position
    torch.testing.assert_close(lens_logits[-1], logits[:, -1], rtol=1e-4, atol=1e-3)
    assert int(lens_logits[-1, 0].argmax()) == int(logits[0, -1].argmax())


def test_activation_patching_with_transformer_lens_utilities(model):
    clean, corrupted = model.to_tokens(PROMPT), model.to_tokens(CORRUPT)
    assert clean.shape == corrupted.shape
    _, clean_cache = model.run_with_cache(clean)
    answer = int(model(clean)[0, -1].argmax())

    def metric(logits):
        return logits[0, -1, answer]

    patched = patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric)
    assert patched.shape == (model.config.n_layers, clean.shape[1])
    # patching every position of layer 0's input restores the clean run: the last position is what the metric reads
    layer, pos = 0, clean.shape[1] - 1

    def restore(activation, hook):
        activation[:, pos] = clean_cache[hook.name][:, pos]
        return activation

    by_hand = model.run_with_hooks(corrupted, fwd_hooks=[(utilities.get_act_name("resid_pre", layer), restore)])
    torch.testing.assert_close(patched[layer, pos], metric(by_hand), rtol=1e-5, atol=1e-5)


def test_w_pos_says_what_rotary_models_have_instead(model):
    assert model.config.positional == "rope"
    with pytest.raises(NotInThisArchitecture, match="rotary position embeddings"):
        model.W_pos
