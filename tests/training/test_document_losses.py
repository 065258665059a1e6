"""The model's per-document held-out losses (circuitlab.training.evaluation.document_losses) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.training.evaluation import document_losses

EOS = 0


@pytest.mark.parametrize("preset", ["tiny-gelu", "tiny-legible"])
def test_document_losses_match_one_document_at_a_time(preset):
    config = ModelConfig.preset(preset, d_vocab=50, n_ctx=48)
    model = CircuitTransformer(config)
    model.reset_parameters(seed=0)
    rng = np.random.default_rng(1)
    # lengths from 1 to 3 x n_ctx: single pieces, several pieces, and widths that the padding rounds up
    documents = [rng.integers(1, 50, size=int(n)).tolist() for n in (1, 5, 47, 48, 49, 100, 150, 30)]
    nll, counts = document_losses(model, documents, EOS, batch_size=3)
    model.eval()
    with torch.no_grad():
        for document, total, count in zip(documents, nll, counts):
            tokens = [EOS, *document]
            expected, predicted = 0.0, 0
            # every token predicted once, each piece read alone from its own start (n_ctx + 1 tokens a piece)
            for start in range(0, len(tokens) - 1, config.n_ctx):
                piece = torch.tensor(tokens[start:start + config.n_ctx + 1])
                logits = model(piece[None, :-1]).float()[0]
                expected += float(F.cross_entropy(logits, piece[1:], reduction="sum"))
                predicted += len(piece) - 1
            assert count == predicted == len(document)
            assert total == pytest.approx(expected, rel=1e-4, abs=1e-4)
