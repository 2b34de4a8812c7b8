"""Event-time windows with a watermark, and a global aggregate, through real Spark: files land
epoch by epoch, late rows go to the quarantine and are counted, the views equal `lakeview
verify`'s recompute, closed windows' state rows are gone while their view rows stay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from catalog_api.ops import view_tables as tables
from catalog_api.ops.status import view_statuses
from catalog_api.server import CatalogServer
from lakeview.graph.expire import bounds
from lakeview.ivm import oracle
from lakeview.project import explain_view
from spark_jobs.graph_pipeline import GraphPipeline
from spark_jobs.sources.quarantine import quarantined_rows
from tests.spark_jobs.test_changes import FEED, change, land
from tests.spark_jobs.test_graph_watermark import state_log_rows
from tests.spark_jobs.test_pipeline import read_view, start

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = "event_id BIGINT, product_id BIGINT, amount DOUBLE, ts TIMESTAMP"
TUMBLING = """
SELECT window(ts, '10 minutes').start AS window_start, window(ts, '10 minutes').end AS window_end, product_id,
       SUM(amount) AS total, COUNT(*) AS n, AVG(amount) AS avg_amount
FROM events
GROUP BY window(ts, '10 minutes'), product_id
"""
HOPPING = """
SELECT window.start AS window_start, window.end AS window_end, COUNT(*) AS n, SUM(amount) AS total
FROM events WHERE amount > 0
GROUP BY window(ts, '10 minutes', '5 minutes')
"""
ids = iter(range(1, 10_000))


def event(minute: int, product: int = 1, amount: float = 1.0) -> str:
    return json.dumps(
        {
            "event_id": next(ids),
            "product_id": product,
            "amount": amount,
            "ts": (T0 + timedelta(minutes=minute)).isoformat(),
        }
    )


# minutes after T0; the tumbling view's watermark is 10 min, the hopping view's 5 min
EPOCHS = [
    [event(1), event(7, 2), event(12), event(18, 2, 4.0)],
    [event(31), event(33, 2), event(5), event(11, 1, 2.0)],  # 5: late for both (W 8 / 13); 11: late for hopping only
    [event(52), event(20), "{not json"],  # 20: late for both (W 23 / 28)
]


def verify(project, view: str) -> oracle.Comparison:
    """What `lakeview verify VIEW` does: recompute at the last commit's frontier and compare."""
    record = tables.last_commit(project, view)
    assert record is not None
    files = oracle.frontier_files(project, view, record.frontier)
    return oracle.compare(tables.read_rows(project, view, record.snapshot_id), oracle.recompute(project, view, files))


def state_windows(pipeline, catalog_server: CatalogServer, view: str, source: str) -> set[str]:
    """The starts of the 10-minute windows a view's state still holds: the aggregate's state the watermark
    bounds (its group records, and MIN/MAX's values), keyed by the window's end, read back from the view's state
    log through the catalog."""
    starts = set()
    for bound in (b for table_bounds in bounds(pipeline.graph, source, "ts").values() for b in table_bounds):
        rows = state_log_rows(catalog_server, view, bound.table, "window_tests")
        starts |= {(r[bound.column] - timedelta(minutes=10)).strftime("%H:%M") for r in rows}
    return starts


