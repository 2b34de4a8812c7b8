"""Event-time windows (tumbling, hopping), the watermark and global aggregates: plan forms,
and views maintained epoch by epoch with the code the pipeline runs (DuckDB standing in for
Spark's per-batch SQL), equal to an independent recompute after every epoch."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeview.errors import UnsupportedSQLError
from lakeview.ivm.commits import Epoch
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.oracle import compare
from lakeview.sql.plan import KeyedAggregatePlan
from lakeview.sql.planner import plan_view
from lakeview.sql.watermark import LATE, Watermark, delay_us
from lakeview.sql.windows import parse_interval
from tests.lakeview.duck_batch import duck, latest_changes
from tests.lakeview.memory_writer import MemoryWriter
from tests.lakeview.test_ivm_changes import FEED, apply_python, run_epoch

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


def assert_epoch_held(
    m, name: str, batches: list[list[dict]], number: int, applied: int | None, late_total: int
) -> None:
    """After epoch ``number``: the view equals the reference over the rows the watermark rule
    holds, the late count agrees, and no closed window (end <= ``applied``) keeps state."""
    held, late = held_rows(batches, delay_us(DELAY), PASSES[name])
    expected = reference(name, held)
    view = m.view.rows if m.view.rows is not None and m.view.rows.num_columns else expected.schema.empty_table()
    result = compare(view, expected)
    assert result.equal, f"epoch {number}: {result.describe()}"
    assert late_total == late
    for state in m.state:
        if applied is not None and state.rows is not None and state.rows.num_rows:
            assert min(_us(r["ws"]) + 10 * MINUTE for r in state.rows.to_pylist()) > applied, (
                "state of a closed window was kept"
            )


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
    return duck(sql, ex=expanded(rows, window))


def maintainer(sql: str, feed=FEED) -> ViewMaintainer:
    plan = plan_view("v", sql)
    assert isinstance(plan, KeyedAggregatePlan)
    state = [MemoryWriter() for _ in range(1 + len(plan.multisets))]
    if feed is None:
        return ViewMaintainer(plan=plan, view=MemoryWriter(), state=state)
    return ViewMaintainer(
        plan=plan, view=MemoryWriter(), state=state, feed=feed, mirror=MemoryWriter(), source_columns=COLUMNS
    )


# --- plan: accepted and refused forms ---------------------------------------------------


def test_window_forms_plan_to_keyed_aggregates_keyed_by_the_window_bounds() -> None:
    tumbling = plan_view("v", VIEWS["tumbling"][0])
    assert tumbling.keys == ("ws", "we", "k") and tumbling.window is not None
    assert (tumbling.window.size_us, tumbling.window.slide_us, tumbling.window.windows_per_row) == (
        10 * MINUTE,
        10 * MINUTE,
        1,
    )
    hopping = plan_view("v", VIEWS["hopping"][0])
    assert hopping.keys == ("ws",) and hopping.window.windows_per_row == 2 and hopping.window.is_hopping
    assert plan_view("v", VIEWS["hopping_uneven"][0]).window.windows_per_row == 3
    lower = plan_view(
        "v", "select WINDOW(o.ts, '1 hour').start as h, count(*) as n from orders o group by WINDOW(o.ts, '1 hour')"
    )
    assert lower.keys == ("h",) and lower.window.time_column == "o.ts"
    assert parse_interval("1 hour 30 minutes") == 90 * MINUTE and parse_interval("interval 500 milliseconds") == 500_000
    quoted = plan_view("v", "SELECT k, COUNT(*) AS n FROM o WHERE note <> 'open window(s)' GROUP BY k")
    assert quoted.window is None and quoted.where == "note <> 'open window(s)'"  # text in quotes is not a call


def test_global_aggregate_plans_with_an_empty_key() -> None:
    plan = plan_view("v", "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE amount > 0")
    assert isinstance(plan, KeyedAggregatePlan) and plan.keys == () and not plan.view_is_state(append_only=True)


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
            "SELECT k, COUNT(*) AS n FROM o\nGROUP BY k, window(ts, '5 minutes')",
            "select the bounds of window(ts, '5 minutes'): they are the view's key (line 2); nearest supported form: SELECT window(ts, '5 minutes').start AS window_start",
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
        (
            "SELECT COUNT(*) AS n FROM o\nHAVING COUNT(*) > 2",
            "HAVING on a global aggregate (no GROUP BY) is not supported (line 2)",
        ),
        ("SELECT k, COUNT(*) AS n FROM o", "'k' is neither aggregated nor in GROUP BY"),
    ],
)
def test_unsupported_window_forms_name_the_construct_line_and_nearest_form(sql: str, message: str) -> None:
    with pytest.raises(
        UnsupportedSQLError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.").replace("'", "'")
    ):
        plan_view("v", sql)


# --- change feeds: inserts, updates, deletes --------------------------------------------

change = st.tuples(
    st.sampled_from(["I", "I", "U", "D"]),
    st.integers(0, 7),  # id
    st.one_of(st.none(), st.integers(0, 2)),  # k
    st.one_of(st.none(), st.integers(-30, 30)),  # x
    st.one_of(st.none(), st.integers(0, 40)),  # ts: minutes after T0 (NULL: in no window)
)
epochs = st.lists(st.lists(change, max_size=8), min_size=1, max_size=3)


@pytest.mark.parametrize("name", list(VIEWS))
@settings(max_examples=4, deadline=None)
@given(history=epochs)
def test_windowed_and_global_views_over_a_change_feed_equal_recompute_after_every_epoch(
    name: str, history: list[list[tuple]]
) -> None:
    m = maintainer(VIEWS[name][0])
    current: dict[int, dict] = {}
    seq = 0
    for number, changes in enumerate(history):
        rows = change_rows(changes, seq)
        seq += len(rows)
        for row in rows:
            apply_python(current, row)
        run_epoch(m, number, pa.Table.from_pylist(rows, schema=SCHEMA))
        expected = reference(name, list(current.values()))
        view = m.view.rows if m.view.rows is not None and m.view.rows.num_columns else expected.schema.empty_table()
        if name == "global" and m.view.rows is None:
            continue  # no epoch had a row yet: the view's table is still empty
        result = compare(view, expected)
        assert result.equal, f"epoch {number}: {result.describe()}"


def test_global_aggregate_over_no_rows_is_one_row_with_count_0_and_sum_null() -> None:
    m = maintainer(VIEWS["global"][0])
    run_epoch(m, 0, pa.Table.from_pylist([{"id": 1, "k": 1, "x": 5, "ts": T0, "op": "I", "seq": 1}], schema=SCHEMA))
    assert m.view.rows.to_pylist() == [{"n": 1, "s": 5, "nx": 1, "a": 5.0, "hi": 5, "d": 1}]
    run_epoch(
        m, 1, pa.Table.from_pylist([{"id": 1, "k": None, "x": None, "ts": None, "op": "D", "seq": 2}], schema=SCHEMA)
    )
    assert m.view.rows.to_pylist() == [{"n": 0, "s": None, "nx": 0, "a": None, "hi": None, "d": 0}]
    # a batch whose rows the WHERE drops still leaves the row (nothing to add)
    run_epoch(m, 2, pa.Table.from_pylist([{"id": 2, "k": None, "x": 3, "ts": T0, "op": "I", "seq": 3}], schema=SCHEMA))
    assert m.view.rows.to_pylist() == [{"n": 0, "s": None, "nx": 0, "a": None, "hi": None, "d": 0}]


# --- append-only input with a watermark ---------------------------------------------------

WATERMARKED = "hopping"
DELAY = "10 minutes"


def run_watermarked_epoch(m: ViewMaintainer, wm: Watermark, number: int, rows: list[dict]) -> list[dict]:
    """What the pipeline does per batch with a watermark (DuckDB in place of Spark): set the
    late rows aside, stamp the watermark, fold the rest in, drop closed windows' state.
    Returns the late rows."""
    applied = wm.for_epoch(number)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    late_sql = wm.late_sql(applied, "duckdb")
    late = duck(f"SELECT * FROM b WHERE {late_sql}", b=table).to_pylist() if late_sql else []
    good = duck(f"SELECT * FROM b WHERE NOT coalesce({late_sql}, false)", b=table) if late_sql else table
    plan = m.plan
    batch_max = (
        duck(f"SELECT max(epoch_us(ts)) AS t FROM b WHERE {plan.where or 'TRUE'}", b=good).column("t")[0].as_py()
    )
    stamps = {**wm.advance(number, applied, batch_max), LATE: str(len(late))}
    weighted = duck("SELECT *, 1::INTEGER AS __lv_w FROM g", g=good)
    m.apply_zset(Epoch(view="v", number=number, frontier={}, stamps=stamps), weighted, closed_before_us=applied)
    return late


def on_time_rows(batches: list[list[dict]], delay: int) -> list[dict]:
    """The watermark rule replayed independently: a row is late when older than the greatest
    event time consumed in earlier batches minus the delay."""
    kept, high = [], None
    for rows in batches:
        mark = None if high is None else high - delay
        consumed = [r for r in rows if mark is None or r["ts"] is None or _us(r["ts"]) >= mark]
        kept += consumed
        seen = [_us(r["ts"]) for r in consumed if r["ts"] is not None and r["x"] is not None and r["x"] > -20]
        high = max([*seen, *([high] if high is not None else [])], default=None)
    return kept


def _us(ts: dt.datetime) -> int:
    return int((ts - dt.datetime(1970, 1, 1, tzinfo=UTC)) / dt.timedelta(microseconds=1))


arrival = st.lists(
    st.lists(st.tuples(st.integers(0, 2), st.integers(-30, 30), st.integers(0, 90)), max_size=8), min_size=1, max_size=5
)


@settings(max_examples=6, deadline=None)
@given(history=arrival)
def test_watermarked_hopping_window_equals_recompute_over_on_time_rows_and_keeps_only_open_windows(history) -> None:
    m = maintainer(VIEWS[WATERMARKED][0], feed=None)
    delay = delay_us(DELAY)
    wm = Watermark(delay, "ts")
    batches: list[list[dict]] = []
    late_total = 0
    for number, batch in enumerate(history):
        rows = [
            {"id": i, "k": k, "x": x, "ts": T0 + dt.timedelta(minutes=minutes), "op": "I", "seq": i}
            for i, (k, x, minutes) in enumerate(batch)
        ]
        batches.append(rows)
        applied = wm.for_epoch(number)
        late_total += len(run_watermarked_epoch(m, wm, number, rows))
        expected = reference(WATERMARKED, on_time_rows(batches, delay))
        view = m.view.rows if m.view.rows is not None and m.view.rows.num_columns else expected.schema.empty_table()
        result = compare(view, expected)
        assert result.equal, f"epoch {number}: {result.describe()}"
        state = m.state[0].rows
        if applied is not None and state is not None and state.num_rows:
            ends = [_us(r["ws"]) + 10 * MINUTE for r in state.to_pylist()]
            assert min(ends) > applied, "state of a window closed by the watermark was kept"
    assert late_total == sum(len(b) for b in batches) - len(on_time_rows(batches, delay))


def test_watermark_recovered_from_the_last_commit_applies_the_same_rule_to_a_replayed_epoch() -> None:
    m = maintainer(VIEWS[WATERMARKED][0], feed=None)
    wm = Watermark(delay_us(DELAY), "ts")

    def rows(*minutes: int) -> list[dict]:
        return [
            {"id": i, "k": 1, "x": 1, "ts": T0 + dt.timedelta(minutes=m), "op": "I", "seq": i}
            for i, m in enumerate(minutes)
        ]

    run_watermarked_epoch(m, wm, 0, rows(60))
    assert run_watermarked_epoch(m, wm, 1, rows(55)) == []  # the watermark is 60 - 10 = 50
    late = run_watermarked_epoch(m, wm, 2, rows(30, 70))
    assert [r["ts"] for r in late] == [T0 + dt.timedelta(minutes=30)]
    recovered = Watermark.recover(delay_us(DELAY), "ts", [w.last_commit() for w in [m.view, *m.state]])
    assert recovered.for_epoch(2) == wm.applied_us  # a replay of epoch 2 gets epoch 2's watermark
    assert recovered.for_epoch(3) == _us(T0 + dt.timedelta(minutes=70)) - delay_us(DELAY)
    assert m.view.last_commit().extra[LATE] == "1"


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
            {"sql": "SELECT id, ts FROM events", "watermark": "1 minute", "event_time": "ts"},
            {"events": {**EVENTS, "images": {"key": ["id"]}}},
            "views.v.watermark: the event time's source 'events' is a change feed",  # [images]: refused by the graph
        ),
    ],
)
def test_watermark_settings_are_checked_when_the_project_loads(
    tmp_path, view: dict, sources: dict, message: str
) -> None:
    from lakeview.errors import ConfigError
    from lakeview.project import parse_project

    if "changes" in sources.get("events", {}):
        sources["events"]["schema"] += ", op STRING"
    data = {"sources": sources or {"events": EVENTS}, "views": {"v": view}}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


def test_a_watermark_on_a_projection_over_a_change_feed_loads(tmp_path) -> None:
    """The graph judges the feed's images by their event time (late ones left out of the view, not of the
    feed's mirror): a projection over a [changes] feed takes a watermark too."""
    from lakeview.project import is_graph_view, parse_project

    feed = {**EVENTS, "schema": EVENTS["schema"] + ", op STRING"}
    feed["changes"] = {"operation": "op", "key": ["id"], "sequence": "id"}
    view = {"sql": "SELECT id, ts FROM events", "watermark": "1 minute", "event_time": "ts"}
    project = parse_project({"sources": {"events": feed}, "views": {"v": view}}, file="lakeview.toml", root=tmp_path)
    assert is_graph_view(project, "v")


