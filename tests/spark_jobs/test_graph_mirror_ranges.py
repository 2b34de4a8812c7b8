"""A change feed's mirror past ``[spark] driver_keys_max`` (Iceberg) is looked up by its row groups' key ranges
in the driver: its first batch written by the executors sorted by the key, every later file too, in small row
groups. Through real Spark and the embedded catalog, with a new pipeline (a restart) every epoch: after
updates and deletes of old keys the view equals DuckDB's recompute, and a lookup of one key reads fewer row
groups than the mirror holds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from spark_jobs import graph_pipeline
from tests.spark_jobs.test_graph_pipeline import NS, TOPK, project_with, run
from writers.graph_table_rows import ClusteredRows


def test_a_mirror_past_the_bound_is_read_by_row_group_and_the_view_equals_the_recompute_across_restarts(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graph_pipeline, "CLUSTERED", {"write.parquet.row-group-limit": "2"})
    project = project_with(make_project, {unique_name: TOPK})  # orders JOIN products (a change feed), ranked
    project = project.model_copy(update={"spark": SparkConfig(driver_rows_max=8, driver_keys_max=5)})
    # the first batch (39 orders, 9 products) on the executors; then products updated, deleted, inserted again
    pipeline = run(spark, project, unique_name, catalog_server, restart=True)
    rows = pipeline.mirror_store.store.memory["products"]
    assert isinstance(rows, ClusteredRows) and rows.runs is None, "past the bound the mirror is not held"
    # the last epoch's lookups asked for every product (its orders name all nine; the join's products side is
    # this mirror): a lookup of one key reads only the row groups that can hold it
    found = rows.lookup(pa.table({"id": pa.array([4], pa.int64())}))
    groups = sum(len(footer.ranges) for footer in rows.ranges.footers.values())
    assert found.column("id").to_pylist() == [4]
    assert 0 < rows.ranges.row_groups_read < groups, (rows.ranges.row_groups_read, groups)
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    table = catalog.load_table((NS, pipeline.mirrors["products"].table_name))
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert len(files) > 1
    for path in files:  # the executors' file and the driver's, each sorted by the key
        with table.io.new_input(path).open() as stream:
            ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
        assert ids == sorted(ids), path
