"""circuitlab.analysis.code_probe: codes as sparse matrices, the seeded token split, the majority baseline by its
definition, a probe that separates a constructed separable case perfectly and a shuffled one no better than
the baseline, and the labelled tokens of the generator's held-out stories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from circuitlab.analysis.code_probe import ProbeSplit, code_matrix, labelled_tokens, majority_accuracy, probe_accuracy
from circuitlab.codes import SparseCode

TOKENIZER = Path(__file__).resolve().parents[2] / "models" / "sgatlin-stories" / "tokenizer.json"


def test_a_code_matrix_is_the_dense_code():
    indices = torch.tensor([[0, 3, 3], [5, 1, 2]])
    values = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.5, 4.0]])
    matrix = code_matrix(indices, values, 6)
    np.testing.assert_array_equal(matrix.toarray(), SparseCode(indices, values, 6).to_dense().numpy())
    assert matrix.nnz == 4  # duplicate ids summed, the value-0 entry dropped


def test_the_split_is_seeded_disjoint_and_covers_every_token():
    split = ProbeSplit.of(101, seed=3, test_share=0.2)
    assert split.test.size == 20 and split.train.size == 81
    assert sorted(np.concatenate([split.train, split.test]).tolist()) == list(range(101))
    again = ProbeSplit.of(101, seed=3, test_share=0.2)
    assert np.array_equal(split.test, again.test) and not np.array_equal(split.test, ProbeSplit.of(101, 4).test)
    with pytest.raises(ValueError, match="test_share"):
        ProbeSplit.of(10, 0, test_share=1.0)


def test_the_majority_baseline_answers_the_training_tokens_commonest_category():
    labels = np.array(["NOUN", "VERB", "NOUN", "DET", "NOUN", "VERB", "VERB", "VERB"], dtype=object)
    split = ProbeSplit(train=np.array([0, 1, 2, 3, 4]), test=np.array([5, 6, 7, 0]))
    # training tokens: NOUN 3, VERB 1, DET 1 -> always NOUN; test tokens VERB, VERB, VERB, NOUN -> 1 of 4
    assert majority_accuracy(labels, split) == 0.25


def _constructed(n=600, m=256, k=4, classes=5, seed=0):
    """Codes where category c always holds feature c among k - 1 random others: separable by one feature."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    indices = np.concatenate([labels[:, None], rng.integers(classes, m, size=(n, k - 1))], axis=1)
    values = rng.uniform(0.5, 2.0, size=(n, k))
    return torch.from_numpy(indices), torch.from_numpy(values).float(), np.array([f"C{c}" for c in labels], dtype=object)


def test_a_probe_separates_a_separable_code_and_not_shuffled_labels():
    indices, values, labels = _constructed()
    split = ProbeSplit.of(len(labels), seed=0)
    features = code_matrix(indices, values, 256)
    assert probe_accuracy(features, labels, split) == 1.0
    # the same categories as dense one-hot-plus-noise raw writes: separable too
    rng = np.random.default_rng(1)
    dense = np.eye(5)[[int(label[1:]) for label in labels]] * 3.0 + rng.normal(0, 0.1, size=(len(labels), 5))
    assert probe_accuracy(np.concatenate([dense, rng.normal(size=(len(labels), 11))], axis=1), labels, split) == 1.0
    shuffled = labels[np.random.default_rng(2).permutation(len(labels))]
    chance = majority_accuracy(shuffled, split)
    assert probe_accuracy(features, shuffled, split) < chance + 0.15


def test_labelled_tokens_are_the_stories_tokens_and_their_word_categories():
    from circuitlab.data.stories import HELD_OUT_SEED, generate_stories, label_tokens
    from circuitlab.data.tokenizer import CircuitTokenizer

    tokenizer = CircuitTokenizer.from_file(TOKENIZER)
    tokens = labelled_tokens(tokenizer, 5, n_ctx=48)
    expected_ids, expected_labels = [], []
    for story in generate_stories(5, seed=HELD_OUT_SEED):
        ids, labels = label_tokens(tokenizer, story)
        expected_ids.append(ids[:48]), expected_labels.extend(labels[:48])
    assert tokens.n_tokens == sum(len(ids) for ids in expected_ids) == len(tokens.labels_N)
    for row, ids in enumerate(expected_ids):
        assert tokens.windows_SxT[row][tokens.valid_SxT[row]].tolist() == ids
    assert tokens.labels_N.tolist() == expected_labels
    assert (tokens.windows_SxT[~tokens.valid_SxT] == tokenizer.eos_id).all()
    assert {"NAME", "VERB", "PUNCT"} <= set(tokens.labels_N)