def test_a_watermarked_window_over_a_change_feed_is_accepted(tmp_path) -> None:
    from lakeview.project import parse_project

    feed = {
        **EVENTS,
        "schema": EVENTS["schema"] + ", op STRING",
        "changes": {"operation": "op", "key": ["id"], "sequence": "id"},
    }
    data = {"sources": {"events": feed}, "views": {"v": {"sql": WINDOWED, "watermark": "10 minutes"}}}
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "10 minutes"


def test_a_watermarked_window_over_a_before_after_image_feed_is_accepted(tmp_path) -> None:
    from lakeview.project import parse_project

    data = {
        "sources": {"events": {**EVENTS, "images": {"key": ["id"]}}},
        "views": {"v": {"sql": WINDOWED, "watermark": "10 minutes"}},
    }
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "10 minutes"


def test_a_declared_event_time_gives_a_plain_aggregate_a_watermark(tmp_path) -> None:
    from lakeview.project import parse_project

    data = {
        "sources": {"events": EVENTS},
        "views": {
            "v": {"sql": "SELECT k, COUNT(*) AS n FROM events GROUP BY k", "watermark": "1 minute", "event_time": "ts"}
        },
    }
    assert parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path).views["v"].watermark == "1 minute"


def test_epoch_replayed_after_a_crash_between_commits_applies_its_own_watermark() -> None:
    """Crash after the state table committed epoch 2 (late rows set aside, closed windows
    dropped) but before the view did: the restarted pipeline recovers the watermark from the
    tables, replays epoch 2 with the watermark epoch 2 had, and ends equal to a clean run."""

    def rows(*minutes: int) -> list[dict]:
        return [
            {"id": i, "k": 1, "x": i, "ts": T0 + dt.timedelta(minutes=m), "op": "I", "seq": i}
            for i, m in enumerate(minutes)
        ]

    batches = [rows(1, 12, 18), rows(33, 9, 40), rows(52, 25, 31)]
    clean = maintainer(VIEWS[WATERMARKED][0], feed=None)
    wm = Watermark(delay_us(DELAY), "ts")
    for number, batch in enumerate(batches):
        run_watermarked_epoch(clean, wm, number, batch)

    crashed = maintainer(VIEWS[WATERMARKED][0], feed=None)
    wm = Watermark(delay_us(DELAY), "ts")
    for number, batch in enumerate(batches[:2]):
        run_watermarked_epoch(crashed, wm, number, batch)
    view_before = (crashed.view.rows, crashed.view.epoch, crashed.view.stamps)
    run_watermarked_epoch(crashed, wm, 2, batches[2])
    crashed.view.rows, crashed.view.epoch, crashed.view.stamps = view_before  # the view's commit never happened
    recovered = Watermark.recover(delay_us(DELAY), "ts", [w.last_commit() for w in [crashed.view, *crashed.state]])
    assert recovered.for_epoch(2) == _us(T0 + dt.timedelta(minutes=40)) - delay_us(DELAY)
    late = run_watermarked_epoch(crashed, recovered, 2, batches[2])
    assert [r["ts"] for r in late] == [T0 + dt.timedelta(minutes=25)]
    assert compare(crashed.view.rows, clean.view.rows).equal
    assert compare(crashed.state[0].rows, clean.state[0].rows).equal


