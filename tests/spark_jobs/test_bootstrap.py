"""A keyed view's large first batch (a backfill) is computed by Spark and written by the
executors, never collected: every table it keeps (state, view, a change feed's mirror) is
written by Spark tasks, each view equals the full recompute after it, and the later batches
the driver merges into those tables keep it equal (so the state the executors wrote is exact).
A SIGKILL between the state tables' commits and the view's is repaired by the replay."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from pathlib import Path

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from lakeview.stack.embedded import EmbeddedStack
from spark_jobs.sources.quarantine import quarantined_rows
from tests.pipelines import view_pipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk
from tests.spark_jobs.test_view_dag import FEED, SCHEMA, assert_chain_equals_recompute, chain, order
from tests.writers.test_executor_writes import refresh_with_fault

ROWS_MAX = 8  # [spark] driver_rows_max: every first batch here is larger
NAMESPACE = "bootstrap_tests"


def backfill() -> list[str]:
    """40 orders over 10 products, one updated and one deleted in the same batch, a delete of an
    unknown key. Built when a test runs, so its sequence numbers are older than the later batches'."""
    return [order("c", i, i % 10, i % 7) for i in range(1, 41)] + [order("u", 3, 5, 9), order("d", 7), order("d", 99)]


def changes() -> list[str]:
    """A later batch: updates (one moves an order to another product), deletes, inserts, and a
    change of a row inserted in the same batch."""
    return [order("u", 1, 1, 40), order("u", 2, 3, 2), order("d", 4), order("d", 8), order("c", 43, 2, 5, price=10.0)] + [
        order("d", i) for i in (5, 9)] + [order("c", 44, 1, 1), order("u", 43, 2, 6, price=10.0)]  # fmt: skip


def by_executors(write: dict) -> None:
    """The epoch was a bootstrap: nothing collected, every file written by a Spark task."""
    assert write.get("bootstrap") and write["by"] == "executors" and write["rows_collected"] == 0, write
    assert f"{socket.gethostname()}:{os.getpid()}" not in write["writers"], (
        "a data file was written by the driver process"
    )


def assert_equals_recompute(project, view: str, when: str) -> None:
    expected = oracle.recompute(project, view, oracle.landed_files(project.source_path("orders")))
    comparison = oracle.compare(tables.read_rows(project, view), expected)
    assert comparison.equal, f"{view} {when}: {comparison.describe()}"


