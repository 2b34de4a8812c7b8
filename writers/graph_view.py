"""A graph view's own table, changed per epoch by its unique key, or as a multiset keyed by the whole row.

Most graph views people keep fresh are small (an aggregate: one row per group) while their inputs are large.
For such a view, patching its table costs more than its rows: the stored copies of each changed row are
looked up in the table, then found again by position to be deleted (a position-delete file, the live files'
manifests read back). :class:`ViewRows` keeps the view's rows in memory instead (each distinct row with its
copies, :class:`~writers.graph_state.CommittedRows`) and, while the view holds at most ``REPLACE_ROWS`` rows,
commits an epoch as a :class:`~writers.graph_state.Replacement`: one data file of the view's rows after the
epoch replacing every live file, nothing read. A view past that size is changed as before
(:func:`multiset_change`: its copies looked up in the table) and not held in memory.
Iceberg only (its group stages a replacement); Delta's views are changed by key, but for the first epoch below.

A rebuilt view's first epoch (its table holds the baseline rows an older Lakeview left, kept for readers:
:meth:`writers.base.SnapshotWriter.at_baseline`, :mod:`spark_jobs.migrate`) is a
:class:`~writers.graph_state.Replacement` in both formats: its rows replace the baseline rows in one commit, so
readers go from the old rows to the new. A new view's first epoch is changed as any other.

A view whose rows have a unique key (:func:`lakeview.graph.output_types.output_key`: an aggregate's GROUP BY
columns, a change feed's key) is changed by that key instead of the whole row, as the one-source stack changed
it (:func:`keyed_change`: each touched key's new row replaces its stored row, nothing looked up first), so its
table keeps the stack's key and the key index serves it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.errors import WriterError
from lakeview.graph.zset import WEIGHT, Duck, cols_sql, q
from lakeview.ivm.commits import Change
from lakeview.sql.duck import arrow_sql
from writers.base import SnapshotWriter
from writers.graph_state import CommittedRows, Replacement, every_key

REPLACE_ROWS = 20_000  # a view of at most this many rows is written whole each epoch (one small data file)
COPIES = "__lv_copies"  # a multiset view's copies of a row after the epoch (internal: the reserved prefix)


class ViewRows:
    """The view's table ``writer`` (columns ``key``, its rows' schema ``schema``) and its change per epoch."""

    def __init__(
        self,
        writer: SnapshotWriter,
        key: tuple[str, ...],
        schema: pa.Schema,
        held: bool,
        unique: tuple[str, ...] | None = None,
        rows_max: int = REPLACE_ROWS,
        replaces: bool = False,
    ) -> None:
        """``held``: whether the view is small enough to be held in memory (see :func:`small`); ``unique``: the
        rows' unique key (None: a multiset, keyed by the whole row ``key``); ``rows_max``: the most rows held
        (``REPLACE_ROWS``, or ``[spark] driver_keys_max`` when lower: past it nothing is held by the driver);
        ``replaces``: the table holds a rebuild's baseline rows (which readers keep reading until then): the first
        epoch's rows replace them, in one commit."""
        self.writer, self.key, self.unique, self.duck, self.rows_max = writer, key, unique, Duck(), rows_max
        self.replaces = replaces
        self.weighted = pa.schema([*schema, pa.field(WEIGHT, pa.int64())])
        self.memory: CommittedRows | None = CommittedRows(self._read, key, self.weighted, self.duck) if held else None

    def _read(self) -> pa.Table:
        if self.replaces:  # none of the rows the table holds are the view's (a rebuild's baseline rows)
            return self.weighted.empty_table()
        rows = self.writer.lookup(every_key())
        return rows.append_column(WEIGHT, pa.array([1] * rows.num_rows, pa.int64()))

    def begin(self) -> None:
        """Start an epoch (a change staged by an epoch that was not committed voids the memory copy)."""
        if self.memory is not None:
            self.memory.begin()

    def change(self, weighted: pa.Table) -> Change:
        """The table's change for the view's delta ``weighted`` (its columns and ``__lv_w``)."""
        if self.memory is None and self.replaces:  # the first epoch over baseline rows: its rows are the view's
            net = _net(weighted, self.key)
            return Replacement(rows=self._copies(net.filter(pc.greater(net.column(WEIGHT), 0))))
        if self.memory is None:
            return self._by_key(weighted)
        cols = cols_sql(list(self.key))
        net = self.duck.consolidate(f"SELECT {cols}, {WEIGHT} FROM w", list(self.key), w=weighted)
        if net.num_rows == 0:
            return Change(rows=weighted.select(list(self.key)).slice(0, 0), key=self.key)
        held = self.memory.lookup(None)
        after = self.duck.consolidate(
            f"SELECT {cols}, {WEIGHT} FROM h UNION ALL SELECT {cols}, {WEIGHT} FROM n", list(self.key), h=held, n=net
        )
        live = after.filter(pc.greater(after.column(WEIGHT), 0))
        copies = pc.sum(live.column(WEIGHT)).as_py() or 0
        if copies > self.rows_max:  # grown past memory's share: changed by key from now on
            self.memory = None
            return self.change(weighted)
        self.memory.stage_netted(net, after)  # after: the memory copy once committed (netted here already)
        return Replacement(rows=self._copies(live))

    def _copies(self, live: pa.Table) -> pa.Table:
        """The rows of ``live`` (the view's columns and a positive ``__lv_w``), each repeated its weight times."""
        rows = live.select(list(self.key))
        if (pc.sum(live.column(WEIGHT)).as_py() or 0) != rows.num_rows:  # a row held more than once: its copies
            weights = live.column(WEIGHT).to_pylist()
            rows = rows.take(pa.array([i for i, n in enumerate(weights) for _ in range(n)], pa.int64()))
        return rows

    def _by_key(self, weighted: pa.Table) -> Change:
        if self.unique is None:
            return multiset_change(self.writer, weighted, self.key)
        return keyed_change(weighted, self.key, self.unique)

    def committed(self) -> None:
        """The epoch's change is committed: the memory copy takes it."""
        self.replaces = False
        if self.memory is not None:
            self.memory.committed()