# --- a change feed with a watermark ---------------------------------------------------------


def run_watermarked_changes(m: ViewMaintainer, wm: Watermark, number: int, rows: list[dict]) -> list[tuple[dict, str]]:
    """What the pipeline does per change-feed batch with a watermark (DuckDB in place of
    Spark): the newest change per key to the maintainer, which judges each image against the
    epoch's watermark. Returns the late images set aside, with their reasons."""
    late: list[tuple[dict, str]] = []
    m.watermark, m.closed_before_us = wm, wm.for_epoch(number)
    m.set_aside = lambda epoch, images, reason: late.extend((r, reason) for r in images.to_pylist())
    m.apply_changes(
        Epoch(view="v", number=number, frontier={}), latest_changes(FEED, pa.Table.from_pylist(rows, schema=SCHEMA))
    )
    return late


def held_rows(batches: list[list[dict]], delay: int, passes) -> tuple[list[dict], int]:
    """The rule over a change feed replayed independently: per batch each key's newest change;
    an image (the new one, or the old one an update or delete retracts) older than the greatest
    event time of the new images consumed (on time, ``passes``) in earlier batches minus the
    delay is late; a row is held from its on-time new image until an on-time retraction.
    Returns the rows held and the count of late images."""
    current: dict[int, tuple[dict, bool]] = {}
    kept: list[dict] = []
    high, late = None, 0
    for rows in batches:
        mark = None if high is None else high - delay

        def is_late(row: dict, mark: int | None = mark) -> bool:
            return mark is not None and row["ts"] is not None and _us(row["ts"]) < mark

        newest = {r["id"]: r for r in sorted(rows, key=lambda r: r["seq"])}
        consumed = []
        for id_, row in newest.items():
            if id_ in current:
                old, held = current.pop(id_)
                if is_late(old):
                    late += 1
                    kept += [old] if held else []
            if row["op"] != "D":
                current[id_] = (row, not is_late(row))
                late += is_late(row)
                consumed += [] if is_late(row) else [row]
        seen = [_us(r["ts"]) for r in consumed if r["ts"] is not None and passes(r)]
        high = max([*seen, *([high] if high is not None else [])], default=None)
    return kept + [r for r, held in current.values() if held], late


