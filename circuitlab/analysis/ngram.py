"""Count-based baselines for a corpus' held-out loss: unigram, Kneser-Ney bigram and Kneser-Ney trigram.

A model's loss means little without what counting alone achieves on the same text with the same tokenizer.
Each document is read as its model sees it (the end-of-text separator, then its tokens) and every token is
predicted from what precedes it in the document; the trigram's context before the first token is two
separators. The models, fitted on the training documents' token ids:

    unigram   (C(c) + 1) / (N + V)                                    add-one
    bigram    interpolated Kneser-Ney:
              P(c | b) = max(C(bc) - D, 0) / C(b.) + D N1+(b.) / C(b.) P_cont(c)
    trigram   interpolated Kneser-Ney, three orders:
              P(c | ab) = max(C(abc) - D3, 0) / C(ab.) + D3 N1+(ab.) / C(ab.) P2(c | b)
              P2(c | b) = max(N1+(.bc) - D2, 0) / N1+(.b.) + D2 N1+(b.)' / N1+(.b.) P_cont(c)

P_cont(c) is the continuation unigram N1+(.c) / N1+(..), itself interpolated with the uniform 1/V (so an
unseen token has a probability), and an unseen context falls back to the next lower order. Each discount is
D = n1 / (n1 + 2 n2) of its order's counts of counts (Chen and Goodman's estimate). Losses come per document
(summed negative log-likelihood and token count), so they can be bootstrapped over documents
(circuitlab.stats).

Letters: V vocabulary size, a b c the tokens of a trigram (c predicted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BASELINES = ("unigram", "bigram", "trigram")


def _contexts(documents: Sequence[Sequence[int]], eos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, c, document number) of every predicted token: c with its two preceding tokens."""
    parts_a, parts_b, parts_c, owners = [], [], [], []
    for number, tokens in enumerate(documents):
        padded = np.concatenate([[eos, eos], np.asarray(tokens, dtype=np.int64)])
        if padded.size == 2:
            continue
        parts_a.append(padded[:-2])
        parts_b.append(padded[1:-1])
        parts_c.append(padded[2:])
        owners.append(np.full(padded.size - 2, number, dtype=np.int64))
    if not parts_c:
        raise ValueError("no tokens to count: every document is empty")
    return tuple(np.concatenate(part) for part in (parts_a, parts_b, parts_c, owners))


def _discount(counts: np.ndarray) -> float:
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5


