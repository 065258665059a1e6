"""Neuron usage: Gini against hand-computed cases, unique-token weighting, co-activation, subkey sharing."""

from __future__ import annotations

import numpy as np
import pytest

from circuitlab.analysis.codeindex import CodeMatrix, structured_synthetic_codes
from circuitlab.analysis.usage import (
    activation_counts,
    activation_frequency,
    coactivation,
    gini,
    neuron_usage,
    shared_subkey_mask,
    usage_figure,
    usage_table,
)


def test_gini_hand_computed():
    # {0, 0, 1, 3}: sum over ordered pairs of |x_i - x_j| = 2 * (1 + 3 + 1 + 3 + 2) = 20; 2 n^2 mean = 32.
    assert gini(np.array([0, 0, 1, 3])) == pytest.approx(20 / 32)
    assert gini(np.array([3, 0, 1, 0])) == pytest.approx(0.625)
    assert gini(np.ones(10)) == 0.0
    assert gini(np.array([0, 0, 0, 5])) == pytest.approx(3 / 4)  # (n - 1) / n: one neuron does everything
    assert gini(np.zeros(4)) == 0.0
    with pytest.raises(ValueError, match="non-negative"):
        gini(np.array([1.0, -1.0]))


def test_gini_matches_pairwise_definition_on_random_values():
    values = np.random.default_rng(0).gamma(0.5, size=300)
    pairwise = np.abs(values[:, None] - values[None, :]).sum() / (2 * values.size**2 * values.mean())
    assert gini(values) == pytest.approx(pairwise, rel=1e-12)


def test_each_unique_token_counts_once():
    # Token 7 occurs three times (neurons 3, 3, 2); token 9 once (neuron 3). Size-4 codes with one non-zero.
    codes = CodeMatrix(np.array([[3], [3], [2], [3]]), np.ones((4, 1), np.float32), 4)
    token_ids = np.array([7, 7, 7, 9])
    # f = (1/2) * (token 7: [0, 0, 1/3, 2/3] + token 9: [0, 0, 0, 1]) = [0, 0, 1/6, 5/6]
    np.testing.assert_allclose(activation_frequency(codes, token_ids), [0, 0, 1 / 6, 5 / 6])
    np.testing.assert_allclose(activation_frequency(codes, token_ids, unique_tokens=False), [0, 0, 1 / 4, 3 / 4])
    # Gini of [0, 0, 1/6, 5/6]: pairwise sum 2 * (1/6 * 2 + 5/6 * 2 + 4/6) = 32/6; 2 n^2 mean = 8.
    report = neuron_usage(codes, token_ids)
    assert report.gini == pytest.approx((32 / 6) / 8)
    assert report.fraction_used == 0.5
    assert report.n_unique_tokens == 2 and report.n_tokens == 4
    np.testing.assert_array_equal(report.counts, [0, 0, 1, 3])


def test_repeated_index_counts_once_per_token():
    codes = CodeMatrix(np.array([[1, 1, 2]]), np.array([[1.0, 2.0, 1.0]], np.float32), 4)
    np.testing.assert_array_equal(activation_counts(codes), [0, 1, 1, 0])


def test_coactivation_against_counting():
    rng = np.random.default_rng(1)
    indices = np.stack([rng.choice(12, 3, replace=False) for _ in range(200)])
    codes = CodeMatrix(indices, np.ones_like(indices, dtype=np.float32), 12)
    neurons = np.arange(6)
    probabilities = coactivation(codes, neurons)
    active = np.zeros((200, 12), dtype=bool)
    np.put_along_axis(active, indices, True, axis=1)
    for i in neurons:
        for j in neurons:
            expected = (active[:, i] & active[:, j]).sum() / active[:, i].sum()
            assert probabilities[i, j] == pytest.approx(expected)
    unused = coactivation(CodeMatrix(np.array([[5]]), np.ones((1, 1), np.float32), 8), np.arange(3))
    assert np.isnan(unused).all()


def test_shared_subkey_mask_follows_product_keys():
    # N = 16 neurons per channel, n = 4 keys per half: neuron i = 4 * i1 + i2; two channels.
    mask = shared_subkey_mask(np.arange(32), neurons_per_channel=16)
    assert mask[0, 1] and mask[0, 3]  # same i1 = 0
    assert mask[0, 4] and mask[0, 12]  # same i2 = 0
    assert not mask[0, 5]  # i1 and i2 both differ
    assert not mask[0, 16] and not mask[0, 0]  # another channel; not itself
    assert mask.sum(axis=1).tolist() == [6] * 32  # (n - 1) + (n - 1) partners per neuron
    assert (mask == mask.T).all()
    with pytest.raises(ValueError, match="perfect square"):
        shared_subkey_mask(np.arange(4), neurons_per_channel=12)


