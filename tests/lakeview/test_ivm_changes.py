"""Views over a change feed (inserts, updates, deletes), maintained epoch by epoch with the
same code the Spark pipeline runs (DuckDB stands in for Spark's per-batch SQL), equal the
full recompute after every epoch, for each SQL class."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeview.config.models import ChangeFeedConfig
from lakeview.ivm.commits import Epoch
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.oracle import compare
from lakeview.sql.plan import KeyedAggregatePlan
from lakeview.sql.planner import plan_view
from tests.lakeview.duck_batch import duck, latest_changes, spark_sql
from tests.lakeview.memory_writer import MemoryWriter

FEED = ChangeFeedConfig(operation="op", key=["id"], sequence="seq", insert=["I"], update=["U"], delete=["D"])
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("x", pa.int64()), ("op", pa.string()), ("seq", pa.int64())])
COLUMNS = SCHEMA.names

VIEWS = {
    "sums": "SELECT k, SUM(x) AS s, COUNT(*) AS n, COUNT(x) AS nx, AVG(x) AS a FROM src GROUP BY k",
    "extremes": "SELECT k, MIN(x) AS lo, MAX(x) AS hi, COUNT(DISTINCT x) AS d FROM src GROUP BY k",
    "having": "SELECT k, SUM(x) AS s FROM src WHERE x > -20 GROUP BY k HAVING COUNT(*) >= 2",
    "distinct": "SELECT DISTINCT k, x FROM src",
    "expressions": "SELECT k % 2 AS parity, SUM(x) + COUNT(*) AS t, MAX(x) - MIN(x) AS spread FROM src GROUP BY k % 2",
    "projection": "SELECT id, x * 2 AS x2, k FROM src WHERE k IS NOT NULL",
}

change = st.tuples(
    st.sampled_from(["I", "U", "D", "D", "X"]),  # X: an unknown operation (quarantined, ignored)
    st.integers(0, 7),  # id
    st.one_of(st.none(), st.integers(0, 3)),  # k
    st.one_of(st.none(), st.integers(-30, 30)),  # x
)
epochs = st.lists(st.lists(change, max_size=10), min_size=1, max_size=4)


def maintainer(sql: str) -> ViewMaintainer:
    plan = plan_view("v", sql)
    state = [MemoryWriter() for _ in range(1 + len(plan.multisets))] if isinstance(plan, KeyedAggregatePlan) else []
    return ViewMaintainer(
        plan=plan, view=MemoryWriter(), state=state, feed=FEED, mirror=MemoryWriter(), source_columns=COLUMNS
    )


def run_epoch(m: ViewMaintainer, number: int, batch: pa.Table) -> None:
    """What the pipeline does per micro-batch, with DuckDB in place of Spark."""
    latest = latest_changes(FEED, batch)
    m.apply_changes(Epoch(view="v", number=number, frontier={}), latest)


def recompute(sql: str, current: dict[int, dict]) -> pa.Table:
    table = pa.Table.from_pylist(list(current.values()), schema=SCHEMA)
    return duck(spark_sql(sql), src=table)


def apply_python(current: dict[int, dict], row: dict) -> None:
    if row["op"] in ("I", "U"):
        current[row["id"]] = row
    elif row["op"] == "D":
        current.pop(row["id"], None)


@pytest.mark.parametrize("name", list(VIEWS))
@settings(max_examples=6, deadline=None)
@given(history=epochs)
def test_maintained_view_equals_recompute_after_every_epoch(name: str, history: list[list[tuple]]) -> None:
    sql = VIEWS[name]
    m = maintainer(sql)
    current: dict[int, dict] = {}
    seq = 0
    for number, changes in enumerate(history):
        rows = []
        for op, id_, k, x in changes:
            seq += 1
            rows.append({"id": id_, "k": k, "x": x, "op": op, "seq": seq})
        for row in rows:
            apply_python(current, row)
        run_epoch(m, number, pa.Table.from_pylist(rows, schema=SCHEMA))
        view = (
            m.view.rows
            if m.view.rows is not None and m.view.rows.num_columns
            else recompute(sql, {}).schema.empty_table()
        )
        result = compare(view, recompute(sql, current))
        assert result.equal, f"epoch {number}: {result.describe()}"


def test_replayed_epoch_after_a_crash_between_commits_changes_nothing() -> None:
    """An epoch replayed after only some of its tables were committed ends equal to one clean
    application (each table skips an epoch it has; the mirror, committed last, holds the old images)."""
    sql = VIEWS["extremes"]
    batches = [
        [{"id": 1, "k": 1, "x": 5, "op": "I"}, {"id": 2, "k": 1, "x": 9, "op": "I"}],
        [{"id": 2, "k": 1, "x": 1, "op": "U"}, {"id": 1, "k": 1, "x": None, "op": "D"}],
    ]
    for crash_after in range(3):  # group state, multiset, view committed; the rest not
        m = maintainer(sql)
        current: dict[int, dict] = {}
        seq = 0
        for number, rows in enumerate(batches):
            for row in rows:
                seq += 1
                row["seq"] = seq
                apply_python(current, row)
            table = pa.Table.from_pylist(rows, schema=SCHEMA)
            if number == 1:
                tables = [*m.state, m.view]
                saved = [(t.rows, t.epoch, t.commits) for t in tables]
                mirror_before = (m.mirror.rows, m.mirror.epoch)
                run_epoch(m, number, table)
                for t, (rows_, epoch, commits) in list(zip(tables, saved))[crash_after + 1 :]:
                    t.rows, t.epoch, t.commits = rows_, epoch, commits  # these commits never happened
                m.mirror.rows, m.mirror.epoch = mirror_before  # the mirror is committed last
            run_epoch(m, number, table)
        result = compare(m.view.rows, recompute(sql, current))
        assert result.equal, f"crash after table {crash_after}: {result.describe()}"
