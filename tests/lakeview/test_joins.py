"""Joins and unions load as operator graphs: every two-input join (inner, LEFT, RIGHT, FULL) and every
UNION [ALL] (alone, or under an aggregate) is a graph view; a column the SQL reads that its source lacks is
refused naming it; ``explain`` prints the join operator and the table holding its state; a view over a join
view loads (an aggregate keyed by its GROUP BY, a projection as a graph view). That every such view equals
the recompute after every epoch is checked by the graph's property tests (tests/lakeview/graph/test_properties.py
over DuckDB, tests/spark_jobs/test_graph_properties.py through Spark and the catalog) and tests/spark_jobs/test_joins.py."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError
from lakeview.project import explain_view, is_graph_view, parse_project, table_key
from lakeview.sql.dag import downstreams_of, view_key

SALES_BY_CATEGORY = """SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders AS o
JOIN products AS p ON o.product_id = p.product_id
WHERE o.amount > 0
GROUP BY p.category"""
FEED = {"operation": "op", "key": ["product_id"], "sequence": "seq"}
SOURCES = {
    "orders": {"format": "json", "path": "o", "schema": "order_id BIGINT, product_id BIGINT, amount DOUBLE"},
    "products": {
        "format": "json",
        "path": "p",
        "schema": "product_id BIGINT, category STRING, op STRING, seq BIGINT",
        "changes": FEED,
    },
}


def load(tmp_path, views: dict[str, str], **namespace: str):
    data = {"sources": SOURCES, "views": {n: {"sql": sql, **namespace} for n, sql in views.items()}}
    return parse_project(data, file="lakeview.toml", root=tmp_path)


@pytest.mark.parametrize(
    "sql",
    [
        SALES_BY_CATEGORY,
        "SELECT o.order_id, p.category FROM orders o LEFT JOIN products p ON o.product_id = p.product_id",
        "SELECT o.order_id, p.category FROM orders o RIGHT JOIN products p ON o.product_id = p.product_id",
        "SELECT o.order_id, p.category FROM orders o FULL JOIN products p ON o.product_id = p.product_id",
        "SELECT order_id AS id, amount AS x FROM orders UNION ALL SELECT product_id, 1 FROM products",
        "SELECT product_id FROM orders UNION SELECT product_id FROM products",
        "SELECT k, SUM(x) AS s, COUNT(*) AS n FROM (SELECT product_id AS k, amount AS x FROM orders UNION ALL "
        "SELECT product_id AS k, 10 AS x FROM products WHERE category IS NOT NULL) AS u GROUP BY k",
    ],
)
def test_every_join_and_union_is_an_operator_graph_view(tmp_path, sql: str) -> None:
    project = load(tmp_path, {"v": sql})
    assert is_graph_view(project, "v")


def test_config_names_a_join_column_missing_from_its_source(tmp_path) -> None:
    sql = "SELECT p.categry, COUNT(*) AS n FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.categry"
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {"v": sql})
    message = str(info.value)
    assert message.startswith("lakeview.toml: views.v.sql: ") and "categry" in message, message


def test_explain_shows_the_join_operator_and_its_state_tables(tmp_path) -> None:
    project = load(tmp_path, {"by_category": SALES_BY_CATEGORY}, namespace="shop")
    text = explain_view(project, "by_category")
    assert text.startswith("view by_category (operator graph) -> shop.by_category"), text
    assert "join" in text.lower() and "state tables:" in text, text
    assert "shop.__lv_state_by_category_g_log" in text, "Iceberg: every operator's state in one log table"
    # a later bulk load: the orders' eager aggregate gets its partial sums from Spark, one row per group
    assert "a later batch of more than 500000 input rows: the driver collects aggregate" in text, text
    assert "one row per group (partial sums by Spark)" in text, text


def test_a_view_over_a_join_view_loads(tmp_path) -> None:
    project = load(
        tmp_path,
        {
            "enriched": "SELECT o.order_id, p.category FROM orders o JOIN products p ON o.product_id = p.product_id",
            "per_category": "SELECT category, COUNT(*) AS n FROM enriched GROUP BY category",
            "named": "SELECT order_id, category FROM enriched WHERE order_id > 1",
        },
    )
    assert downstreams_of(project, "enriched") == ["per_category", "named"]
    assert view_key(project, "enriched") == ("order_id", "category"), "a graph view: keyed by the whole row"
    assert table_key(project, "per_category") == ("category",)
    assert is_graph_view(project, "named"), "a projection over a join view (rows may repeat): a graph view too"


def test_an_event_time_window_over_a_join_loads_as_a_graph_view_and_a_bad_one_is_refused_naming_it(tmp_path) -> None:
    """A window over a join is kept by the operator graph (tests/lakeview/graph/test_windows.py); a window form
    Spark would not group by is refused at load naming it; a window over a view holding the join still loads."""
    sources = {
        "o": {"format": "json", "path": "o", "schema": "id BIGINT, pid BIGINT, ts TIMESTAMP, q INT"},
        "p": {"format": "json", "path": "p", "schema": "pid BIGINT, cat STRING"},
    }
    window = (
        "SELECT window(ts, '10 minutes').start AS ws, cat, SUM(q) AS s FROM {} GROUP BY window(ts, '10 minutes'), cat"
    )
    joined = (
        "SELECT window(o.ts, '10 minutes').start AS ws, p.cat, SUM(o.q) AS s FROM o JOIN p ON o.pid = p.pid "
        "GROUP BY window(o.ts, '10 minutes'), p.cat"
    )
    project = parse_project({"sources": sources, "views": {"w": {"sql": joined}}}, file="lakeview.toml", root=tmp_path)
    assert is_graph_view(project, "w")
    struct = joined.replace(".start AS ws", " AS w")
    with pytest.raises(ConfigError) as info:
        parse_project({"sources": sources, "views": {"w": {"sql": struct}}}, file="lakeview.toml", root=tmp_path)
    assert "views.w.sql: select the window's bounds, not the window struct" in str(info.value), str(info.value)
    views = {"j": {"sql": "SELECT o.ts, o.q, p.cat FROM o JOIN p ON o.pid = p.pid"}, "w": {"sql": window.format("j")}}
    project = parse_project({"sources": sources, "views": views}, file="lakeview.toml", root=tmp_path)
    assert is_graph_view(project, "j") and is_graph_view(project, "w")  # a window over a view: a graph too
