"""An in-memory SnapshotWriter (same contract as the Iceberg writer: one version per epoch,
null-safe keyed upserts and deletes) so the merge logic can be property-tested without Spark."""

from __future__ import annotations

import pyarrow as pa

from lakeview.ivm.commits import Change, CommitRecord, Epoch
from writers.arrow_ops import rows_at_most, rows_with_keys, rows_without_keys
from writers.base import SnapshotWriter, WriterCapabilities


class MemoryWriter(SnapshotWriter):
    capabilities = WriterCapabilities(format="memory", closed_window_reads=True)

    def __init__(self, schema: pa.Schema | None = None) -> None:
        self.rows: pa.Table | None = schema.empty_table() if schema is not None else None
        self.epoch: int | None = None
        self.commits = 0
        self.stamps: dict[str, str] = {}

    def ensure_table(self, schema: pa.Schema, key: tuple[str, ...] | None, properties: dict[str, str]) -> None:
        if self.rows is None:
            self.rows = schema.empty_table()

    def last_commit(self) -> CommitRecord | None:
        if self.epoch is None:
            return None
        return CommitRecord(
            view="", epoch=self.epoch, frontier={}, snapshot_id=self.commits, committed_at_ms=0, extra=dict(self.stamps)
        )

    def lookup(self, keys: pa.Table) -> pa.Table:
        if self.rows is None or self.rows.num_rows == 0:
            return self.rows if self.rows is not None else pa.table({})
        return rows_with_keys(self.rows, keys, tuple(keys.column_names))

    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        if self.epoch is not None and epoch.number <= self.epoch:
            return None
        if change.is_empty:
            return None
        if self.rows is None or self.rows.num_rows == 0:
            base = change.rows.schema.empty_table() if self.rows is None or self.rows.num_columns == 0 else self.rows
        else:
            base = self.rows
        if change.key is not None and base.num_rows:
            base = rows_without_keys(base, change.touched_keys(), change.key)
        self.rows = (
            pa.concat_tables([base, change.rows.select(base.schema.names).cast(base.schema)])
            if base.num_columns
            else change.rows
        )
        self.epoch = epoch.number
        self.stamps = dict(epoch.stamps)
        self.commits += 1
        return self.last_commit()

    def rows_ending_by(self, column: str, bound_us: int) -> pa.Table:
        if self.rows is None or self.rows.num_rows == 0:
            return self.rows if self.rows is not None else pa.table({})
        return rows_at_most(self.rows, column, bound_us)
