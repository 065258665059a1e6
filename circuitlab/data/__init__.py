"""Data: natural children's stories (data/natural), a labelling lexicon, labelled story corpus, noun ->
adjective facts, corpus loaders, byte-level BPE tokenizer.

Only the standard library, numpy and torch are imported here; `tokenizers` is imported when a tokenizer is
trained or loaded, `datasets` when a Hugging Face dataset is read.
"""

from circuitlab.data._io import DataError
from circuitlab.data.facts import (
    FACTS,
    Fact,
    FactPair,
    DISTANT_PROMPTS,
    build_fact_pairs,
    distant_fact_accuracy,
    fact_accuracy,
    fact_pair_tensors,
    fact_rank_figure,
    single_token_facts,
)
from circuitlab.data.loaders import (
    load_documents,
    load_hf_dataset,
    load_jsonl,
    load_text_files,
    pack_sequences,
    tokenize_documents,
)
from circuitlab.data.lexicon import label_text
from circuitlab.data.natural import NaturalCorpus, NaturalStory, is_held_out, load_natural_stories
from circuitlab.data.stories import (
    HELD_OUT_SEED,
    LABELS,
    TOKEN_LABELS,
    TRAIN_SEED,
    LabelledStory,
    generate_stories,
    generate_story,
    held_out_stories,
    iter_stories,
    label_tokens,
    read_corpus,
    token_labels,
    write_corpus,
)
from circuitlab.data.tokenizer import CircuitTokenizer, train_tokenizer

__all__ = [
    "DISTANT_PROMPTS", "FACTS", "HELD_OUT_SEED", "LABELS", "TOKEN_LABELS", "TRAIN_SEED", "CircuitTokenizer",
    "DataError", "Fact", "FactPair", "LabelledStory", "NaturalCorpus", "NaturalStory", "build_fact_pairs",
    "distant_fact_accuracy", "fact_accuracy", "fact_pair_tensors", "fact_rank_figure", "generate_stories",
    "generate_story", "held_out_stories", "is_held_out", "iter_stories", "label_text", "label_tokens",
    "load_documents", "load_hf_dataset", "load_jsonl", "load_natural_stories", "load_text_files",
    "pack_sequences", "read_corpus", "single_token_facts", "token_labels", "tokenize_documents",
    "train_tokenizer", "write_corpus",
]
