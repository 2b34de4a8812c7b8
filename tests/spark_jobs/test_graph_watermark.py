"""A watermark on a windowed join view kept as an operator graph, by real Spark and the catalog: a tumbling
window over orders ⋈ a products change feed with ``watermark = "10 minutes"`` (the event time: ``window()``'s
``o.ts``, a column of orders). Late orders are quarantined (the reason names the watermark) and counted
(``lakeview.rows-late``, status), the view equals Spark's own window() over the orders that were on time and
DuckDB's recompute (``lakeview verify``), and after a restart the watermark is recovered from the last commit.
The first batch (the history, past ``driver_rows_max``) is written by the executors: nothing is late in it, and
its commit carries the watermark's first advance (the newest order's time, computed by Spark). The state only
closed windows reach (orders pre-aggregated by their time below the join) is dropped in the commit of the epoch
whose watermark closes them, read back from the state log through the catalog; the join's sides keep every row
(a product's update still re-groups closed windows)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from catalog_api.ops import view_tables
from catalog_api.ops.status import view_statuses
from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from lakeview.graph import WEIGHT
from lakeview.graph.expire import bounds
from lakeview.ivm import oracle
from lakeview.project import is_graph_view
from lakeview.sql.watermark import APPLIED, LATE, MAX_EVENT
from spark_jobs.sources.quarantine import quarantined_rows
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_graph_backfill import BOUNDS, by_executors
from tests.spark_jobs.test_graph_pipeline import NS, assert_recomputed, change, read, start
from tests.spark_jobs.test_graph_windows import SOURCES, T0, VIEWS, micros, plain
from writers.graph_log import LAYOUT, OP, log_table_name

MINUTE_US = 60_000_000
T0_US = plain(T0)
SQL = VIEWS["tumbling_join"].format(orders="orders", products="products")


def order(i: int, minute: float | None, qty: int, pid: int) -> str:
    ts = None if minute is None else (T0 + timedelta(minutes=minute)).isoformat()
    return json.dumps({"id": i, "pid": pid, "qty": qty, "ts": ts})


# epoch 0: max event time 50 → epoch 1's watermark 40: order 101 (30) is late, 102 (55) and 103 (NULL) are not;
# the update of product 2 moves rows of closed windows (the watermark does not freeze a join's dimensions).
# After a restart, epoch 2's watermark is 55 - 10 = 45: order 201 (44) is late, 202 (46) is not.
EPOCHS = [
    {
        "products": [change("c", p, category=("toys", "books")[p % 2]) for p in range(1, 5)],
        "orders": [order(i, i * 5, 1 + i % 3, 1 + i % 4) for i in range(11)],
    },
    {
        "products": [change("u", 2, category="games")],
        "orders": [order(101, 30, 7, 1), order(102, 55, 2, 2), order(103, None, 1, 3)],
    },
    {"orders": [order(201, 44, 5, 1), order(202, 46, 3, 4)]},
]


def on_time_by_spark(spark, project, view: str, late: set[int]) -> Counter:
    """The view's SQL run by Spark (its own window()) over the current inputs without the late orders."""
    files = oracle.frontier_files(project, view, read_commit(project, view).frontier)
    names = {}
    for source in ("orders", "products"):
        rows = [
            r
            for r in oracle.source_rows(project, source, files[source]).to_pylist()
            if r["id"] not in late or source != "orders"
        ]
        names[source] = f"{view}_{source}"
        spark.createDataFrame(rows, schema=project.sources[source].schema_).createOrReplaceTempView(names[source])
    frame = spark.sql(VIEWS["tumbling_join"].format(**names))
    frame = frame.select(
        [F.unix_micros(f.name) if f.dataType == TimestampType() else F.col(f.name) for f in frame.schema]
    )
    return Counter(tuple(plain(v) for v in r) for r in frame.collect())


