"""The real path: files land → Spark Structured Streaming → Iceberg snapshot through the REST
catalog → DuckDB ATTACH reads what a full recompute over the same files gives."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from catalog_api.server import CatalogServer
from lakeview.cli.generator import land_json, make_orders
from lakeview.ivm import oracle
from lakeview.ops.source_log import files_up_to
from spark_jobs.graph_pipeline import GraphPipeline
from tests.conftest import SALES_SQL
from tests.duck_readers import catalog_reader
from writers.registry import make_writer


def read_view(catalog_server: CatalogServer, namespace: str, view: str) -> pa.Table:
    con = catalog_reader(catalog_server.uri, "lakeview")
    return con.sql(f"SELECT * FROM lake.{namespace}.{view}").to_arrow_table()


def start(spark, project, view, catalog_server):
    pipeline = GraphPipeline(spark, project, view, make_writer(project, view, catalog_server.uri))
    pipeline.prepare()
    return pipeline, pipeline.start()


def assert_matches_recompute(project, view: str, snapshot: pa.Table, files: int) -> None:
    landed = oracle.landed_files(project.source_path("orders"))
    assert len(landed) == files
    comparison = oracle.compare(snapshot, oracle.recompute(project, view, landed))
    assert comparison.equal, comparison.describe()


def test_files_to_duckdb_exactly_once_across_restarts(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    view = unique_name
    project = make_project(views={view: {"sql": SALES_SQL, "cadence": "200ms", "namespace": "pipeline_tests"}})
    landing = project.source_path("orders")
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        land_json(landing, "a.json", make_orders(200, seed=1, first_id=1))
        land_json(landing, "b.json", make_orders(100, seed=2, first_id=201))
        query.processAllAvailable()
        assert_matches_recompute(project, view, read_view(catalog_server, "pipeline_tests", view), files=2)
        before = {r["product_id"]: r for r in read_view(catalog_server, "pipeline_tests", view).to_pylist()}

        third = make_orders(50, seed=3, first_id=301)
        land_json(landing, "c.json", third)
        query.processAllAvailable()
        after = {r["product_id"]: r for r in read_view(catalog_server, "pipeline_tests", view).to_pylist()}
        # The view moved forward by exactly the third file's content: no double count.
        for product, row in after.items():
            batch = [o for o in third if o["product_id"] == product]
            old = before.get(product, {"total_sold": 0, "orders": 0})
            assert row["total_sold"] == old["total_sold"] + sum(o["quantity"] for o in batch)
            assert row["orders"] == old["orders"] + len(batch)
    finally:
        query.stop()

    # Restart: a new pipeline picks up from the checkpoint, only the new file is read.
    land_json(landing, "d.json", make_orders(70, seed=4, first_id=401))
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        query.processAllAvailable()
        last = pipeline.writer.last_commit()
        assert last is not None and last.rows_in == 70, "only the new file was read after the restart"
        assert_matches_recompute(project, view, read_view(catalog_server, "pipeline_tests", view), files=4)
    finally:
        query.stop()

    # A crash after the table commit but before Spark recorded it: Spark replays the batch,
    # the writer sees the epoch in the table and skips it.
    commit_dir = project.checkpoint_path(view) / "commits"
    newest = max(int(p.name) for p in commit_dir.iterdir() if p.name.isdigit())
    (commit_dir / str(newest)).unlink()
    (commit_dir / f".{newest}.crc").unlink(missing_ok=True)
    snapshots_before = len(pipeline.writer.table().snapshots())
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(pipeline.writer.table().snapshots()) == snapshots_before
    assert_matches_recompute(project, view, read_view(catalog_server, "pipeline_tests", view), files=4)

    # The committed frontier names exactly the files the snapshot reflects.
    last = pipeline.writer.last_commit()
    assert last is not None
    frontier_files = files_up_to(project.checkpoint_path(view), last.frontier["orders"]["log_offset"])
    assert sorted(p.name for p in frontier_files) == ["a.json", "b.json", "c.json", "d.json"]


def test_append_view_with_filter(spark, catalog_server: CatalogServer, make_project, unique_name: str) -> None:
    sql = "SELECT order_id, product_id, quantity * 10 AS decaquantity FROM orders WHERE quantity >= 3"
    project = make_project(views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "pipeline_tests"}})
    landing = project.source_path("orders")
    _, query = start(spark, project, unique_name, catalog_server)
    try:
        land_json(landing, "a.json", make_orders(120, seed=7))
        query.processAllAvailable()
        land_json(landing, "b.json", make_orders(80, seed=8, first_id=1000))
        query.processAllAvailable()
    finally:
        query.stop()
    assert_matches_recompute(project, unique_name, read_view(catalog_server, "pipeline_tests", unique_name), files=2)


def test_files_landing_while_stopped_are_all_picked_up(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, tmp_path: Path
) -> None:
    project = make_project(views={unique_name: {"sql": SALES_SQL, "cadence": "manual", "namespace": "pipeline_tests"}})
    landing = project.source_path("orders")
    for i in range(3):
        land_json(landing, f"f{i}.json", make_orders(40, seed=10 + i, first_id=i * 100))
    pipeline = GraphPipeline(spark, project, unique_name, make_writer(project, unique_name, catalog_server.uri))
    pipeline.prepare()
    pipeline.start(available_now=True).awaitTermination()  # what `lakeview refresh` does
    assert_matches_recompute(project, unique_name, read_view(catalog_server, "pipeline_tests", unique_name), files=3)
    assert len(pipeline.writer.table().snapshots()) == 1


def test_append_only_source_with_state_tables(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """AVG, COUNT(DISTINCT) and HAVING over an append-only source: the state holds each group's sums/counts
    and the value multiset."""
    sql = (
        "SELECT product_id, AVG(quantity) AS avg_q, COUNT(DISTINCT quantity) AS sizes, MAX(quantity) - MIN(quantity) AS spread "
        "FROM orders WHERE quantity > 1 GROUP BY product_id HAVING COUNT(*) > 3"
    )
    project = make_project(views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "pipeline_tests"}})
    landing = project.source_path("orders")
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        land_json(landing, "a.json", make_orders(20, seed=21))
        query.processAllAvailable()
        assert_matches_recompute(
            project, unique_name, read_view(catalog_server, "pipeline_tests", unique_name), files=1
        )
        land_json(landing, "b.json", make_orders(60, seed=22, first_id=100))
        query.processAllAvailable()
        assert_matches_recompute(
            project, unique_name, read_view(catalog_server, "pipeline_tests", unique_name), files=2
        )
    finally:
        query.stop()
    # the groups' records and COUNT(DISTINCT)'s value multiset, both in the view's one state log (Iceberg)
    assert len(pipeline.graph.state_tables()) == 2
    assert [w.table_name for w in pipeline.state.values()] == [f"__lv_state_{unique_name}_g_log"]
