"""A view whose input never had a row it keeps — every row filtered out — is the same view when stopped and
started again: no WARNING, no start over from the sources' whole history, no rebuild. Its epochs so far changed
nothing, so a keyed aggregate or a top-k committed nothing (its table has no commit while Spark's checkpoint has
epochs); a global aggregate holds its one row (COUNT 0, SUM NULL) from its first epoch. After each start the view
read back equals DuckDB's recompute, also once a row it keeps arrives after the restarts (nothing was skipped)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from lakeview.ivm import oracle
from lakeview.project import parse_project
from tests.pipelines import land_parquet, started
from tests.spark_jobs.test_graph_pipeline import read

ARROW = pa.schema([("k", pa.int64()), ("x", pa.int64())])
NS = "quiet_restart"
VIEWS = {
    "keyed": "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > 100 GROUP BY k",
    "topk": "SELECT k, x FROM t WHERE x > 100 ORDER BY x DESC LIMIT 2",
    "global": "SELECT COUNT(*) AS n, SUM(x) AS s, COUNT(DISTINCT k) AS d FROM t WHERE x > 100",
}


@pytest.mark.parametrize(("shape", "fmt"), [("keyed", "iceberg"), ("topk", "delta"), ("global", "iceberg")])
def test_a_view_whose_input_never_had_a_row_it_keeps_restarts_quietly_from_its_checkpoint(
    spark, catalog_server, lake_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, shape: str, fmt: str
) -> None:
    caplog.set_level(logging.WARNING)
    view = f"quiet_{shape}_{fmt}"
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "sources": {"t": {"format": "parquet", "path": str(tmp_path / "t"), "schema": "k BIGINT, x BIGINT"}},
        "views": {view: {"sql": VIEWS[shape], "cadence": "200ms", "namespace": NS, "format": fmt}},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    land_parquet(tmp_path / "t", "000.parquet", [{"k": 1, "x": 5}, {"k": 2, "x": None}, {"k": 3, "x": 100}], ARROW)
    files = [None, [{"k": 4, "x": 7}], [{"k": 5, "x": 101}]]  # landed while the view runs after each start
    for start, rows in enumerate(files):  # start, stop, start, stop, start
        pipeline, query = started(spark, project, view, catalog_server.uri)
        try:
            query.processAllAvailable()
            if rows is not None:
                land_parquet(tmp_path / "t", f"{start:03d}.parquet", rows, ARROW)
                query.processAllAvailable()
        finally:
            query.stop()
        comparison = oracle.compare(read(project, view, catalog_server, NS), oracle.recompute(project, view))
        assert comparison.equal, f"start {start}: {comparison.describe()}"
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not warnings, f"start {start}: {warnings}"
        # the last start read only its new file: the checkpoint was kept, not started over
        assert start < 2 or pipeline.writer.last_commit().rows_in == 1, pipeline.writer.last_commit()
    assert read(project, view, catalog_server, NS).num_rows == 1  # k 5's row (global: n 1, s 101)