PASSES = {"tumbling": lambda r: True, "hopping": lambda r: r["x"] is not None and r["x"] > -20}
feed_change = st.tuples(
    st.sampled_from(["I", "I", "U", "U", "D"]),
    st.integers(0, 5),  # id
    st.integers(0, 2),  # k
    st.one_of(st.none(), st.integers(-30, 30)),  # x
    st.one_of(st.none(), st.integers(0, 90)),  # ts: minutes after T0
)


@pytest.mark.parametrize("name", list(PASSES))
@settings(max_examples=8, deadline=None)
@given(history=st.lists(st.lists(feed_change, max_size=8), min_size=1, max_size=5))
def test_watermarked_window_over_a_change_feed_equals_recompute_of_the_rule_after_every_epoch(
    name: str, history
) -> None:
    m = maintainer(VIEWS[name][0])
    wm = Watermark(delay_us(DELAY), "ts")
    batches: list[list[dict]] = []
    late_total, seq = 0, 0
    for number, changes in enumerate(history):
        rows = change_rows(changes, seq)
        seq += len(rows)
        batches.append(rows)
        applied = wm.for_epoch(number)
        late_total += len(run_watermarked_changes(m, wm, number, rows))
        assert_epoch_held(m, name, batches, number, applied, late_total)


def test_late_delete_and_update_of_a_closed_window_leave_its_row_while_open_windows_change_exactly() -> None:
    m = maintainer(VIEWS["tumbling"][0])
    wm = Watermark(delay_us(DELAY), "ts")

    def at(minute: int) -> dt.datetime:
        return T0 + dt.timedelta(minutes=minute)

    seqs = iter(range(1, 100))

    def row(op: str, id_: int, k: int | None = None, x: int | None = None, minute: int | None = None) -> dict:
        return {"id": id_, "k": k, "x": x, "ts": None if minute is None else at(minute), "op": op, "seq": next(seqs)}

    def view() -> dict:
        return {(r["ws"].strftime("%H:%M"), r["k"]): (r["n"], r["s"]) for r in m.view.rows.to_pylist()}

    run_watermarked_changes(
        m, wm, 0, [row("I", 1, 1, 5, 1), row("I", 2, 1, 7, 4), row("I", 3, 2, 1, 18), row("I", 4, 1, 2, 22)]
    )
    assert view() == {("00:00", 1): (2, 12), ("00:10", 2): (1, 1), ("00:20", 1): (1, 2)}
    # watermark 00:12: [00:00, 00:10) is closed
    late = run_watermarked_changes(m, wm, 1, [row("U", 3, 2, 10, 19), row("D", 4), row("D", 1), row("I", 5, 1, 3, 35)])
    assert [(r["id"], r["__lv_w"]) for r, _ in late] == [(1, -1)]  # the delete of a closed window's row
    assert late[0][1].startswith("late: ts older than the watermark 2026-01-01 00:12:00 UTC")
    assert view() == {("00:00", 1): (2, 12), ("00:10", 2): (1, 10), ("00:30", 1): (1, 3)}
    assert m.view.last_commit().extra[LATE] == "1" and m.mirror.last_commit().extra[LATE] == "1"
    # watermark 00:25: order 2 moves out of the closed window: its old image is late, its new one applied
    late = run_watermarked_changes(m, wm, 2, [row("U", 2, 1, 9, 40)])
    assert [(r["id"], r["__lv_w"]) for r, _ in late] == [(2, -1)]
    assert view() == {("00:00", 1): (2, 12), ("00:10", 2): (1, 10), ("00:30", 1): (1, 3), ("00:40", 1): (1, 9)}
    assert sorted(r["id"] for r in m.mirror.rows.to_pylist()) == [2, 3, 5]  # the mirror follows the source
    assert {r["ws"].strftime("%H:%M") for r in m.state[0].rows.to_pylist()} == {"00:30", "00:40"}
    assert int(m.view.last_commit().extra["lakeview.watermark-us"]) == _us(at(25))


