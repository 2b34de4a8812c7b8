"""Turn one epoch's delta into the changes the writers commit (no Spark, no table format here).

Changes are Z-sets: each row carries a weight (+1 insert, −1 delete; an update is both).
A keyed aggregate keeps its state in Lakeview-owned tables next to the view
(``<namespace>.__lv_state_<view>_<n>``, written with the same writer):

- table 0, the **group state**, keyed by the view's key: the hidden row count
  (``__lv_rows``; a group at 0 leaves the view), and per aggregate its weighted sum and its
  non-null count (SUM, AVG = sum / count, COUNT);
- table *i+1*, a **value multiset** per MIN/MAX/COUNT(DISTINCT) argument, keyed by (view key,
  value) with the value's multiplicity: MIN/MAX/COUNT(DISTINCT) of a group after a delete are
  read from it, never by rescanning the history.

Only the rows of the groups an epoch touches are looked up (by key) and rewritten. Each state
table applies an epoch at most once (its snapshots carry the epoch, like the view's); the
view's rows for the touched groups are a pure function of the state *after* the epoch, so a
crash between any two commits is repaired by replaying the epoch: tables that have it skip,
the others apply it, and the view is finalized from the state read back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lakeview.errors import AggregateOverflowError
from lakeview.ivm.commits import Change, CommitAll, CommitRecord, Epoch, Pending, commit_each
from lakeview.sql.duck import arrow_sql as _sql
from lakeview.sql.plan import COUNT, ROWS, VALUE, WEIGHT, AppendPlan, KeyedAggregatePlan, Slot

if TYPE_CHECKING:
    from writers.base import SnapshotWriter


def change_for(plan: AppendPlan | KeyedAggregatePlan, delta: pa.Table, writer: SnapshotWriter) -> Change:
    """The change that moves a view whose own rows are its whole state forward by ``delta``
    (append views over append-only input; self-mergeable keyed aggregates)."""
    if plan.is_append or delta.num_rows == 0:
        return Change(rows=delta, key=plan.key)
    assert isinstance(plan, KeyedAggregatePlan)
    current = writer.lookup(delta.select(list(plan.keys)))
    return Change(rows=merge_groups(plan, delta, current), key=plan.keys)


def merge_groups(plan: KeyedAggregatePlan, delta: pa.Table, current: pa.Table) -> pa.Table:
    """Each delta group's new row: its stored row (if any) merged with the delta."""
    current = current.select(delta.column_names) if current.num_rows else delta.schema.empty_table()
    try:
        return _sql(plan.merge_sql(), delta=delta, current=current)
    except OVERFLOWS as exc:
        for agg in plan.aggregates:
            one = plan.model_copy(update={"aggregates": (agg,)})
            try:
                _sql(one.merge_sql(), delta=delta, current=current)
            except OVERFLOWS as found:
                raise AggregateOverflowError(
                    plan.view, agg.column, agg.function.value.upper(), str(found).splitlines()[0]
                ) from exc
        raise


def state_table_names(view: str, plan: KeyedAggregatePlan) -> list[str]:
    """Names of the view's state tables: group state, then one per value multiset."""
    return [f"__lv_state_{view}_{i}" for i in range(1 + len(plan.multisets))]


@dataclass
class ViewStores:
    """The tables one keyed-aggregate view is kept in: the view and its state tables, and how an
    epoch's changes of them are committed (:func:`~lakeview.ivm.commits.commit_each` by default)."""

    view: SnapshotWriter
    groups: SnapshotWriter
    multisets: list[SnapshotWriter] = field(default_factory=list)
    commit: CommitAll = commit_each
    fresh: bool = False  # no table holds the epoch (they moved together through the last one): no per-table check


