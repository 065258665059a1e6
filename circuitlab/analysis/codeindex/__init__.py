"""Sparse code storage and nearest-neighbour search by cosine distance.

A circuit is identified by its sparse code (seed 000, section 4: the gate vector of a token fixes the linear
circuit sgatlin applies to it), and two circuits are compared by the cosine distance of their codes
(docs/analyses/circuit-lookup.md). The codes of one layer and their two searches, one module each:

- `matrix`: `CodeMatrix`, the codes of one layer in canonical form (sorted indices, repeats merged).
- `exact`: `ExactIndex` and `exact_search`, blocked sparse products (or posting lists) that equal brute force;
  `brute_force_search` is the dense reference.
- `approximate`: `SketchSpec`, `sketch` and `ApproximateIndex`, seeded sparse sketches in a FAISS index that
  propose candidates, re-ranked by exact cosine distance (`rerank`); `recall_at_k` scores them.
- `synthetic`: `structured_synthetic_codes`, codes of the sgatlin shape for tests and benchmarks.

Every public name of these modules is exported here.
"""

from circuitlab.analysis.codeindex.approximate import (
    ApproximateIndex,
    SketchSpec,
    faiss_gpu_available,
    projection,
    recall_at_k,
    rerank,
    sketch,
)
from circuitlab.analysis.codeindex.exact import (
    ExactIndex,
    brute_force_search,
    cosine_distance_from_dots,
    exact_search,
    smallest_k,
)
from circuitlab.analysis.codeindex.matrix import CodeMatrix
from circuitlab.analysis.codeindex.synthetic import structured_synthetic_codes