def test_change_feed_epoch_replayed_after_a_crash_before_the_mirror_commit_judges_the_same_images() -> None:
    """Crash after the view committed epoch 2 but before the mirror did: the restarted pipeline
    recovers the watermark from the tables, finds the same old images in the mirror, sets the
    same images aside and ends equal to a clean run."""

    def rows(*changes: tuple) -> list[dict]:
        return [
            {"id": i, "k": 1, "x": i, "ts": None if m is None else T0 + dt.timedelta(minutes=m), "op": op, "seq": s}
            for s, (op, i, m) in enumerate(changes)
        ]

    batches = [
        rows(("I", 1, 1), ("I", 2, 12), ("I", 3, 18)),
        rows(("I", 4, 33), ("U", 2, 30)),
        rows(("D", 1, None), ("U", 3, 40), ("I", 5, 9)),
    ]
    clean = maintainer(VIEWS[WATERMARKED][0])
    wm = Watermark(delay_us(DELAY), "ts")
    clean_late = [run_watermarked_changes(clean, wm, number, batch) for number, batch in enumerate(batches)]

    crashed = maintainer(VIEWS[WATERMARKED][0])
    wm = Watermark(delay_us(DELAY), "ts")
    for number, batch in enumerate(batches[:2]):
        run_watermarked_changes(crashed, wm, number, batch)
    mirror_before = (crashed.mirror.rows, crashed.mirror.epoch, crashed.mirror.stamps)
    run_watermarked_changes(crashed, wm, 2, batches[2])
    crashed.mirror.rows, crashed.mirror.epoch, crashed.mirror.stamps = (
        mirror_before  # the mirror's commit never happened
    )
    recovered = Watermark.recover(delay_us(DELAY), "ts", [w.last_commit() for w in crashed.tables()])
    assert recovered.for_epoch(2) == _us(T0 + dt.timedelta(minutes=23))
    late = run_watermarked_changes(crashed, recovered, 2, batches[2])
    assert late == clean_late[2]
    assert sorted((r["id"], r["__lv_w"]) for r, _ in late) == [
        (1, -1),
        (3, -1),
        (5, 1),
    ]  # 00:01 and 00:18 retracted, 00:09 inserted
    assert compare(crashed.view.rows, clean.view.rows).equal and compare(crashed.mirror.rows, clean.mirror.rows).equal
    assert crashed.mirror.last_commit().extra == clean.mirror.last_commit().extra


