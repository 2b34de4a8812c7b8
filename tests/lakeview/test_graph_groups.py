"""Load time: a view kept as an operator graph joins a view group when it reads the group's one source; one
reading several sources is refused naming the group and its sources (no Spark)."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError
from lakeview.project import explain_view, is_graph_view, parse_project

SOURCES = {
    "orders": {"format": "json", "path": "landing/orders", "schema": "id BIGINT, pid BIGINT, qty INT"},
    "products": {"format": "json", "path": "landing/products", "schema": "id BIGINT, category STRING"},
}
TOP = "SELECT pid, qty FROM orders ORDER BY qty DESC LIMIT 3"


def project(views: dict[str, str]):
    return parse_project({"sources": SOURCES, "views": {n: {"sql": s, "group": "g"} for n, s in views.items()}})


def test_a_graph_view_over_the_groups_source_is_a_member() -> None:
    config = project({"top": TOP, "sums": "SELECT pid, SUM(qty) AS total FROM orders GROUP BY pid"})
    assert is_graph_view(config, "top") and is_graph_view(config, "sums")  # one-source views are graphs too
    assert "group g: one streaming query keeps top, sums" in explain_view(config, "top")


def test_a_graph_view_over_several_sources_cannot_join_a_group() -> None:
    with pytest.raises(ConfigError) as info:
        project({"top": TOP, "joined": "SELECT o.id, p.category FROM orders o JOIN products p ON o.pid = p.id"})
    message = str(info.value)
    assert "views.joined.group" in message and "reads 2 sources (orders, products)" in message, message