def apply_epoch(
    plan: KeyedAggregatePlan,
    epoch: Epoch,
    group_delta: pa.Table,
    multiset_deltas: list[pa.Table],
    stores: ViewStores,
    closed: Callable[[SnapshotWriter], pa.Table] | None = None,
    also: Pending = (),
) -> CommitRecord | None:
    """Fold one epoch's state deltas into the state tables and commit the view's change.

    ``group_delta`` is :meth:`KeyedAggregatePlan.group_delta_sql`'s result, ``multiset_deltas``
    one :meth:`~KeyedAggregatePlan.multiset_delta_sql` result per multiset. Idempotent per epoch.
    ``closed``: a state table's rows of windows closed by the watermark, deleted in the same
    commit (:mod:`lakeview.sql.watermark`). ``also``: more tables' changes of the epoch (a change
    feed's mirror), committed after the view's (with it, when ``stores.commit`` is one transaction).
    """
    if group_delta.num_rows == 0:
        pending: Pending = []
        if closed is not None:  # nothing consumed (e.g. every row late): still drop closed windows' state
            for writer, key in zip(
                [stores.groups, *stores.multisets], [plan.keys] + [(*plan.keys, VALUE)] * len(stores.multisets)
            ):
                gone = closed(writer)
                if gone.num_rows:
                    pending.append(
                        (writer, Change(rows=gone.schema.empty_table(), key=key, deletes=gone.select(list(key))))
                    )
        if pending or also:
            stores.commit(epoch, [*pending, *also])
        return None
    keys = plan.keys
    # a global aggregate (no key) has one group: the key-less table row
    touched = _distinct(group_delta.select(list(keys))) if keys else group_delta.select([]).slice(0, 1)
    groups, group_change = _advance(
        stores.groups,
        epoch,
        touched,
        lambda old: merge_group_state(plan, group_delta, old),
        keys,
        ROWS,
        closed,
        stores.fresh,
    )
    advanced = [
        _advance(
            writer,
            epoch,
            touched,
            lambda old, d=delta, i=i: (merge_extremes if plan.extremes_only(i) else merge_multiset)(plan, d, old),
            (*keys, VALUE),
            COUNT,
            closed,
            stores.fresh,
        )
        for i, (writer, delta) in enumerate(zip(stores.multisets, multiset_deltas))
    ]
    # The view's rows before any table commits: an overflow (AggregateOverflowError) fails the
    # epoch with every table as it was, so a resume after widening the column starts clean.
    rows = finalize(plan, groups, [values for values, _ in advanced])
    changes = zip([stores.groups, *stores.multisets], [group_change, *(change for _, change in advanced)])
    state: Pending = [(writer, change) for writer, change in changes if change is not None]
    records = stores.commit(epoch, [*state, (stores.view, view_change(plan, touched, rows)), *also])
    return records[len(state)]


def _advance(
    writer: SnapshotWriter,
    epoch: Epoch,
    touched: pa.Table,
    merge: Callable[[pa.Table], pa.Table],
    key: tuple[str, ...],
    count: str,
    closed: Callable[[SnapshotWriter], pa.Table] | None = None,
    fresh: bool = False,
) -> tuple[pa.Table, Change | None]:
    """One state table's delta (unless the table already has the epoch; ``fresh``: known not to): the
    state rows of the touched groups after the epoch, and the change to commit (None: nothing to
    commit) once nothing can fail."""
    old = writer.lookup(touched)
    if not fresh and (last := writer.last_commit()) is not None and last.epoch >= epoch.number:
        return old, None  # applied before a crash: ``old`` is already the state after the epoch
    merged = merge(old)
    if not key:  # a global aggregate's one state row is replaced whole (kept at count 0)
        return merged, Change(rows=merged, key=())
    change = state_change(merged, key, count)
    gone = closed(writer) if closed is not None else None
    if gone is not None and gone.num_rows:
        # no touched group is in a closed window (its rows would be late), so this cannot clash
        drop = gone.select(list(key)).cast(pa.schema([merged.schema.field(k) for k in key]))
        deletes = drop if change.deletes is None else pa.concat_tables([change.deletes.cast(drop.schema), drop])
        change = Change(rows=change.rows, key=key, deletes=deletes)
    if key == tuple(touched.column_names) or not old.num_rows:
        # every stored row looked up is merged (a group table: each touched group has its merged row)
        return change.rows, change
    match = " AND ".join(f'o."{k}" IS NOT DISTINCT FROM m."{k}"' for k in key)
    cols = ", ".join(f'"{c}"' for c in merged.column_names)
    kept = _sql(
        f"SELECT {cols} FROM o WHERE {count} <> 0 AND NOT EXISTS (SELECT 1 FROM m WHERE {match})",
        o=_or_empty(old, merged),
        m=merged,
    )
    return (pa.concat_tables([change.rows, kept.cast(merged.schema)]) if kept.num_rows else change.rows), change