def test_chain_over_a_change_feed_backfills_on_the_executors(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    # A keyed projection over the feed (Delta), an aggregate with MAX state over it (its input:
    # the projection's change files), a filter view over that (10 products: a large first batch too).
    lines, sales, big, views = chain(unique_name[:36])
    for view in views.values():
        view["cadence"] = "200ms"
    sources = {"orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED}}
    project = make_project(views=views, sources=sources).model_copy(
        update={"spark": SparkConfig(driver_rows_max=ROWS_MAX)}
    )
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number, batch in enumerate([backfill(), changes()]):
            land(project.source_path("orders"), f"{number:03d}.json", batch)
            for view in (lines, sales, big):
                stack.queries[view].processAllAvailable()
                if number == 0:
                    by_executors(stack.pipelines[view].last_write)
                else:
                    assert not stack.pipelines[view].last_write.get("bootstrap"), (
                        f"{view}: batch {number} is not a first batch"
                    )
            assert_chain_equals_recompute(project, (lines, sales, big), f"after batch {number}")
    finally:
        stack.stop_views()
    first = tables.commit_history(project, lines)[-1]  # newest first
    assert first.epoch == 0 and first.rows_in == 43


def test_aggregates_and_projections_backfill_on_the_executors(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    p = unique_name[:30]
    views = {
        # over the change feed: state tables (sums, a MIN and a COUNT DISTINCT multiset) and the mirror
        f"{p}_agg": "SELECT product_id, SUM(quantity) AS q, AVG(price) AS p, MIN(quantity) AS lo, COUNT(DISTINCT quantity) AS dq, "
        "COUNT(*) AS n FROM orders GROUP BY product_id HAVING COUNT(*) >= 4",
        f"{p}_total": "SELECT COUNT(*) AS n, SUM(quantity) AS q FROM orders",  # a global aggregate: one state row
        f"{p}_proj": "SELECT order_id, product_id, quantity * price AS amount FROM orders WHERE quantity > 1",
    }
    config = {name: {"sql": sql, "cadence": "200ms", "namespace": NAMESPACE} for name, sql in views.items()}
    sources = {"orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED}}
    project = make_project(views=config, sources=sources).model_copy(
        update={"spark": SparkConfig(driver_rows_max=ROWS_MAX)}
    )
    first = backfill()
    later = (  # updates, deletes taking products below HAVING, an insert
        [order("u", i, i % 10, 1) for i in range(2, 20, 3)] + [order("d", i) for i in (4, 10, 11, 12, *range(13, 41, 2))]
        + [order("c", 50, 3, 6), order("u", 14, 14, 2)]
    )  # fmt: skip
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number, batch in enumerate([first, later]):
            land(project.source_path("orders"), f"{number:03d}.json", batch)
            for view in views:
                stack.queries[view].processAllAvailable()
                assert_equals_recompute(project, view, f"after batch {number}")
            if number == 0:
                for view in views:
                    pipeline = stack.pipelines[view]
                    by_executors(pipeline.last_write)
                    written = pipeline.last_write["tables"]
                    assert set(written) == {w.table_name for w in pipeline.tables()}, "every table the view keeps"
                mirror = stack.pipelines[f"{p}_agg"].mirrors["orders"]
                assert (
                    mirror.last_commit().epoch == 0
                    and stack.pipelines[f"{p}_agg"].last_write["tables"][mirror.table_name] == 39
                )
    finally:
        stack.stop_views()
    # the feed's deletes took products below HAVING: the state the executors wrote was exact
    assert 0 < tables.read_rows(project, f"{p}_agg").num_rows < 10


def test_append_source_aggregates_backfill_on_the_executors(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    from lakeview.cli.generator import land_json, make_orders

    p = unique_name[:30]
    views = {
        f"{p}_state": "SELECT product_id, AVG(quantity) AS avg_q, MAX(quantity) AS top, COUNT(DISTINCT quantity) AS dq "
        "FROM orders GROUP BY product_id HAVING COUNT(*) > 1",
        f"{p}_sums": "SELECT product_id, SUM(quantity) AS q, COUNT(*) AS n FROM orders GROUP BY product_id",  # the view is its state
        f"{p}_hourly": "SELECT window(ts, '1 hour').start AS hour, product_id, COUNT(*) AS n, MIN(quantity) AS lo "
        "FROM orders GROUP BY window(ts, '1 hour'), product_id",
    }
    config = {name: {"sql": sql, "cadence": "200ms", "namespace": NAMESPACE} for name, sql in views.items()}
    project = make_project(views=config).model_copy(update={"spark": SparkConfig(driver_rows_max=ROWS_MAX)})
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number, count in enumerate([300, 5]):
            land_json(
                project.source_path("orders"),
                f"{number:03d}.json",
                make_orders(count, seed=90 + number, first_id=1 + 1000 * number),
            )
            for view in views:
                stack.queries[view].processAllAvailable()
                assert_equals_recompute(project, view, f"after batch {number}")
                if number == 0:
                    by_executors(stack.pipelines[view].last_write)
    finally:
        stack.stop_views()


def test_sigkill_between_state_and_view_commits_of_a_backfill(spark, tmp_path: Path) -> None:
    view = "backfill_crash"
    sql = "SELECT product_id, SUM(quantity) AS q, MAX(quantity) AS top, COUNT(*) AS n FROM orders GROUP BY product_id"
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "spark": {"driver_rows_max": ROWS_MAX},
        "sources": {"orders": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": {view: {"sql": sql, "cadence": "manual", "namespace": NAMESPACE}},
    }
    project = project_on_disk(tmp_path, data)
    first, later = backfill(), changes()
    land(project.source_path("orders"), "000.json", first)
    refresh_with_fault(tmp_path, view, "before_view_commit:0")  # every table's files written, nothing committed
    store = open_store(project)
    state = [(NAMESPACE, f"__lv_state_{view}_g_log"), (NAMESPACE, f"__lv_state_{view}_src_orders")]  # state, mirror
    assert all(store.load_table(t).current_snapshot() is None for t in state), "one transaction: none committed"
    assert tables.last_commit(project, view) is None, "nor the view"

    land(project.source_path("orders"), "001.json", later)
    with CatalogServer(store, host="127.0.0.1", port=0) as server:
        pipeline = view_pipeline(spark, project, view, server.uri)
        pipeline.prepare()
        pipeline.start(available_now=True).awaitTermination()  # replays epoch 0, then epoch 1
        assert_equals_recompute(project, view, "after the restart")
        assert [c.epoch for c in tables.commit_history(project, view)] == [1, 0], (
            "each epoch committed once (newest first)"
        )
        for name in state:
            summaries = [
                s.summary.additional_properties.get("lakeview.epoch") for s in store.load_table(name).snapshots()
            ]
            assert summaries.count("0") == 1, f"{name}: epoch 0 applied once ({json.dumps(summaries)})"


def test_watermarked_window_over_a_change_feed_backfills_on_the_executors(spark, tmp_path: Path) -> None:
    """The crash test's windowed view over a change feed (tests/spark_jobs/test_crash_combined.py),
    without a crash and with every batch past the bound: the first batch is written by the
    executors and stamped with the watermark's advance, so the later batches apply the same
    watermark, set the same images aside and end with the same rows as on the driver's path."""
    from tests.spark_jobs.test_crash_combined import write_project
    from tests.spark_jobs.test_view_dag import refresh_in_process
    from tests.spark_jobs.test_windows import CHANGE_EPOCHS, CHANGES_SCHEMA, T0, WINDOW_OVER_CHANGES
    from writers.staged_files import WRITTEN_BY

    view = "windowed"
    sources = {"order_changes": {"format": "json", "path": "landing", "schema": CHANGES_SCHEMA, "changes": FEED}}
    project = write_project(tmp_path, sources, {view: {"sql": WINDOW_OVER_CHANGES, "watermark": "10 minutes"}})
    project = project.model_copy(update={"spark": SparkConfig(driver_rows_max=0)})
    for number, batch in enumerate(CHANGE_EPOCHS):
        land(project.source_path("order_changes"), f"{number:03d}.json", batch)
        refresh_in_process(spark, project, [view])
        record = tables.last_commit(project, view)
        files = oracle.frontier_files(project, view, record.frontier)
        comparison = oracle.compare(tables.read_rows(project, view), oracle.recompute(project, view, files))
        assert comparison.equal, f"after batch {number}: {comparison.describe()}"
    first = min(
        open_store(project).load_table((project.views[view].namespace, view)).snapshots(),
        key=lambda s: s.sequence_number,
    )
    assert first.summary.additional_properties.get(WRITTEN_BY) == "executors", (
        "the first batch was written by the executors"
    )
    rows = {
        (r["window_start"].strftime("%H:%M"), r["product_id"]): (r["n"], r["total"], r["lo"], r["hi"])
        for r in tables.read_rows(project, view).to_pylist()
    }
    assert rows == {
        ("00:00", 1): (2, 12.0, 5.0, 7.0),
        ("00:10", 2): (1, 10.0, 10.0, 10.0),
        ("00:40", 1): (1, 9.0, 9.0, 9.0),
    }
    late = sorted(json.loads(r["record"])["order_id"] for r in quarantined_rows(project, "order_changes", view))
    assert late == [1, 2, 6], "each late image set aside once"
    assert record.extra["lakeview.watermark-us"] == str(int((T0 + timedelta(minutes=25)).timestamp() * 1_000_000))


def test_image_feed_backfill_and_a_retraction_of_a_row_never_held(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """Over a before/after-image feed the first batch's Z-set can retract a row the view never
    held (the feed started mid-stream). Both first batches are written by the executors: the graph's
    first-batch SQL sums the Z-set's weights per group as its step on the driver would, so that count is
    kept either way. The clean view equals the recompute after each batch. (The recompute ignores such a
    retraction where the graph's state subtracts it: that divergence predates the executors' path.)"""
    from tests.spark_jobs.test_changes import image

    def o(i: int, p: int, q: int) -> dict:
        return {"order_id": i, "product_id": p, "quantity": q}

    row_schema = "order_id BIGINT, product_id BIGINT, quantity INT"
    sql = "SELECT product_id, SUM(quantity) AS total, MAX(quantity) AS hi, COUNT(*) AS n FROM {} GROUP BY product_id"
    sources = {
        s: {"format": "json", "path": f"landing/{s}", "schema": row_schema, "images": {"key": ["order_id"]}}
        for s in ("clean", "mid")
    }
    views = {
        f"{unique_name[:40]}_{s}": {"sql": sql.format(s), "cadence": "200ms", "namespace": NAMESPACE} for s in sources
    }
    project = make_project(views=views, sources=sources).model_copy(
        update={"spark": SparkConfig(driver_rows_max=ROWS_MAX)}
    )
    inserts = [image(None, o(i, i % 3, i)) for i in range(1, 12)]
    first = {
        "clean": [
            *inserts,
            image(o(2, 2, 2), o(2, 1, 7)),
            image(o(5, 2, 5), None),
        ],  # changes of rows inserted in the batch
        "mid": [
            *inserts,
            image(o(90, 1, 4), o(90, 2, 6)),
        ],  # order 90 was never inserted: its before image retracts nothing held
    }
    later = [
        image(o(1, 1, 1), o(1, 0, 3)),
        image(o(11, 2, 11), None),
        image(None, o(20, 1, 2)),
    ]  # an update, a delete, an insert
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number in range(2):
            for source in sources:
                land(project.source_path(source), f"{number:03d}.json", first[source] if number == 0 else later)
            for source, view in zip(sources, views):
                stack.queries[view].processAllAvailable()
                if number == 0:  # both first batches: the graph's first-batch SQL sums the Z-set's weights
                    by_executors(stack.pipelines[view].last_write)
                if source == "clean":
                    expected = oracle.recompute(project, view, oracle.landed_files(project.source_path(source)))
                    comparison = oracle.compare(tables.read_rows(project, view), expected)
                    assert comparison.equal, f"{view} after batch {number}: {comparison.describe()}"
    finally:
        stack.stop_views()
