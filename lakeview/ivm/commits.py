"""What one epoch commits and what a commit records: the data every table format's writer
takes and gives back (the writer interface itself is :class:`writers.base.SnapshotWriter`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Keys Lakeview stamps on every commit (Iceberg snapshot summary / Delta commit info).
VIEW = "lakeview.view"
EPOCH = "lakeview.epoch"
FRONTIER = "lakeview.frontier"
ROWS_INSERTED = "lakeview.rows-inserted"
ROWS_DELETED = "lakeview.rows-deleted"
ROWS_IN = "lakeview.rows-in"
LAG_MS = "lakeview.lag-ms"
COMMITTED_AT = "lakeview.committed-at-ms"
# A commit that marks the rows a table holds as from before the view's epochs (a view rebuilt from its sources,
# :mod:`spark_jobs.migrate`): they stay readable, the table reads as holding no epoch, and the view's first epoch
# replaces them in one commit. Its value is the view's name.
BASELINE = "lakeview.baseline"
STAMPED = ("lakeview.watermark", "lakeview.max-event-time", "lakeview.rows-late")  # read back into CommitRecord.extra


@dataclass(frozen=True)
class Epoch:
    """One Spark micro-batch of one view: its id and the source positions it reaches."""

    view: str
    number: int
    frontier: dict[str, Any]
    rows_in: int = 0
    newest_input_ms: int | None = None
    rows_quarantined: int = 0  # malformed input rows set aside this epoch (not in rows_in)
    stamps: dict[str, str] = field(default_factory=dict)  # more ``lakeview.*`` summary keys (e.g. the watermark)


@dataclass(frozen=True)
class Change:
    """What an epoch does to the view's table.

    ``key is None``: ``rows`` are appended. Otherwise each row of ``rows`` replaces the stored
    row with the same key (null-safe equality), or is inserted when there is none, and the
    stored rows whose key is in ``deletes`` (a table of the key columns) are removed.
    """

    rows: pa.Table
    key: tuple[str, ...] | None = None
    deletes: pa.Table | None = None

    def __post_init__(self) -> None:
        if self.deletes is not None and self.key is None:
            raise ValueError("deletes need a key: an append-only change cannot delete rows")

    @property
    def is_empty(self) -> bool:
        return self.rows.num_rows == 0 and (self.deletes is None or self.deletes.num_rows == 0)

    def touched_keys(self) -> pa.Table:
        """Every key this change upserts or deletes (key columns only)."""
        assert self.key is not None
        if not self.key:  # the empty key: pyarrow concatenates zero-column tables to 0 rows, so count them here
            deleted = 0 if self.deletes is None else self.deletes.num_rows
            return pa.table({"_": pa.nulls(self.rows.num_rows + deleted)}).select([])
        upserted = self.rows.select(list(self.key))
        if self.deletes is None or self.deletes.num_rows == 0:
            return upserted
        return pa.concat_tables([upserted, self.deletes.select(list(self.key)).cast(upserted.schema)])


@dataclass(frozen=True)
class Replacement(Change):
    """A table's whole content: ``rows`` replace every stored row in ONE commit (an append log's fold, a small
    view's epoch, a rebuilt view's first epoch over its baseline rows). Only a writer that knows it commits it
    (the Iceberg group: one snapshot removing every data file and adding these rows; Delta: one overwrite)."""

    @property
    def is_empty(self) -> bool:
        return False  # no rows: every stored row goes


@dataclass(frozen=True)
class CommitRecord:
    """What a commit recorded, read back from the table."""

    view: str
    epoch: int
    frontier: dict[str, Any]
    snapshot_id: int | None
    committed_at_ms: int
    rows_inserted: int = 0
    rows_deleted: int = 0
    rows_in: int = 0
    lag_ms: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def properties(epoch: Epoch, inserted: int, deleted: int) -> dict[str, str]:
        now = int(time.time() * 1000)
        props = {
            VIEW: epoch.view,
            EPOCH: str(epoch.number),
            FRONTIER: json.dumps(epoch.frontier, sort_keys=True, separators=(",", ":")),
            ROWS_INSERTED: str(inserted),
            ROWS_DELETED: str(deleted),
            ROWS_IN: str(epoch.rows_in),
            COMMITTED_AT: str(now),
        }
        if epoch.newest_input_ms is not None:
            props[LAG_MS] = str(max(0, now - epoch.newest_input_ms))
        if epoch.rows_quarantined:
            props["lakeview.rows-quarantined"] = str(epoch.rows_quarantined)
        props.update(epoch.stamps)
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str], snapshot_id: int | None) -> CommitRecord | None:
        if EPOCH not in props:
            return None
        return cls(
            view=props.get(VIEW, ""),
            epoch=int(props[EPOCH]),
            frontier=json.loads(props.get(FRONTIER, "{}")),
            snapshot_id=snapshot_id,
            committed_at_ms=int(props.get(COMMITTED_AT, "0")),
            rows_inserted=int(props.get(ROWS_INSERTED, "0")),
            rows_deleted=int(props.get(ROWS_DELETED, "0")),
            rows_in=int(props.get(ROWS_IN, "0")),
            lag_ms=int(props[LAG_MS]) if LAG_MS in props else None,
            extra={k: v for k, v in props.items() if k.startswith(STAMPED)},
        )
