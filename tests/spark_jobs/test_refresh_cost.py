"""The cheap per-epoch paths: a Parquet source (rows counted from the files' footers, no
quarantine job), a small batch read by the driver and stepped through the view's graph there,
and the writer's lookup reusing the files it read for the commit's rewrite.
What a user sees must not change: every snapshot equals the full recompute, and each
snapshot records the rows it took in."""

from __future__ import annotations

from bench.history import land_parquet
from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from tests.spark_jobs.test_graph_watermark import state_log_rows
from tests.spark_jobs.test_pipeline import read_view, start

SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"
# No timestamp aggregate here: the oracle reads a Parquet TIMESTAMP as naive while the view
# stores it as timestamptz, and the comparison is exact on types (a separate, known gap).
VIEWS = {
    "sales": "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id",
    "stats": "SELECT product_id, AVG(quantity) AS avg_q, MIN(quantity) AS least, MAX(quantity) AS most, "
    "COUNT(DISTINCT quantity) AS sizes FROM orders GROUP BY product_id",
}


def test_parquet_views_equal_recompute_and_record_rows_in(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {"orders": {"format": "parquet", "path": "landing/orders", "schema": SCHEMA}}
    views = {
        f"{unique_name}_{v}": {"sql": sql, "cadence": "200ms", "namespace": "cost_tests"} for v, sql in VIEWS.items()
    }
    project = make_project(views=views, sources=sources)
    landing = project.source_path("orders")
    started = [start(spark, project, view, catalog_server) for view in views]
    try:
        for i, rows in enumerate([3_000, 500, 1_200]):
            land_parquet(landing, f"o{i}.parquet", rows, first_id=i * 10_000, products=300)
            for pipeline, query in started:
                query.processAllAvailable()
                assert pipeline.writer.last_commit().rows_in == rows  # from the Parquet footers
                assert pipeline.last_write == {"by": "driver", "rows_collected": rows}  # stepped on the driver
        for view in views:
            comparison = oracle.compare(read_view(catalog_server, "cost_tests", view), oracle.recompute(project, view))
            assert comparison.equal, comparison.describe()
    finally:
        for _, query in started:
            query.stop()


def test_min_max_over_append_only_input_keep_each_groups_extremes(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """MIN/MAX over an append-only source: each group's record holds its lowest and highest value so far (no
    value multiset: the state follows the groups, not the history), while a COUNT(DISTINCT) keeps every value;
    the view equals the recompute after the first batch (computed by Spark on the executors) and after
    each later one (DuckDB on the driver)."""
    sql = (
        "SELECT product_id, AVG(quantity) AS avg_q, MIN(order_id) AS first_order, MAX(order_id) AS last_order, "
        "COUNT(DISTINCT quantity) AS sizes FROM orders GROUP BY product_id"
    )
    sources = {"orders": {"format": "parquet", "path": "landing/orders", "schema": SCHEMA}}
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "cost_tests"}}, sources=sources
    )
    project = project.model_copy(update={"spark": SparkConfig(driver_rows_max=1_000)})  # the first batch: executors
    landing = project.source_path("orders")
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        for i, rows in enumerate([3_000, 500, 1_200]):
            land_parquet(landing, f"o{i}.parquet", rows, first_id=i * 10_000, products=300)
            query.processAllAvailable()
            comparison = oracle.compare(
                read_view(catalog_server, "cost_tests", unique_name), oracle.recompute(project, unique_name)
            )
            assert comparison.equal, comparison.describe()
    finally:
        query.stop()
    states = sorted(t.name for t in pipeline.graph.state_tables())
    (groups,) = [n for n in states if n.endswith(".groups")]
    (values,) = [n for n in states if ".values" in n]  # COUNT(DISTINCT)'s only: MIN/MAX live in the records
    assert len(state_log_rows(catalog_server, unique_name, groups, "cost_tests")) == 300  # one record per product
    distinct = len(state_log_rows(catalog_server, unique_name, values, "cost_tests"))
    assert distinct > 2 * 300  # quantities 1..5 per product: every value kept for COUNT(DISTINCT)
