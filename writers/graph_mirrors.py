"""The change feeds' mirrors of a graph view (the current row per key of each feed), kept as Z-set state.

A mirror is a state table like an operator's (:class:`~writers.graph_state.TableStateStore`): keyed by the
feed's key, each row with its weight ``__lv_w``, served from the memory copy this process committed. So on
Iceberg a mirror is an append log too: an epoch appends its netted change (the old images at −1, the new at
+1) as one data file, with no stored row looked up and no delete file, and the log is folded back to one
row per key (one snapshot replacing its files) once it outgrows the mirror. Before, a mirror was a table
keyed one row per key whose commit found every replaced row's position: past ``[spark] driver_keys_max``
rows that was a Spark job over every data file each epoch. Delta keeps the keyed table (with the weight
column, always 1) and reads it as of a version when an epoch is replayed after a crash.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from lakeview.graph.join import shared_sides as shared_sides  # where the pipeline asks for it
from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT
from lakeview.ivm.commits import Change
from writers.base import SnapshotWriter
from writers.graph_state import TableStateStore

# An Iceberg mirror's table properties: small Parquet row groups (pyiceberg's writers, the driver's and the
# executors', honour the limit), so that past the driver's bound a key costs at most one row group of its files
CLUSTERED = {"write.parquet.row-group-limit": "1024"}


def mirror_schema(source: pa.Schema) -> pa.Schema:
    """A mirror table's columns: the source's, then the weight."""
    return source.append(pa.field(WEIGHT, pa.int64()))


def clustered(change: Change, key: tuple[str, ...]) -> Change:
    """``change`` with its rows sorted by ``key``: each file of a mirror's log is then sorted by the key and, in
    the mirror table's small row groups, looked up by their key ranges past the driver's bound
    (:class:`writers.graph_table_rows.ClusteredRows`)."""
    if not key or change.rows.num_rows < 2:
        return change
    return dataclasses.replace(change, rows=change.rows.sort_by([(k, "ascending") for k in key]))


class SourceMirrors:
    """Every change feed's mirror of one view: ``writers``, ``keys`` and source ``schemas`` by source name.
    Per epoch: :meth:`begin`, :meth:`old` (the stored images of the batch's keys), :meth:`apply` (the
    feed's Z-set), :meth:`changes` (each mirror's change, to commit with the epoch's other tables), and
    :meth:`committed` once the commit succeeded."""

    def __init__(
        self,
        writers: dict[str, SnapshotWriter],
        keys: dict[str, tuple[str, ...]],
        schemas: dict[str, pa.Schema],
        append_log: bool,
    ) -> None:
        self.writers = writers
        self.tables = {s: StateTable(s, keys[s], f"the current row per key of {s}") for s in writers}
        self.schemas = {s: mirror_schema(schemas[s]) for s in writers}
        self.store = TableStateStore(dict(keys), writers, self.schemas, append_log=append_log)

    def begin(self, as_of: dict[str, int]) -> None:
        """Start an epoch; ``as_of``: mirrors that hold it already (Delta, a replay), by the version before it."""
        self.store.begin(as_of)

    def old(self, source: str, keys: pa.Table) -> pa.Table:
        """The mirror's current rows (source columns) for ``keys``."""
        rows = self.store.lookup(self.tables[source], keys)
        return rows.drop_columns([WEIGHT]) if rows is not None else self.schemas[source].empty_table()

    def apply(self, source: str, zset: pa.Table) -> None:
        """The feed's Z-set of the epoch (source columns and the weight): old images −1, new +1."""
        self.store.apply(self.tables[source], zset)

    def changes(self) -> dict[str, Change]:
        """Each mirror's change for the epoch, by its table's name (mirrors holding the epoch: none); its rows
        sorted by the key (:func:`clustered`), an appended file's and a fold's alike."""
        return {
            self.writers[s].table_name: clustered(change, self.store.keys[s])
            for s, change in self.store.changes().items()
        }

    def committed(self) -> None:
        """The epoch's changes are committed: the memory copies take them."""
        self.store.committed()