def test_tumbling_and_hopping_windows_with_a_watermark(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    tumbling, hopping = f"{unique_name[:40]}_t", f"{unique_name[:40]}_h"
    sources = {"events": {"format": "json", "path": "landing/events", "schema": SCHEMA}}
    views = {
        tumbling: {"sql": TUMBLING, "cadence": "200ms", "namespace": "window_tests", "watermark": "10 minutes"},
        hopping: {"sql": HOPPING, "cadence": "200ms", "namespace": "window_tests", "watermark": "5 minutes"},
    }
    project = make_project(views=views, sources=sources)
    landing = project.source_path("events")
    t_pipeline, t_query = start(spark, project, tumbling, catalog_server)
    h_pipeline, h_query = start(spark, project, hopping, catalog_server)
    try:
        for number, lines in enumerate(EPOCHS):
            land(landing, f"{number:03d}.json", lines)
            t_query.processAllAvailable()
            h_query.processAllAvailable()
            for view in (tumbling, hopping):
                comparison = verify(project, view)
                assert comparison.equal, f"{view} after epoch {number}: {comparison.describe()}"
    finally:
        t_query.stop()
        h_query.stop()

    late = {
        view: sorted(
            json.loads(r["record"])["ts"][11:16]
            for r in quarantined_rows(project, "events", view)
            if r["reason"].startswith("late:")
        )
        for view in (tumbling, hopping)
    }
    assert late == {tumbling: ["00:05", "00:20"], hopping: ["00:05", "00:11", "00:20"]}
    reason = next(r["reason"] for r in quarantined_rows(project, "events", tumbling) if r["reason"].startswith("late:"))
    assert "watermark 2026-01-01 00:08:00 UTC" in reason
    statuses = {s.view: s for s in view_statuses(project)}
    assert (statuses[tumbling].rows_late, statuses[hopping].rows_late) == (2, 3)
    assert statuses[tumbling].rows_quarantined == 3  # the two late rows and the malformed line

    view = {
        (r["window_start"].strftime("%H:%M"), r["product_id"]): (r["n"], r["total"])
        for r in read_view(catalog_server, "window_tests", tumbling).to_pylist()
    }
    assert view == {
        ("00:00", 1): (1, 1.0),
        ("00:00", 2): (1, 1.0),
        ("00:10", 1): (2, 3.0),
        ("00:10", 2): (1, 4.0),
        ("00:30", 1): (1, 1.0),
        ("00:30", 2): (1, 1.0),
        ("00:50", 1): (1, 1.0),
    }
    # Epoch 2 applied the watermark 00:23: the state of windows ended by then is gone, their view rows stay.
    assert state_windows(t_pipeline, catalog_server, tumbling, "events") == {"00:30", "00:50"}
    hop = {
        r["window_start"].strftime("%H:%M"): r["n"]
        for r in read_view(catalog_server, "window_tests", hopping).to_pylist()
    }
    assert hop == {
        "23:55": 1,
        "00:00": 2,
        "00:05": 2,
        "00:10": 2,
        "00:15": 1,
        "00:25": 2,
        "00:30": 2,
        "00:45": 1,
        "00:50": 1,
    }
    summary = tables.last_commit(project, tumbling)
    assert summary is not None and summary.extra["lakeview.watermark-us"] == str(
        int((T0 + timedelta(minutes=23)).timestamp() * 1_000_000)
    )
    text = explain_view(project, tumbling)
    ((bound,),) = bounds(t_pipeline.graph, "events", "ts").values()
    closing = "watermark 10 minutes on events.ts: its late rows quarantined; state dropped once its windows close"
    assert f"{closing}: {bound.table}" in text
    assert isinstance(h_pipeline, GraphPipeline)


def test_watermark_survives_a_restart_and_lakeview_verify_agrees(
    spark, catalog_server: CatalogServer, lake_dir, tmp_path, unique_name: str
) -> None:
    from typer.testing import CliRunner

    from lakeview.cli.main import app
    from lakeview.project import load_project

    toml = f"""
[lake]
warehouse = "{lake_dir / "warehouse"}"
catalog_store = "sqlite:///{lake_dir / "catalog.db"}"
[server]
port = {catalog_server.port}
[sources.events]
format = "json"
path = "landing/events"
schema = "{SCHEMA}"
[views.{unique_name}]
sql = \"\"\"{TUMBLING}\"\"\"
cadence = "1s"
namespace = "window_tests"
watermark = "10 minutes"
"""
    (tmp_path / "lakeview.toml").write_text(toml)
    project = load_project(tmp_path / "lakeview.toml")
    landing = project.source_path("events")
    _, query = start(spark, project, unique_name, catalog_server)
    try:
        land(landing, "000.json", [event(40)])
        query.processAllAvailable()
    finally:
        query.stop()
    _, query = start(
        spark, project, unique_name, catalog_server
    )  # a new process: the watermark comes from the last commit
    try:
        land(landing, "001.json", [event(29), event(31)])
        query.processAllAvailable()
    finally:
        query.stop()
    assert [r["reason"][:5] for r in quarantined_rows(project, "events", unique_name)] == ["late:"]
    result = CliRunner().invoke(app, ["verify", unique_name, "-p", str(tmp_path)])
    assert result.exit_code == 0 and result.output.strip().endswith("equal"), result.output


def test_global_aggregate_under_a_change_feed(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    schema = "order_id BIGINT, product_id BIGINT, quantity INT, op STRING, seq BIGINT"
    sources = {"changes": {"format": "json", "path": "landing/changes", "schema": schema, "changes": FEED}}
    sql = "SELECT COUNT(*) AS n, SUM(quantity) AS total, MAX(quantity) AS hi, COUNT(DISTINCT product_id) AS products FROM changes WHERE quantity > 0"
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "window_tests"}}, sources=sources
    )
    landing = project.source_path("changes")
    epochs = [
        [change("c", i, i % 2, i) for i in range(1, 6)],
        [change("u", 5, 1, 50), change("d", 1), change("u", 2, 0, -1)],  # order 2 leaves through the WHERE
        [change("d", i) for i in (2, 3, 4, 5)],  # no rows left
    ]
    _, query = start(spark, project, unique_name, catalog_server)
    seen = []
    try:
        for number, lines in enumerate(epochs):
            land(landing, f"{number:03d}.json", lines)
            query.processAllAvailable()
            rows = read_view(catalog_server, "window_tests", unique_name).to_pylist()
            seen.append(rows)
            comparison = verify(project, unique_name)
            assert comparison.equal, f"after epoch {number}: {comparison.describe()}"
    finally:
        query.stop()
    assert seen == [
        [{"n": 5, "total": 15, "hi": 5, "products": 2}],
        [{"n": 3, "total": 57, "hi": 50, "products": 2}],
        [{"n": 0, "total": None, "hi": None, "products": 0}],
    ]


