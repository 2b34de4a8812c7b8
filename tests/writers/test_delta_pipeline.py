"""A Delta view kept fresh by the real Spark pipeline equals the DuckDB recompute; status and
verify read the Delta log."""

from __future__ import annotations

from catalog_api.ops import view_tables as tables
from catalog_api.ops.status import view_statuses
from lakeview.cli.generator import land_json, make_orders
from lakeview.cli.main import main
from lakeview.ivm import oracle
from spark_jobs.graph_pipeline import GraphPipeline
from tests.conftest import SALES_SQL
from writers.delta.writer import DeltaWriter
from writers.registry import make_writer, state_writer_factory

# AVG needs state tables (sums and counts per group): for a Delta view they are Delta tables too.
SQL = SALES_SQL.replace("COUNT(*) AS orders", "COUNT(*) AS orders, AVG(quantity) AS avg_quantity")


def test_spark_pipeline_keeps_a_delta_view_equal_to_the_recompute(
    spark, catalog_server, make_project, unique_name: str, capsys
) -> None:
    view = unique_name
    project = make_project(
        views={view: {"sql": SQL, "cadence": "200ms", "format": "delta", "namespace": "delta_tests"}}
    )
    landing = project.source_path("orders")
    writer = make_writer(project, view, catalog_server.uri)
    assert isinstance(writer, DeltaWriter) and writer.location == project.table_location(view)
    pipeline = GraphPipeline(spark, project, view, writer, state_writer=state_writer_factory(project, view))
    pipeline.prepare()
    query = pipeline.start()
    try:
        land_json(landing, "a.json", make_orders(150, seed=21, first_id=1))
        query.processAllAvailable()
        land_json(landing, "b.json", make_orders(90, seed=22, first_id=1000))
        query.processAllAvailable()
    finally:
        query.stop()

    expected = oracle.recompute(project, view, oracle.landed_files(landing))
    comparison = oracle.compare(tables.read_rows(project, view), expected)
    assert comparison.equal, comparison.describe()

    commits = tables.commit_history(project, view)
    assert [c.epoch for c in commits] == [1, 0] and commits[0].rows_in == 90
    (status,) = [s for s in view_statuses(project) if s.view == view]
    assert (status.format, status.state, status.epoch, status.snapshot_id) == (
        "delta",
        "committed",
        1,
        commits[0].snapshot_id,
    )
    # Cadence asked for and achieved, and lag, come from the Delta log's commit info.
    assert status.cadence_asked_ms == 200 and status.cadence_achieved_ms is not None and status.lag_ms is not None

    config_file = project.root / "lakeview.toml"
    config_file.write_text(_toml(project, view))
    capsys.readouterr()
    try:
        main(["verify", view, "-p", str(config_file)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    assert "equal" in capsys.readouterr().out


def _toml(project, view: str) -> str:
    source = project.sources["orders"]
    return f"""
[lake]
warehouse = "{project.warehouse_uri}"
catalog_store = "{project.catalog_store_url}"

[sources.orders]
format = "json"
path = "{project.source_path("orders")}"
schema = "{source.schema_}"

[views.{view}]
sql = "{project.views[view].sql}"
format = "delta"
namespace = "delta_tests"
"""
