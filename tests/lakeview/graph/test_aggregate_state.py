"""The aggregate's state: MIN/MAX over an append-only input kept as one extreme per group, MIN/MAX over a
retracting input and DISTINCT aggregates kept as per-argument value multisets; after every epoch the view
equals DuckDB's recompute of the same SQL, for every column type the aggregates take."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from lakeview.errors import UnsupportedSQLError
from lakeview.graph import WEIGHT, compile_view, explain, step
from lakeview.graph.backfill_sql import first_batch_sql
from tests.lakeview.graph.test_backfill_sql import backfilled_then_stepped
from tests.lakeview.graph.view_grammar import TABLES, multiset, run_seed

T = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.int64()),
        ("i", pa.int64()),
        ("d", pa.decimal128(10, 2)),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
    ]
)
TYPED = (
    "SELECT k, MIN(i) AS i0, MAX(i) AS i1, MIN(d) AS d0, MAX(d) AS d1, MIN(f) AS f0, MAX(f) AS f1, MIN(s) AS s0, "
    "MAX(s) AS s1, MIN(day) AS day0, MAX(day) AS day1, MIN(ts) AS ts0, MAX(ts) AS ts1, COUNT(DISTINCT i) AS ni, "
    "COUNT(DISTINCT s) AS ns, COUNT(DISTINCT day) AS nday, AVG(f) AS af, SUM(d) AS sd, COUNT(*) AS n FROM t GROUP BY k"
)


def row(rid: int, k: int | None, v: int | None) -> dict:
    """A row of ``t`` whose every typed column orders as ``v`` does (NULL where ``v`` is None)."""
    return {
        "id": rid,
        "k": k,
        "i": v,
        "d": None if v is None else Decimal(v) / 4,
        "f": None if v is None else v / 8,
        "s": None if v is None else f"s{v:03d}",
        "day": None if v is None else dt.date(2026, 1, 1) + dt.timedelta(days=v),
        "ts": None if v is None else dt.datetime(2026, 1, 1) + dt.timedelta(seconds=v),
    }


class Maintained:
    """A view kept by the graph over input ``t``, checked against DuckDB's recompute after every epoch."""

    def __init__(self, sql: str, insert_only: bool) -> None:
        self.sql = sql
        self.graph = compile_view(sql, {"t": T}, insert_only={"t"} if insert_only else set())
        self.rows: dict[int, dict] = {}
        self.view: Counter = Counter()
        self.con = duckdb.connect()

    def epoch(self, inserts: list[dict] = (), deletes: list[int] = ()) -> None:  # type: ignore[assignment]
        changes = [{**self.rows.pop(rid), WEIGHT: -1} for rid in deletes]
        for r in inserts:
            self.rows[r["id"]] = r
            changes.append({**r, WEIGHT: 1})
        delta = pa.Table.from_pylist(changes, schema=T.append(pa.field(WEIGHT, pa.int64())))
        self.view.update(multiset(step(self.graph, {"t": delta}), weighted=True))
        self.view = Counter({k: w for k, w in self.view.items() if w != 0})
        self.con.register("t", pa.Table.from_pylist(list(self.rows.values()), schema=T))
        expected = multiset(self.con.execute(self.sql).to_arrow_table(), weighted=False)
        assert self.view == expected, f"extra {dict(self.view - expected)} missing {dict(expected - self.view)}"


def test_extremes_over_an_append_only_input_with_nulls_and_duplicates():
    view = Maintained(TYPED, insert_only=True)
    assert "[extremes]" in explain(view.graph) and "values0" in explain(view.graph)  # COUNT(DISTINCT) only
    view.epoch([row(1, 1, None), row(2, None, 5)])  # a group with only NULLs; a NULL group
    view.epoch([row(3, 1, 7), row(4, 1, 7), row(5, 2, 3)])  # duplicates
    view.epoch([row(6, 1, 2), row(7, 2, 9), row(8, None, 1)])  # a new MIN, a new MAX
    view.epoch([row(9, 1, 4), row(10, 2, None)])  # neither extreme moves
    view.epoch([])


def test_multisets_over_a_retracting_input():
    view = Maintained(TYPED, insert_only=False)
    assert "[multiset]" in explain(view.graph) and "[extremes]" not in explain(view.graph)
    view.epoch([row(1, 1, 5), row(2, 1, 2), row(3, 1, 2), row(4, 1, None), row(5, None, 8), row(6, 2, 1)])
    view.epoch(deletes=[2])  # one of two copies of the MIN: it stays
    view.epoch(deletes=[3])  # the last copy of the MIN: the next value takes over
    view.epoch([row(7, 1, 9)], deletes=[1])  # the MAX leaves and a new one arrives in one epoch
    view.epoch(deletes=[6])  # group 2 vanishes
    view.epoch([row(8, 2, 4), row(9, 2, 4)])  # and returns
    view.epoch(deletes=[7])  # group 1 left with a NULL value only: MIN/MAX NULL, COUNT DISTINCT 0
    view.epoch([row(10, 1, 3)], deletes=[4])  # an update of the NULL row


