"""Count baselines (unigram, Kneser-Ney bigram and trigram) against a brute-force implementation, per-document
model losses against a hand loop, and bootstrap intervals against their definition."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from circuitlab.analysis.ngram import NgramBaselines
from circuitlab.stats import bootstrap_difference, bootstrap_ratio, seed_spread
from circuitlab.training.evaluation import document_losses

V, EOS = 12, 0


def corpus(seed: int, n_docs: int = 30):
    rng = np.random.default_rng(seed)
    # a little structure: token t tends to be followed by t + 1
    docs = []
    for _ in range(n_docs):
        doc = [int(rng.integers(1, V))]
        for _ in range(int(rng.integers(3, 15))):
            doc.append(int((doc[-1] + 1) % V or 1) if rng.random() < 0.6 else int(rng.integers(1, V)))
        docs.append(doc)
    return docs


def brute_force_kn(docs):
    """Interpolated Kneser-Ney as the module docstring writes it, with dictionaries."""
    tri, bi, uni = Counter(), Counter(), Counter()
    for doc in docs:
        padded = [EOS, EOS, *doc]
        for i in range(2, len(padded)):
            tri[tuple(padded[i - 2:i + 1])] += 1
            bi[tuple(padded[i - 1:i + 1])] += 1
            uni[padded[i]] += 1
    def discount(counts):
        n1 = sum(1 for v in counts if v == 1)
        n2 = sum(1 for v in counts if v == 2)
        return n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
    cont = Counter(c for (_, c) in bi)
    n_types = len(bi)
    d_cont = discount(cont.values())
    def p_cont(c):
        return (max(cont[c] - d_cont, 0) + d_cont * len(cont) / V) / n_types
    middle = Counter((b, c) for (_, b, c) in tri)
    d_mid, d_tri, d_bi = discount(middle.values()), discount(tri.values()), discount(bi.values())
    mid_total, mid_types = defaultdict(float), defaultdict(int)
    for (b, c), n in middle.items():
        mid_total[b] += n
        mid_types[b] += 1
    tri_total, tri_types = defaultdict(float), defaultdict(int)
    for (a, b, c), n in tri.items():
        tri_total[(a, b)] += n
        tri_types[(a, b)] += 1
    bi_total, bi_types = defaultdict(float), defaultdict(int)
    for (b, c), n in bi.items():
        bi_total[b] += n
        bi_types[b] += 1
    def p_mid(b, c):
        if not mid_total[b]:
            return p_cont(c)
        return (max(middle[(b, c)] - d_mid, 0) + d_mid * mid_types[b] * p_cont(c)) / mid_total[b]
    def p_tri(a, b, c):
        if not tri_total[(a, b)]:
            return p_mid(b, c)
        return (max(tri[(a, b, c)] - d_tri, 0) + d_tri * tri_types[(a, b)] * p_mid(b, c)) / tri_total[(a, b)]
    def p_bi(b, c):
        if not bi_total[b]:
            return p_cont(c)
        return (max(bi[(b, c)] - d_bi, 0) + d_bi * bi_types[b] * p_cont(c)) / bi_total[b]
    def p_uni(c):
        return (uni[c] + 1) / (sum(uni.values()) + V)
    return p_uni, p_bi, p_tri


def test_kneser_ney_matches_a_brute_force_implementation_and_sums_to_one():
    train, held = corpus(1), corpus(2, 10)
    fitted = NgramBaselines.fit(train, V, EOS)
    p_uni, p_bi, p_tri = brute_force_kn(train)
    grid = np.array([(a, b, c) for a in range(V) for b in range(V) for c in range(V)])
    a, b, c = grid.T
    assert np.allclose(fitted.p_trigram(a, b, c), [p_tri(*t) for t in grid], atol=1e-12)
    assert np.allclose(fitted.p_bigram(b, c), [p_bi(y, z) for y, z in zip(b, c)], atol=1e-12)
    assert np.allclose(fitted.p_unigram(c), [p_uni(z) for z in c], atol=1e-12)
    # every context, seen or not, gives a distribution over the vocabulary
    assert np.allclose(fitted.p_trigram(a, b, c).reshape(V, V, V).sum(-1), 1.0)
    assert np.allclose(fitted.p_bigram(b, c).reshape(V, V, V)[0].sum(-1), 1.0)
    losses = fitted.document_losses(held)
    for name, p in (("unigram", lambda x, y, z: p_uni(z)), ("bigram", lambda x, y, z: p_bi(y, z)), ("trigram", p_tri)):
        nll, counts = losses[name]
        for doc, total, count in zip(held, nll, counts):
            padded = [EOS, EOS, *doc]
            assert count == len(doc)
            assert total == pytest.approx(-sum(math.log(p(*padded[i - 2:i + 1])) for i in range(2, len(padded))))
    # on text where a token predicts the next, context predicts better than frequency alone
    loss = {name: nll.sum() / counts.sum() for name, (nll, counts) in losses.items()}
    assert max(loss["trigram"], loss["bigram"]) < loss["unigram"]


def test_bootstrap_intervals_follow_their_definition():
    rng = np.random.default_rng(3)
    top, bottom = rng.random(40) * 50, rng.integers(10, 60, 40).astype(float)
    estimate = bootstrap_ratio(top, bottom, n_resamples=500, seed=7)
    assert estimate.value == pytest.approx(top.sum() / bottom.sum())
    picked = np.random.default_rng(7).integers(0, 40, size=(500, 40))
    ratios = [top[row].sum() / bottom[row].sum() for row in picked]
    assert [estimate.low, estimate.high] == pytest.approx(list(np.percentile(ratios, [2.5, 97.5])))
    assert estimate.low < estimate.value < estimate.high
    same = bootstrap_ratio(bottom * 2.0, bottom)  # every unit has ratio 2: no spread
    assert same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    diff = bootstrap_difference(top + bottom, bottom, top, bottom)  # b shifted by exactly 1 per token
    assert diff.value == pytest.approx(1.0) and diff.low == pytest.approx(1.0) and diff.high == pytest.approx(1.0)
    assert diff.excludes(0.5) and not diff.excludes(1.0)
    assert bootstrap_ratio([3.0], [2.0]).ci95 is None
    assert seed_spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0, "n": 3}


def test_model_document_losses_equal_a_hand_loop_and_do_not_depend_on_batching():
    from circuitlab import CircuitTransformer, ModelConfig

    model = CircuitTransformer(ModelConfig.preset("tiny-gelu", n_ctx=16))
    model.reset_parameters(seed=0)
    model.eval()
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 500, size=n).tolist() for n in (3, 40, 15, 16, 1, 33)]  # 40 and 33 need pieces
    nll, counts = document_losses(model, docs, eos=0, batch_size=4)
    for doc, total, count in zip(docs, nll, counts):
        tokens = [0, *doc]
        expected, n = 0.0, 0
        for start in range(0, max(1, len(tokens) - 1), 16):  # pieces of n_ctx + 1 overlapping by one token
            piece = torch.tensor([tokens[start:start + 17]])
            with torch.no_grad():
                logits = model(piece[:, :-1])
            expected += float(F.cross_entropy(logits[0], piece[0, 1:], reduction="sum"))
            n += piece.shape[1] - 1
        assert count == n == len(doc)
        assert total == pytest.approx(expected, rel=1e-5)
    again = document_losses(model, docs, eos=0, batch_size=1)
    assert np.allclose(again[0], nll, rtol=1e-5) and np.array_equal(again[1], counts)
