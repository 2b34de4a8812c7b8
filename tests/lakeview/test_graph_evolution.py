"""Load time: a view kept as an operator graph over a source with ``new_columns = "evolve"`` loads when it names
its columns (it reads the declared ones, as a one-source view naming its columns does) or when its ``*`` only
flows through filters, projections, UNION ALL and join sides (its table and a join side's state gain the new
columns), and is refused, naming the source, the operator and the nearest supported form, where another
operator keeps the starred rows in state (top-k, DISTINCT, UNION) or the columns must line up, and when it selects ``*`` over
a view whose columns grow. One-source views are graphs too."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError
from lakeview.project import evolving_inputs, is_graph_view, parse_project


def project(sql: str, new_columns: str = "evolve", over: str | None = None):
    views = {"v": {"sql": sql}, **({"w": {"sql": over}} if over is not None else {})}
    return parse_project(
        {
            "sources": {
                "orders": {
                    "format": "json",
                    "path": "landing/orders",
                    "schema": "id BIGINT, pid BIGINT, qty INT",
                    "new_columns": new_columns,
                },
                "products": {"format": "json", "path": "landing/products", "schema": "id BIGINT, category STRING"},
            },
            "views": views,
        }
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM (SELECT * FROM orders) t ORDER BY qty DESC LIMIT 3",
        "SELECT DISTINCT * FROM orders WHERE qty > 0",
        "SELECT * FROM orders UNION SELECT * FROM orders",
        "SELECT * FROM orders UNION ALL SELECT id, pid, qty FROM orders",
    ],
    ids=["subquery_top", "distinct", "union", "union_all_lined_up"],
)
def test_a_graph_view_whose_star_over_an_evolving_source_reaches_state_is_refused_naming_it(sql: str) -> None:
    with pytest.raises(ConfigError) as info:
        project(sql)
    message = str(info.value)
    assert "views.v.sql" in message and "selects * over 'orders'" in message, message
    assert 'new_columns = "evolve"' in message and "name the columns" in message, message
    assert "keeps the rows * selects in state" in message or "must line up" in message, message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM orders UNION ALL SELECT * FROM orders WHERE qty > 5",
        "SELECT t.*, t.qty * 2 AS twice FROM (SELECT * FROM orders WHERE qty > 0) t",
        "SELECT o.*, p.category FROM orders o JOIN products p ON o.pid = p.id",
        "SELECT o.*, p.category FROM orders o LEFT JOIN products p ON o.pid = p.id WHERE o.qty > 1",
    ],
    ids=["union_all", "subquery", "join", "left_join"],
)
def test_a_graph_view_whose_star_flows_through_projections_unions_and_joins_follows_the_source(sql: str) -> None:
    config = project(sql)
    assert is_graph_view(config, "v") and evolving_inputs(config, "v") == ["orders"]


def test_a_view_selecting_star_over_a_view_whose_columns_grow_is_refused_naming_it() -> None:
    grows = "SELECT * FROM orders UNION ALL SELECT * FROM orders WHERE qty > 5"
    assert evolving_inputs(project(grows, over="SELECT id, qty FROM v WHERE qty > 1"), "w") == []
    counted = "SELECT COUNT(*) AS n FROM (SELECT * FROM orders UNION ALL SELECT * FROM orders) t"  # * stays inside
    assert is_graph_view(project(counted, over="SELECT * FROM v WHERE n > 1"), "w")
    with pytest.raises(ConfigError) as info:
        project(grows, over="SELECT * FROM v WHERE qty > 1")
    message = str(info.value)
    assert "views.w.sql" in message and "selects * over the view(s) 'v'" in message, message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT o.id, o.qty, p.category FROM orders o JOIN products p ON o.pid = p.id",
        "SELECT p.*, o.qty FROM orders o JOIN products p ON o.pid = p.id",  # * over the source that does not evolve
        "SELECT * FROM (SELECT id, qty FROM orders) t ORDER BY qty DESC LIMIT 3",
        "SELECT pid, COUNT(*) AS n FROM orders WHERE id IN (SELECT id FROM products) GROUP BY pid",
    ],
    ids=["named", "star_over_other", "star_over_subquery", "count_star"],
)
def test_a_graph_view_naming_its_columns_of_an_evolving_source_loads(sql: str) -> None:
    assert is_graph_view(project(sql), "v") and evolving_inputs(project(sql), "v") == []


def test_star_over_a_source_that_ignores_new_columns_loads() -> None:
    assert is_graph_view(project("SELECT * FROM orders UNION ALL SELECT * FROM orders", "ignore"), "v")


def test_one_source_views_are_graphs() -> None:
    sql = "SELECT pid, SUM(qty) AS total, COUNT(*) AS n FROM orders GROUP BY pid"
    assert is_graph_view(project(sql), "v")
    with pytest.raises(ConfigError) as info:  # the graph's own limits hold for one-source views
        project("SELECT DISTINCT * FROM orders WHERE qty > 0")
    assert "selects * over 'orders'" in str(info.value)
    assert evolving_inputs(project("SELECT * FROM orders WHERE qty > 0"), "v") == ["orders"]
