"""A pyiceberg transaction that computes its table metadata once per state.

pyiceberg 0.12's ``Transaction.table_metadata`` deep-copies the whole table metadata (every
snapshot, schema and log entry) on each access, even with nothing staged, and one snapshot
commit reads it ~20 times: measured 0.43 s of a 0.7 s merge-on-read commit on a table with 40
snapshots. The metadata only changes when an update is staged or the table is refreshed, so
this transaction keeps the last result until then (callers only read it), and with nothing staged
answers the table's own metadata (a group commit stages five tables per epoch: ten deep copies before).
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata


class MemoTransaction(Transaction):
    _memo: tuple[TableMetadata, tuple, TableMetadata] | None = None  # (base, updates, result)

    @property
    def table_metadata(self) -> TableMetadata:
        # Identity, not equality: staging builds a new updates tuple and a refresh a new base
        # metadata object (both held here, so their identities cannot be reused meanwhile).
        base, updates = self._table.metadata, self._updates
        if not updates:  # nothing staged: the table's own metadata (read only, as the memo's result is), no copy
            return base
        if self._memo is None or self._memo[0] is not base or self._memo[1] is not updates:
            self._memo = (base, updates, super().table_metadata)
        return self._memo[2]


def transaction(table: Table) -> Transaction:
    """``table.transaction()``, with the metadata memoised (see the module docstring)."""
    return MemoTransaction(table)
