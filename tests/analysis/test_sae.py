"""circuitlab.analysis.sae: the top-k autoencoder's forward pass against a hand computation in float64, the
AuxK loss against its formula, the dead-latent bookkeeping step by step, the decoder's gradient projection,
and a saved autoencoder reloading to the same state."""

from __future__ import annotations

import pytest
import torch

from circuitlab.analysis.sae import SAEConfig, TopKSAE
from circuitlab.errors import UserError


def _sae(d=6, m=16, k=3, k_aux=4, dead_after=10, seed=0) -> TopKSAE:
    sae = TopKSAE(SAEConfig(d_model=d, n_latents=m, k=k, k_aux=k_aux, dead_after=dead_after, seed=seed))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # break the tied start and give the biases values, so every term is exercised
        sae.W_enc.copy_(torch.randn(m, d, generator=generator))
        sae.b_enc.copy_(0.3 * torch.randn(m, generator=generator))
        sae.b_dec.copy_(0.5 * torch.randn(d, generator=generator))
    return sae


def _by_hand(sae: TopKSAE, x):
    """(ids of the k largest pre-activations, their ReLU values, x_hat, pre) in float64, token by token."""
    W_enc, b_enc = sae.W_enc.detach().double(), sae.b_enc.detach().double()
    W_dec, b_dec = sae.W_dec.detach().double(), sae.b_dec.detach().double()
    ids, values, x_hats, pres = [], [], [], []
    for token in x.double():
        pre = [float(sum(W_enc[i, j] * (token[j] - b_dec[j]) for j in range(len(token))) + b_enc[i])
               for i in range(W_enc.shape[0])]
        order = sorted(range(len(pre)), key=lambda i: -pre[i])[: sae.k]
        kept = [max(pre[i], 0.0) for i in order]
        x_hat = b_dec.clone()
        for i, value in zip(order, kept):
            x_hat += value * W_dec[:, i]
        ids.append(order), values.append(kept), x_hats.append(x_hat), pres.append(pre)
    return ids, values, torch.stack(x_hats), torch.tensor(pres, dtype=torch.float64)


def test_the_forward_pass_is_the_equation_computed_by_hand():
    sae = _sae()
    with torch.no_grad():
        sae.b_enc -= 3.0  # some tokens keep a latent whose pre-activation is below zero
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(7))
    ids, values, x_hat, _ = _by_hand(sae, x)
    found_ids, found_values = sae.encode(x)
    assert [sorted(row) for row in found_ids.tolist()] == [sorted(row) for row in ids]
    by_id = [dict(zip(row_ids, row_values)) for row_ids, row_values in zip(found_ids.tolist(), found_values.tolist())]
    for row, expected_ids, expected_values in zip(by_id, ids, values):
        assert [row[i] for i in expected_ids] == pytest.approx(expected_values, abs=1e-5)
    assert (found_values >= 0).all() and (found_values == 0).any()  # a kept latent below zero has not fired
    torch.testing.assert_close(sae(x).double(), x_hat, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sae(x.reshape(3, 3, 6)).double(), x_hat.reshape(3, 3, 6), atol=1e-5, rtol=1e-5)
    assert torch.allclose(sae.W_dec.norm(dim=0), torch.ones(16))  # unit-norm columns from the start
    fresh = TopKSAE(SAEConfig(d_model=6, n_latents=16, k=3))
    assert torch.equal(fresh.W_enc, fresh.W_dec.T)  # the tied start


def test_the_loss_is_normalised_mse_plus_alpha_times_auxk_by_their_formulas():
    sae = _sae(k=1, k_aux=4, dead_after=15)  # one latent per token: 12 tokens leave some of latents 0-5 unfired
    with torch.no_grad():
        sae.b_enc += 1.0  # and most pre-activations positive, so the dead latents have something to give
    x = torch.randn(12, 6, generator=torch.Generator().manual_seed(3))
    sae.init_from_data_(x[:8])
    v = (x[:8].double() - x[:8].double().mean(0)).pow(2).sum(-1).mean()
    assert float(sae.variance) == pytest.approx(float(v), rel=1e-6)
    torch.testing.assert_close(sae.b_dec.detach(), x[:8].mean(0))
    # latents 0-5 have gone 7 tokens without firing: after this batch 19 >= 15, dead unless they fire in it; the
    # others 12 < 15
    with torch.no_grad():
        sae.tokens_since_fired.copy_(torch.tensor([7] * 6 + [0] * 10))
    ids, values, x_hat, pre = _by_hand(sae, x)
    fired = {i for row_ids, row_values in zip(ids, values) for i, value in zip(row_ids, row_values) if value > 0}
    dead = [i for i in range(16) if i < 6 and i not in fired]
    assert dead, "the constructed case should leave some latent dead"
    residual = x.double() - x_hat
    e_hat = torch.zeros_like(residual)
    for n in range(12):
        chosen = sorted(dead, key=lambda i: -pre[n, i])[:4]
        for i in chosen:
            e_hat[n] += max(float(pre[n, i]), 0.0) * sae.W_dec.detach().double()[:, i]
    aux = (residual - e_hat).pow(2).sum() / residual.pow(2).sum()
    reconstruction = residual.pow(2).sum() / (12 * v)

    total, parts = sae.loss(x)
    assert float(parts["reconstruction"]) == pytest.approx(float(reconstruction), rel=1e-5)
    assert float(parts["aux"]) == pytest.approx(float(aux), rel=1e-5)
    assert float(total.detach()) == pytest.approx(float(reconstruction + aux / 32), rel=1e-5)
    assert float(parts["dead_share"]) == len(dead) / 16
    # the AuxK term reaches the dead latents' encoder rows; the main term alone does not
    total.backward()
    assert sae.W_enc.grad[dead].abs().sum() > 0


