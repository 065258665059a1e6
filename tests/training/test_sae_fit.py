"""circuitlab.training.sae_fit: the loop follows the warmup-stable-decay schedule, keeps the decoder at unit-norm
columns, passes over the rows in seeded permutations, and learns a dictionary that codes data made of one."""

from __future__ import annotations

import pytest
import torch

from circuitlab.analysis.sae import SAEConfig, TopKSAE
from circuitlab.training.sae_fit import batch_rows, fit_dictionary
from circuitlab.training.schedule import wsd_lr


def test_each_pass_is_a_seeded_permutation_of_the_rows():
    rows = torch.cat([batch_rows(10, 3, step, seed=4) for step in range(3)])  # one pass: 3 batches of 3, one row left
    assert len(set(rows.tolist())) == 9 and rows.max() < 10
    assert torch.equal(batch_rows(10, 3, 1, seed=4), batch_rows(10, 3, 1, seed=4))
    assert not torch.equal(batch_rows(10, 3, 0, seed=4), batch_rows(10, 3, 3, seed=4))  # the next pass reorders
    for step, (epoch, index) in ((1, (0, 1)), (4, (1, 1)), (1, (0, 1))):  # by definition, whatever was drawn before
        order = torch.randperm(10, generator=torch.Generator().manual_seed(4 * 1_000_003 + epoch))
        assert torch.equal(batch_rows(10, 3, step, seed=4), order[3 * index : 3 * index + 3])
    with pytest.raises(ValueError, match="fewer than one batch"):
        batch_rows(2, 3, 0, seed=0)


def _sparse_data(n=2048, d=16, m_true=32, k=2, seed=0):
    """Writes made of k of m_true unit directions with positive weights: a dictionary exists that codes them."""
    generator = torch.Generator().manual_seed(seed)
    atoms = torch.nn.functional.normalize(torch.randn(m_true, d, generator=generator), dim=-1)
    ids = torch.stack([torch.randperm(m_true, generator=generator)[:k] for _ in range(n)])
    weights = 1.0 + torch.rand(n, k, generator=generator)
    return torch.einsum("nk,nkd->nd", weights, atoms[ids])


def test_training_follows_the_schedule_keeps_unit_columns_and_learns_the_dictionary():
    x = _sparse_data()
    sae = TopKSAE(SAEConfig(d_model=16, n_latents=64, k=2, k_aux=8, dead_after=512, seed=0))
    sae.init_from_data_(x[:256])
    with torch.no_grad():
        before = ((x - sae(x)).pow(2).sum() / x.pow(2).sum()).item()
    record = fit_dictionary(sae, x, steps=300, batch_size=128, lr=1e-2, warmup=20, log_every=25, progress=False)
    assert [entry["lr"] for entry in record["log"]] == [wsd_lr(entry["step"], 300, 1e-2, 20) for entry in record["log"]]
    assert record["log"][0]["lr"] == 0.0 and record["log"][-1]["step"] == 299
    assert record["tokens_seen"] == 300 * 128 and record["rows"] == 2048
    torch.testing.assert_close(sae.W_dec.norm(dim=0), torch.ones(64))
    with torch.no_grad():
        after = ((x - sae(x)).pow(2).sum() / x.pow(2).sum()).item()
    assert after < 0.2 * before and after < 0.1, (before, after)
    assert record["final"]["reconstruction"] < record["log"][1]["reconstruction"]
