"""A pyiceberg transaction that computes its table metadata once per state, without a deep copy.

pyiceberg 0.12's ``Transaction.table_metadata`` applies the staged updates to the table's metadata and
deep-copies the result (every snapshot, schema and log entry) on each access, even with nothing staged, and
one snapshot commit reads it ~20 times: measured 0.43 s of a 0.7 s merge-on-read commit on a table with 40
snapshots. The metadata only changes when an update is staged or the table is refreshed, so this transaction
keeps the last result until then (callers only read it), and with nothing staged answers the table's own
metadata (a group commit stages five tables per epoch: ten deep copies before). The result is not deep-copied
either (still 0.035 s of a 0.57 s group commit per 8 epochs): pyiceberg's metadata models are frozen and each
update builds new containers for what it changes (``model_copy(update=...)``), so sharing the unchanged
parts with the base metadata is safe for readers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)


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
            self._memo = (base, updates, applied(base, updates))
        return self._memo[2]


def applied(
    base: TableMetadata,
    updates: tuple[TableUpdate, ...],
    metadata_location: str | None = None,
    apply: Callable[[TableUpdate, TableMetadata, _TableMetadataUpdateContext], TableMetadata] = _apply_table_update,
    start: TableMetadata | None = None,
) -> TableMetadata:
    """pyiceberg 0.12's ``update_table_metadata(base, updates, metadata_location=...)`` without validation and
    without its final deep copy (see the module docstring); ``apply`` applies one update (the catalog's also
    upgrades to format v3), starting from ``start`` (default ``base``)."""
    context = _TableMetadataUpdateContext()
    metadata = base if start is None else start
    for update in updates:
        metadata = apply(update, metadata, context)
    if context.has_changes():
        if metadata_location:
            metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": int(time.time() * 1000)})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def transaction(table: Table) -> Transaction:
    """``table.transaction()``, with the metadata memoised (see the module docstring)."""
    return MemoTransaction(table)


_ARROW: dict[int, tuple[Schema, pa.Schema]] = {}  # id(schema) -> (that schema, held so its id is not reused; arrow)


def arrow_schema(table: Table) -> pa.Schema:
    """``table.schema().as_arrow()``, converted once per schema object (a conversion walks every field in Python:
    ~1 ms a table, paid by each member of a group every epoch). Tables staged on the metadata a transaction left
    (:mod:`writers.iceberg.group`) share their schema objects, so only a load converts again."""
    schema = table.schema()
    held = _ARROW.get(id(schema))
    if held is None or held[0] is not schema:
        if len(_ARROW) > 1_000:
            _ARROW.clear()
        held = _ARROW[id(schema)] = (schema, schema.as_arrow())
    return held[1]
