"""A join view an earlier Lakeview kept with both join sides stored is rebuilt at start by this version, which reads
the side under an aggregate from the aggregate's records (:class:`lakeview.graph.derived.DerivedSide`).

The earlier version is the same graph with that side kept as its own state (``Join.derived`` cleared before its
tables are made): its run leaves the side's rows in the Iceberg state log (listed in the log's layout) or in the
side's own Delta table, as that version left them. Started by this version, the view is rebuilt from its sources'
full history with one WARNING naming the table, and equals DuckDB's recompute after the start and after a later
epoch; the side's table (Delta) or the log's entry for it (Iceberg) is gone."""

from __future__ import annotations

import json
import logging

import pytest

from catalog_api.server import CatalogServer
from lakeview.graph.join import Join
from spark_jobs.graph_pipeline import GraphPipeline
from tests.pipelines import view_pipeline
from tests.spark_jobs.test_migrate import FIRST, SOURCES, WHILE_STOPPED, exists, land_all, upgrade_and_run
from writers.graph_log import LAYOUT, log_table_name
from writers.graph_state import state_table_name

NS = "migrate_tests"
SQL = (
    "SELECT p.category, SUM(o.qty) AS sold, COUNT(*) AS n FROM orders o JOIN products p ON o.pid = p.id "
    "GROUP BY p.category"
)


def run(pipeline: GraphPipeline, batch: dict[str, list[str]], name: str) -> None:
    land_all(pipeline.project, batch, name)
    query = pipeline.start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_join_side_an_earlier_version_kept_is_rebuilt_to_be_read_from_the_aggregate(
    fmt: str, spark, make_project, unique_name: str, catalog_server: CatalogServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lakeview.pipeline")
    view = {"sql": SQL, "cadence": "100ms", "namespace": NS, "format": fmt}
    project = make_project(views={unique_name: view}, sources=SOURCES)

    earlier = view_pipeline(spark, project, unique_name, catalog_server.uri)
    assert isinstance(earlier, GraphPipeline)
    (join,) = [op for op in earlier.graph.operators if isinstance(op, Join)]
    assert join.derived is not None, "this version reads the pre-aggregated side from the aggregate's records"
    side = (join.left_state, join.right_state)[join.derived[0]]
    join.derived = None  # the earlier version: the side kept as the join's own state
    earlier.prepare()
    run(earlier, FIRST, "000.json")
    side_table = state_table_name(unique_name, side)
    if fmt == "delta":
        assert exists(earlier, side_table)
    else:
        log = earlier._state_writer(log_table_name(unique_name))
        assert side.name in json.loads(log.table().properties[LAYOUT])  # type: ignore[attr-defined]

    land_all(project, WHILE_STOPPED, "001.json")
    upgraded = upgrade_and_run(spark, project, unique_name, catalog_server)

    (line,) = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    dropped = side_table if fmt == "delta" else log_table_name(unique_name)
    assert line.startswith(f"{unique_name}: rebuilding the view from its sources' full history") and dropped in line
    if fmt == "delta":
        assert not exists(upgraded, side_table)
    else:
        log = upgraded._state_writer(log_table_name(unique_name))
        assert side.name not in json.loads(log.table().properties[LAYOUT])  # type: ignore[attr-defined]