# --- a before/after-image feed with a watermark -----------------------------------------------

IMAGE_COLUMNS = ["id", "k", "x", "ts"]
IMAGE_ZSET = pa.schema([*(SCHEMA.field(c) for c in IMAGE_COLUMNS), pa.field("__lv_w", pa.int32())])


def image_maintainer(sql: str) -> ViewMaintainer:
    """A view over a before/after-image feed keyed by ``id``: state tables, no mirror."""
    plan = plan_view("v", sql)
    assert isinstance(plan, KeyedAggregatePlan)
    return ViewMaintainer(
        plan=plan, view=MemoryWriter(), state=[MemoryWriter() for _ in range(1 + len(plan.multisets))], feed_key=("id",)
    )


def run_watermarked_images(
    m: ViewMaintainer, wm: Watermark, number: int, images: list[tuple[dict | None, dict | None]]
) -> list[tuple[dict, str]]:
    """What the pipeline does per image-feed batch with a watermark (DuckDB in place of Spark):
    the batch's images as a Z-set (before -1, after +1) to the maintainer, which judges each
    image against the epoch's watermark. Returns the late images set aside, with their reasons."""
    late: list[tuple[dict, str]] = []
    m.watermark, m.closed_before_us = wm, wm.for_epoch(number)
    m.set_aside = lambda epoch, table, reason: late.extend((r, reason) for r in table.to_pylist())
    weighted = [
        {**{c: row[c] for c in IMAGE_COLUMNS}, "__lv_w": w}
        for before, after in images
        for row, w in ((before, -1), (after, 1))
        if row
    ]
    m.apply_images(Epoch(view="v", number=number, frontier={}), pa.Table.from_pylist(weighted, schema=IMAGE_ZSET))
    return late


