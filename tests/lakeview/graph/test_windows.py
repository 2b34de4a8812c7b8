"""Event-time windows as operators of the graph (no Spark): Spark's ``window(ts, size[, slide])`` in GROUP BY
over a join, a union, a CTE and one input, compiled (:func:`lakeview.sql.graph_plan.graph_sql`) and stepped
over random inserts and deletes with NULL, pre-1970 and on-the-bound event times. After every epoch the view
equals a Python reference of Spark's window() (start inclusive, end exclusive, aligned to the Unix epoch, a
NULL time in no window, a hopping window's row in every window holding it) and DuckDB's recompute of the same
SQL; the first batch as SQL (the backfill) gives the same view. Bad window forms are refused naming them."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

from lakeview.errors import UnsupportedSQLError
from lakeview.graph import WEIGHT, MemoryStateStore, compile_view, explain, step
from lakeview.graph.backfill_sql import first_batch_sql
from lakeview.sql.graph_plan import graph_sql

UTC = dt.UTC
ORDERS = pa.schema([("id", pa.int64()), ("pid", pa.int64()), ("qty", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
RETURNS = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
PRODUCTS = pa.schema([("pid", pa.int64()), ("cat", pa.string())])
SCHEMAS = {"orders": ORDERS, "returns": RETURNS, "products": PRODUCTS}
T0 = dt.datetime(1969, 12, 31, 23, 0, tzinfo=UTC)  # windows before and after the Unix epoch

TUMBLING_JOIN = (
    "SELECT window(o.ts, '10 minutes').start AS ws, window(o.ts, '10 minutes').end AS we, p.cat, COUNT(*) AS n, "
    "SUM(o.qty) AS qty FROM orders o JOIN products p ON o.pid = p.pid GROUP BY window(o.ts, '10 minutes'), p.cat"
)
HOPPING_UNION = (  # 10 minutes every 4: a row in 2 or 3 windows (size not a multiple of the slide)
    "SELECT window.start AS ws, window.end AS we, COUNT(*) AS n, SUM(x) AS s FROM "
    "(SELECT ts, qty AS x FROM orders UNION ALL SELECT ts, -qty AS x FROM returns) u "
    "GROUP BY window(ts, '10 minutes', '4 minutes')"
)
HOPPING_CTE = (  # the window inside a CTE, then joined; the bounds not selected
    "WITH w AS (SELECT pid, window(ts, '15 minutes', '5 minutes').end AS we, MAX(qty) AS top FROM orders "
    "GROUP BY pid, window(ts, '15 minutes', '5 minutes')) "
    "SELECT p.cat, w.we, w.top FROM w JOIN products p ON w.pid = p.pid"
)
ONE_INPUT = (
    "SELECT window(ts, '7 minutes').end AS we, pid, COUNT(*) AS n FROM orders GROUP BY window(ts, '7 minutes'), pid"
)


def windows_of(ts: dt.datetime | None, size_min: int, slide_min: int) -> list[tuple[dt.datetime, dt.datetime]]:
    """Spark's window(): every [start, end) holding ts, starts on multiples of the slide since the epoch."""
    if ts is None:
        return []
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    micros = (ts - epoch) // dt.timedelta(microseconds=1)
    slide, size = slide_min * 60_000_000, size_min * 60_000_000
    last = micros - micros % slide  # Python's % is a floor mod, as Spark's window() is
    starts = [last - k * slide for k in range(size // slide + 1) if last - k * slide + size > micros]
    return [(epoch + dt.timedelta(microseconds=s), epoch + dt.timedelta(microseconds=s + size)) for s in starts]


def reference(view: str, rows: dict[str, list[dict]]) -> Counter:
    """The view computed in Python from the inputs' current rows."""
    out: Counter = Counter()
    if view == "tumbling_join":
        cats = {p["pid"]: p["cat"] for p in rows["products"]}
        groups: dict = {}
        for o in rows["orders"]:
            for ws, we in windows_of(o["ts"], 10, 10):
                if o["pid"] in cats:
                    n, q = groups.get((ws, we, cats[o["pid"]]), (0, 0))
                    groups[(ws, we, cats[o["pid"]])] = (n + 1, q + o["qty"])
        out.update((*k, n, q) for k, (n, q) in groups.items())
    elif view == "hopping_union":
        groups = {}
        for r, sign in [(o, 1) for o in rows["orders"]] + [(r, -1) for r in rows["returns"]]:
            for w in windows_of(r["ts"], 10, 4):
                n, s = groups.get(w, (0, 0))
                groups[w] = (n + 1, s + sign * r["qty"])
        out.update((*k, n, s) for k, (n, s) in groups.items())
    elif view == "hopping_cte":
        cats = {p["pid"]: p["cat"] for p in rows["products"]}
        tops: dict = {}
        for o in rows["orders"]:
            for _, we in windows_of(o["ts"], 15, 5):
                tops[(o["pid"], we)] = max(tops.get((o["pid"], we), o["qty"]), o["qty"])
        out.update((cats[pid], we, top) for (pid, we), top in tops.items() if pid in cats)
    else:
        counts = Counter((w, o["pid"]) for o in rows["orders"] for w in windows_of(o["ts"], 7, 7))
        out.update((w[1], pid, n) for (w, pid), n in counts.items())
    return out


VIEWS = {"tumbling_join": TUMBLING_JOIN, "hopping_union": HOPPING_UNION, "hopping_cte": HOPPING_CTE, "one": ONE_INPUT}


class History:
    """Random inputs: inserts and deletes of orders and returns, product rows changing category."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.rows: dict[str, list[dict]] = {"orders": [], "returns": [], "products": []}
        self.ids = iter(range(1, 1 << 30))

    def time(self) -> dt.datetime | None:
        if self.r.random() < 0.1:
            return None
        if self.r.random() < 0.2:  # on a window's bound
            return T0 + dt.timedelta(minutes=self.r.randrange(0, 120, 2))
        return T0 + dt.timedelta(seconds=self.r.randrange(7200), microseconds=self.r.randrange(3) * 7)

    def epoch(self) -> dict[str, pa.Table]:
        changes: dict[str, list[tuple[dict, int]]] = {t: [] for t in self.rows}
        for _ in range(self.r.randint(5, 25)):
            table = self.r.choice(["orders", "orders", "returns"])
            if self.rows[table] and self.r.random() < 0.3:
                row = self.rows[table].pop(self.r.randrange(len(self.rows[table])))
                changes[table].append((row, -1))
                continue
            row = {"id": next(self.ids), "qty": self.r.randint(1, 9), "ts": self.time()}
            if table == "orders":
                row["pid"] = self.r.randint(1, 4)
            self.rows[table].append(row)
            changes[table].append((row, 1))
        pid = self.r.randint(1, 5)
        old = [p for p in self.rows["products"] if p["pid"] == pid]
        for p in old:
            self.rows["products"].remove(p)
            changes["products"].append((p, -1))
        if self.r.random() < 0.8:
            new = {"pid": pid, "cat": self.r.choice(["a", "b"])}
            self.rows["products"].append(new)
            changes["products"].append((new, 1))
        return {
            t: pa.Table.from_pylist(
                [{**row, WEIGHT: w} for row, w in rows], SCHEMAS[t].append(pa.field(WEIGHT, pa.int64()))
            )
            for t, rows in changes.items()
        }


def current(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema)


def recompute(sql: str, history: History) -> Counter:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for t, rows in history.rows.items():
        con.register(t, current(rows, SCHEMAS[t]))
    return Counter(tuple(r.values()) for r in con.execute(sql).to_arrow_table().to_pylist())


def utc(value):
    return value.astimezone(UTC) if isinstance(value, dt.datetime) else value


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("seed", [1, 2])
def test_a_windowed_graph_view_equals_sparks_window_semantics_after_every_epoch(view: str, seed: int) -> None:
    sql = graph_sql(VIEWS[view], "spark")
    graph = compile_view(sql, SCHEMAS, eager=seed == 1)
    history = History(seed)
    held: Counter = Counter()
    for epoch in range(6):
        deltas = history.epoch()
        out = step(graph, {t: d for t, d in deltas.items() if t in graph.schemas})
        for row in out.to_pylist():
            held[tuple(utc(v) for k, v in row.items() if k != WEIGHT)] += row[WEIGHT]
        held = Counter({k: w for k, w in held.items() if w})
        assert all(w > 0 for w in held.values()), f"epoch {epoch}: a row retracted more often than held"
        expected = reference(view, history.rows)
        assert held == expected, f"epoch {epoch}: extra {held - expected}, missing {expected - held}"
        assert recompute(sql, history) == expected, f"epoch {epoch}: DuckDB's recompute of {sql}"
    assert sum(held.values()) > 3


def test_a_hopping_window_expands_rows_after_the_joins_and_explain_shows_it() -> None:
    graph = compile_view(
        graph_sql(HOPPING_UNION.replace("FROM orders", "FROM orders JOIN products pp ON orders.pid = pp.pid"), "spark"),
        SCHEMAS,
    )
    text = explain(graph)
    assert "Expand each row x3" in text and "VALUES (0), (1), (2)" in text, text
    lines = text.splitlines()
    expand = next(i for i, line in enumerate(lines) if "Expand" in line)
    assert any("Join INNER" in line for line in lines[expand:]), "the expansion is above the join (fewer rows joined)"


def test_the_first_batch_as_sql_gives_the_windowed_view_stepping_gives() -> None:
    for view, spark_sql in VIEWS.items():
        history = History(3)  # its first epoch: the history, inserts only
        sql = graph_sql(spark_sql, "spark")
        graph = compile_view(sql, SCHEMAS, eager=True)
        step(graph, {})
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        deltas = history.epoch()
        for t, delta in deltas.items():
            con.register(f"src_{t}", delta)
        first = first_batch_sql(graph, {t: f"src_{t}" for t in SCHEMAS if t in graph.schemas}, "rel_", "duckdb")
        for name, query in first.relations:
            con.execute(f"CREATE TEMP VIEW {name} AS {query}")
        got = Counter(tuple(utc(v) for v in r.values()) for r in con.execute(first.view).to_arrow_table().to_pylist())
        assert got == reference(view, history.rows), view
        assert isinstance(graph.runtime.store, MemoryStateStore)


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SELECT window(ts, '5 minutes') AS w, COUNT(*) AS n FROM orders GROUP BY window(ts, '5 minutes')", "struct"),
        ("SELECT COUNT(*) AS n FROM orders GROUP BY session_window(ts, '5 minutes')", "session_window"),
        ("SELECT window(ts, '5 minutes').start AS s FROM orders", "needs GROUP BY window"),
        ("SELECT COUNT(*) AS n FROM orders WHERE window.start > ts GROUP BY window(ts, '5 minutes')", "WHERE"),
        ("SELECT COUNT(*) AS n FROM orders GROUP BY window(ts, '5 minutes', '10 minutes')", "at most the window"),
        ("SELECT COUNT(*) AS n FROM orders GROUP BY window(ts, 'soon')", "not an interval"),
        (
            "SELECT window(ts, '6 minutes').end AS e FROM orders GROUP BY window(ts, '5 minutes')",
            "differs from GROUP BY",
        ),
    ],
)
def test_window_forms_the_graph_does_not_keep_are_refused_naming_them(sql: str, named: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=named):
        compile_view(graph_sql(sql.replace("FROM orders", "FROM orders JOIN products p USING (pid)"), "spark"), SCHEMAS)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT o.id, v.k FROM orders o CROSS JOIN (VALUES (1), (o.qty)) AS v(k)", "literals only"),
        ("SELECT o.id FROM (VALUES (1)) AS v(k) CROSS JOIN orders o", "only tables"),
        ("SELECT o.id, v.k FROM orders o JOIN (VALUES (1)) AS v(k) ON v.k = o.qty", "last CROSS JOIN"),
    ],
)
def test_constant_rows_elsewhere_than_the_last_cross_join_are_refused(sql: str, reason: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=reason):
        compile_view(sql, SCHEMAS)


def test_constant_rows_as_the_last_cross_join_multiply_each_change() -> None:
    graph = compile_view(
        "SELECT o.id, v.k, v.tag FROM orders o CROSS JOIN (VALUES (1, 'x'), (-2, NULL)) AS v(k, tag)", SCHEMAS
    )
    delta = pa.Table.from_pylist(
        [{"id": 1, "pid": 1, "qty": 1, "ts": None, WEIGHT: 2}], ORDERS.append(pa.field(WEIGHT, pa.int64()))
    )
    out = step(graph, {"orders": delta})
    assert sorted(out.to_pylist(), key=str) == sorted(
        [{"id": 1, "k": 1, "tag": "x", WEIGHT: 2}, {"id": 1, "k": -2, "tag": None, WEIGHT: 2}], key=str
    )


def test_a_window_in_another_dialect_is_refused_naming_spark() -> None:
    with pytest.raises(UnsupportedSQLError, match='dialect = "spark"'):
        graph_sql("SELECT COUNT(*) AS n FROM orders GROUP BY window(ts, '5 minutes')", "duckdb")