def test_auxk_is_zero_with_no_dead_latent_and_uses_every_dead_one_when_fewer_than_k_aux():
    sae = _sae(k_aux=8, dead_after=1000)
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(5))
    sae.init_from_data_(x)
    _, parts = sae.loss(x)
    assert float(parts["aux"]) == 0.0 and float(parts["dead_share"]) == 0.0
    pre = sae.pre_activations(x).detach()
    residual = torch.randn(10, 6, generator=torch.Generator().manual_seed(6))
    dead = torch.zeros(16, dtype=torch.bool)
    dead[[2, 9]] = True  # two dead latents, k_aux 8: both serve every token (where their pre-activation is > 0)
    e_hat = torch.relu(pre[:, [2, 9]]) @ sae.W_dec.detach()[:, [2, 9]].T
    expected = (residual - e_hat).pow(2).sum() / residual.pow(2).sum()
    assert float(sae.aux_loss(residual, pre, dead).detach()) == pytest.approx(float(expected), rel=1e-5)


def test_dead_latent_bookkeeping_counts_tokens_since_each_latent_last_fired():
    sae = _sae(m=5, k=2, k_aux=2, dead_after=6)
    # batch of 4 tokens: latents 0 and 1 fire; latent 2 is kept with value 0, which is not firing
    sae.record_firing_(torch.tensor([[0, 2], [1, 2], [0, 1], [1, 0]]), torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.5, 0.1], [3.0, 1.0]]))
    assert sae.tokens_since_fired.tolist() == [0, 0, 4, 4, 4]
    assert sae.dead_latents().tolist() == [False] * 5
    sae.record_firing_(torch.tensor([[2, 0], [2, 1], [2, 0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))
    assert sae.tokens_since_fired.tolist() == [3, 3, 0, 7, 7]
    assert sae.dead_latents().tolist() == [False, False, False, True, True]  # 7 >= 6 tokens without firing
    sae.record_firing_(torch.tensor([[3, 0]]), torch.tensor([[0.25, 0.0]]))
    assert sae.tokens_since_fired.tolist() == [4, 4, 1, 0, 8]
    assert sae.dead_latents().tolist() == [False, False, False, False, True]


def test_a_latent_that_never_wins_the_top_k_is_dead_after_dead_after_tokens():
    sae = _sae(m=8, k=2, k_aux=2, dead_after=12)
    with torch.no_grad():
        sae.b_enc[5] = -1e6  # never among the top k
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    sae.init_from_data_(x)
    for batch in range(3):
        _, parts = sae.loss(x)
        assert bool(sae.dead_latents()[5]) == ((batch + 1) * 4 >= 12)
        assert int(sae.tokens_since_fired[5]) == (batch + 1) * 4


def test_the_decoder_gradient_loses_its_component_along_each_column_and_columns_renormalise():
    sae = _sae()
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(2))
    sae.init_from_data_(x)
    sae.loss(x)[0].backward()
    assert (sae.W_dec.grad * sae.W_dec).sum(0).abs().max() > 1e-4
    sae.project_decoder_grad_()
    assert (sae.W_dec.grad * sae.W_dec).sum(0).abs().max() < 1e-6
    with torch.no_grad():
        sae.W_dec.mul_(torch.linspace(0.5, 2.0, 16))
    sae.normalise_decoder_()
    torch.testing.assert_close(sae.W_dec.norm(dim=0), torch.ones(16))


def test_a_saved_autoencoder_reloads_to_the_same_state(tmp_path):
    sae = _sae()
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(4))
    sae.init_from_data_(x)
    sae.loss(x)
    sae.save(tmp_path / "layer_0", record={"hook": "blocks.0.hook_mlp_out"})
    loaded, record = TopKSAE.load(tmp_path / "layer_0")
    assert record == {"hook": "blocks.0.hook_mlp_out"} and loaded.config == sae.config
    for name, tensor in sae.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert torch.equal(loaded(x), sae(x))
    with pytest.raises(UserError, match="holds no sparse autoencoder"):
        TopKSAE.load(tmp_path / "absent")
    with pytest.raises(ValueError, match="at most n_latents"):
        SAEConfig(d_model=4, n_latents=8, k=9)