def as_images(
    changes: list[tuple], source: dict[int, dict], seq: int
) -> tuple[list[tuple[dict | None, dict | None]], list[dict]]:
    """``(op, id, k, x, minutes)`` changes as a before/after-image batch against ``source`` (the
    current row per id, moved forward), and the same batch as an operation-column feed: per key
    its net change (none when the batch leaves the key's row as it was)."""
    start = dict(source)
    images = []
    for row in change_rows(changes, seq):
        before = source.get(row["id"])
        if row["op"] == "D":
            if before is None:
                continue
            del source[row["id"]]
            images.append((before, None))
        else:
            source[row["id"]] = {**row, "op": "U"}
            images.append((before, source[row["id"]]))
    ops = []
    for id_ in sorted({before["id"] if before else after["id"] for before, after in images}):
        old, new = start.get(id_), source.get(id_)
        if old != new:
            ops.append(
                new if new is not None else {"id": id_, "k": None, "x": None, "ts": None, "op": "D", "seq": old["seq"]}
            )
    return images, ops


@pytest.mark.parametrize("name", list(PASSES))
@settings(max_examples=8, deadline=None)
@given(history=st.lists(st.lists(feed_change, max_size=8), min_size=1, max_size=5))
def test_watermarked_window_over_an_image_feed_equals_the_same_rule_over_an_operation_column_feed(
    name: str, history
) -> None:
    """The images feed's view, late count and watermark equal what the rule gives over the same
    changes as an operation-column feed, after every epoch; closed windows keep no state."""
    m = image_maintainer(VIEWS[name][0])
    wm = Watermark(delay_us(DELAY), "ts")
    source: dict[int, dict] = {}
    op_batches: list[list[dict]] = []
    late_total, seq = 0, 0
    for number, changes in enumerate(history):
        images, ops = as_images(changes, source, seq)
        seq += len(changes)
        op_batches.append(ops)
        applied = wm.for_epoch(number)
        late_total += len(run_watermarked_images(m, wm, number, images))
        assert_epoch_held(m, name, op_batches, number, applied, late_total)


