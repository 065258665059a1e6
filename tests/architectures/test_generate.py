"""model.generate (TransformerLens' signature) and `circuitlab generate`, checked against generation loops
written out by hand."""

from __future__ import annotations

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig, kernels
from circuitlab.cli import main
from circuitlab.data.stories import generate_stories
from circuitlab.data.tokenizer import train_tokenizer


@pytest.fixture(autouse=True)
def _fast_cpu():
    """Plain-PyTorch kernels (the interpreted Triton ones are tested in test_kernels.py) on one thread: tiny
    matrices gain nothing from more, and a busy machine makes extra threads much slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with kernels.use_backend("reference"):
            yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    texts = [story.text for story in generate_stories(80, seed=4)] + ["The turtle was slow."] * 20
    return train_tokenizer(texts, vocab_size=400, show_progress=False)


def make_model(preset: str = "tiny-gelu", tokenizer=None, **overrides) -> CircuitTransformer:
    torch.manual_seed(0)
    if tokenizer is not None:
        overrides["d_vocab"] = tokenizer.vocab_size
    return CircuitTransformer(ModelConfig.preset(preset, **overrides), tokenizer=tokenizer).eval()


def greedy_by_hand(model, tokens, n_new, fwd_hooks=()):
    tokens = tokens.clone()
    with torch.no_grad():
        for _ in range(n_new):
            window = tokens[:, -model.config.n_ctx :]
            logits = model.run_with_hooks(window, fwd_hooks=list(fwd_hooks))
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


PROMPT = torch.tensor([[5, 17, 99, 3], [42, 42, 7, 300]])


@pytest.mark.parametrize("preset", ["tiny-gelu", "tiny-sgatlin", "tiny-legible", "tiny-parity", "tiny-parity-linear"])
def test_greedy_generation_is_the_argmax_loop(preset):
    model = make_model(preset)
    expected = greedy_by_hand(model, PROMPT, 6)
    out = model.generate(PROMPT, max_new_tokens=6, do_sample=False, stop_at_eos=False, verbose=False)
    assert torch.equal(out, expected)
    # temperature 0 and top_k=1 are greedy too, whatever the seed
    torch.manual_seed(123)
    assert torch.equal(model.generate(PROMPT, 6, stop_at_eos=False, temperature=0.0, verbose=False), expected)
    assert torch.equal(model.generate(PROMPT, 6, stop_at_eos=False, top_k=1, verbose=False), expected)
    assert torch.equal(model.generate(PROMPT, 6, stop_at_eos=False, top_p=1e-6, verbose=False), expected)
    # accepted for TransformerLens compatibility and ignored
    assert torch.equal(model.generate(PROMPT, 6, stop_at_eos=False, do_sample=False, use_past_kv_cache=False,
                                      verbose=False), expected)


def test_hooks_fire_on_every_step_and_patch_the_generation():
    model = make_model("tiny-sgatlin")
    seen = []

    def record(activation, hook):
        seen.append(tuple(activation.shape))

    def ablate_head(activation, hook):
        activation[:, :, 0] = 0
        return activation

    with model.hooks(fwd_hooks=[("blocks.1.mlp.hook_gate_values", record)]):
        model.generate(PROMPT, max_new_tokens=5, do_sample=False, stop_at_eos=False, verbose=False)
    assert seen == [(2, 4 + step, 2, 4) for step in range(5)]

    hooks = [("blocks.0.attn.hook_z", ablate_head)]
    with model.hooks(fwd_hooks=hooks):
        patched = model.generate(PROMPT, max_new_tokens=5, do_sample=False, stop_at_eos=False, verbose=False)
    assert torch.equal(patched, greedy_by_hand(model, PROMPT, 5, fwd_hooks=hooks))
    assert not torch.equal(patched, greedy_by_hand(model, PROMPT, 5))  # the ablation mattered
    assert len(model.hook_dict["blocks.0.attn.hook_z"]._forward_hooks) == 0  # removed afterwards


def test_sampling_is_seeded_and_stays_in_the_top_k():
    model = make_model("tiny-legible")
    prompt = PROMPT[:1]
    torch.manual_seed(7)
    first = model.generate(prompt, 8, stop_at_eos=False, top_k=5, temperature=1.5, verbose=False)
    torch.manual_seed(7)
    again = model.generate(prompt, 8, stop_at_eos=False, top_k=5, temperature=1.5, verbose=False)
    assert torch.equal(first, again)
    with torch.no_grad():
        logits = model(first)[0]
    for pos in range(4, first.shape[1]):
        assert int(first[0, pos]) in logits[pos - 1].topk(5).indices.tolist()
    assert not torch.equal(first, greedy_by_hand(model, prompt, 8))  # it did sample (seed 7, 8 tokens)
    # a huge frequency penalty forbids every token already in the sequence, prompt included
    penalised = model.generate(prompt, 8, stop_at_eos=False, temperature=0.5, freq_penalty=1e4, verbose=False)
    assert len(set(penalised[0].tolist())) == penalised.shape[1]


def test_stop_at_eos_fills_finished_rows_and_stops_when_all_are_done():
    model = make_model()
    greedy = greedy_by_hand(model, PROMPT, 5)
    stop = int(greedy[0, 4])  # row 0's first new token plays the end-of-text token
    assert stop not in greedy[1, 4:].tolist()
    out = model.generate(PROMPT, 5, stop_at_eos=True, eos_token_id=stop, do_sample=False, verbose=False)
    assert torch.equal(out[0], torch.cat([PROMPT[0], torch.full((5,), stop)]))
    assert torch.equal(out[1], greedy[1])
    alone = model.generate(PROMPT[:1], 5, stop_at_eos=True, eos_token_id=stop, do_sample=False, verbose=False)
    assert alone.shape == (1, 5)  # finished after one token: the loop ended


def test_generation_past_the_context_keeps_the_last_n_ctx_tokens():
    model = make_model(n_ctx=6)
    out = model.generate(PROMPT, 5, do_sample=False, stop_at_eos=False, verbose=False)
    assert out.shape == (2, 9)
    assert torch.equal(out, greedy_by_hand(model, PROMPT, 5))


def test_text_inputs_and_return_types(tokenizer):
    model = make_model(tokenizer=tokenizer)
    prompt = "The turtle was"
    ids = model.to_tokens(prompt)
    greedy = greedy_by_hand(model, ids, 4)
    text = model.generate(prompt, 4, do_sample=False, stop_at_eos=False, verbose=False)
    assert text == model.to_string(greedy[0]) and text.startswith(prompt)
    tokens = model.generate(prompt, 4, do_sample=False, stop_at_eos=False, return_type="tokens", verbose=False)
    assert torch.equal(tokens, greedy)
    assert model.generate(ids, 4, do_sample=False, stop_at_eos=False, return_type="str", verbose=False) == [text]

    with_bos = model.generate(prompt, 4, do_sample=False, stop_at_eos=False, prepend_bos=True, return_type="tokens",
                              verbose=False)
    assert int(with_bos[0, 0]) == tokenizer.eos_id
    assert torch.equal(with_bos, greedy_by_hand(model, model.to_tokens(prompt, prepend_bos=True), 4))
    bos_text = model.generate(prompt, 4, do_sample=False, stop_at_eos=False, prepend_bos=True, verbose=False)
    assert bos_text == model.to_string(with_bos[0, 1:])  # the prepended BOS is not part of the text

    # prompts of different lengths: each continued on its own (no padding in its context), ids left-padded
    prompts = ["Once upon a time, there was", "The turtle was"]
    texts = model.generate(prompts, 3, do_sample=False, stop_at_eos=False, verbose=False)
    assert texts == [model.generate(p, 3, do_sample=False, stop_at_eos=False, verbose=False) for p in prompts]
    batch = model.generate(prompts, 3, do_sample=False, stop_at_eos=False, return_type="tokens", verbose=False)
    short = model.to_tokens(prompts[1]).shape[1] + 3
    assert model.to_string(batch[1, -short:]) == texts[1]
    assert (batch[1, : batch.shape[1] - short] == tokenizer.eos_id).all()

    empty = model.generate("", 3, do_sample=False, stop_at_eos=False, return_type="tokens", verbose=False)
    assert int(empty[0, 0]) == tokenizer.eos_id and empty.shape == (1, 4)  # "" starts a new document


def test_bad_arguments_say_what_is_wrong():
    model = make_model()
    with pytest.raises(ValueError, match="return_type"):
        model.generate(PROMPT, 2, return_type="logits", verbose=False)
    with pytest.raises(ValueError, match="top_k and top_p"):
        model.generate(PROMPT, 2, top_k=3, top_p=0.5, verbose=False)
    for temperature in (-1, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            model.generate(PROMPT, 2, temperature=temperature, verbose=False)
    with pytest.raises(ValueError, match="freq_penalty"):
        model.generate(PROMPT, 2, freq_penalty=float("nan"), verbose=False)
    with pytest.raises(ValueError, match="top_p"):
        model.generate(PROMPT, 2, top_p=1.5, verbose=False)
    with pytest.raises(ValueError, match="no tokenizer"):
        model.generate("hello", 2, verbose=False)
    with pytest.raises(ValueError, match="eos_token_id"):
        model.generate(PROMPT, 2, verbose=False)  # stop_at_eos with neither a tokenizer nor an eos id


def test_generate_command(tokenizer, tmp_path, capsys):
    model = make_model(tokenizer=tokenizer)
    model.save(tmp_path / "model")
    prompts = ["The turtle was", "Once upon a time"]
    assert main(["generate", str(tmp_path / "model"), *prompts, "--greedy", "--max-new-tokens", "5", "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [model.generate(p, 5, do_sample=False, verbose=False) for p in prompts]

    args = ["generate", str(tmp_path / "model"), prompts[0], "--max-new-tokens", "6", "--top-k", "4", "--seed", "3",
            "--quiet"]
    assert main(args) == 0
    sampled = capsys.readouterr().out
    torch.manual_seed(3)
    assert sampled.strip() == model.generate(prompts[0], 6, top_k=4, verbose=False)

    assert main(["generate", "preset:tiny-gelu", "5,17,99", "--tokens", "--greedy", "--max-new-tokens", "3", "--quiet"]) == 0
    ids = [int(i) for i in capsys.readouterr().out.split(",")]
    assert ids == greedy_by_hand(make_model(), torch.tensor([[5, 17, 99]]), 3)[0].tolist()

    assert main(["generate", "preset:tiny-gelu", "hello", "--quiet"]) == 2
    assert "has no tokenizer" in capsys.readouterr().err
    assert main(["generate", "preset:tiny-gelu", "5,x", "--tokens", "--quiet"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
