"""Fast paths. Layers call the functions exported here; each has a plain-PyTorch reference in
`reference.py` that it must equal."""

from circuitlab.kernels.reference import (
    existential_scan,
    parity_decode,
    parity_directions,
    parity_scores,
    parity_signs,
    proportion_scan,
    sgatlin_combine,
)

__all__ = [
    "existential_scan",
    "parity_decode",
    "parity_directions",
    "parity_scores",
    "parity_signs",
    "proportion_scan",
    "sgatlin_combine",
]
