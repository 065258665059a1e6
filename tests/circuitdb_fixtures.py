"""Shared set-up for the circuit database tests: a few labelled stories, a tokenizer trained on them, and
tiny random models of every architecture."""

from __future__ import annotations

import functools

import torch

from circuitlab import CircuitTransformer, ModelConfig


@functools.lru_cache(maxsize=None)
def stories(n: int = 12):
    from circuitlab.data.stories import generate_stories

    return tuple(generate_stories(n, seed=1234))


@functools.lru_cache(maxsize=None)
def tokenizer(vocab_size: int = 300, other: bool = False):
    """A byte-level BPE trained on 40 stories (other=True: on unrelated text, a different tokenizer)."""
    from circuitlab.data.tokenizer import train_tokenizer

    texts = ["Zebras zoom over the quiet hills. " * 20, "Quick brown foxes."] if other else [s.text for s in stories(40)]
    return train_tokenizer(texts, vocab_size=vocab_size, show_progress=False)


def tiny_model(preset: str = "tiny-sgatlin", seed: int = 0, tok=None) -> CircuitTransformer:
    tok = tok or tokenizer()
    config = ModelConfig.preset(preset).replace(d_vocab=tok.vocab_size)
    torch.manual_seed(seed)
    model = CircuitTransformer(config, tokenizer=tok)
    model.reset_parameters(seed=seed)
    return model.eval()
