"""Load time: a view the per-shape planner refuses is accepted when the operator graph compiles it over
its sources' schemas, refused with the graph's construct and reason otherwise; ``lakeview explain``
prints the graph (no Spark, no catalog)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakeview.cli.main import app
from lakeview.errors import ConfigError
from lakeview.project import explain_view, is_graph_view, load_project, parse_project
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


def test_one_source_views_are_graph_views_too() -> None:
    config = project({"sales": "SELECT pid, SUM(qty) AS total FROM orders GROUP BY pid"})
    assert is_graph_view(config, "sales")
    assert "view sales (operator graph)" in explain_view(config, "sales")


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


def test_graph_views_read_views_and_views_read_graph_views(tmp_path: Path) -> None:
    """A graph view over a keyed aggregate view and over another graph view, a keyed aggregate over a graph
    view, and a projection over a graph view (kept as a graph too: its input has no key but the whole row)
    load; ``explain`` prints the graph over the upstream view's columns."""
    views = {
        "sales": "SELECT pid, SUM(qty) AS total FROM orders GROUP BY pid",
        "star": STAR,
        "v": STAR.replace("orders o", "sales s2, orders o").replace("o.pid=p.id", "o.pid=p.id AND s2.pid=o.pid"),
        "top": "SELECT region, revenue FROM star ORDER BY revenue DESC LIMIT 2",
        "per_region": "SELECT region, SUM(revenue) AS revenue FROM top GROUP BY region",
        "big": "SELECT region, revenue FROM top WHERE revenue > 1",  # a projection of a multiset: a graph too
        "bigger": "SELECT region FROM big WHERE revenue > 2",  # ... and so on down the chain
    }
    config = project(views, tmp_path)
    assert [v for v in views if is_graph_view(config, v)] == list(views)
    result = CliRunner().invoke(app, ["explain", "top", "-p", str(tmp_path)])
    assert result.exit_code == 0 and "view top (operator graph)" in result.output, result.output
    assert "sources: star" in result.output


def test_what_a_graph_view_over_views_cannot_do_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError) as info:  # graph views reading each other: a cycle, named
        project(
            {
                "a": "SELECT region, n FROM b ORDER BY n DESC LIMIT 2",
                "b": "SELECT region, n FROM a ORDER BY n DESC LIMIT 3",
            }
        )
    assert "in a cycle" in str(info.value) and "a -> b -> a" in str(info.value), str(info.value)
    with pytest.raises(ConfigError) as info:  # found by the property test through the catalog (seed 11)
        project({"v": "SELECT o.id, c.id, c.ID FROM orders o FULL JOIN customers c ON o.cid = c.id ORDER BY 1 LIMIT 3"})
    message = str(info.value)
    assert "views.v.sql" in message and "columns need distinct names, but 'id' names more than one" in message
    with pytest.raises(ConfigError) as info:
        project({"v": STAR.replace("orders o", "shipped s2, orders o")})
    assert "reads 'shipped', which is not a declared source" in str(info.value), str(info.value)


def test_explain_prints_the_graph_with_its_state_tables(tmp_path: Path) -> None:
    project({"star": STAR}, tmp_path)
    result = CliRunner().invoke(app, ["explain", "star", "-p", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "view star (operator graph)" in result.output
    assert result.output.count("Join INNER") == 3 and "Aggregate GROUP BY" in result.output
    assert "__lv_state_star_g_" in result.output
    assert not [line for line in result.output.splitlines() if line.lstrip().startswith("rows:")], result.output
    # the products side of its join is the products change feed's rows by key: kept once, in the feed's mirror
    assert result.output.count("(the mirror)") == 1 and "__lv_state_star_src_products (the mirror)" in result.output
