"""Load time: a view the per-shape planner refuses is accepted when the operator graph compiles it over
its sources' schemas, refused with the graph's construct and reason otherwise; ``lakeview explain``
prints the graph (no Spark, no catalog)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakeview.cli.main import app
from lakeview.errors import ConfigError
from lakeview.project import is_graph_view, load_project, parse_project
from lakeview.sql.planner import plan_for

SOURCES = """
[sources.orders]
format = "json"
path = "landing/orders"
schema = "id BIGINT, pid BIGINT, cid BIGINT, qty INT"

[sources.products]
format = "json"
path = "landing/products"
schema = "id BIGINT, category STRING, price DOUBLE, op STRING, seq BIGINT"
changes = { operation = "op", key = ["id"], sequence = "seq", insert = ["c"], update = ["u"], delete = ["d"] }

[sources.customers]
format = "json"
path = "landing/customers"
schema = "id BIGINT, rid BIGINT"

[sources.regions]
format = "json"
path = "landing/regions"
schema = "id BIGINT, region STRING"
"""
STAR = (
    "SELECT r.region, p.category, COUNT(*) n, SUM(o.qty*p.price) revenue FROM orders o JOIN products p ON o.pid=p.id "
    "JOIN customers c ON o.cid=c.id JOIN regions r ON c.rid=r.id GROUP BY r.region, p.category"
)


def project(views: dict[str, str], tmp_path: Path | None = None):
    text = SOURCES + "".join(f'\n[views.{name}]\nsql = "{sql}"\n' for name, sql in views.items())
    if tmp_path is None:
        import tomllib

        return parse_project(tomllib.loads(text))
    (tmp_path / "lakeview.toml").write_text(text)
    return load_project(tmp_path)


@pytest.mark.parametrize(
    "sql",
    [
        STAR,
        "SELECT c.id, o.qty FROM customers c RIGHT JOIN orders o ON o.cid = c.id",
        "SELECT c.id, o.qty FROM customers c FULL OUTER JOIN orders o ON o.cid = c.id",
        "WITH big AS (SELECT id FROM products WHERE price > 5) SELECT o.id FROM orders o JOIN big b ON o.pid = b.id",
        "SELECT id, qty FROM orders WHERE pid IN (SELECT id FROM products WHERE category = 'toys')",
        "SELECT id, qty FROM orders WHERE NOT EXISTS (SELECT 1 FROM customers c WHERE c.id = orders.cid)",
        "SELECT pid, qty FROM orders ORDER BY qty DESC LIMIT 3",
        "SELECT category, id FROM (SELECT category, id, ROW_NUMBER() OVER (PARTITION BY category ORDER BY price DESC) rn "
        "FROM products) t WHERE rn <= 2",
    ],
    ids=["star", "right_join", "full_join", "cte", "in_subquery", "not_exists", "order_limit", "top_k"],
)
def test_views_the_planner_refuses_load_as_graph_views(sql: str) -> None:
    config = project({"v": sql})
    assert is_graph_view(config, "v")
    assert plan_for("v", sql).kind == "graph"


def test_views_the_planner_keeps_stay_on_it() -> None:
    config = project({"sales": "SELECT pid, SUM(qty) AS total FROM orders GROUP BY pid"})
    assert not is_graph_view(config, "sales")


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        (STAR.replace("COUNT(*) n", "COUNT(*) n, MAX(random()) x"), "RANDOM(): a non-deterministic function"),
        (
            "WITH RECURSIVE t AS (SELECT id FROM orders UNION ALL SELECT id FROM t) SELECT o.id FROM orders o JOIN t ON o.id = t.id JOIN customers c ON c.id = o.cid",
            "WITH RECURSIVE",
        ),
        ("SELECT o.id FROM orders o JOIN shipments s ON o.id = s.id JOIN customers c ON c.id = o.cid", "'shipments'"),
    ],
    ids=["nondeterministic", "recursive_cte", "unknown_table"],
)
def test_what_the_graph_refuses_is_a_config_error_naming_the_construct(sql: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        project({"v": sql})
    assert "views.v.sql" in str(info.value) and named in str(info.value), str(info.value)


def test_a_graph_view_over_a_view_is_refused_until_graph_views_read_views() -> None:
    with pytest.raises(ConfigError) as info:
        project(
            {
                "sales": "SELECT pid, SUM(qty) AS total FROM orders GROUP BY pid",
                "v": STAR.replace("orders o", "sales s2, orders o"),
            }
        )
    assert "views.v.sql" in str(info.value) and "reads the view 'sales'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        project({"star": STAR, "top": "SELECT region, n FROM star WHERE n > 1"})
    assert "views.top.sql" in str(info.value) and "maintained as an operator graph" in str(info.value)


def test_explain_prints_the_graph_with_its_state_tables(tmp_path: Path) -> None:
    project({"star": STAR}, tmp_path)
    result = CliRunner().invoke(app, ["explain", "star", "-p", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "view star (operator graph)" in result.output
    assert result.output.count("Join INNER") == 3 and "Aggregate GROUP BY" in result.output
    assert "__lv_state_star_g_" in result.output and "rows:" not in result.output