CHANGES_SCHEMA = "order_id BIGINT, product_id BIGINT, amount DOUBLE, ts TIMESTAMP, op STRING, seq BIGINT"
WINDOW_OVER_CHANGES = """
SELECT window(ts, '10 minutes').start AS window_start, window(ts, '10 minutes').end AS window_end, product_id,
       SUM(amount) AS total, COUNT(*) AS n, AVG(amount) AS avg_amount, MIN(amount) AS lo, MAX(amount) AS hi
FROM order_changes
GROUP BY window(ts, '10 minutes'), product_id
"""
seqs = iter(range(1, 10_000))


def timed_change(
    op: str, order_id: int, product: int | None = None, amount: float | None = None, minute: int | None = None
) -> str:
    """A change row; a delete carries only its key (its event time is the mirror's old image's)."""
    row = {"order_id": order_id, "op": op, "seq": next(seqs)}
    if op != "d":
        row.update(product_id=product, amount=amount, ts=(T0 + timedelta(minutes=minute)).isoformat())
    return json.dumps(row)


# minutes after T0; the watermark is 10 minutes
CHANGE_EPOCHS = [
    [
        timed_change("c", 1, 1, 5.0, 1),
        timed_change("c", 2, 1, 7.0, 4),
        timed_change("c", 3, 2, 1.0, 18),
        timed_change("c", 4, 1, 2.0, 22),
    ],
    # watermark 00:12: an update and a delete in open windows, a late delete of a closed window's row
    [timed_change("u", 3, 2, 10.0, 19), timed_change("d", 4), timed_change("d", 1), timed_change("c", 5, 1, 3.0, 35)],
    # watermark 00:25: order 2 leaves the closed window (old image late, new applied), a delete
    # empties an open window, a late insert
    [timed_change("u", 2, 1, 9.0, 40), timed_change("d", 5), timed_change("c", 6, 2, 4.0, 20)],
]


