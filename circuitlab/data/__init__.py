"""Data: natural children's stories (data/natural), a labelling lexicon, labelled story corpus, noun ->
adjective facts, corpus loaders, byte-level BPE tokenizer.

Only the standard library, numpy and torch are imported here; `tokenizers` is imported when a tokenizer is
trained or loaded, `datasets` when a Hugging Face dataset is read.

The names below import on first use, so importing one submodule loads no other.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DataError": "circuitlab.data._io",
    "FACTS": "circuitlab.data.facts",
    "Fact": "circuitlab.data.facts",
    "FactPair": "circuitlab.data.facts",
    "DISTANT_PROMPTS": "circuitlab.data.facts",
    "build_fact_pairs": "circuitlab.data.facts",
    "distant_fact_accuracy": "circuitlab.data.facts",
    "fact_accuracy": "circuitlab.data.facts",
    "fact_pair_tensors": "circuitlab.data.facts",
    "fact_rank_figure": "circuitlab.data.facts",
    "single_token_facts": "circuitlab.data.facts",
    "load_documents": "circuitlab.data.loaders",
    "load_hf_dataset": "circuitlab.data.hf",
    "iter_documents": "circuitlab.data.hf",
    "load_jsonl": "circuitlab.data.loaders",
    "load_text_files": "circuitlab.data.loaders",
    "pack_sequences": "circuitlab.data.loaders",
    "tokenize_documents": "circuitlab.data.loaders",
    "label_text": "circuitlab.data.lexicon",
    "NaturalCorpus": "circuitlab.data.natural",
    "NaturalStory": "circuitlab.data.natural",
    "is_held_out": "circuitlab.data.natural",
    "split_of": "circuitlab.data.natural",
    "load_natural_stories": "circuitlab.data.natural",
    "HELD_OUT_SEED": "circuitlab.data.stories",
    "VALIDATION_SEED": "circuitlab.data.stories",
    "LABELS": "circuitlab.data.stories",
    "TOKEN_LABELS": "circuitlab.data.stories",
    "TRAIN_SEED": "circuitlab.data.stories",
    "LabelledStory": "circuitlab.data.stories",
    "generate_stories": "circuitlab.data.stories",
    "generate_story": "circuitlab.data.stories",
    "held_out_stories": "circuitlab.data.stories",
    "iter_stories": "circuitlab.data.stories",
    "label_tokens": "circuitlab.data.stories",
    "read_corpus": "circuitlab.data.stories",
    "token_labels": "circuitlab.data.stories",
    "write_corpus": "circuitlab.data.stories",
    "CircuitTokenizer": "circuitlab.data.tokenizer",
    "train_tokenizer": "circuitlab.data.tokenizer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitlab.data' has no attribute {name!r}")


__all__ = sorted(_LAZY)