def merge_group_state(plan: KeyedAggregatePlan, delta: pa.Table, old: pa.Table) -> pa.Table:
    """Each touched group's new state: stored counts and sums plus the delta's.
    Raises :class:`AggregateOverflowError` when a sum leaves its type."""
    _check_batch_sums(plan, delta)
    items = [f'd."{k}"' for k in plan.keys]
    sums: dict[str, str] = {}  # sum column -> its SQL
    for column in plan.state_columns():
        if column in plan.sum_columns():
            count = column[:-2] + "_c"
            total = f"COALESCE(o.{count}, 0) + COALESCE(d.{count}, 0)"
            # A sum with no values left is NULL (not a float residue of retractions).
            sums[column] = (
                f"CASE WHEN {total} = 0 THEN NULL ELSE COALESCE(o.{column}, 0) + COALESCE(d.{column}, 0) END AS {column}"
            )
            items.append(sums[column])
        else:
            items.append(f"COALESCE(o.{column}, 0) + COALESCE(d.{column}, 0) AS {column}")
    tables = {"d": delta, "o": _or_empty(old, delta)}
    schema = _state_schema(delta, old)
    try:
        return _sql(f"SELECT {', '.join(items)} FROM d LEFT JOIN o ON {plan.key_match('d', 'o')}", **tables).cast(
            schema
        )
    except OVERFLOWS as exc:
        for slot in plan.sum_slots():  # which sum: each one alone, in its stored type
            one = f"SELECT {sums[slot.name + '_s']} FROM d LEFT JOIN o ON {plan.key_match('d', 'o')}"
            try:
                _sql(one, **tables).cast(pa.schema([schema.field(slot.name + "_s")]))
            except OVERFLOWS as found:
                raise overflow_error(plan, slot, found) from exc
        raise


OVERFLOWS = (duckdb.OutOfRangeException, duckdb.ConversionException, pa.ArrowInvalid)


def overflow_error(plan: KeyedAggregatePlan, slot: Slot, exc: Exception) -> AggregateOverflowError:
    """The error naming the view, the output column(s) and the aggregate of ``slot``, whose sum ``exc`` says left its type."""
    columns = [name for name, sql in plan.outputs if f'"{slot.name}"' in sql] or [slot.name]
    aggregate = f"{slot.function.value.upper()}({slot.argument})"
    return AggregateOverflowError.of(plan.view, columns, aggregate, exc)


def _check_batch_sums(plan: KeyedAggregatePlan, delta: pa.Table) -> None:
    """Spark's SUM of a decimal is NULL when the batch's sum overflows (no error without ANSI
    mode): a NULL sum over a non-zero count of values is that overflow, never a result."""
    for slot in plan.sum_slots():
        s, c = f"{slot.name}_s", f"{slot.name}_c"
        if (
            s in delta.column_names
            and pc.any(pc.and_(pc.is_null(delta.column(s)), pc.not_equal(delta.column(c), 0))).as_py()
        ):
            raise overflow_error(plan, slot, ValueError("its sum over the epoch's rows is out of range"))