def run_window_epochs(spark, catalog_server: CatalogServer, project, view: str, source: str, epochs: list[list[str]]):
    """Land each epoch's lines into ``source``, let the view's query take them, check the view
    against ``verify`` after every epoch; (the pipeline, the view's windows after each epoch)."""
    landing = project.source_path(source)
    pipeline, query = start(spark, project, view, catalog_server)
    seen = []
    try:
        for number, lines in enumerate(epochs):
            land(landing, f"{number:03d}.json", lines)
            query.processAllAvailable()
            comparison = verify(project, view)
            assert comparison.equal, f"after epoch {number}: {comparison.describe()}"
            seen.append(
                {
                    (r["window_start"].strftime("%H:%M"), r["product_id"]): (r["n"], r["total"], r["lo"], r["hi"])
                    for r in read_view(catalog_server, "window_tests", view).to_pylist()
                }
            )
    finally:
        query.stop()
    return pipeline, seen


def test_watermarked_tumbling_window_over_a_change_feed(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "order_changes": {"format": "json", "path": "landing/order_changes", "schema": CHANGES_SCHEMA, "changes": FEED}
    }
    views = {
        unique_name: {
            "sql": WINDOW_OVER_CHANGES,
            "cadence": "200ms",
            "namespace": "window_tests",
            "watermark": "10 minutes",
        }
    }
    project = make_project(views=views, sources=sources)
    pipeline, seen = run_window_epochs(spark, catalog_server, project, unique_name, "order_changes", CHANGE_EPOCHS)
    assert seen == [
        {("00:00", 1): (2, 12.0, 5.0, 7.0), ("00:10", 2): (1, 1.0, 1.0, 1.0), ("00:20", 1): (1, 2.0, 2.0, 2.0)},
        {("00:00", 1): (2, 12.0, 5.0, 7.0), ("00:10", 2): (1, 10.0, 10.0, 10.0), ("00:30", 1): (1, 3.0, 3.0, 3.0)},
        {("00:00", 1): (2, 12.0, 5.0, 7.0), ("00:10", 2): (1, 10.0, 10.0, 10.0), ("00:40", 1): (1, 9.0, 9.0, 9.0)},
    ]
    late = sorted(
        (json.loads(r["record"])["order_id"], r["reason"].rsplit("; ", 1)[1])
        for r in quarantined_rows(project, "order_changes", unique_name)
    )
    assert late == [(1, "retracted old image left out"), (2, "retracted old image left out"), (6, "new image left out")]
    summary = tables.last_commit(project, unique_name)
    assert summary is not None and summary.extra["lakeview.rows-late"] == "2"
    assert summary.extra["lakeview.watermark-us"] == str(int((T0 + timedelta(minutes=25)).timestamp() * 1_000_000))
    status = {s.view: s for s in view_statuses(project)}[unique_name]
    assert (status.rows_late, status.rows_quarantined) == (3, 3)
    assert state_windows(pipeline, catalog_server, unique_name, "order_changes") == {"00:40"}  # closed ones gone


IMAGE_ROW = "order_id BIGINT, product_id BIGINT, amount DOUBLE, ts TIMESTAMP"
WINDOW_OVER_IMAGES = WINDOW_OVER_CHANGES.replace("order_changes", "order_images")


def o(order_id: int, product: int, amount: float, minute: int) -> dict:
    return {
        "order_id": order_id,
        "product_id": product,
        "amount": amount,
        "ts": (T0 + timedelta(minutes=minute)).isoformat(),
    }


def image(before: dict | None, after: dict | None) -> str:
    return json.dumps({"before": before, "after": after})


