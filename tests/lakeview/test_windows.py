"""Event-time windows (tumbling, hopping), the watermark and global aggregates: the forms a project loads (as
graph views, keyed by the window bounds) or refuses naming the construct, the watermark's settings checked at load, and windowed and global views over a change feed stepped through the operator graph
(:func:`lakeview.graph.step`), equal to an independent recompute after every epoch."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeview.errors import ConfigError
from lakeview.graph import WEIGHT, compile_view, step
from lakeview.ivm.oracle import compare
from lakeview.project import graph_output_schema, is_graph_view, parse_project, table_key
from lakeview.sql.duck import arrow_sql
from lakeview.sql.graph_plan import graph_sql
from lakeview.sql.windows import parse_interval

UTC = dt.UTC
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = 60_000_000
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.int64()),
        ("x", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("op", pa.string()),
        ("seq", pa.int64()),
    ]
)
COLUMNS = SCHEMA.names

# view SQL -> (window size, slide in minutes or None for a global aggregate, the aggregate over
# the rows expanded to windows, as DuckDB SQL over ``ex`` with ws/we columns): the reference.
VIEWS = {
    "tumbling": (
        "SELECT window(ts, '10 minutes').start AS ws, window(ts, '10 minutes').end AS we, k, SUM(x) AS s, COUNT(*) AS n, "
        "MIN(x) AS lo FROM src GROUP BY window(ts, '10 minutes'), k",
        (10, 10),
        "SELECT ws, we, k, SUM(x) AS s, COUNT(*) AS n, MIN(x) AS lo FROM ex GROUP BY ws, we, k",
    ),
    "hopping": (
        "SELECT window.start AS ws, COUNT(*) AS n, AVG(x) AS a, COUNT(DISTINCT k) AS d FROM src WHERE x > -20 "
        "GROUP BY window(ts, '10 minutes', '5 minutes')",
        (10, 5),
        "SELECT ws, COUNT(*) AS n, AVG(x) AS a, COUNT(DISTINCT k) AS d FROM ex WHERE x > -20 GROUP BY ws",
    ),
    "hopping_uneven": (
        "SELECT window(ts, '10 minutes', '4 minutes').end AS we, k, MAX(x) AS hi, SUM(x) AS s FROM src "
        "GROUP BY k, window(ts, '10 minutes', '4 minutes')",
        (10, 4),
        "SELECT we, k, MAX(x) AS hi, SUM(x) AS s FROM ex GROUP BY we, k",
    ),
    "global": (
        "SELECT COUNT(*) AS n, SUM(x) AS s, COUNT(x) AS nx, AVG(x) AS a, MAX(x) AS hi, COUNT(DISTINCT k) AS d FROM src WHERE k IS NOT NULL",
        None,
        "SELECT COUNT(*) AS n, SUM(x) AS s, COUNT(x) AS nx, AVG(x) AS a, MAX(x) AS hi, COUNT(DISTINCT k) AS d FROM ex WHERE k IS NOT NULL",
    ),
}


def change_rows(changes: list[tuple], seq: int) -> list[dict]:
    """Feed rows of ``(op, id, k, x, minutes past T0 or None)`` changes, sequenced after ``seq``."""
    return [
        {
            "id": id_,
            "k": k,
            "x": x,
            "ts": None if minutes is None else T0 + dt.timedelta(minutes=minutes, seconds=id_),
            "op": op,
            "seq": seq + i,
        }
        for i, (op, id_, k, x, minutes) in enumerate(changes, start=1)
    ]


def expanded(rows: list[dict], window: tuple[int, int] | None) -> pa.Table:
    """Each row once per window it is in (start <= ts < end, epoch-aligned), by plain arithmetic."""
    fields = [*SCHEMA, pa.field("ws", pa.timestamp("us", tz="UTC")), pa.field("we", pa.timestamp("us", tz="UTC"))]
    out = []
    for row in rows:
        if window is None:
            out.append({**row, "ws": None, "we": None})
            continue
        if row["ts"] is None:
            continue
        size, slide = window[0] * MINUTE, window[1] * MINUTE
        t = int((row["ts"] - dt.datetime(1970, 1, 1, tzinfo=UTC)) / dt.timedelta(microseconds=1))
        start = t - t % slide
        while start + size > t:
            begin = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=start)
            out.append({**row, "ws": begin, "we": begin + dt.timedelta(microseconds=size)})
            start -= slide
    return pa.Table.from_pylist(out, schema=pa.schema(fields))


def reference(name: str, rows: list[dict]) -> pa.Table:
    _, window, sql = VIEWS[name]
    return arrow_sql(sql, ex=expanded(rows, window))


# --- plan: accepted and refused forms ---------------------------------------------------


def load(sql: str):
    """The project with one view ``v`` of ``sql`` over ``o`` (``o``: the feed's columns and a note)."""
    source = {
        "format": "json",
        "path": "landing/o",
        "schema": "id BIGINT, k BIGINT, x BIGINT, ts TIMESTAMP, note STRING",
    }
    return parse_project({"sources": {"o": source}, "views": {"v": {"sql": sql}}}, file="lakeview.toml")


@pytest.mark.parametrize(
    ("sql", "key", "columns"),
    [
        (VIEWS["tumbling"][0].replace("FROM src", "FROM o"), ("ws", "we", "k"), ["ws", "we", "k", "s", "n", "lo"]),
        (VIEWS["hopping"][0].replace("FROM src", "FROM o"), None, ["ws", "n", "a", "d"]),
        (VIEWS["hopping_uneven"][0].replace("FROM src", "FROM o"), None, ["we", "k", "hi", "s"]),
        (
            "select WINDOW(o.ts, '1 hour').start as h, count(*) as n from o o group by WINDOW(o.ts, '1 hour')",
            None,
            ["h", "n"],
        ),
        # text in quotes is not a call of window()
        ("SELECT k, COUNT(*) AS n FROM o WHERE note <> 'open window(s)' GROUP BY k", ("k",), ["k", "n"]),
        (VIEWS["global"][0].replace("FROM src", "FROM o"), (), ["n", "s", "nx", "a", "hi", "d"]),
        # a window's bounds in a subquery need not be selected: the outer query's rows are told apart by its own
        (
            "SELECT k, MAX(n) AS most FROM (SELECT k, COUNT(*) AS n FROM o GROUP BY k, window(ts, '5 minutes')) w "
            "GROUP BY k",
            ("k",),
            ["k", "most"],
        ),
        ("SELECT COUNT(*) AS n FROM o\nHAVING COUNT(*) > 2", (), ["n"]),
    ],
    ids=[
        "tumbling",
        "hopping",
        "hopping_uneven",
        "lower_case",
        "quoted",
        "global",
        "bounds_in_a_subquery",
        "global_having",
    ],
)
def test_window_and_global_forms_load_as_graph_views(sql: str, key: tuple[str, ...] | None, columns: list[str]) -> None:
    config = load(sql)
    assert is_graph_view(config, "v")
    assert table_key(config, "v") == key  # None: a multiset keyed by the whole row; (): one row
    assert graph_output_schema(config, "v").names == columns


def test_window_lengths_are_spark_intervals() -> None:
    assert parse_interval("1 hour 30 minutes") == 90 * MINUTE and parse_interval("interval 500 milliseconds") == 500_000
    assert "'open window(s)'" in graph_sql("SELECT k FROM o WHERE note <> 'open window(s)'", "spark")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT session_window(ts, '5 minutes').start AS s, COUNT(*) AS n FROM o\nGROUP BY session_window(ts, '5 minutes')",
            "session windows (session_window) are not supported (line 1); nearest supported form: a tumbling window",
        ),
        (
            "SELECT k,\n  window(ts, '5 minutes').start AS s FROM o",
            "window(ts, '5 minutes') needs GROUP BY window(...) (an event-time window groups rows) (line 2); nearest supported form: GROUP BY window(ts",
        ),
        ("SELECT window.start AS s, COUNT(*) AS n FROM o GROUP BY k", "needs GROUP BY window(...)"),
        (
            "SELECT window(ts, '5 minutes') AS w, COUNT(*) AS n FROM o\nGROUP BY window(ts, '5 minutes')",
            "select the window's bounds, not the window struct",
        ),
        (
            "SELECT window(ts, '5 parsecs').start AS s, COUNT(*) AS n FROM o GROUP BY window(ts, '5 parsecs')",
            "'5 parsecs' is not an interval",
        ),
        (
            "SELECT window(ts, '5 minutes', '10 minutes').start AS s, COUNT(*) AS n FROM o GROUP BY window(ts, '5 minutes', '10 minutes')",
            "the slide must be positive and at most the window size",
        ),
        (
            "SELECT window(ts, '5 minutes', '1 minute', '30 seconds').start AS s, COUNT(*) AS n FROM o "
            "GROUP BY window(ts, '5 minutes', '1 minute', '30 seconds')",
            "no start offset",
        ),
        (
            "SELECT window(ts, '1 hour').start AS s, COUNT(*) AS n FROM o GROUP BY window(ts, '5 minutes')",
            "differs from GROUP BY window(ts, '5 minutes')",
        ),
        ("SELECT k, COUNT(*) AS n FROM o", "column o.k: neither grouped nor aggregated"),
        (
            "SELECT k, COUNT(*) AS n FROM o\nGROUP BY k, window(ts, '5 minutes')",
            "GROUP BY window(ts, '5 minutes') without the window's bounds in the SELECT list gives one row per window "
            "that nothing tells apart; select window_start and/or window_end (line 2); nearest supported form: "
            "SELECT window(ts, '5 minutes').start AS window_start, window(ts, '5 minutes').end AS window_end",
        ),
        (
            "SELECT k, COUNT(*) AS n FROM o GROUP BY k UNION ALL\n"
            "SELECT k, COUNT(*) AS n FROM o GROUP BY k, window(ts, '1 hour', '10 minutes')",
            "GROUP BY window(ts, '1 hour', '10 minutes') without the window's bounds in the SELECT list",
        ),
    ],
)
def test_unsupported_window_forms_name_the_construct_line_and_nearest_form(sql: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(sql)
    assert "views.v.sql" in str(raised.value) and message in str(raised.value), str(raised.value)


# --- change feeds: inserts, updates, deletes --------------------------------------------

change = st.tuples(
    st.sampled_from(["I", "I", "U", "D"]),
    st.integers(0, 7),  # id
    st.one_of(st.none(), st.integers(0, 2)),  # k
    st.one_of(st.none(), st.integers(-30, 30)),  # x
    st.one_of(st.none(), st.integers(0, 40)),  # ts: minutes after T0 (NULL: in no window)
)
epochs = st.lists(st.lists(change, max_size=8), min_size=1, max_size=3)


INPUT = pa.schema([SCHEMA.field(c) for c in ("id", "k", "x", "ts")])


def feed_zset(current: dict[int, dict], rows: list[dict]) -> pa.Table:
    """An epoch of the feed as the graph's input: each change's old image (the key's current row) at -1 and its new
    image (an insert or update) at +1, applied to ``current`` in sequence."""
    out = []
    for row in rows:
        if row["id"] in current:
            out.append({**current.pop(row["id"]), WEIGHT: -1})
        if row["op"] in ("I", "U"):
            current[row["id"]] = {c: row[c] for c in INPUT.names}
            out.append({**current[row["id"]], WEIGHT: 1})
    return pa.Table.from_pylist(out, schema=INPUT.append(pa.field(WEIGHT, pa.int64())))


@pytest.mark.parametrize("name", list(VIEWS))
@settings(max_examples=4, deadline=None)
@given(history=epochs)
def test_windowed_and_global_views_over_a_change_feed_equal_recompute_after_every_epoch(
    name: str, history: list[list[tuple]]
) -> None:
    """Ported from the one-source stack's ViewMaintainer test to the operator graph: inserts, updates and deletes
    (NULL keys, values and event times) of one change feed, each view after every epoch equal to the reference."""
    graph = compile_view(graph_sql(VIEWS[name][0], "spark"), {"src": INPUT})
    current: dict[int, dict] = {}
    held: Counter = Counter()
    seq = 0
    for number, changes in enumerate(history):
        rows = change_rows(changes, seq)
        seq += len(rows)
        out = step(graph, {"src": feed_zset(current, rows)})
        for row in out.to_pylist():
            held[tuple(v for k, v in row.items() if k != WEIGHT)] += row[WEIGHT]
        held = Counter({k: w for k, w in held.items() if w})
        assert all(w > 0 for w in held.values()), f"epoch {number}: a row retracted more often than held"
        expected = reference(name, list(current.values()))
        view = pa.Table.from_pylist(
            [dict(zip(graph.names, r)) for r in held.elements()],
            schema=out.schema.remove(out.schema.get_field_index(WEIGHT)),
        )
        result = compare(view, expected)
        assert result.equal, f"epoch {number}: {result.describe()}"


# --- config: the watermark's settings ------------------------------------------------------

EVENTS = {"format": "json", "path": "landing/events", "schema": "id BIGINT, k BIGINT, x BIGINT, ts TIMESTAMP"}
WINDOWED = "SELECT window(ts, '10 minutes').start AS ws, COUNT(*) AS n FROM events GROUP BY window(ts, '10 minutes')"


@pytest.mark.parametrize(
    ("view", "sources", "message"),
    [
        ({"sql": WINDOWED, "watermark": "10 parsecs"}, {}, "views.v.watermark: '10 parsecs' is not an interval"),
        (
            {"sql": "SELECT k, COUNT(*) AS n FROM events GROUP BY k", "watermark": "1 minute"},
            {},
            'views.v.watermark: a watermark needs an event-time column: GROUP BY window(ts, ...) or event_time = "source.column"',
        ),
        ({"sql": WINDOWED, "event_time": "ts"}, {}, "views.v.watermark: event_time is set without a watermark"),
        (
            {"sql": "SELECT id, ts FROM events", "watermark": "1 minute", "event_time": "events.nope"},
            {},
            "views.v.watermark: event_time 'events.nope' is a column of no source of the view (events)",
        ),
    ],
)
def test_watermark_settings_are_checked_when_the_project_loads(
    tmp_path, view: dict, sources: dict, message: str
) -> None:
    data = {"sources": sources or {"events": EVENTS}, "views": {"v": view}}
    with pytest.raises(ConfigError) as raised:
        parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    assert message in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "feed",
    [{"changes": {"operation": "op", "key": ["id"], "sequence": "id"}}, {"images": {"key": ["id"]}}],
    ids=["changes", "images"],
)
def test_a_watermark_on_a_projection_over_a_change_feed_loads(tmp_path, feed: dict) -> None:
    """The graph judges the feed's images by their event time (late ones left out of the view, not of the
    feed's mirror): a projection over a [changes] or [images] feed takes a watermark too (the per-shape
    planner refused one without an aggregate)."""
    source = {**EVENTS, "schema": EVENTS["schema"] + ", op STRING", **feed}
    view = {"sql": "SELECT id, ts FROM events", "watermark": "1 minute", "event_time": "ts"}
    project = parse_project({"sources": {"events": source}, "views": {"v": view}}, file="lakeview.toml", root=tmp_path)
    assert is_graph_view(project, "v") and project.views["v"].watermark == "1 minute"


def test_a_watermarked_window_over_a_change_feed_is_accepted(tmp_path) -> None:
    feed = {
        **EVENTS,
        "schema": EVENTS["schema"] + ", op STRING",
        "changes": {"operation": "op", "key": ["id"], "sequence": "id"},
    }
    data = {"sources": {"events": feed}, "views": {"v": {"sql": WINDOWED, "watermark": "10 minutes"}}}
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "10 minutes"


def test_a_watermarked_window_over_a_before_after_image_feed_is_accepted(tmp_path) -> None:
    data = {
        "sources": {"events": {**EVENTS, "images": {"key": ["id"]}}},
        "views": {"v": {"sql": WINDOWED, "watermark": "10 minutes"}},
    }
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "10 minutes"


def test_a_declared_event_time_gives_a_plain_aggregate_a_watermark(tmp_path) -> None:
    data = {
        "sources": {"events": EVENTS},
        "views": {
            "v": {"sql": "SELECT k, COUNT(*) AS n FROM events GROUP BY k", "watermark": "1 minute", "event_time": "ts"}
        },
    }
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "1 minute"
