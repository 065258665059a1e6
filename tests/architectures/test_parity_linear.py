"""The parity bottleneck with seed 003's eq. 1 code against brute force over the materialised dictionary, and
the bias path and usage balance against their definitions."""

from __future__ import annotations

import itertools

import pytest
import torch

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.architectures.bottleneck.parity_linear import walsh_hadamard
from circuitlab.architectures.bottleneck.usage import usage_balance


def layer(**bottleneck):
    config = ModelConfig.preset("tiny-parity-linear", bottleneck=dict(design="linear", n_bits=10, k=6, **bottleneck))
    model = CircuitTransformer(config)
    model.reset_parameters(seed=0)
    return model.blocks[0].bottleneck


def test_walsh_hadamard_is_the_character_sum():
    values = torch.randn(3, 16, dtype=torch.float64)
    signs = torch.tensor([[(-1) ** bin(a & b).count("1") for b in range(16)] for a in range(16)], dtype=torch.float64)
    assert torch.allclose(walsh_hadamard(values), values @ signs.T)
    with pytest.raises(ValueError, match="power-of-two"):
        walsh_hadamard(torch.zeros(12))


def test_dictionary_is_the_random_code_s_sign_patterns_and_the_fast_parts_match_it():
    bottleneck = layer()
    code = bottleneck.code.long()  # [D, r]
    D = bottleneck.dictionary().double()
    for u in (0, 1, 77, 1023):
        bits = torch.tensor([(u >> b) & 1 for b in range(bottleneck.n_bits)])
        expected = (1 - 2 * ((code @ bits) % 2)).double() / bottleneck.d_model**0.5
        assert torch.equal(D[u], expected)  # eq. 1: phi_u = R(M bits(u)) / sqrt(d)
    G = D @ D.T
    assert torch.allclose(bottleneck.overlaps.double(), G[0], atol=1e-6)
    assert bottleneck.coherence() == pytest.approx(float((G - torch.eye(len(G), dtype=G.dtype)).abs().max()), abs=1e-6)
    x = torch.randn(20, bottleneck.d_model)
    assert torch.allclose(bottleneck.scores(x).double(), x.double() @ D.T, atol=1e-4)
    # the two ways of scoring (the product with the dictionary, the transform of the key histogram) agree
    assert torch.allclose(bottleneck.transform_scores(x).double(), x.double() @ D.T, atol=1e-4)
    # the encoder is exhaustive: its support is the top k of |<x, phi_u>| over all m features
    support = bottleneck.encode_indices(x[None])[0]
    brute = (x.double() @ D.T).abs().topk(bottleneck.k, dim=-1).indices
    assert all(set(a.tolist()) == set(b.tolist()) for a, b in zip(support, brute))
    indices = torch.randint(0, bottleneck.n_features, (4, 5))
    assert torch.allclose(bottleneck.gram(indices).double(), G[indices[..., :, None], indices[..., None, :]], atol=1e-6)


def test_least_squares_decode_and_the_bias_path():
    bottleneck = layer(pursuit_rounds=1)
    D = bottleneck.dictionary().double()
    with torch.no_grad():
        bottleneck.bias.copy_(torch.randn(bottleneck.d_model) * 0.3)
    x = torch.randn(2, 3, bottleneck.d_model)
    x_hat, error, balance = bottleneck.reconstruct_with_usage(x)
    centred = (x - bottleneck.bias.detach()).reshape(-1, bottleneck.d_model).double()
    support = bottleneck.encode_indices((x - bottleneck.bias.detach()))[..., :].reshape(-1, bottleneck.k)
    for n, (row, ids) in enumerate(zip(centred, support)):
        Phi = D[ids]  # [k, D]
        a = torch.linalg.solve(Phi @ Phi.T + bottleneck.ridge * torch.eye(len(ids), dtype=torch.float64), Phi @ row)
        assert torch.allclose(x_hat.reshape(-1, bottleneck.d_model)[n].double(), a @ Phi + bottleneck.bias.detach().double(),
                              atol=1e-4)
    assert float(error) == pytest.approx(float(((x - x_hat) ** 2).sum() / (x**2).sum()), rel=1e-5)
    # a write that is the bias plus two features: the support holds both, and the write is reproduced (up to
    # the ridge)
    ids = torch.tensor([100, 900])
    exact = (torch.tensor([3.0, -2.0], dtype=torch.float64) @ D[ids] + bottleneck.bias.detach().double()).float()[None, None]
    found = bottleneck.encode_indices(exact - bottleneck.bias.detach())[0, 0].tolist()
    assert {100, 900} <= set(found)
    assert float(bottleneck.reconstruct(exact)[1]) < 1e-5
    # the gradient reaches the write through the least squares
    x.requires_grad_(True)
    bottleneck.reconstruct(x)[0].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert float(balance) >= 1.0


def test_usage_balance_is_m_times_the_sum_of_squared_mass_shares():
    indices = torch.tensor([[0, 1], [0, 2], [3, 0]])
    values = torch.tensor([[2.0, -1.0], [1.0, 1.0], [-1.0, 4.0]])
    mass = {0: 2 + 1 + 4, 1: 1, 2: 1, 3: 1}
    total = sum(mass.values())
    expected = 8 * sum((m / total) ** 2 for m in mass.values())
    assert float(usage_balance(indices, values, 8)) == pytest.approx(expected)
    spread = torch.arange(8).reshape(4, 2)
    assert float(usage_balance(spread, torch.ones(4, 2), 8)) == pytest.approx(1.0)  # equal mass: 1
    assert float(usage_balance(torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2), 8)) == pytest.approx(8.0)


def test_training_adds_the_balance_term_and_logs_the_effective_features(tmp_path):
    from circuitlab.training.settings import TrainConfig
    from circuitlab.training.trainer import Trainer

    config = ModelConfig.preset("tiny-parity-linear")
    model = CircuitTransformer(config)
    model.reset_parameters(seed=0)
    windows = torch.randint(0, config.d_vocab, (40, 17))
    trainer = Trainer(model, TrainConfig(steps=3, batch_size=4, seq_len=16, eval_every=0, ckpt_every=0, warmup=1),
                      windows[:32], windows[32:], tmp_path, progress=False)
    trainer.fit()
    record = trainer.history[0]
    assert 1.0 <= record["effective_features"] <= 2 ** config.bottleneck.n_bits
    # the loss the optimizer saw includes lambda_balance * balance: its gradient differs from lambda 0's
    grads = []
    for lam in (0.0, 10.0):
        m = CircuitTransformer(ModelConfig.preset("tiny-parity-linear", bottleneck=dict(
            design="linear", n_bits=10, k=8, pursuit_rounds=2, bias=True, lambda_balance=lam)))
        m.reset_parameters(seed=0)
        _, aux = m(windows[:2, :16], return_aux=True)
        (aux["reconstruction"] + lam * aux["balance"]).backward()
        grads.append(m.blocks[0].mlp.W_out.grad.clone() if hasattr(m.blocks[0].mlp, "W_out") else
                     next(p.grad for p in m.blocks[0].mlp.parameters() if p.grad is not None).clone())
    assert not torch.allclose(grads[0], grads[1])