def test_a_global_aggregate_over_values_that_all_leave():
    sql = "SELECT MIN(i) AS lo, MAX(s) AS hi, COUNT(DISTINCT day) AS n, SUM(DISTINCT i) AS si FROM t"
    view = Maintained(sql, insert_only=False)
    view.epoch()
    view.epoch([row(1, 1, 5), row(2, 2, 5), row(3, 3, 1)])
    view.epoch(deletes=[3, 1])
    view.epoch(deletes=[2])
    view.epoch([row(4, 1, None)])


def test_filtered_and_shared_arguments():
    sql = (
        "SELECT k, MIN(i) FILTER (WHERE f > 0.5) AS lo, MAX(i) FILTER (WHERE f > 0.5) AS hi, "
        "COUNT(DISTINCT i) AS n, AVG(DISTINCT i) AS a, MAX(i) AS top FROM t GROUP BY k"
    )
    for insert_only in (True, False):
        view = Maintained(sql, insert_only=insert_only)
        view.epoch([row(1, 1, 2), row(2, 1, 6), row(3, 1, 9), row(4, 2, 4)])
        view.epoch([row(5, 1, 1), row(6, 2, 8)], deletes=[] if insert_only else [3])
    # MIN and MAX of one argument under one FILTER share one value table: two tables here, not four
    assert [t.name.split(".")[1] for t in view.graph.state_tables()] == ["groups", "values0", "values1"]


def test_a_group_keeps_its_distinct_values_not_its_rows():
    view = Maintained("SELECT k, MIN(i) AS lo, COUNT(DISTINCT s) AS n FROM t GROUP BY k", insert_only=False)
    view.epoch([row(n, 1, n % 3) for n in range(1, 61)])
    text = explain(view.graph)
    assert "input rows" not in text
    assert ".groups key (g_k), 1 rows" in text and ".values0 key (g_k), 3 rows" in text, text


def test_a_retraction_into_extremes_kept_for_an_append_only_input_is_refused():
    view = Maintained("SELECT k, MIN(i) AS lo FROM t GROUP BY k", insert_only=True)
    view.epoch([row(1, 1, 5)])
    with pytest.raises(UnsupportedSQLError, match="append-only"):
        view.epoch(deletes=[1])


@pytest.mark.parametrize("insert_only", [True, False])
def test_first_batch_sql_writes_the_records_and_value_tables(insert_only):
    graph = compile_view(TYPED, {"t": T}, insert_only={"t"} if insert_only else set())
    r = random.Random(3)
    history = [{**row(n, r.choice([1, 2, None]), r.choice([None, 1, 4, 4, 9])), WEIGHT: 1} for n in range(40)]
    delta = pa.Table.from_pylist(history, schema=T.append(pa.field(WEIGHT, pa.int64())))
    first = first_batch_sql(graph, {"t": "src"}, "rel_", dialect="duckdb")
    stepped = multiset(step(graph, {"t": delta}), weighted=True)
    con = duckdb.connect()
    con.register("src", delta)
    for name, sql in first.relations:
        con.execute(f"CREATE TEMP VIEW {name} AS {sql}")
    assert multiset(con.execute(first.view).to_arrow_table(), weighted=False) == stepped
    for table in graph.state_tables():
        rows = con.execute(first.state[table.name]).to_arrow_table()
        held = graph.runtime.store.tables[table.name].all()  # type: ignore[attr-defined]
        assert multiset(rows, weighted=True) == multiset(held, weighted=True), table.name


@pytest.mark.parametrize("query_seed", range(700, 720))
def test_random_views_over_append_only_inputs_equal_the_recompute(query_seed):
    failure = run_seed(query_seed, epochs=5, insert_only=frozenset(TABLES))
    assert failure is None, f"seed {failure.seed}, epoch {failure.epoch}\n{failure.query}\n{failure.diff}"


@pytest.mark.parametrize("query_seed", range(800, 806))
def test_backfilled_extremes_then_later_epochs_equal_the_recompute(query_seed):
    failure = backfilled_then_stepped(query_seed, insert_only=frozenset(TABLES))
    assert failure is None, f"seed {query_seed}: {failure}"
