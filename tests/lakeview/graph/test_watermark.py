"""A watermark on a graph view (a join, a union) is checked when the project loads: the event time names a
column of one append-only source of the view (``window()``'s, or ``event_time = "source.column"``); an
ambiguous column, a change feed's, a missing or non-timestamp column is refused naming the problem."""

from __future__ import annotations

import re

import pytest

from lakeview.errors import ConfigError
from lakeview.project import is_graph_view, parse_project
from lakeview.sql.graph_watermark import EventTime, event_time

FEED = {"operation": "op", "key": ["id"], "sequence": "seq"}
SOURCES = {
    "orders": {"format": "json", "path": "landing/orders", "schema": "id BIGINT, pid BIGINT, qty INT, ts TIMESTAMP"},
    "returns": {"format": "json", "path": "landing/returns", "schema": "id BIGINT, qty INT, ts TIMESTAMP"},
    "products": {
        "format": "json",
        "path": "landing/products",
        "schema": "id BIGINT, category STRING, ts TIMESTAMP, op STRING, seq BIGINT",
        "changes": FEED,
    },
}
TUMBLING_JOIN = (
    "SELECT window(o.ts, '10 minutes').start AS ws, p.category, COUNT(*) AS n FROM orders o "
    "JOIN products p ON o.pid = p.id GROUP BY window(o.ts, '10 minutes'), p.category"
)
HOPPING_UNION = (
    "SELECT window.start AS ws, COUNT(*) AS n FROM (SELECT ts, qty FROM orders UNION ALL "
    "SELECT ts, -qty FROM returns) u GROUP BY window(ts, '10 minutes', '4 minutes')"
)
JOIN = "SELECT o.id, o.ts, p.category FROM orders o JOIN products p ON o.pid = p.id"


def load(tmp_path, view: dict):
    data = {"sources": SOURCES, "views": {"v": {"watermark": "10 minutes", **view}}}
    return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        ({"sql": TUMBLING_JOIN}, EventTime("orders", "ts")),  # window(o.ts): o aliases orders
        ({"sql": HOPPING_UNION, "event_time": "returns.ts"}, EventTime("returns", "ts")),
        ({"sql": JOIN, "event_time": "orders.TS"}, EventTime("orders", "ts")),
        ({"sql": JOIN, "event_time": "o.ts"}, EventTime("orders", "ts")),  # o aliases orders
    ],
)
def test_the_event_time_is_a_column_of_one_append_only_source(tmp_path, view: dict, expected: EventTime) -> None:
    project = load(tmp_path, view)
    assert is_graph_view(project, "v")
    assert event_time(project, "v", ("orders", "returns", "products")) == expected


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (
            {"sql": HOPPING_UNION},
            "views.v.watermark: event_time 'ts' is a column of more than one source (orders, returns); "
            'name the one whose rows can be late, e.g. event_time = "orders.ts"',
        ),
        (
            {"sql": JOIN},
            'views.v.watermark: a watermark needs an event-time column: GROUP BY window(ts, ...) or event_time = "source.column"',
        ),
        (
            {"sql": JOIN, "event_time": "x.ts"},
            "views.v.watermark: event_time 'x.ts': 'x' is not a source of the view (orders, products)",
        ),
        (
            {"sql": JOIN, "event_time": "p.ts"},  # p aliases products
            "views.v.watermark: the event time's source 'products' is a change feed ([changes]); a watermark on a "
            "view with joins, unions or subqueries needs an append-only event-time source",
        ),
        (
            {"sql": JOIN, "event_time": "orders.qty"},
            "views.v.watermark: event_time orders.qty is INT, not a TIMESTAMP",
        ),
        (
            {"sql": JOIN, "event_time": "orders.shipped"},
            "views.v.watermark: event_time 'orders.shipped' is a column of no source of the view (orders)",
        ),
        ({"sql": JOIN, "watermark": "soon"}, "views.v.watermark: 'soon' is not an interval"),
        (
            {"sql": JOIN, "watermark": None, "event_time": "orders.ts"},
            "views.v.watermark: event_time is set without a watermark",
        ),
    ],
)
def test_a_graph_views_watermark_is_refused_naming_the_problem(tmp_path, view: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, view)
