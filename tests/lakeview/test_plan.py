"""SQL analysis and the incremental merge, checked against full recompute in DuckDB."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
import sqlglot
from hypothesis import strategies as st

from lakeview.errors import UnsupportedSQLError
from lakeview.sql.plan import AggregateFunction
from lakeview.sql.planner import plan_view


def test_group_by_is_keyed_aggregate() -> None:
    plan = plan_view("v", "SELECT product_id, SUM(quantity) AS total, COUNT(*) AS n FROM orders GROUP BY product_id")
    assert plan.is_keyed_aggregate and plan.keys == ("product_id",) and plan.sources == ("orders",)
    assert [a.function for a in plan.aggregates] == [AggregateFunction.SUM, AggregateFunction.COUNT_STAR]


def test_projection_is_append() -> None:
    plan = plan_view("v", "SELECT order_id, quantity * 2 AS double_qty FROM orders WHERE quantity > 1")
    assert plan.is_append and plan.key is None


def test_batch_sql_reads_the_batch_relation() -> None:
    plan = plan_view("v", "SELECT o.product_id, SUM(o.quantity) AS t FROM orders o GROUP BY o.product_id")
    sql = plan.batch_sql({"orders": "__batch"})
    assert "FROM __batch AS o" in sql


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT a FROM s\nFULL JOIN t ON s.a = t.a", "a JOIN reads several inputs: kept as an operator graph"),
        ("SELECT a, SUM(b) FROM s GROUP BY a", "give 'SUM(b)' a column name"),
        (
            "SELECT a,\n  STDDEV(b) AS x FROM s GROUP BY a",
            "aggregate STDDEV is not supported (line 2); nearest supported form: SUM, COUNT",
        ),
        ("SELECT a, b, SUM(c) AS x FROM s GROUP BY a", "'b' is neither aggregated nor in GROUP BY (line 1)"),
        ("SELECT SUM(c) AS x FROM s GROUP BY a", "GROUP BY 'a' must also be selected"),
        (
            "SELECT SUM(c) AS x FROM s\nHAVING SUM(c) > 1",
            "HAVING on a global aggregate (no GROUP BY) is not supported (line 2)",
        ),
        ("SELECT a, COUNT(DISTINCT b, c) AS x FROM s GROUP BY a", "only COUNT(DISTINCT one_expression)"),
        ("SELECT * FROM s\nORDER BY a", "ORDER BY is not supported yet (line 2)"),
        ("SELECT a, ROW_NUMBER() OVER (ORDER BY a) AS r FROM s", "window functions"),
        ("SELECT a FROM s WHERE a IN (SELECT b FROM t)", "subqueries"),
        ("SELECT a, rand() AS r FROM s", "non-deterministic"),
        ("SELECT a FROM s UNION SELECT a FROM t", "UNION reads several inputs: kept as an operator graph"),
        (
            "SELECT a, COUNT(*) AS n FROM s GROUP BY a, session_window(ts, '5 minutes')",
            "session windows (session_window) are not supported",
        ),
        ("DELETE FROM s", "expected a SELECT statement"),
        ("SELEC a FROM s", "cannot parse SQL"),
        ("SELECT a FROM db.s", "without a qualifier"),
        ("SELECT 1 AS one", "must read FROM a source"),
    ],
)
def test_unsupported_sql_names_the_construct(sql: str, message: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_view("v", sql)


VIEW_SQL = "SELECT k, SUM(x) AS s, COUNT(*) AS n, COUNT(x) AS nx, MIN(x) AS lo, MAX(x) AS hi FROM src GROUP BY k"
rows = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.integers(-50, 50))), max_size=12
)


def _run(sql: str, table: pa.Table) -> pa.Table:
    con = duckdb.connect()
    con.register("src", table)
    return con.execute(sqlglot.transpile(sql, read="spark", write="duckdb")[0]).to_arrow_table()


def _table(batch: list[tuple]) -> pa.Table:
    return pa.table(
        {"k": [r[0] for r in batch], "x": [r[1] for r in batch]},
        schema=pa.schema([("k", pa.int64()), ("x", pa.int64())]),
    )


def _as_set(table: pa.Table) -> set[tuple]:
    return {tuple(r.values()) for r in table.to_pylist()}


def test_supported_classes_plan_their_state() -> None:
    plan = plan_view(
        "v",
        "SELECT k, AVG(x) AS a, MIN(x) AS lo, COUNT(DISTINCT y) AS d, SUM(x) / COUNT(*) AS r FROM s GROUP BY k HAVING MAX(x) > 1",
    )
    assert plan.is_keyed_aggregate and not plan.self_mergeable
    assert plan.multisets == ("x", "y")  # MIN and MAX share the multiset of x
    distinct = plan_view("v", "SELECT DISTINCT a, b FROM s WHERE b > 0")
    assert distinct.is_keyed_aggregate and distinct.keys == ("a", "b") and distinct.self_mergeable


def test_view_in_duckdb_dialect_is_transpiled() -> None:
    plan = plan_view("v", "SELECT k, SUM(x) AS s FROM s WHERE x::INTEGER > 1 GROUP BY k", dialect="duckdb")
    assert "CAST(x AS INT)" in plan.sql and plan.keys == ("k",)
