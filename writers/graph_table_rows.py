"""A graph view's state table or mirror past the driver's bound, looked up by key in the table itself.

:class:`~writers.graph_state.CommittedRows` holds a table's rows in the driver's memory, read whole on first
use: right for the small state eager aggregation leaves, wrong for state that is per fact row (a join's
side, a top-k's rows) over a large history. Past ``[spark] driver_keys_max`` live rows (a first batch the
executors wrote, or a restart over such tables) :class:`TableRows` takes its place: it holds nothing, each
lookup reads the keys it asks for from the table (the writer's keyed lookup: the driver's key index, or
Spark's executors past the same bound), netting the rows of an append log to one row per distinct row. A change
feed's mirror on Iceberg (:class:`ClusteredRows`) is read by its row groups' key ranges instead, in the driver:
a lookup then costs the keys it asks for, not the mirror's rows.
"""

from __future__ import annotations

import pyarrow as pa

from lakeview.graph.zset import WEIGHT, Duck
from writers.base import SnapshotWriter
from writers.graph_log import OP, StateLog
from writers.graph_state import CommittedRows, every_key


class TableRows(CommittedRows):
    """The rows of ``writer``'s table as a keyed Z-set, never held: every lookup reads the table. ``weighted``:
    the table has the weight column (a state table); else each row has weight 1 (a change feed's mirror)."""

    def __init__(
        self, writer: SnapshotWriter, key: tuple[str, ...], schema: pa.Schema, duck: Duck, weighted: bool = True
    ) -> None:
        super().__init__(lambda: self.lookup(None), key, schema, duck)
        self.writer, self.weighted = writer, weighted

    def begin(self) -> None:
        self.staged = []

    def forget(self) -> None:
        self.staged = []

    def stage(self, delta: pa.Table) -> None:
        """Nothing to hold: once committed, the table has the epoch's delta."""

    def committed(self) -> None:
        self.staged = []

    def _loaded(self):  # type: ignore[no-untyped-def]  # nothing is loaded; the table is read per lookup
        return None

    def lookup(self, keys: pa.Table | None) -> pa.Table:
        """The rows whose key equals a row of ``keys`` (NULL matches NULL), netted; every row for None or no key."""
        probe = every_key() if keys is None or not self.key else keys.select(list(self.key))
        rows = self._found(probe) if probe.num_rows else self.schema.empty_table()
        if not self.weighted and WEIGHT not in rows.column_names:
            rows = rows.append_column(WEIGHT, pa.array([1] * rows.num_rows, pa.int64()))
        rows = rows.select(self.schema.names).cast(self.schema)
        if rows.num_rows == 0:
            return rows
        data = ", ".join(f'"{n}"' for n in self.schema.names if n != WEIGHT)
        by = f"{data}, " if data else ""
        netted = self.duck.query(
            f"SELECT {by}CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM r {'GROUP BY ALL ' if data else ''}"
            f"HAVING SUM({WEIGHT}) <> 0",
            r=rows,
        )
        return netted.cast(self.schema)

    def _found(self, probe: pa.Table) -> pa.Table:
        """The table's rows matching ``probe``'s keys, as stored (not netted)."""
        return self.writer.lookup(probe)


class ClusteredRows(TableRows):
    """A change feed's mirror past the driver's bound on Iceberg, whose log files are each sorted by the key in
    small row groups (:func:`writers.graph_mirrors.clustered`): a lookup reads, in the driver, only the row
    groups whose key range can hold an asked key (:class:`~writers.iceberg.key_ranges.KeyRanges`), so it costs
    the keys asked for, not the mirror's rows; the writer's keyed lookup where the row groups cannot tell."""

    def __init__(self, writer: SnapshotWriter, key: tuple[str, ...], schema: pa.Schema, duck: Duck) -> None:
        from writers.iceberg.key_ranges import KeyRanges  # lazy: Iceberg's modules load only where used

        super().__init__(writer, key, schema, duck)
        self.ranges = KeyRanges()

    def _found(self, probe: pa.Table) -> pa.Table:
        found = None
        if probe.num_columns:  # (every row: the writer's scan)
            found = self.ranges.find(self.writer.table(), self.writer.live, probe, self.key)  # type: ignore[attr-defined]
        return self.writer.lookup(probe) if found is None else found


def mirror_rows(writer: SnapshotWriter, key: tuple[str, ...], schema: pa.Schema, duck: Duck) -> TableRows:
    """A change feed's mirror past the driver's bound, looked up by key in its table: from its row groups' key
    ranges on Iceberg (:class:`ClusteredRows`), else the writer's keyed lookup."""
    if writer.capabilities.format == "iceberg":
        return ClusteredRows(writer, key, schema, duck)
    return TableRows(writer, key, schema, duck)


class LogRows(TableRows):
    """One state of a view's state log (Iceberg, :class:`writers.graph_log.StateLog`) past the driver's bound:
    each lookup reads the state's keys from the log (its rows tagged with the state's name), never held."""

    def __init__(
        self, log: SnapshotWriter, packing: StateLog, name: str, key: tuple[str, ...], schema: pa.Schema, duck: Duck
    ) -> None:
        super().__init__(log, key, schema, duck)
        self.packing, self.name = packing, name

    def _found(self, probe: pa.Table) -> pa.Table:
        slots = self.packing.slots[self.name]
        tagged = probe.rename_columns([slots[c] for c in probe.column_names])
        tagged = tagged.append_column(OP, pa.repeat(pa.scalar(self.name, pa.string()), probe.num_rows))
        return self.packing.unpack(self.writer.lookup(tagged))[self.name]


def live_rows(writer: SnapshotWriter) -> int:
    """How many rows ``writer``'s table holds, from its metadata (no data file read; 0 without a snapshot)."""
    table = writer.table()  # type: ignore[attr-defined]
    if writer.capabilities.format == "delta":
        actions = table.get_add_actions(flatten=True)
        counts = actions.column("num_records").to_pylist() if actions.num_rows else []
        return int(sum(c or 0 for c in counts))
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    summary = snapshot.summary.additional_properties
    return int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))
