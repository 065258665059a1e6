"""Reproduce the seed authors' own model outputs (shared fixture, produced by their JAX code in float32)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from circuitlab import from_official_sgatlin
from circuitlab.architectures.interop import OfficialFormatError

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "official_sgatlin_public.npz"


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURE))


def test_reproduces_official_logits_and_router_indices(reference):
    model = from_official_sgatlin(FIXTURE)
    assert model.config.feedforward.k == int(reference["config/knn"])
    tokens = torch.from_numpy(reference["tokens"]).long()
    logits, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(logits, torch.from_numpy(reference["logits"]), rtol=0, atol=1e-4)
    for layer in range(model.config.n_layers):
        ours = cache[f"blocks.{layer}.mlp.hook_gate_indices"].sort(-1).values
        theirs = torch.from_numpy(reference[f"intermediate/blocks_{layer}/ffw/router/indices"]).long().sort(-1).values
        assert torch.equal(ours, theirs), f"layer {layer}: router indices differ"
        torch.testing.assert_close(
            cache[f"blocks.{layer}.mlp.hook_gate_values"].sort(-1).values,
            torch.from_numpy(reference[f"intermediate/blocks_{layer}/ffw/router/scores"]).sort(-1).values,
            rtol=0, atol=1e-4,
        )


def test_accepts_a_mapping_with_or_without_prefix(reference):
    params = {k[len("param/"):]: v for k, v in reference.items() if k.startswith("param/")}
    model = from_official_sgatlin(params, knn=4)
    logits = model(torch.from_numpy(reference["tokens"]).long())
    torch.testing.assert_close(logits, torch.from_numpy(reference["logits"]), rtol=0, atol=1e-4)
    with pytest.raises(OfficialFormatError, match="knn"):
        from_official_sgatlin(params)
    params.pop("blocks_1/ffw/experts")
    with pytest.raises(OfficialFormatError, match="blocks_1/ffw/experts"):
        from_official_sgatlin(params, knn=4)