def state_log_rows(catalog_server: CatalogServer, view: str, state: str, namespace: str = NS) -> list[dict]:
    """The rows one operator's state holds (by its column names), read back from the view's state log through
    the catalog: the log's rows of that state, netted by their weights."""
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    log = catalog.load_table((namespace, log_table_name(view)))
    slots = json.loads(log.properties[LAYOUT])[state]
    net: Counter = Counter()
    for r in log.scan(row_filter=EqualTo(OP, state)).to_arrow().to_pylist():
        net[tuple(r[slot] for _, slot in slots)] += r[WEIGHT]
    return [dict(zip([column for column, _ in slots], row, strict=True)) for row, weight in net.items() if weight]


def state_rows(catalog_server: CatalogServer, view: str, state: str) -> int:
    return len(state_log_rows(catalog_server, view, state))


def read_commit(project, view: str):
    record = view_tables.last_commit(project, view)
    assert record is not None
    return record


def test_late_orders_of_a_windowed_join_are_quarantined_and_the_watermark_survives_a_restart(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    view = unique_name[:50]
    views = {view: {"sql": SQL, "cadence": "100ms", "namespace": NS, "watermark": "10 minutes"}}
    project = make_project(views=views, sources={s: SOURCES[s] for s in ("orders", "products")})
    project = project.model_copy(update={"spark": SparkConfig(**BOUNDS)})
    assert is_graph_view(project, view)
    for source, lines in EPOCHS[0].items():  # the history, whole before the view starts: its first batch
        land(project.source_path(source), "000.json", lines)
    pipeline, query = start(spark, project, view, catalog_server)
    late: set[int] = set()
    (bounded,) = [b.table for tables in bounds(pipeline.graph, "orders", "ts").values() for b in tables]
    join_sides = [  # the orders' side (the products' is the feed's mirror, not in the log)
        t.name
        for t in pipeline.graph.state_tables()
        if t.name.startswith("join") and t.name not in pipeline.store.borrowed
    ]
    sides: list[int] = []
    try:
        for number, batch in enumerate(EPOCHS):
            if number == 2:  # a restart: a new pipeline recovers the watermark from the last commit
                query.stop()
                pipeline, query = start(spark, project, view, catalog_server)
                assert pipeline.watermark.rule.max_event_us == T0_US + 55 * MINUTE_US
            for source, lines in batch.items() if number else ():
                land(project.source_path(source), f"{number:03d}.json", lines)
            query.processAllAvailable()
            if number == 0:
                by_executors(pipeline)
            rows = quarantined_rows(project, "orders", view)
            late = {json.loads(r["record"])["id"] for r in rows}
            assert late == [set(), {101}, {101, 201}][number]
            assert all(r["reason"].startswith("late: ts older than the watermark") for r in rows)
            record = read_commit(project, view)
            expected_mark = [None, T0_US + 40 * MINUTE_US, T0_US + 45 * MINUTE_US][number]
            assert record.extra[APPLIED] == ("" if expected_mark is None else str(expected_mark))
            assert record.extra[MAX_EVENT] == str(T0_US + [50, 55, 55][number] * MINUTE_US)
            assert record.extra[LATE] == ["0", "1", "1"][number]
            assert_recomputed(project, view, pipeline, catalog_server)  # lakeview verify: equal
            held = micros(read(project, view, catalog_server))
            assert held == on_time_by_spark(spark, project, view, late) and held
            # orders by (time, product) below the join: 11 times; at 40 the 8 before it closed (55 joins, a
            # NULL time is in none); at 45 the one at 40 closed, 46 joins. The join's sides only grow.
            assert state_rows(catalog_server, view, bounded) == [11, 4, 4][number]
            sides.append(sum(state_rows(catalog_server, view, s) for s in join_sides))
            assert sides == sorted(sides) and join_sides
    finally:
        query.stop()
    status = {s.view: s for s in view_statuses(project)}[view]
    assert (status.rows_late, status.rows_quarantined) == (2, 2)


IMAGES = {  # a before/after-image feed of orders (each line the row before and after a change; None: none)
    "order_images": {
        "format": "json",
        "path": "landing/order_images",
        "schema": "order_id BIGINT, amount DOUBLE, ts TIMESTAMP",
        "images": {"key": ["order_id"]},
    }
}
IMAGE_SQL = (
    "SELECT window(ts, '10 minutes').end AS window_end, COUNT(*) AS n, SUM(amount) AS total, MAX(amount) AS hi "
    "FROM order_images GROUP BY window(ts, '10 minutes')"
)


def image(order_id: int, before: float | None, after: float | None) -> str:
    """A change of an order whose time moves from minute ``before`` to ``after`` (its amount: the minute)."""

    def row(minute: float | None) -> dict | None:
        ts = None if minute is None else (T0 + timedelta(minutes=minute)).isoformat()
        return None if minute is None else {"order_id": order_id, "amount": minute, "ts": ts}

    return json.dumps({"before": row(before), "after": row(after)})


# epoch 0 (the history, by the executors): orders at 5..40, and order 9 inserted at 50 then moved to 12 in the same
# batch (its image at 50 cancels: the watermark's first advance is 40, not 50). Epoch 1, watermark 30: order 1's
# retraction (its old image at 5) and order 10's insert at 25 are late; order 8 moves from 40 to 41, 11 comes at 45.
IMAGE_EPOCHS = [
    [image(i, None, 5 * i) for i in range(1, 9)] + [image(9, None, 50), image(9, 50, 12)],
    [image(1, 5, None), image(10, None, 25), image(8, 40, 41), image(11, None, 45)],
]


def test_a_watermark_judges_a_before_after_image_feed_from_its_first_batch_by_the_executors(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, monkeypatch
) -> None:
    """The event source may be an [images] feed: each batch's Z-set (before -1, after +1) is consolidated, then
    each image judged as a change feed's are (a late old image's retraction and a late new image are left out,
    quarantined with their reason), the watermark moved by the new on-time images only."""
    monkeypatch.setenv("LAKEVIEW_ENGINE", "graph")  # a one-source view: kept as a graph before the graph is the default
    view = unique_name[:50]
    views = {view: {"sql": IMAGE_SQL, "cadence": "200ms", "namespace": NS, "watermark": "10 minutes"}}
    project = make_project(views=views, sources=IMAGES)
    project = project.model_copy(update={"spark": SparkConfig(**BOUNDS)})
    assert is_graph_view(project, view)
    land(project.source_path("order_images"), "000.json", IMAGE_EPOCHS[0])
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        query.processAllAvailable()
        by_executors(pipeline)
        record = read_commit(project, view)
        assert (record.extra[APPLIED], record.extra[MAX_EVENT]) == ("", str(T0_US + 40 * MINUTE_US))
        land(project.source_path("order_images"), "001.json", IMAGE_EPOCHS[1])
        query.processAllAvailable()
        record = read_commit(project, view)
        assert record.extra[APPLIED] == str(T0_US + 30 * MINUTE_US) and record.extra[LATE] == "2"
        assert record.extra[MAX_EVENT] == str(T0_US + 45 * MINUTE_US)
        assert_recomputed(project, view, pipeline, catalog_server)  # lakeview verify: equal
        rows = quarantined_rows(project, "order_images", view)
        late = sorted((json.loads(r["record"])["order_id"], r["reason"].rsplit("; ", 1)[1]) for r in rows)
        assert late == [(1, "retracted old image left out"), (10, "new image left out")]
        held = {plain(r["window_end"]): (r["n"], r["hi"]) for r in read(project, view, catalog_server).to_pylist()}
        assert held[T0_US + 10 * MINUTE_US] == (1, 5.0), "order 1's late retraction left it in its closed window"
        assert held[T0_US + 50 * MINUTE_US] == (2, 45.0) and held[T0_US + 20 * MINUTE_US] == (3, 15.0)
    finally:
        query.stop()