# minutes after T0; the watermark is 10 minutes
IMAGE_EPOCHS = [
    [
        image(None, o(1, 1, 5.0, 1)),
        image(None, o(2, 1, 7.0, 4)),
        image(None, o(3, 2, 1.0, 18)),
        image(None, o(4, 1, 2.0, 22)),
    ],
    # watermark 00:12: an update and a delete in open windows, a late delete of a closed window's
    # row, order 7 inserted and updated in one batch (its first image cancels), a malformed line
    [
        image(o(3, 2, 1.0, 18), o(3, 2, 10.0, 19)),
        image(o(4, 1, 2.0, 22), None),
        image(o(1, 1, 5.0, 1), None),
        image(None, o(5, 1, 3.0, 35)),
        image(None, o(7, 2, 4.0, 36)),
        image(o(7, 2, 4.0, 36), o(7, 2, 8.0, 37)),
        "{not json",
    ],
    # watermark 00:27: order 2 leaves the closed window (old image late, new applied), a delete
    # empties an open window, a late insert
    [image(o(2, 1, 7.0, 4), o(2, 1, 9.0, 40)), image(o(5, 1, 3.0, 35), None), image(None, o(6, 2, 4.0, 20))],
]


def test_watermarked_tumbling_window_over_a_before_after_image_feed(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "order_images": {
            "format": "json",
            "path": "landing/order_images",
            "schema": IMAGE_ROW,
            "images": {"key": ["order_id"]},
        }
    }
    views = {
        unique_name: {
            "sql": WINDOW_OVER_IMAGES,
            "cadence": "200ms",
            "namespace": "window_tests",
            "watermark": "10 minutes",
        }
    }
    project = make_project(views=views, sources=sources)
    pipeline, seen = run_window_epochs(spark, catalog_server, project, unique_name, "order_images", IMAGE_EPOCHS)
    assert seen == [
        {("00:00", 1): (2, 12.0, 5.0, 7.0), ("00:10", 2): (1, 1.0, 1.0, 1.0), ("00:20", 1): (1, 2.0, 2.0, 2.0)},
        {
            ("00:00", 1): (2, 12.0, 5.0, 7.0),
            ("00:10", 2): (1, 10.0, 10.0, 10.0),
            ("00:30", 1): (1, 3.0, 3.0, 3.0),
            ("00:30", 2): (1, 8.0, 8.0, 8.0),
        },
        {
            ("00:00", 1): (2, 12.0, 5.0, 7.0),
            ("00:10", 2): (1, 10.0, 10.0, 10.0),
            ("00:30", 2): (1, 8.0, 8.0, 8.0),
            ("00:40", 1): (1, 9.0, 9.0, 9.0),
        },
    ]
    quarantined = quarantined_rows(project, "order_images", unique_name)
    late = sorted(
        (json.loads(r["record"])["order_id"], json.loads(r["record"])["ts"][11:16], r["reason"].rsplit("; ", 1)[1])
        for r in quarantined
        if r["reason"].startswith("late:")
    )
    assert late == [
        (1, "00:01", "retracted old image left out"),
        (2, "00:04", "retracted old image left out"),
        (6, "00:20", "new image left out"),
    ]
    assert [r["reason"][:9] for r in quarantined if not r["reason"].startswith("late:")] == ["malformed"]
    summary = tables.last_commit(project, unique_name)
    assert summary is not None and summary.extra["lakeview.rows-late"] == "2"
    assert summary.extra["lakeview.watermark-us"] == str(int((T0 + timedelta(minutes=27)).timestamp() * 1_000_000))
    status = {s.view: s for s in view_statuses(project)}[unique_name]
    assert (status.rows_late, status.rows_quarantined) == (3, 4)
    assert state_windows(pipeline, catalog_server, unique_name, "order_images") == {"00:30", "00:40"}  # closed: gone
    mirrors = pipeline.mirrors if isinstance(pipeline, GraphPipeline) else pipeline.maintainer.mirror
    assert not mirrors  # the images carry the old rows
