"""An operator graph's state (:mod:`lakeview.graph.state`) kept in Lakeview-owned tables.

Each :class:`~lakeview.graph.state.StateTable` is one table (a :class:`~writers.base.SnapshotWriter`
made by the view's state-writer factory, property ``lakeview.state-of``) holding the state's Z-set: rows
with their weight in the column ``__lv_w``, keyed by the state's key. An apply is held until the end of the
epoch, when :meth:`TableStateStore.changes` turns each table's held deltas into ONE change: keyed, each
distinct row once with its net weight (for every key the epoch touched, the key's stored rows are
replaced by the rows whose weight is still non-zero), or with ``append_log`` (Iceberg) the epoch's netted
delta appended as it is — one data file, no stored row looked up, no delete file — the table's rows then
summing to the state, folded back to one row per distinct row once the log outgrows it. The pipeline then
commits those changes with the view's in one catalog transaction (Iceberg) or table by table (Delta), see
:mod:`spark_jobs.graph_pipeline`.

A lookup made after an apply in the same epoch sees that apply (the held deltas are added), so the
store behaves like :class:`~lakeview.graph.state.MemoryStateStore` within an epoch.

Lookups are served from memory (:class:`CommittedRows`): the tables are the durable copy, and the process
that committed them knows what they hold. A table is read whole once, on first use (a start or restart);
an epoch's changes join the memory copy only when the caller says its commit succeeded
(:meth:`TableStateStore.committed`); an epoch that computed its changes but was never declared committed
(a failed or unknown commit, a retry) makes the next epoch read the tables again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.errors import WriterError
from lakeview.graph import Graph, step
from lakeview.graph.runs import KeyedRuns
from lakeview.graph.state import MemoryStateStore, StateTable
from lakeview.graph.state import state_table_name as state_table_name  # where the pipeline asks for it
from lakeview.graph.zset import WEIGHT, Duck
from lakeview.ivm.commits import Change
from lakeview.ivm.commits import Replacement as Replacement  # where the state's writers ask for it
from lakeview.sql.duck import cursor
from writers.base import SnapshotWriter
from writers.graph_log import StateLog

# An append-log state table is folded when it holds more than FOLD_FACTOR x the rows it held when last read
# or folded + FOLD_SLACK (per state it holds, for the one log of every state): a fold costs the state's rows, so
# it is paid at most once per that many appended rows.
FOLD_FACTOR = 2
FOLD_SLACK = 50_000
# The one log of every state (Iceberg) is also folded whenever its states hold no more rows than the epoch appends
# (see TableStateStore._log_change).
FOLD_WHEN_SMALLER = True


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def warm_up(graph: Graph) -> tuple[pa.Schema, dict[str, pa.Schema]]:
    """The view's output schema and every state table's arrow schema (weight column included): one epoch
    of empty inputs through ``graph`` with its in-memory store, before it is pointed at tables (which
    also primes each operator's empty output)."""
    out = step(graph, {})
    memory = graph.runtime.store
    assert isinstance(memory, MemoryStateStore), "warm_up runs before the graph is pointed at its tables"
    schemas = {t.name: memory.schema(t) for t in graph.state_tables()}
    return out.drop_columns([WEIGHT]).schema, schemas


def commit_key(table: StateTable, schema: pa.Schema) -> tuple[str, ...]:
    """The key a state table is committed (and created) with: the operator's key, or for state without
    one (a global aggregate, ORDER BY … LIMIT, a join without equality) the whole row (a table keyed by
    nothing would be rewritten whole every epoch)."""
    return table.key or tuple(n for n in schema.names if n != WEIGHT)


def every_key() -> pa.Table:
    """A key table of no columns and one row: with the empty key, it matches every stored row."""
    return pa.table({"_": [1]}).drop_columns(["_"])


class CommittedRows:
    """One table's rows as this process last committed them, held in memory as a keyed Z-set (each distinct
    row with its weight ``__lv_w``; :class:`~lakeview.graph.runs.KeyedRuns`), so a lookup costs the keys it
    asks for and reads no file. ``read`` gives the table's rows (with their weight) and is called on first
    use; :meth:`stage` holds an epoch's delta until :meth:`committed` says the epoch's commit succeeded, and
    :meth:`begin` forgets the memory copy when a staged delta was never declared committed (the outcome is
    unknown: the table is read again)."""

    def __init__(self, read: Callable[[], pa.Table], key: tuple[str, ...], schema: pa.Schema, duck: Duck) -> None:
        self.read, self.key, self.schema, self.duck = read, key, schema, duck
        self.runs: KeyedRuns | None = None
        self.staged: list[pa.Table] = []
        self.whole: KeyedRuns | None = None  # staged: the table's whole Z-set after the epoch (stage_whole)

    def begin(self) -> None:
        """Start an epoch: a delta staged by an epoch that was not declared committed voids the memory copy."""
        if self.staged or self.whole is not None:
            self.forget()

    def forget(self) -> None:
        """Read the table again on next use (e.g. it was committed by a path that bypassed :meth:`stage`)."""
        self.runs, self.staged, self.whole = None, [], None

    def lookup(self, keys: pa.Table | None) -> pa.Table:
        """The rows whose key equals a row of ``keys`` (NULL matches NULL); every row for None or no key."""
        runs = self._loaded()
        if keys is None or not self.key:
            return runs.all()
        return runs.lookup(keys)

    def stage(self, delta: pa.Table) -> None:
        """Hold the epoch's delta (the table's Z-set change) until :meth:`committed`."""
        if delta.num_rows:
            self.staged.append(delta)

    def stage_whole(self, delta: pa.Table) -> pa.Table:
        """The table's whole Z-set after ``delta``, netted (what a fold writes); held as the memory copy's next
        state until :meth:`committed` (then taken as it is, not merged again)."""
        after = self._loaded().copy()
        after.apply(delta)
        rows = after.all()
        self.staged, self.whole = [], after
        return rows

    def stage_netted(self, delta: pa.Table, whole: pa.Table) -> None:
        """Hold ``delta`` and the table's whole Z-set after it, netted by the caller (``whole``), until :meth:`committed`
        (which then takes ``whole`` as it is: hashed once, not merged with the memory copy)."""
        try:
            after = KeyedRuns.of_netted(self.key, self.schema, self.duck, whole)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):  # other types: merged as any delta is
            self.stage(delta)
            return
        self.staged, self.whole = [], after

    def committed(self) -> None:
        """The epoch's commit succeeded: its staged deltas join the memory copy."""
        if self.whole is not None:
            self.runs = self.whole
        if self.runs is not None:
            for delta in self.staged:
                self.runs.apply(delta)
        self.staged, self.whole = [], None

    def held(self) -> int | None:
        """Rows held in memory (a row in several runs not yet merged counts in each: at least the table's distinct
        rows); None when the rows are not held (a subclass that reads its table per lookup)."""
        runs = self._loaded()
        return None if runs is None else runs.held()

    def _loaded(self) -> KeyedRuns:
        if self.runs is None:
            runs = KeyedRuns(self.key, self.schema, self.duck)
            runs.apply(_conform(self.read(), self.schema))
            runs.all()  # netted once (a log's rows sum to the state), not on every lookup that finds them
            self.runs = runs
        return self.runs