def test_shared_subkey_pairs_coactivate_more_when_codes_share_keys():
    # Product top-k picks neurons from the product of two short key lists, so a code's neurons share keys.
    rng = np.random.default_rng(2)
    n, k = 8, 2
    rows = []
    for _ in range(3000):
        first, second = rng.choice(n, k, replace=False), rng.choice(n, k, replace=False)
        rows.append((first[:, None] * n + second[None, :]).ravel())
    codes = CodeMatrix(np.array(rows), np.ones((3000, k * k), np.float32), n * n)
    report = neuron_usage(codes, np.arange(3000), layout={"kind": "sgatlin", "neurons_per_channel": n * n})
    assert report.shared_subkey is not None and report.shared_subkey.shape == (64, 64)
    # P(j | i) is (k - 1)/(n - 1) = 1/7 for a shared key and (k - 1)^2/(n - 1)^2 = 1/49 otherwise.
    assert report.shared_subkey_coactivation == pytest.approx(1 / 7, abs=0.02)
    assert report.other_pair_coactivation == pytest.approx(1 / 49, abs=0.01)
    assert report.fraction_used == 1.0


def test_usage_report_figure_and_table():
    codes = structured_synthetic_codes(2000, channels=2, k=4, neurons=64, seed=3)
    token_ids = np.random.default_rng(0).integers(0, 50, 2000)
    report = neuron_usage(codes, token_ids, layer=1, layout={"kind": "sgatlin", "neurons_per_channel": 64})
    assert report.coactivation.shape == (128, 128)
    assert 0 < report.gini < 1 and 0 < report.fraction_used <= 1
    figure = usage_figure(report)
    assert len(figure.data) == 5  # heatmap, shared-subkey marks, activations, Lorenz curve, diagonal
    table = usage_table({1: report})
    assert table.loc[0, "gini"] == pytest.approx(report.gini)


def test_weighted_usage_is_the_usage_of_the_rows_repeated():
    """Rows taken 0, 1, 2 or 3 times give the Gini and fraction used of the explicitly repeated matrix."""
    from circuitlab.analysis.usage import neuron_usage, weighted_usage

    codes = structured_synthetic_codes(300, channels=2, k=3, neurons=16, seed=4)
    rng = np.random.default_rng(0)
    token_ids = rng.integers(0, 40, len(codes))
    multiplicity = rng.integers(0, 4, len(codes))
    repeated = np.repeat(np.arange(len(codes)), multiplicity)
    expected = neuron_usage(codes.rows(repeated), token_ids[repeated])
    gini_value, used = weighted_usage(codes, token_ids, multiplicity)
    assert gini_value == pytest.approx(expected.gini, abs=1e-12) and used == pytest.approx(expected.fraction_used)
    whole = neuron_usage(codes, token_ids)
    assert weighted_usage(codes, token_ids, np.ones(len(codes))) == (pytest.approx(whole.gini, abs=1e-12), whole.fraction_used)


def test_usage_bootstrap_resamples_whole_sequences():
    from circuitlab.analysis.usage import usage_bootstrap, weighted_usage

    codes = {0: structured_synthetic_codes(120, channels=2, k=3, neurons=16, seed=1),
             2: structured_synthetic_codes(120, channels=2, k=3, neurons=16, seed=2)}
    token_ids = np.arange(120) % 17
    sequence_ids = np.repeat(np.arange(6), 20)
    out = usage_bootstrap(codes, token_ids, sequence_ids, n_resamples=30, seed=5)
    assert out["gini"].shape == out["fraction_used"].shape == (30, 2)
    # each resample is the usage of the drawn sequences, the same draw for both layers
    draws = np.random.default_rng(5).integers(0, 6, size=(30, 6))
    for number in (0, 17, 29):
        multiplicity = np.bincount(draws[number], minlength=6)[sequence_ids]
        for column, layer in enumerate(codes):
            assert (out["gini"][number, column], out["fraction_used"][number, column]) == \
                weighted_usage(codes[layer], token_ids, multiplicity)
    assert np.ptp(out["gini"][:, 0]) > 0  # resamples differ
    with pytest.raises(Exception, match="at least two"):
        usage_bootstrap(codes, token_ids, np.zeros(120), n_resamples=3)
