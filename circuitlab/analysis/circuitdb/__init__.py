"""Circuit databases: every token of a corpus with its sparse code per layer, searchable by cosine distance.

One module per job: `database` (the CircuitDB object), `manifest` (the folder format), `shards` (reading
shards lazily), `store` (saving and appending, atomically), `indexes` (what search builds over the shards),
`search` (exact and approximate search and the hits table), `device` (exact search on an accelerator,
certified in float64), `ranks` (a database split over torchrun ranks), `errors`.
"""

from circuitlab.analysis.circuitdb.database import CircuitDB
from circuitlab.analysis.circuitdb.errors import (
    CircuitDBError,
    CorruptDatabaseError,
    DamagedShardError,
    DatabaseMismatchError,
)
from circuitlab.analysis.circuitdb.manifest import FORMAT_NAME, FORMAT_VERSION, LOCK, MANIFEST
from circuitlab.analysis.circuitdb.shards import sha256_file
from circuitlab.analysis.neighbour_figures import TOKEN_MARKS, format_hits, mark_token, neighbour_heatmap

__all__ = [
    "CircuitDB", "CircuitDBError", "CorruptDatabaseError", "DamagedShardError", "DatabaseMismatchError",
    "FORMAT_NAME", "FORMAT_VERSION", "LOCK", "MANIFEST", "TOKEN_MARKS", "format_hits", "mark_token",
    "neighbour_heatmap", "sha256_file",
]
