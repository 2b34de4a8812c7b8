"""A watermark on a graph view (a join, a union) is checked when the project loads: the event time names a
column of one source of the view, append-only or a [changes] feed (``window()``'s, or ``event_time =
"source.column"``); an ambiguous column, a missing or non-timestamp column is refused naming the problem."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

import tests.lakeview.graph.test_windows as w
from lakeview.errors import ConfigError
from lakeview.graph import WEIGHT, compile_view, step
from lakeview.graph.expire import bounds, expire
from lakeview.graph.join import Join
from lakeview.project import is_graph_view, parse_project
from lakeview.sql.graph_plan import graph_sql
from lakeview.sql.graph_watermark import EventTime, event_time
from lakeview.sql.watermark import Watermark

MINUTE_US = 60_000_000

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
        ({"sql": JOIN, "event_time": "p.ts"}, EventTime("products", "ts")),  # a change feed: judged image by image
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


# --- bounded state: what a watermark lets the graph drop (lakeview.graph.expire), stepped without Spark ---------
WINDOWED = {  # view -> (its SQL, the state tables the watermark bounds, by their operator's kind)
    "one": (w.ONE_INPUT, {"Aggregate"}),  # a window's group records: only orders reach them
    "hopping_max": (  # a hopping window's multiset (MAX): its end proven by the window's filter
        "SELECT window.end AS we, COUNT(*) AS n, MAX(qty) AS m FROM orders GROUP BY window(ts, '10 minutes', '4 minutes')",
        {"Aggregate"},
    ),
    "hopping_cte": (w.HOPPING_CTE, {"Aggregate"}),  # the CTE's window, below the join: bounded; the join's sides not
    "tumbling_join": (w.TUMBLING_JOIN, {"Aggregate"}),  # eager: orders pre-aggregated by ts; not the join, not above
    "hopping_union": (w.HOPPING_UNION, set()),  # returns' rows are not judged: any window may still change
    "distinct": ("SELECT DISTINCT pid, ts FROM orders", {"Distinct"}),
    "join": ("SELECT o.id, o.ts, p.cat FROM orders o JOIN products p ON o.pid = p.pid", set()),
}


@pytest.mark.parametrize("view", list(WINDOWED))
def test_a_watermark_bounds_only_state_that_the_judged_source_alone_reaches(view: str) -> None:
    sql, kinds = WINDOWED[view]
    graph = compile_view(graph_sql(sql, "spark"), w.SCHEMAS, {"orders": 1000, "products": 10, "returns": 10})
    found = bounds(graph, "orders", "ts")
    ops = {op.id: op for op in graph.operators}
    assert {type(ops[i]).__name__ for i in found} == kinds
    for i, tables in found.items():  # never a join's side, and the aggregate above a join keeps every window
        assert not any(isinstance(o, Join) for o in _upstream(ops[i]))
        assert {b.table for b in tables} <= {t.name for t in ops[i].state_tables()}


def _upstream(op) -> list:
    return [op, *(u for i in op.inputs for u in _upstream(i))]


def _orders(r: random.Random, epoch: int, ids) -> list[dict]:
    """Orders of one epoch: times around minute 10 * epoch (some older: late once the watermark passes them)."""
    rows = []
    for _ in range(r.randint(6, 14)):
        minute = None if r.random() < 0.1 else 10 * epoch + r.uniform(-25, 10)
        ts = None if minute is None else w.T0 + dt.timedelta(minutes=round(minute, 2))
        rows.append({"id": next(ids), "pid": r.randint(1, 4), "qty": r.randint(1, 9), "ts": ts})
    return rows


@pytest.mark.parametrize("view", ["one", "hopping_max", "hopping_cte", "tumbling_join"])
def test_state_of_closed_windows_is_dropped_and_the_view_stays_the_recompute_of_the_on_time_rows(view: str) -> None:
    sql = graph_sql(WINDOWED[view][0], "spark")
    graph = compile_view(sql, w.SCHEMAS, {"orders": 1000, "products": 10, "returns": 10})
    kept = compile_view(sql, w.SCHEMAS, {"orders": 1000, "products": 10, "returns": 10})  # the same, never bounded
    found = bounds(graph, "orders", "ts")
    r, ids = random.Random(view), iter(range(1, 1 << 30))
    rows: dict[str, list[dict]] = {"orders": [], "returns": [], "products": []}
    weighted = {t: s.append(pa.field(WEIGHT, pa.int64())) for t, s in w.SCHEMAS.items()}
    rule, held, dropped = Watermark(10 * MINUTE_US, "ts"), Counter(), 0
    for epoch in range(8):
        mark = rule.for_epoch(epoch)
        orders = _orders(r, epoch, ids)
        on_time = [o for o in orders if mark is None or o["ts"] is None or micros(o["ts"]) >= mark]
        products = [{"pid": epoch % 5, "cat": r.choice("ab")}] if epoch < 5 else []  # a dimension joins late too
        rows["orders"] += on_time
        rows["products"] += products
        deltas = {
            "orders": pa.Table.from_pylist([{**o, WEIGHT: 1} for o in on_time], weighted["orders"]),
            "products": pa.Table.from_pylist([{**p, WEIGHT: 1} for p in products], weighted["products"]),
        }
        deltas = {t: d for t, d in deltas.items() if t in graph.schemas}
        out = step(graph, deltas)
        step(kept, deltas)
        rule.advance(epoch, mark, max((micros(o["ts"]) for o in on_time if o["ts"]), default=None))
        if mark is not None:
            expire(graph, found, mark)
        for row in out.to_pylist():
            held[tuple(w.utc(v) for k, v in row.items() if k != WEIGHT)] += row[WEIGHT]
        held = Counter({k: n for k, n in held.items() if n})
        assert held == w.reference(view, rows) if view in w.VIEWS else True, f"epoch {epoch}"
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        for t, current in rows.items():
            con.register(t, pa.Table.from_pylist(current, w.SCHEMAS[t]))
        recomputed = Counter(tuple(w.utc(v) for v in x.values()) for x in con.execute(sql).to_arrow_table().to_pylist())
        assert held == recomputed, f"epoch {epoch}: extra {held - recomputed}, missing {recomputed - held}"
        for tables in found.values():  # no row of a closed window is left; the unbounded graph keeps them all
            for b in tables:
                table = next(t for t in graph.state_tables() if t.name == b.table)
                state = graph.runtime.store.lookup(table, None)
                closed = (
                    []
                    if mark is None
                    else [
                        x
                        for x in state.column(b.column).to_pylist()
                        if x and (micros(x) <= mark if b.inclusive else micros(x) < mark)
                    ]
                )
                assert not closed, f"epoch {epoch}: {b.table} still holds closed windows' rows"
                dropped = max(dropped, kept.runtime.store.rows(table) - graph.runtime.store.rows(table))
    assert dropped > 0 and sum(held.values()) > 3


def micros(ts: dt.datetime) -> int:
    return (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
