"""A graph view's later batch past ``[spark] driver_rows_max`` (a late bulk load) never brings its raw rows into
the driver: a stateless view's new rows are appended by the executors; a linear aggregate (alone, or pushed
below a join by eager aggregation) gets its partial sums per group from Spark; a DISTINCT its distinct rows
with summed weights. After each epoch the view read back equals DuckDB's recompute, on Iceberg (JSON sources
read by Spark's stream) and on Delta (Parquet sources, the driver's stream)."""

from __future__ import annotations

import json
import os
import socket

import pytest

from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from tests.spark_jobs.test_graph_backfill import land_epoch
from tests.spark_jobs.test_graph_pipeline import EPOCHS, SOURCES, assert_recomputed, change, order, start

BOUNDS = {"driver_rows_max": 50}  # the first batch (the history) stays under it, the bulk load goes over
VIEWS = {  # what each view's bulk load costs the driver (GraphPipeline.last_write)
    "rows": ("SELECT id, qty * 2 AS q2 FROM orders WHERE qty > 1 UNION ALL SELECT id, qty FROM orders", "appended"),
    "sums": (
        "SELECT pid, COUNT(*) n, SUM(qty) s, AVG(qty) a, COUNT(*) FILTER (WHERE qty > 2) big FROM orders "
        "WHERE qty > 0 GROUP BY pid",
        "partials",
    ),
    "eager": (
        "SELECT p.category, COUNT(*) n, SUM(o.qty) qty FROM orders o JOIN products p ON o.pid = p.id "
        "GROUP BY p.category",
        "partials",
    ),
    "distinct": ("SELECT DISTINCT pid, qty FROM orders", "consolidated"),
}
BULK = {  # 400 orders over 9 products and 4 quantities, and a product update
    "orders": [order(i, 1 + i % 9, 1 + i % 6, 1 + i % 4) for i in range(1000, 1400)],
    "products": [change("u", 3, category="games", price=2.5)],
}


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_later_bulk_load_is_reduced_by_spark_and_equals_the_recompute(
    fmt: str, spark, catalog_server: CatalogServer, make_project, unique_name: str, caplog
) -> None:
    parquet = fmt == "delta"
    sources = {s: {**c, "format": "parquet"} for s, c in SOURCES.items()} if parquet else SOURCES
    names = {f"{unique_name[:40]}_{v}": (sql, how) for v, (sql, how) in VIEWS.items()}
    views = {
        n: {"sql": sql, "cadence": "200ms", "namespace": "graph_tests", "format": fmt} for n, (sql, _) in names.items()
    }
    project = make_project(views=views, sources=sources).model_copy(update={"spark": SparkConfig(**BOUNDS)})
    first = len(EPOCHS[0]["orders"]) + len(EPOCHS[0]["products"])  # the views' history: a first batch in the driver
    assert first <= BOUNDS["driver_rows_max"] < len(BULK["orders"])
    EPOCHS.append(BULK)  # land_epoch lands EPOCHS[number]
    try:
        land_epoch(project, 0, parquet)
        started = {name: start(spark, project, name, catalog_server) for name in names}
        try:
            for name, (pipeline, query) in started.items():
                query.processAllAvailable()
                assert pipeline.last_write["by"] == "driver", pipeline.last_write  # a small first batch
                assert_recomputed(project, name, pipeline, catalog_server)
            land_epoch(project, len(EPOCHS) - 1, parquet)
            for name, (pipeline, query) in started.items():
                query.processAllAvailable()
                assert_recomputed(project, name, pipeline, catalog_server)
                write, how = pipeline.last_write, names[name][1]
                if how == "appended":  # every data file written by a Spark task, nothing collected
                    assert write["by"] == "executors" and write["rows_collected"] == 0, write
                    assert f"{socket.gethostname()}:{os.getpid()}" not in write["writers"], write
                else:  # reduced by Spark: far fewer rows than the bulk load reached the driver
                    assert write["reduced_by"] == "spark" and write[how], write
                    assert write["rows_collected"] < len(BULK["orders"]) / 4, write
        finally:
            for _, query in started.values():
                query.stop()
    finally:
        EPOCHS.pop()
    assert not [r for r in caplog.records if "driver_rows_max" in r.getMessage()], "nothing past the bound collected"


def test_a_later_bulk_load_a_join_collects_past_the_bound_says_so(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, caplog
) -> None:
    """A join whose fact side has no aggregate above it: the fact side's rows reach the driver (consolidated);
    past the bound the log names the view, the rows and the setting."""
    name = f"{unique_name[:40]}_join"
    sql = "SELECT o.id, o.qty, p.category FROM orders o JOIN products p ON o.pid = p.id"
    views = {name: {"sql": sql, "cadence": "200ms", "namespace": "graph_tests", "format": "iceberg"}}
    project = make_project(views=views, sources=SOURCES).model_copy(update={"spark": SparkConfig(**BOUNDS)})
    land = project.source_path("orders")
    land.mkdir(parents=True, exist_ok=True)
    (project.source_path("products")).mkdir(parents=True, exist_ok=True)
    (project.source_path("products") / "000.json").write_text("\n".join(EPOCHS[0]["products"]) + "\n")
    (land / "000.json").write_text("\n".join(json.dumps({"id": i, "pid": 1, "cid": 1, "qty": 1}) for i in range(5)))
    pipeline, query = start(spark, project, name, catalog_server)
    try:
        query.processAllAvailable()
        (land / "001.json").write_text("\n".join(BULK["orders"]) + "\n")
        with caplog.at_level("WARNING", logger="lakeview.pipeline"):
            query.processAllAvailable()
        assert_recomputed(project, name, pipeline, catalog_server)
        assert pipeline.last_write["consolidated"], pipeline.last_write
        warned = [r.getMessage() for r in caplog.records if "driver_rows_max = 50" in r.getMessage()]
        assert warned and name in warned[0] and "400 input rows" in warned[0], warned
    finally:
        query.stop()
