"""A set-aside row's quarantine record is the same whether Spark read it (a first batch past ``[spark]
driver_rows_max`` rows, tagged by Spark SQL) or the driver read its Parquet file itself (a small later batch):
JSON of the row's fields, a NULL field left out as Spark's ``to_json`` leaves it out."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from lakeview.project import parse_project
from spark_jobs.sources.quarantine import quarantined_rows
from tests.pipelines import land_parquet, started

ARROW = pa.schema(
    [("id", pa.int64()), ("k", pa.int64()), ("note", pa.string()), ("op", pa.string()), ("seq", pa.int64())]
)
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["i"], "update": ["u"], "delete": ["d"]}


def test_a_set_aside_rows_record_leaves_null_fields_out_on_the_driver_as_spark_does(
    spark, catalog_server, lake_dir: Path, tmp_path: Path
) -> None:
    view = "quarantine_records"
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "spark": {"driver_rows_max": 3},
        "sources": {
            "t": {
                "format": "parquet",
                "path": str(tmp_path / "t"),
                "schema": "id BIGINT, k BIGINT, note STRING, op STRING, seq BIGINT",
                "changes": FEED,
            }
        },
        "views": {
            view: {
                "sql": "SELECT k, COUNT(*) AS n FROM t GROUP BY k",
                "cadence": "200ms",
                "namespace": "quarantine_records",
            }
        },
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    good = [{"id": i, "k": i % 2, "note": "ok", "op": "i", "seq": i} for i in range(10, 14)]
    # an unknown operation, with NULL fields: epoch 0 (5 rows) read by Spark, epoch 1 (2 rows) by the driver
    epochs = [
        [*good, {"id": 1, "k": None, "note": None, "op": "x", "seq": 1}],
        [good[0] | {"id": 20, "seq": 20}, {"id": 2, "k": None, "note": None, "op": "x", "seq": 2}],
    ]
    pipeline, query = started(spark, project, view, catalog_server.uri)
    paths = []
    try:
        for number, rows in enumerate(epochs):
            land_parquet(tmp_path / "t", f"{number:03d}.parquet", rows, ARROW)
            query.processAllAvailable()
            paths.append(pipeline.last_write.get("by"))
    finally:
        query.stop()
    assert paths == ["executors", "driver"], paths
    records = sorted((r["epoch"], json.loads(r["record"])) for r in quarantined_rows(project, "t", view))
    assert records == [(0, {"id": 1, "op": "x", "seq": 1}), (1, {"id": 2, "op": "x", "seq": 2})], records
