"""A one-source view's SQL at load time: the operator graph keeps projections, filters, DISTINCT and GROUP BY
aggregates (the view's table keyed by its GROUP BY columns), and refuses what it cannot maintain with a
ConfigError naming the view's key, the construct and why."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError, UnsupportedSQLError
from lakeview.project import graph_output_schema, is_graph_view, parse_project, table_key

ORDERS = {
    "format": "json",
    "path": "landing/orders",
    "schema": "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP, note STRING",
}


def load(sql: str, dialect: str = "spark"):
    """The project with one view ``v`` of ``sql`` over ``orders`` (and ``returns``, of the same schema)."""
    sources = {"orders": ORDERS, "returns": {**ORDERS, "path": "landing/returns"}}
    return parse_project({"sources": sources, "views": {"v": {"sql": sql, "dialect": dialect}}}, file="lakeview.toml")


@pytest.mark.parametrize(
    ("sql", "dialect", "key", "columns"),
    [
        (
            "SELECT product_id, SUM(quantity) AS total, COUNT(*) AS n FROM orders GROUP BY product_id",
            "spark",
            ("product_id",),
            ["product_id", "total", "n"],
        ),
        (
            "SELECT order_id, quantity * 2 AS double_qty FROM orders WHERE quantity > 1",
            "spark",
            None,
            ["order_id", "double_qty"],
        ),
        (
            "SELECT o.product_id, SUM(o.quantity) AS t FROM orders o GROUP BY o.product_id",
            "spark",
            ("product_id",),
            ["product_id", "t"],
        ),
        (
            "SELECT product_id, AVG(quantity) AS a, MIN(quantity) AS lo, COUNT(DISTINCT order_id) AS d, "
            "SUM(quantity) / COUNT(*) AS r FROM orders GROUP BY product_id HAVING MAX(quantity) > 1",
            "spark",
            ("product_id",),
            ["product_id", "a", "lo", "d", "r"],
        ),
        (
            "SELECT DISTINCT product_id, quantity FROM orders WHERE quantity > 0",
            "spark",
            None,
            ["product_id", "quantity"],
        ),
        (
            "SELECT product_id, SUM(quantity) AS s FROM orders WHERE quantity::INTEGER > 1 GROUP BY product_id",
            "duckdb",
            ("product_id",),
            ["product_id", "s"],
        ),
        ("SELECT COUNT(*) AS n, SUM(quantity) AS total FROM orders WHERE quantity > 0", "spark", (), ["n", "total"]),
    ],
    ids=["group_by", "projection", "aliased_source", "avg_min_distinct_having", "distinct", "duckdb", "global"],
)
def test_one_source_views_load_as_graph_views_keyed_by_their_group_by(
    sql: str, dialect: str, key: tuple[str, ...] | None, columns: list[str]
) -> None:
    config = load(sql, dialect)
    assert is_graph_view(config, "v")
    assert table_key(config, "v") == key  # None: a multiset keyed by the whole row; (): one row
    assert graph_output_schema(config, "v").names == columns


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT product_id,\n  STDDEV(quantity) AS x FROM orders GROUP BY product_id",
            "STDDEV(orders.quantity): aggregate not maintained (SUM, COUNT",
        ),
        (
            "SELECT product_id, quantity, SUM(order_id) AS x FROM orders GROUP BY product_id",
            "column orders.quantity: neither grouped nor aggregated",
        ),
        (
            "SELECT order_id, ROW_NUMBER() OVER (ORDER BY order_id) AS r FROM orders",
            "a window function is maintained only when filtered to rank <= k",
        ),
        ("SELECT order_id, rand() AS r FROM orders", "RANDOM(): a non-deterministic function"),
        (
            "SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id, session_window(ts, '5 minutes')",
            "session windows (session_window) are not supported (line 1); nearest supported form: a tumbling window",
        ),
        ("SELECT 1 AS one", "SELECT without FROM: a view reads at least one input"),
        ("SELECT order_id AS __lv_id FROM orders", "view column '__lv_id': names starting with '__lv_' are reserved"),
        ("SELECT order_id FROM shipments", "'shipments'"),
        (
            "SELECT product_id, SUM(quantity) FROM orders GROUP BY product_id",
            "view column 2 (SUM(quantity)) has no name; nearest supported form: SUM(quantity) AS a_name",
        ),
        (
            "SELECT order_id FROM\n  sales.orders",
            "table sales.orders (line 2): a view reads its sources and other views by the name the project declares "
            "them under, without a catalog or database",
        ),
        (
            "SELECT o.order_id FROM lake.sales.orders AS o JOIN returns r ON o.order_id = r.order_id",
            "table lake.sales.orders (line 1): a view reads its sources",
        ),
        ("SELECT order_id FROM default.returns", "nearest supported form: FROM returns"),
        (
            "SELECT product_id,\n  COUNT(DISTINCT order_id, quantity) AS pairs FROM orders GROUP BY product_id",
            "COUNT(DISTINCT order_id, quantity) (line 2): an aggregate's DISTINCT over several columns is not "
            "maintained (the graph's state keeps one scalar value per distinct argument); nearest supported form: "
            "COUNT(*) over SELECT DISTINCT order_id, quantity, and the GROUP BY columns, FROM ... "
            "WHERE order_id IS NOT NULL AND quantity IS NOT NULL, in a subquery",
        ),
        (
            "SELECT COUNT(DISTINCT (order_id, note)) AS pairs FROM orders",
            "COUNT(DISTINCT (order_id, note)) (line 1): an aggregate's DISTINCT over several columns",
        ),
    ],
    ids=[
        "stddev",
        "not_grouped",
        "window_function",
        "nondeterministic",
        "session_window",
        "no_from",
        "reserved",
        "unknown",
        "unnamed",
        "qualified",
        "catalog_qualified",
        "qualified_fix",
        "count_distinct_pair",
        "count_distinct_row",
    ],
)
def test_sql_the_graph_cannot_maintain_is_a_config_error_naming_the_construct(sql: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(sql)
    assert "views.v.sql" in str(raised.value) and message in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("sql", "message"),
    [("DELETE FROM orders", "expected a SELECT statement"), ("SELEC order_id FROM orders", "cannot parse SQL")],
)
def test_sql_that_is_not_one_query_is_refused(sql: str, message: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=message):
        load(sql)


@pytest.mark.parametrize(
    ("sql", "key", "columns"),
    [
        ("SELECT orders.order_id FROM orders\nFULL JOIN returns r ON orders.order_id = r.order_id", None, ["order_id"]),
        ("SELECT order_id FROM orders UNION SELECT order_id FROM returns", None, ["order_id"]),
        ("SELECT order_id FROM orders WHERE order_id IN (SELECT order_id FROM returns)", None, ["order_id"]),
        ("SELECT order_id, note FROM orders\nORDER BY order_id", None, ["order_id", "note"]),
        ("SELECT SUM(quantity) AS x FROM orders GROUP BY product_id", None, ["x"]),
        ("SELECT SUM(quantity) AS x FROM orders\nHAVING SUM(quantity) > 1", (), ["x"]),
    ],
    ids=["join", "union", "in_subquery", "order_by", "group_key_not_selected", "global_having"],
)
def test_forms_the_per_shape_planner_refused_load_as_graph_views(
    sql: str, key: tuple[str, ...] | None, columns: list[str]
) -> None:
    config = load(sql)
    assert is_graph_view(config, "v")
    assert table_key(config, "v") == key
    assert graph_output_schema(config, "v").names == columns
