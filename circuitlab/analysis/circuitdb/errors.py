"""The errors a circuit database raises (shared by the store, its search and its analyses)."""

from circuitlab.errors import UserError


class CircuitDBError(UserError):
    """A circuit database that cannot be used as asked."""


class CorruptDatabaseError(CircuitDBError):
    """A database file is missing, truncated or modified since it was saved."""


class DamagedShardError(CorruptDatabaseError):
    """One shard's file is missing, truncated, modified or unreadable; the other shards are untouched.

    `shard` is the shard's number, `path` the file, `rows` the circuit ids [start, stop) the shard holds."""

    def __init__(self, message: str, *, shard: int, path: str, rows: tuple[int, int]) -> None:
        super().__init__(message)
        self.shard = shard
        self.path = path
        self.rows = rows


class DatabaseMismatchError(CircuitDBError):
    """A database built with another model or tokenizer than the one given."""