def _grouped(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For sorted `keys`: (distinct keys, how many entries each has, the sum of their values)."""
    distinct, starts, sizes = np.unique(keys, return_index=True, return_counts=True)
    return distinct, sizes, np.add.reduceat(values, starts) if values.size else values


def _lookup(table: np.ndarray, values: np.ndarray, queries: np.ndarray, missing: float = 0.0) -> np.ndarray:
    """values[i] where table[i] == query (table sorted), `missing` where the query is not in the table."""
    if table.size == 0:
        return np.full(queries.shape, missing, dtype=np.float64)
    at = np.clip(np.searchsorted(table, queries), 0, table.size - 1)
    return np.where(table[at] == queries, values[at], missing).astype(np.float64)


@dataclass
class NgramBaselines:
    """The three baselines fitted on training documents (`fit`), scored per document (`document_losses`)."""

    vocab_size: int
    eos: int
    unigram: np.ndarray  # [V] counts
    n_tokens: int
    continuation: np.ndarray  # [V] N1+(.c), over the distinct bigrams
    n_bigram_types: int
    bigram_keys: np.ndarray  # sorted b*V+c of seen bigrams
    bigram_counts: np.ndarray
    bigram_context: tuple[np.ndarray, np.ndarray, np.ndarray]  # b, N1+(b.), C(b.)
    middle_keys: np.ndarray  # sorted b*V+c with N1+(.bc) > 0
    middle_counts: np.ndarray  # N1+(.bc)
    middle_context: tuple[np.ndarray, np.ndarray, np.ndarray]  # b, N1+(b.)', N1+(.b.)
    trigram_keys: np.ndarray  # sorted (a*V+b)*V+c
    trigram_counts: np.ndarray
    trigram_context: tuple[np.ndarray, np.ndarray, np.ndarray]  # a*V+b, N1+(ab.), C(ab.)
    discounts: dict[str, float]

    @classmethod
    def fit(cls, documents: Sequence[Sequence[int]], vocab_size: int, eos: int) -> NgramBaselines:
        a, b, c, _ = _contexts(documents, eos)
        V = vocab_size
        unigram = np.bincount(c, minlength=V).astype(np.float64)
        trigram_keys, trigram_counts = np.unique((a * V + b) * V + c, return_counts=True)
        trigram_context = _grouped(trigram_keys // V, trigram_counts.astype(np.float64))
        bigram_keys, bigram_counts = np.unique(b * V + c, return_counts=True)
        bigram_context = _grouped(bigram_keys // V, bigram_counts.astype(np.float64))
        middle_keys, middle_counts = np.unique(trigram_keys % (V * V), return_counts=True)  # N1+(.bc)
        middle_context = _grouped(middle_keys // V, middle_counts.astype(np.float64))
        continuation = np.bincount(bigram_keys % V, minlength=V).astype(np.float64)
        return cls(
            vocab_size=V, eos=eos, unigram=unigram, n_tokens=int(c.size), continuation=continuation,
            n_bigram_types=int(bigram_keys.size), bigram_keys=bigram_keys, bigram_counts=bigram_counts.astype(np.float64),
            bigram_context=bigram_context, middle_keys=middle_keys, middle_counts=middle_counts.astype(np.float64),
            middle_context=middle_context, trigram_keys=trigram_keys, trigram_counts=trigram_counts.astype(np.float64),
            trigram_context=trigram_context,
            discounts={"continuation": _discount(continuation[continuation > 0]), "bigram": _discount(bigram_counts),
                       "middle": _discount(middle_counts), "trigram": _discount(trigram_counts)},
        )

    # --- probabilities of the tokens c after the contexts (a, b) -------------------------------------------

    def p_unigram(self, c: np.ndarray) -> np.ndarray:
        return (self.unigram[c] + 1.0) / (self.n_tokens + self.vocab_size)

    def p_continuation(self, c: np.ndarray) -> np.ndarray:
        D = self.discounts["continuation"]
        seen_types = float((self.continuation > 0).sum())
        return (np.maximum(self.continuation[c] - D, 0.0) + D * seen_types / self.vocab_size) / self.n_bigram_types

    def _interpolate(self, keys, counts, context, context_of_query, query, D, lower) -> np.ndarray:
        """max(count - D, 0) / total + D types / total * lower, or `lower` where the context is unseen."""
        contexts, types, totals = context
        count = _lookup(keys, counts, query)
        total = _lookup(contexts, totals, context_of_query)
        n_types = _lookup(contexts, types.astype(np.float64), context_of_query)
        seen = total > 0
        safe = np.where(seen, total, 1.0)
        return np.where(seen, (np.maximum(count - D, 0.0) + D * n_types * lower) / safe, lower)

    def p_bigram(self, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        V = self.vocab_size
        return self._interpolate(self.bigram_keys, self.bigram_counts, self.bigram_context, b, b * V + c,
                                 self.discounts["bigram"], self.p_continuation(c))

    def p_trigram(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        V = self.vocab_size
        middle = self._interpolate(self.middle_keys, self.middle_counts, self.middle_context, b, b * V + c,
                                   self.discounts["middle"], self.p_continuation(c))
        return self._interpolate(self.trigram_keys, self.trigram_counts, self.trigram_context, a * V + b,
                                 (a * V + b) * V + c, self.discounts["trigram"], middle)

    def document_losses(self, documents: Sequence[Sequence[int]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per baseline: (summed negative log-likelihood, token count) of each document, in nats."""
        a, b, c, owner = _contexts(documents, self.eos)
        if c.max(initial=0) >= self.vocab_size:
            raise ValueError(f"a token id {int(c.max())} is outside the vocabulary of {self.vocab_size}")
        probabilities = {"unigram": self.p_unigram(c), "bigram": self.p_bigram(b, c), "trigram": self.p_trigram(a, b, c)}
        n_docs = len(documents)
        counts = np.bincount(owner, minlength=n_docs).astype(np.float64)
        return {name: (np.bincount(owner, weights=-np.log(p), minlength=n_docs), counts)
                for name, p in probabilities.items()}
