"""Turn one batch's delta into the change a writer commits (no Spark, no table format here)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from lakeview.plan import AppendPlan, KeyedAggregatePlan
from writers.base import Change, SnapshotWriter


def change_for(plan: AppendPlan | KeyedAggregatePlan, delta: pa.Table, writer: SnapshotWriter) -> Change:
    """The change that moves the stored view forward by ``delta``.

    For an append view the delta rows are the change. For a keyed aggregate the delta is the
    batch's partial aggregate per group; each group's stored row is looked up and merged.
    """
    if plan.is_append or delta.num_rows == 0:
        return Change(rows=delta, key=plan.key)
    assert isinstance(plan, KeyedAggregatePlan)
    current = writer.lookup(delta.select(list(plan.keys)))
    return Change(rows=merge_groups(plan, delta, current), key=plan.keys)


def merge_groups(plan: KeyedAggregatePlan, delta: pa.Table, current: pa.Table) -> pa.Table:
    """Each delta group's new row: its stored row (if any) merged with the delta."""
    con = duckdb.connect()
    try:
        con.register("delta", delta)
        con.register("current", current.select(delta.column_names) if current.num_rows else _empty_like(delta))
        merged = con.execute(plan.merge_sql()).to_arrow_table()
    finally:
        con.close()
    return merged


def _empty_like(table: pa.Table) -> pa.Table:
    return table.schema.empty_table()