def small(writer: SnapshotWriter, rows_max: int = REPLACE_ROWS) -> bool:
    """Whether an Iceberg view's table holds at most ``rows_max`` rows (its snapshot's totals; none: empty)."""
    snapshot = writer.table().current_snapshot()  # type: ignore[attr-defined]
    if snapshot is None or snapshot.summary is None:
        return True
    totals = snapshot.summary.additional_properties
    rows = int(totals.get("total-records", 0)) - int(totals.get("total-position-deletes", 0))
    return rows <= rows_max


def multiset_change(view: SnapshotWriter, weighted: pa.Table, key: tuple[str, ...]) -> Change:
    """A view kept as a multiset keyed by the whole row: per distinct row touched, its stored copies are
    replaced by (stored + net weight) copies; an epoch that only adds copies appends them (no lookup, so a
    nested column, which no table format looks up by value, may be passed through)."""
    cols = ", ".join(f'"{c}"' for c in key)
    net = _net(weighted, key)
    if net.num_rows == 0:
        return Change(rows=weighted.select(list(key)).slice(0, 0), key=key)
    if pc.min(net.column(WEIGHT)).as_py() > 0:  # only new copies: appended, no stored row looked up by its key
        return Change(rows=arrow_sql(f"SELECT {cols} FROM n, range(CAST(n.{WEIGHT} AS BIGINT))", n=net))
    stored = view.lookup(net.select(list(key)))
    stored = stored.select(list(key)) if stored.num_rows else net.select(list(key)).slice(0, 0)
    match = " AND ".join(f'n."{k}" IS NOT DISTINCT FROM s."{k}"' for k in key)
    keys = ", ".join(f'n."{k}"' for k in key)
    counted = arrow_sql(
        f"SELECT {keys}, n.{WEIGHT} + (SELECT COUNT(*) FROM s WHERE {match}) AS {COPIES} FROM n", n=net, s=stored
    )  # each touched row's copies after the epoch, counted once
    rows = arrow_sql(f"SELECT {cols} FROM t, range(CAST(t.{COPIES} AS BIGINT)) WHERE t.{COPIES} > 0", t=counted)
    gone = counted.filter(pc.less_equal(counted.column(COPIES), 0)).select(list(key))
    return Change(rows=rows, key=key, deletes=gone if gone.num_rows else None)


def keyed_change(weighted: pa.Table, columns: tuple[str, ...], key: tuple[str, ...]) -> Change:
    """A view whose rows are unique by ``key``: the delta's new rows (net weight +1) replace their keys' stored
    rows, and a key whose old row left with no new one is deleted; the delta says both, nothing is looked up.
    Raises WriterError when the delta holds two rows of one key (the key is not unique)."""
    net = _net(weighted, columns)
    rows = net.filter(pc.greater(net.column(WEIGHT), 0))
    keys = rows.select(list(key))
    distinct = keys.group_by(list(key)).aggregate([]).num_rows if key else min(rows.num_rows, 1)
    if (pc.max(rows.column(WEIGHT)).as_py() or 0) > 1 or distinct < rows.num_rows:
        raise WriterError(f"a view keyed by ({', '.join(key)}) has more than one row of one key in an epoch's change")
    rows = rows.select(list(columns))
    if not key:  # one row (a global aggregate): deleted only when the change leaves none
        gone = every_key() if rows.num_rows == 0 and net.num_rows else None
        return Change(rows=rows, key=key, deletes=gone)
    match = " AND ".join(f'o."{k}" IS NOT DISTINCT FROM n."{k}"' for k in key)
    gone = arrow_sql(
        f"SELECT DISTINCT {', '.join(f'o.{q(k)}' for k in key)} FROM o "
        f"WHERE o.{WEIGHT} < 0 AND NOT EXISTS (SELECT 1 FROM n WHERE {match})",
        o=net,
        n=keys,
    )
    return Change(rows=rows, key=key, deletes=gone if gone.num_rows else None)


def _net(weighted: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """The delta netted by ``columns``: each distinct row once with its summed weight, rows netting to 0 left out."""
    cols = ", ".join(f'"{c}"' for c in columns)
    return arrow_sql(
        f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM w GROUP BY ALL HAVING SUM({WEIGHT}) <> 0", w=weighted
    )
