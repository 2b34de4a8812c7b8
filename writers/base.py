"""The one interface every table format implements: commit an epoch's change, read back
the last committed epoch, look up the stored rows of some keys."""

from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa

from lakeview.ivm.commits import Change, CommitRecord, Epoch


class SnapshotWriter(ABC):
    """Commits a view's changes to one table, one snapshot per epoch, idempotently."""

    @abstractmethod
    def ensure_table(self, schema: pa.Schema, key: tuple[str, ...] | None, properties: dict[str, str]) -> None:
        """Create the view's table (and its namespace) if it does not exist yet."""

    @abstractmethod
    def last_commit(self) -> CommitRecord | None:
        """The newest commit Lakeview made to the table, or None for a new table."""

    @abstractmethod
    def lookup(self, keys: pa.Table) -> pa.Table:
        """The stored rows whose key equals one of ``keys`` (null-safe)."""

    def add_columns(self, schema: pa.Schema) -> list[str]:
        """Add the columns of ``schema`` the table lacks (source schema evolution); existing
        rows read NULL for them. Returns the names added."""
        raise NotImplementedError(f"{type(self).__name__} cannot evolve its schema")

    @abstractmethod
    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        """Apply ``change`` as one snapshot stamped with ``epoch``.

        Returns None (and changes nothing) when the epoch is already committed or the change is
        empty. Raises CommitConflictError when concurrent commits keep winning.
        """