def merge_multiset(plan: KeyedAggregatePlan, delta: pa.Table, old: pa.Table) -> pa.Table:
    """New multiplicity of each (group, value) in the delta."""
    key = (*plan.keys, VALUE)
    items = [f'd."{k}"' for k in key] + [f"COALESCE(o.{COUNT}, 0) + d.{COUNT} AS {COUNT}"]
    sql = f"SELECT {', '.join(items)} FROM d LEFT JOIN o ON {plan.key_match('d', 'o', key)}"
    return _sql(sql, d=delta, o=_or_empty(old, delta)).cast(_state_schema(delta, old))


def merge_extremes(plan: KeyedAggregatePlan, delta: pa.Table, old: pa.Table) -> pa.Table:
    """A multiset that keeps only each group's lowest and highest value (append-only input, read by MIN/MAX
    only: :meth:`KeyedAggregatePlan.extremes_only`): the touched groups' new extremes that differ from the stored
    rows, and the stored rows no longer extremes at multiplicity 0 (so they are deleted). Values of the
    delta that are no extreme are never stored."""
    key = (*plan.keys, VALUE)
    merged = merge_multiset(plan, delta, old)
    stored = _or_empty(old, merged)
    keys = ", ".join(f'"{k}"' for k in plan.keys)
    part = f"PARTITION BY {keys}" if keys else ""
    cols = ", ".join(f'"{c}"' for c in merged.column_names)
    after = (
        f"SELECT {cols} FROM m UNION ALL SELECT {cols} FROM o AS o "
        f"WHERE NOT EXISTS (SELECT 1 FROM m WHERE {plan.key_match('o', 'm', key)})"
    )
    extremes = (
        f"SELECT * FROM (SELECT *, MIN({VALUE}) OVER ({part}) AS lo, MAX({VALUE}) OVER ({part}) AS hi "
        f"FROM ({after}) WHERE {COUNT} > 0) WHERE {VALUE} = lo OR {VALUE} = hi"
    )
    sql = (
        f"WITH x AS ({extremes}) "
        f"SELECT {cols} FROM x WHERE NOT EXISTS (SELECT 1 FROM o WHERE {plan.key_match('o', 'x', key)} "
        f"AND o.{COUNT} = x.{COUNT}) "
        f"UNION ALL SELECT {', '.join(f'o.{chr(34)}{k}{chr(34)}' for k in key)}, 0 AS {COUNT} FROM o AS o "
        f"WHERE NOT EXISTS (SELECT 1 FROM x WHERE {plan.key_match('o', 'x', key)})"
    )
    return _sql(sql, m=merged, o=stored).select(merged.column_names).cast(merged.schema)


def state_change(merged: pa.Table, key: tuple[str, ...], count: str) -> Change:
    """Upsert state rows with a non-zero count; delete the ones that reached zero."""
    zero = pc.equal(merged.column(count), 0)  # a count is never NULL (merged with COALESCE)
    live = merged.filter(pc.invert(zero))
    gone = merged.filter(zero).select(list(key))
    return Change(rows=live, key=key, deletes=gone if gone.num_rows else None)


def finalize(plan: KeyedAggregatePlan, groups: pa.Table, multisets: list[pa.Table]) -> pa.Table:
    """The view rows of the given groups' state (groups at 0 rows or failing HAVING: none).
    Raises :class:`AggregateOverflowError` when a sum does not fit the recompute's type."""
    names = tuple(f"m{i}" for i in range(len(multisets)))
    try:
        return _sql(plan.finalize_sql("g", names), g=groups, **dict(zip(names, multisets)))
    except OVERFLOWS as exc:
        for slot in plan.sum_slots():
            one = plan.model_copy(update={"outputs": ((slot.name, f'"{slot.name}"'),), "having": None})
            try:
                _sql(one.finalize_sql("g", names), g=groups, **dict(zip(names, multisets)))
            except OVERFLOWS as found:
                raise overflow_error(plan, slot, found) from exc
        raise


