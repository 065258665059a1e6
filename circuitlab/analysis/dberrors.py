"""The errors a circuit database raises (shared by the store, its persistence and its analyses)."""

from circuitlab.errors import UserError


class CircuitDBError(UserError):
    """A circuit database that cannot be used as asked."""


class CorruptDatabaseError(CircuitDBError):
    """A database file is missing, truncated or modified since it was saved."""


class DatabaseMismatchError(CircuitDBError):
    """A database built with another model or tokenizer than the one given."""
