"""Linear probes from a token's code (or its raw write) to the category of the word it belongs to: how much of a
readable property a sparse code keeps, for the parity bottleneck and a sparse autoencoder alike.

Tokens: the story generator's labelled stories of the held-out seed (circuitlab.data.stories.held_out_stories,
never trained on); each token carries its word's category (circuitlab.data.stories.token_labels: NAME,
ANIMAL, VERB, PUNCT, ..., SPACE for a whitespace token), as `circuitlab db` labels circuits.

Features: a code's k (id, value) pairs as a sparse m-dim vector (duplicate ids add up), or the raw d-dim
write. Probe: scikit-learn's LogisticRegression (lbfgs, multinomial, C = 1) on the features scaled by
MaxAbsScaler (each column divided by its largest |value| on the training tokens: comparable scales for every
feature, and a sparse matrix stays sparse), trained on a seeded random share of the tokens and scored by
accuracy on the rest. Baseline: always answering the training tokens' most frequent category.

Letters: N tokens, K code, M features, D d_model, S stories, T positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

PROBE_C = 1.0


@dataclass
class LabelledTokens:
    """Stories as padded token windows, and the category of every real (unpadded) token in row-major order."""

    windows_SxT: Tensor  # int64 token ids, padded with the end-of-text id
    valid_SxT: Tensor  # bool: a story's token, not padding
    labels_N: np.ndarray  # str, one per valid position

    @property
    def n_tokens(self) -> int:
        return int(self.valid_SxT.sum())


def labelled_tokens(tokenizer, n_stories: int, n_ctx: int, seed: int | None = None) -> LabelledTokens:
    """The first `n_stories` generated stories of `seed` (default the held-out seed), tokenized and labelled;
    a story longer than `n_ctx` tokens keeps its first n_ctx."""
    from circuitlab.data.stories import HELD_OUT_SEED, generate_stories, label_tokens

    stories = generate_stories(n_stories, seed=HELD_OUT_SEED if seed is None else seed)
    ids, labels = zip(*(label_tokens(tokenizer, story) for story in stories))
    ids = [row[:n_ctx] for row in ids]
    labels = [row[:n_ctx] for row in labels]
    width = max(len(row) for row in ids)
    pad = int(getattr(tokenizer, "eos_id", 0) or 0)
    windows = torch.full((len(ids), width), pad, dtype=torch.long)
    valid = torch.zeros((len(ids), width), dtype=torch.bool)
    for row, story_ids in enumerate(ids):
        windows[row, : len(story_ids)] = torch.tensor(story_ids, dtype=torch.long)
        valid[row, : len(story_ids)] = True
    return LabelledTokens(windows, valid, np.array([label for row in labels for label in row], dtype=object))


def code_matrix(indices_NxK: Tensor, values_NxK: Tensor, n_features: int):
    """The codes as a scipy CSR matrix [N, M] (duplicate ids add up)."""
    from scipy.sparse import csr_matrix

    n, k = indices_NxK.shape
    rows = np.repeat(np.arange(n), k)
    matrix = csr_matrix((values_NxK.detach().float().cpu().numpy().ravel(),
                         (rows, indices_NxK.detach().long().cpu().numpy().ravel())), shape=(n, n_features))
    matrix.sum_duplicates()
    matrix.eliminate_zeros()  # a kept autoencoder latent of value 0 did not fire
    return matrix


@dataclass(frozen=True)
class ProbeSplit:
    """Which tokens train a probe and which test it: a seeded random `test_share` of the N tokens is tested."""

    train: np.ndarray
    test: np.ndarray

    @classmethod
    def of(cls, n_tokens: int, seed: int, test_share: float = 0.2) -> ProbeSplit:
        if not 0 < test_share < 1:
            raise ValueError(f"test_share must lie in (0, 1), got {test_share}")
        order = np.random.default_rng(seed).permutation(n_tokens)
        n_test = max(1, int(round(test_share * n_tokens)))
        return cls(train=np.sort(order[n_test:]), test=np.sort(order[:n_test]))


def majority_accuracy(labels_N: np.ndarray, split: ProbeSplit) -> float:
    """Accuracy on the test tokens of always answering the training tokens' most frequent category."""
    values, counts = np.unique(labels_N[split.train].astype(str), return_counts=True)
    return float(np.mean(labels_N[split.test].astype(str) == values[np.argmax(counts)]))


def probe_accuracy(features, labels_N: np.ndarray, split: ProbeSplit, max_iter: int = 1000, seed: int = 0) -> float:
    """Test accuracy of a logistic-regression probe trained on the split's training tokens (see the module
    docstring). `features` is [N, dims]: a numpy array or a scipy sparse matrix."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler
    from threadpoolctl import threadpool_limits

    labels = labels_N.astype(str)
    probe = make_pipeline(MaxAbsScaler(), LogisticRegression(C=PROBE_C, max_iter=max_iter, random_state=seed))
    # one BLAS thread: these products are small, and BLAS threads contending with torch's (or other processes')
    # made a probe 5-20x slower on a shared CPU
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter bounds the time; the accuracy is what counts
        probe.fit(features[split.train], labels[split.train])
    return float(np.mean(probe.predict(features[split.test]) == labels[split.test]))