def view_change(plan: KeyedAggregatePlan, touched: pa.Table, rows: pa.Table) -> Change:
    """Upsert the touched groups' rows; delete the touched groups that have none any more."""
    if not plan.keys:  # a global aggregate: its one row replaces the table's
        return Change(rows=rows, key=())
    gone = _without(touched, rows, plan.keys)
    return Change(rows=rows, key=plan.keys, deletes=gone if gone.num_rows else None)


def keyed_append_change(plan: AppendPlan, key: tuple[str, ...], weighted: pa.Table) -> Change:
    """An append view over a change feed, keyed by the feed's key: per key, the row with a
    positive net weight is upserted; keys left with none are deleted."""
    columns = [c for c in weighted.column_names if c != WEIGHT]
    cols = ", ".join(f'"{c}"' for c in columns)
    net = f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM z GROUP BY ALL"
    rows = _sql(f"SELECT {cols} FROM ({net}) WHERE {WEIGHT} > 0", z=weighted)
    match = " AND ".join(f'u."{k}" IS NOT DISTINCT FROM z."{k}"' for k in key)
    keys = ", ".join(f'z."{k}"' for k in key)
    # Only a key whose old row is retracted (net weight < 0) without a new one is deleted;
    # an update to an identical row nets to 0 and changes nothing.
    gone = _sql(
        f"SELECT DISTINCT {keys} FROM ({net}) AS z WHERE {WEIGHT} < 0 AND NOT EXISTS (SELECT 1 FROM u WHERE {match})",
        z=weighted,
        u=rows,
    )
    return Change(rows=rows, key=key, deletes=gone if gone.num_rows else None)


def _without(keys: pa.Table, rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """The ``key`` columns of ``keys``' rows whose key no row of ``rows`` has (NULLs equal)."""
    one = key[0] if len(key) == 1 else None
    if one is not None and keys.schema.field(one).type == rows.schema.field(one).type and _plain(keys.field(one).type):
        # one integer or string column: Arrow's membership test, no DuckDB round trip
        member = pc.is_in(keys.column(one), value_set=rows.column(one), skip_nulls=False)
        return keys.select([one]).filter(pc.invert(member))
    names = ", ".join(f't."{k}"' for k in key)
    match = " AND ".join(f't."{k}" IS NOT DISTINCT FROM r."{k}"' for k in key)
    return _sql(f"SELECT {names} FROM t WHERE NOT EXISTS (SELECT 1 FROM r WHERE {match})", t=keys, r=rows)


def _plain(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)


def _distinct(table: pa.Table) -> pa.Table:
    # one integer or string column already distinct (a group delta is grouped by it): no DuckDB round trip
    one = table.num_columns == 1 and _plain(table.schema.field(0).type)
    if one and pc.count_distinct(table.column(0), mode="all").as_py() == table.num_rows:
        return table
    return _sql("SELECT DISTINCT * FROM t", t=table).cast(table.schema)


def _or_empty(old: pa.Table, like: pa.Table) -> pa.Table:
    return old.select(like.column_names) if old.num_rows else like.schema.empty_table()


def _state_schema(delta: pa.Table, old: pa.Table) -> pa.Schema:
    """The state table's schema when known (the stored rows), else the delta's."""
    schema = old.schema if set(delta.column_names) <= set(old.column_names) and old.num_columns else delta.schema
    return pa.schema([schema.field(n) for n in delta.column_names])


def summed(zset: pa.Table) -> pa.Table:
    """A Z-set (columns plus ``__lv_w``) with identical rows summed (NULLs equal) and rows
    whose weights cancel dropped; same columns and types."""
    cols = ", ".join(f'"{n}"' for n in zset.column_names if n != WEIGHT)
    sql = f"SELECT {cols}, CAST(SUM({WEIGHT}) AS INTEGER) AS {WEIGHT} FROM z GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
    return _sql(sql, z=zset).select(zset.column_names).cast(zset.schema)