def test_late_images_of_a_closed_window_are_left_out_while_open_windows_change_exactly() -> None:
    m = image_maintainer(VIEWS["tumbling"][0])
    wm = Watermark(delay_us(DELAY), "ts")

    def o(id_: int, k: int, x: int, minute: int) -> dict:
        return {"id": id_, "k": k, "x": x, "ts": T0 + dt.timedelta(minutes=minute)}

    def view() -> dict:
        return {(r["ws"].strftime("%H:%M"), r["k"]): (r["n"], r["s"]) for r in m.view.rows.to_pylist()}

    run_watermarked_images(
        m, wm, 0, [(None, o(1, 1, 5, 1)), (None, o(2, 1, 7, 4)), (None, o(3, 2, 1, 18)), (None, o(4, 1, 2, 22))]
    )
    assert view() == {("00:00", 1): (2, 12), ("00:10", 2): (1, 1), ("00:20", 1): (1, 2)}
    # watermark 00:12: [00:00, 00:10) is closed; order 6 is updated twice in the batch (its middle image cancels)
    late = run_watermarked_images(
        m,
        wm,
        1,
        [
            (o(3, 2, 1, 18), o(3, 2, 10, 19)),
            (o(4, 1, 2, 22), None),
            (o(1, 1, 5, 1), None),
            (None, o(5, 1, 3, 35)),
            (None, o(6, 2, 4, 36)),
            (o(6, 2, 4, 36), o(6, 2, 8, 37)),
        ],
    )
    assert [(r["id"], r["__lv_w"]) for r, _ in late] == [(1, -1)]  # the delete of a closed window's row
    assert late[0][1].startswith("late: ts older than the watermark 2026-01-01 00:12:00 UTC")
    assert view() == {("00:00", 1): (2, 12), ("00:10", 2): (1, 10), ("00:30", 1): (1, 3), ("00:30", 2): (1, 8)}
    assert m.view.last_commit().extra[LATE] == "1"
    # watermark 00:27: order 2 moves out of the closed window (old image late, new applied), a late insert
    late = run_watermarked_images(m, wm, 2, [(o(2, 1, 7, 4), o(2, 1, 9, 40)), (None, o(7, 2, 6, 20))])
    assert sorted((r["id"], r["__lv_w"]) for r, _ in late) == [(2, -1), (7, 1)]
    assert view() == {
        ("00:00", 1): (2, 12),
        ("00:10", 2): (1, 10),
        ("00:30", 1): (1, 3),
        ("00:30", 2): (1, 8),
        ("00:40", 1): (1, 9),
    }
    assert {r["ws"].strftime("%H:%M") for r in m.state[0].rows.to_pylist()} == {"00:30", "00:40"}
    assert int(m.view.last_commit().extra["lakeview.watermark-us"]) == _us(T0 + dt.timedelta(minutes=27))
    # no change: the watermark (00:30) still drops the state of the windows it closed
    assert run_watermarked_images(m, wm, 3, []) == []
    assert {r["ws"].strftime("%H:%M") for r in m.state[0].rows.to_pylist()} == {"00:30", "00:40"}
    run_watermarked_images(m, wm, 4, [(None, o(8, 1, 1, 55))])
    run_watermarked_images(m, wm, 5, [])  # watermark 00:45
    assert {r["ws"].strftime("%H:%M") for r in m.state[0].rows.to_pylist()} == {"00:40", "00:50"}


def test_image_feed_epoch_replayed_after_a_crash_between_commits_judges_the_same_images() -> None:
    """Crash after the state tables committed epoch 2 but before the view did: the restarted
    pipeline recovers the watermark from the tables, sets the same images aside and ends equal
    to a clean run."""

    def o(id_: int, minute: int) -> dict:
        return {"id": id_, "k": 1, "x": id_, "ts": T0 + dt.timedelta(minutes=minute)}

    batches = [
        [(None, o(1, 1)), (None, o(2, 12)), (None, o(3, 18))],
        [(None, o(4, 33)), (o(2, 12), o(2, 30))],
        [(o(1, 1), None), (o(3, 18), o(3, 40)), (None, o(5, 9))],
    ]
    clean = image_maintainer(VIEWS[WATERMARKED][0])
    wm = Watermark(delay_us(DELAY), "ts")
    clean_late = [run_watermarked_images(clean, wm, number, batch) for number, batch in enumerate(batches)]

    crashed = image_maintainer(VIEWS[WATERMARKED][0])
    wm = Watermark(delay_us(DELAY), "ts")
    for number, batch in enumerate(batches[:2]):
        run_watermarked_images(crashed, wm, number, batch)
    view_before = (crashed.view.rows, crashed.view.epoch, crashed.view.stamps)
    run_watermarked_images(crashed, wm, 2, batches[2])
    crashed.view.rows, crashed.view.epoch, crashed.view.stamps = view_before  # the view's commit never happened
    recovered = Watermark.recover(delay_us(DELAY), "ts", [w.last_commit() for w in crashed.tables()])
    assert recovered.for_epoch(2) == _us(T0 + dt.timedelta(minutes=23))
    late = run_watermarked_images(crashed, recovered, 2, batches[2])
    assert late == clean_late[2]
    assert sorted((r["id"], r["__lv_w"]) for r, _ in late) == [(1, -1), (3, -1), (5, 1)]
    assert (
        compare(crashed.view.rows, clean.view.rows).equal and compare(crashed.state[0].rows, clean.state[0].rows).equal
    )
    assert crashed.view.last_commit().extra == clean.view.last_commit().extra