@dataclass
class TableStateStore:
    """The state tables of one graph view: their key, ``writers`` and ``schemas`` (weight column
    included) by state table name; with ``log``, every state in that one append-log table (Iceberg,
    :mod:`writers.graph_log`; ``writers`` then names it for every state)."""

    keys: dict[str, tuple[str, ...]]
    writers: dict[str, SnapshotWriter]
    schemas: dict[str, pa.Schema]
    held: dict[str, list[pa.Table]] = field(default_factory=dict)
    # Delta, an epoch replayed after a crash between its commits: the tables that already hold it are
    # read as they stood before it (their version), and their change is not computed (their commit skips it)
    as_of: dict[str, int] = field(default_factory=dict)
    # Each epoch's netted delta appended as it is (one data file, nothing looked up, no delete file): a table
    # then holds rows whose weights sum to the state, folded into one row per distinct row once the log
    # outgrows the state (:meth:`_due`). Set for Iceberg (its commits are one transaction per epoch); the
    # as-of lookups of Delta's replay read tables keyed one row per distinct row.
    append_log: bool = False
    logged: dict[str, int] = field(default_factory=dict)  # rows each table holds (its log's length)
    folded: dict[str, int] = field(default_factory=dict)  # its rows when last read or folded (the fold's yardstick)
    staged_log: dict[str, tuple[int, int]] = field(default_factory=dict)  # this epoch's (logged, folded)
    # Every state in ONE append log (Iceberg graph views): each epoch appends every state's delta to this table
    # (one data file for all), folded as one; its length is kept under its table name in the fields above.
    log: SnapshotWriter | None = None
    # States held by another store's table (a join side that is a change feed's mirror, see
    # writers.graph_mirrors.shared_sides): by state name, that store, its table, the state's columns -> that
    # table's, and the state's schema. Not kept here: a lookup reads that table as committed before the epoch
    # (its store has the same Z-set applied already, held), an apply does nothing.
    borrowed: dict[str, tuple[TableStateStore, StateTable, dict[str, str], pa.Schema]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.con = cursor()
        duck = Duck()
        self.memory = {
            name: CommittedRows(lambda n=name: self._read(n), self.keys[name], self.schemas[name], duck)
            for name in self.writers
        }
        self.packing = StateLog(self.schemas)
        self._unread: dict[str, pa.Table] = {}  # the log as last read, split by state, not yet taken

    def _read(self, name: str) -> pa.Table:
        """A state table's rows, whole (a log's rows included: the memory copy nets them)."""
        if self.log is not None:
            if name not in self._unread:  # one read of the log serves every state of the epoch
                rows = self.log.lookup(every_key())
                self.logged[self.log.table_name] = self.folded[self.log.table_name] = rows.num_rows
                self._unread = self.packing.unpack(rows)
            return self._unread.pop(name)
        rows = self.writers[name].lookup(every_key())
        self.logged[name] = self.folded[name] = rows.num_rows
        return rows

    def begin(self, as_of: dict[str, int] | None = None) -> None:
        """Start an epoch: forget what an epoch that did not commit held (a retried epoch starts from the
        tables); ``as_of``: state tables to read at a version (see the field)."""
        self.held, self.staged_log, self._unread = {}, {}, {}
        self.as_of = dict(as_of or {})
        for name, rows in self.memory.items():
            rows.begin()
            if name in self.as_of:  # it holds this epoch already: read from the table after it
                rows.forget()

    def committed(self) -> None:
        """The epoch's changes (:meth:`changes`) are committed: the memory copy takes them."""
        for rows in self.memory.values():
            rows.committed()
        for name, (logged, folded) in self.staged_log.items():
            self.logged[name], self.folded[name] = logged, folded
        self.staged_log = {}

    # --- the StateStore protocol --------------------------------------------------------------
    def lookup(self, table: StateTable, keys: pa.Table | None) -> pa.Table | None:
        if table.name in self.borrowed:
            return self._borrowed(table, keys)
        schema = self.schemas[table.name]
        if keys is None or not table.key:
            probe = every_key() if keys is None or keys.num_rows else keys.select([])
            key: tuple[str, ...] = ()
        else:
            key = table.key
            probe = keys.select(list(key)).cast(pa.schema([schema.field(k) for k in key]))
        stored = self._stored(table, probe) if probe.num_rows else schema.empty_table()
        pending = self._held(table)
        if pending is None:
            return stored
        if key:
            pending = self._query(f"SELECT p.* FROM p SEMI JOIN k ON {_match(key, 'p', 'k')}", p=pending, k=probe)
        elif not probe.num_rows:
            return stored
        return self._consolidate([stored, pending], schema)

    def apply(self, table: StateTable, delta: pa.Table) -> None:
        if delta.num_rows and table.name not in self.borrowed:
            schema = self.schemas[table.name]
            self.held.setdefault(table.name, []).append(_conform(delta, schema))

    # --- the epoch's changes -----------------------------------------------------------------
    def table_changes(self) -> dict[str, Change]:
        """The epoch's change of each table, by the table's name (see :meth:`changes`; with ``log``, the log's)."""
        if self.log is None:
            return {self.writers[name].table_name: change for name, change in self.changes().items()}
        deltas = {}
        for name, held in self.held.items():  # a log's rows need not be netted: the memory copies net them
            if name in self.as_of:  # (Delta's replay; a log is Iceberg's) it holds this epoch already
                continue
            delta = pa.concat_tables(held)
            if delta.num_rows:
                deltas[name] = delta
        self.held = {}
        return self._log_change(self.log, deltas)

    def changes(self) -> dict[str, Change]:
        """Each state table's change for the epoch (tables nothing was applied to: none); clears what
        was held. Each change is also staged for the memory copy (see :meth:`committed`). Not with ``log``
        (:meth:`table_changes`)."""
        if self.log is not None:
            raise WriterError("every state of this store is in one log: ask table_changes()")
        changes = {}
        for name, deltas in self.held.items():
            if name in self.as_of:  # the table holds this epoch already
                continue
            schema = self.schemas[name]
            key = self._key(name)
            delta = self._consolidate(deltas, schema)
            if delta.num_rows == 0:
                continue
            rows_in_memory = self.memory[name]
            if self.append_log:
                changes[name] = self._logged_change(name, delta)
                continue
            if key:
                touched = self._query(f"SELECT DISTINCT {', '.join(map(_q, key))} FROM d", d=delta)
                stored = rows_in_memory.lookup(touched.cast(pa.schema([schema.field(k) for k in key])))
            else:
                touched = every_key()
                stored = rows_in_memory.lookup(None)
            stored = stored.select(schema.names).cast(schema)
            rows = self._consolidate([stored, delta], schema)
            rows_in_memory.stage(delta)
            gone = (
                self._query(f"SELECT t.* FROM t ANTI JOIN r ON {_match(key, 't', 'r')}", t=touched, r=rows)
                if key
                else None
            )
            if key:
                changes[name] = Change(rows=rows, key=key, deletes=gone if gone is not None and gone.num_rows else None)
            else:  # no operator key: each distinct row is its own key, only rows whose weight changed are written
                changes[name] = self._row_change(stored, rows, schema)
        self.held = {}
        return changes

    def _logged_change(self, name: str, delta: pa.Table) -> Change:
        """An append-log table's change: the netted delta appended, or, once the log is due to be folded, the
        whole table replaced by the state it nets to (the memory copy plus the delta). Stages the delta."""
        memory = self.memory[name]
        memory._loaded()  # reads the table on first use (and its log's length)
        logged, folded = self.logged.get(name, 0) + delta.num_rows, self.folded.get(name, 0)
        empty = not self.logged.get(name)  # the netted delta is the whole state (a first batch): nothing to fold
        if empty or logged <= FOLD_FACTOR * folded + FOLD_SLACK:
            memory.stage(delta)
            self.staged_log[name] = (logged, logged if empty else folded)
            return Change(rows=delta)
        schema = self.schemas[name]
        rows = self._consolidate([memory.lookup(None).select(schema.names).cast(schema), delta], schema)
        memory.stage(delta)
        self.staged_log[name] = (rows.num_rows, rows.num_rows)
        return Replacement(rows=rows)

    def _log_change(self, log: SnapshotWriter, deltas: dict[str, pa.Table]) -> dict[str, Change]:
        """The one log's change: every state's delta appended, or the whole log replaced by the states it nets to
        (the memory copies plus the deltas) once it is due to be folded, or when the states hold no more rows than
        the epoch would append (an epoch that rewrites most of its state, e.g. an aggregate whose every group
        changes, appends each changed row twice, old and new: writing the states whole is then the smaller file,
        and the log stays one file). Stages the deltas."""
        if not deltas:
            return {}
        for rows in self.memory.values():
            rows._loaded()  # reads the log on first use (and its length)
        name = log.table_name
        appended = sum(d.num_rows for d in deltas.values())
        logged, folded = self.logged.get(name, 0) + appended, self.folded.get(name, 0)
        held = [rows.held() for rows in self.memory.values()]
        # (an empty log, a first batch: its delta is the state, appended as it is; a state not held: never)
        cheaper = FOLD_WHEN_SMALLER and None not in held and 0 < sum(held) <= appended  # type: ignore[arg-type]
        if not cheaper and logged <= FOLD_FACTOR * folded + FOLD_SLACK * len(self.memory):
            change = Change(rows=self.packing.pack(deltas))
            self.staged_log[name] = (logged, folded)
            for state, delta in deltas.items():
                self.memory[state].stage(delta)
            return {name: change}
        states = {}
        for state, rows in self.memory.items():
            schema = self.schemas[state]
            if state not in deltas:
                netted = rows.lookup(None)
            elif rows.held() is None:  # not held (read from the table per lookup)
                netted = self._consolidate([rows.lookup(None).select(schema.names).cast(schema), deltas[state]], schema)
                rows.stage(deltas[state])
            else:
                netted = rows.stage_whole(deltas[state])
            states[state] = netted.select(schema.names).cast(schema)
        change = Replacement(rows=self.packing.pack(states))
        self.staged_log[name] = (change.rows.num_rows, change.rows.num_rows)
        return {name: change}

    def _row_change(self, stored: pa.Table, rows: pa.Table, schema: pa.Schema) -> Change:
        data = tuple(n for n in schema.names if n != WEIGHT)
        upserts = self._query(
            f"SELECT r.* FROM r ANTI JOIN s ON {_match((*data, WEIGHT), 'r', 's')}", r=rows, s=stored
        ).cast(schema)
        gone = self._query(
            f"SELECT {', '.join(map(_q, data))} FROM s ANTI JOIN r ON {_match(data, 's', 'r')}", r=rows, s=stored
        )
        return Change(rows=upserts, key=data, deletes=gone if gone.num_rows else None)

    def rows(self, table: StateTable) -> int:
        """How many distinct rows ``table`` holds (for explain)."""
        if table.name in self.borrowed:
            store, other, _, _ = self.borrowed[table.name]
            return store.rows(other)
        self._writer(table)
        return self.memory[table.name].lookup(None).num_rows

    # --- helpers --------------------------------------------------------------------------------
    def _borrowed(self, table: StateTable, keys: pa.Table | None) -> pa.Table:
        """A borrowed state's rows under ``keys``: its table's rows as committed before the epoch, renamed."""
        store, other, columns, schema = self.borrowed[table.name]
        theirs = store.schemas[other.name]
        if keys is None:
            probe = every_key()
        else:
            probe = keys.select(list(table.key)).rename_columns([columns[k] for k in table.key])
            probe = probe.cast(pa.schema([theirs.field(columns[k]) for k in table.key]))
        if not probe.num_rows:
            return schema.empty_table()
        found = store._stored(other, probe)
        mine = {theirs_name: name for name, theirs_name in columns.items()}
        return found.rename_columns([mine.get(n, n) for n in found.column_names]).select(schema.names).cast(schema)

    def _stored(self, table: StateTable, probe: pa.Table) -> pa.Table:
        """The committed rows of ``table`` under the keys of ``probe`` (no columns: every row)."""
        writer, schema = self._writer(table), self.schemas[table.name]
        if table.name in self.as_of:
            found = lookup_as_of(writer, probe, self.as_of[table.name])
        else:
            found = self.memory[table.name].lookup(probe if probe.num_columns else None)
        return found.select(schema.names).cast(schema)

    def _writer(self, table: StateTable) -> SnapshotWriter:
        try:
            return self.writers[table.name]
        except KeyError:
            raise WriterError(
                f"state table {table.name} has no table (not created when the view was prepared)"
            ) from None

    def _key(self, name: str) -> tuple[str, ...]:
        return self.keys[name]

    def _held(self, table: StateTable) -> pa.Table | None:
        deltas = self.held.get(table.name)
        return pa.concat_tables(deltas) if deltas else None

    def _consolidate(self, parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
        columns = [n for n in schema.names if n != WEIGHT]
        tables = {f"t{i}": _conform(p, schema) for i, p in enumerate(parts)}
        union = " UNION ALL ".join(f"SELECT * FROM t{i}" for i in range(len(parts)))
        cols = ", ".join(map(_q, columns))
        group = f"{cols}, " if columns else ""
        by = "GROUP BY ALL " if columns else ""
        sql = f"SELECT {group}CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM ({union}) {by}HAVING SUM({WEIGHT}) <> 0"
        return self._query(sql, **tables).cast(schema)

    def _query(self, sql: str, **tables: pa.Table) -> pa.Table:
        for name, table in tables.items():
            self.con.register(name, table)
        try:
            return self.con.execute(sql).to_arrow_table()
        finally:
            for name in tables:
                self.con.unregister(name)


def lookup_as_of(writer: SnapshotWriter, keys: pa.Table, version: int | None) -> pa.Table:
    """``writer.lookup(keys)``, in the table as it stood at ``version`` (None: now; a Delta table's)."""
    if version is None:
        return writer.lookup(keys)
    return writer.lookup_at(keys, version)  # type: ignore[attr-defined]  # DeltaWriter (time travel)


def _match(key: tuple[str, ...], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{_q(k)} IS NOT DISTINCT FROM {right}.{_q(k)}" for k in key) or "TRUE"


def _conform(delta: pa.Table, schema: pa.Schema) -> pa.Table:
    """``delta`` with the state table's columns and types (a weight of any integer type)."""
    return delta.select(schema.names).cast(schema)
