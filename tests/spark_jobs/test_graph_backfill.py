"""A graph view's large first batch (a backfill) is computed by Spark and written by the executors, never
stepped in the driver: a 3-way join with GROUP BY, a top-k over a join, a LEFT JOIN, an aggregate over a
UNION ALL of an append stream and a change feed, MIN/MAX/COUNT(DISTINCT) over an append stream (extremes in
the group records) and over a join with a change feed (value multisets), on Iceberg (sources
read by Spark's stream) and on Delta (Parquet sources, the driver's stream without Spark), three views each. After the backfill
and after every later epoch of inserts, updates and deletes, the view read back equals DuckDB's recompute;
the state tables past a small ``driver_keys_max`` are looked up by key in the table, never held in memory.
A SIGKILL in the middle of the backfill then a restart ends equal, each table holding the epoch once."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections import Counter
from pathlib import Path

import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from spark_jobs.graph_pipeline import GraphPipeline
from tests.pipelines import land_parquet
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk, refresh
from tests.spark_jobs.test_graph_pipeline import ARROW, EPOCHS, NS, SOURCES, assert_recomputed, start
from tests.spark_jobs.test_view_dag import refresh_in_process
from writers.graph_table_rows import TableRows

BOUNDS = {"driver_rows_max": 8, "driver_keys_max": 5}  # every first batch here is larger; most tables too
VIEWS = {
    "join3": "SELECT p.category, c.rid, COUNT(*) n, SUM(o.qty) qty FROM orders o JOIN products p ON o.pid = p.id "
    "JOIN customers c ON o.cid = c.id GROUP BY p.category, c.rid",
    "topk": "SELECT category, id, qty FROM (SELECT p.category, o.id, o.qty, ROW_NUMBER() OVER "
    "(PARTITION BY p.category ORDER BY o.qty DESC, o.id) rn FROM orders o JOIN products p ON o.pid = p.id) t "
    "WHERE rn <= 3",
    "left": "SELECT o.id, o.qty, p.category, c.rid FROM orders o LEFT JOIN products p ON o.pid = p.id "
    "LEFT JOIN customers c ON o.cid = c.id AND c.rid > 1",
    "union": "SELECT k, COUNT(*) n, SUM(x) s FROM (SELECT pid AS k, qty AS x FROM orders WHERE qty > 1 "
    "UNION ALL SELECT rid, 1 FROM customers) u GROUP BY k",
    # append-only input: MIN/MAX kept as the extreme per group, COUNT(DISTINCT) as a value multiset
    "extremes": "SELECT k, MIN(x) lo, MAX(x) hi, COUNT(DISTINCT c) nc, AVG(x) a FROM (SELECT pid AS k, qty AS x, "
    "cid AS c FROM orders UNION ALL SELECT pid, id, cid FROM orders WHERE qty > 1) u GROUP BY k",
    # a change feed joined: MIN/MAX and COUNT(DISTINCT) kept as value multisets
    "multisets": "SELECT p.category, MIN(o.qty) lo, MAX(p.price) hi, COUNT(DISTINCT o.cid) nc FROM orders o "
    "JOIN products p ON o.pid = p.id GROUP BY p.category",
}

FORMAT_VIEWS = {"iceberg": ("join3", "left", "extremes"), "delta": ("topk", "union", "multisets")}


def by_executors(pipeline: GraphPipeline) -> None:
    """The epoch was a backfill: nothing collected, every file written by a Spark task."""
    write = pipeline.last_write
    assert write.get("bootstrap") and write["by"] == "executors" and write["rows_collected"] == 0, write
    assert f"{socket.gethostname()}:{os.getpid()}" not in write["writers"], "a data file was written by the driver"
    assert pipeline.writer.table_name in write["tables"] and len(write["tables"]) == len(pipeline.tables())


def land_epoch(project, number: int, parquet: bool) -> None:
    for source, lines in EPOCHS[number].items():
        if parquet:
            rows = [json.loads(line) for line in lines]
            land_parquet(project.source_path(source), f"{number:03d}.parquet", rows, ARROW[source])
        else:
            land(project.source_path(source), f"{number:03d}.json", lines)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_graph_views_backfill_on_the_executors_then_later_epochs_equal_the_recompute(
    fmt: str, spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    parquet = fmt == "delta"  # Delta: Parquet sources, read without Spark after the backfill
    sources = {s: {**c, "format": "parquet"} for s, c in SOURCES.items()} if parquet else SOURCES
    # each view in one format (the backfill's SQL is the same for both; each format's writers and reads
    # take three views of different shapes), so the suite runs each Spark backfill once
    names = {f"{unique_name[:40]}_{v}": sql for v, sql in VIEWS.items() if v in FORMAT_VIEWS[fmt]}
    views = {n: {"sql": sql, "cadence": "100ms", "namespace": NS, "format": fmt} for n, sql in names.items()}
    project = make_project(views=views, sources=sources).model_copy(update={"spark": SparkConfig(**BOUNDS)})
    land_epoch(project, 0, parquet)  # the history, whole before the views start: their first batch
    started = {name: start(spark, project, name, catalog_server) for name in names}
    try:
        for number in range(3):  # the backfill, then inserts, updates and deletes on every source
            if number:
                land_epoch(project, number, parquet)
            for name, (pipeline, query) in started.items():
                query.processAllAvailable()
                if number == 0:
                    by_executors(pipeline)
                    lazy = [n for n, rows in pipeline.store.memory.items() if isinstance(rows, TableRows)]
                    assert lazy, f"{name}: no state table is looked up by key past driver_keys_max"
                else:
                    assert pipeline.last_write["by"] == "driver", pipeline.last_write
                assert_recomputed(project, name, pipeline, catalog_server)
    finally:
        for _, query in started.values():
            query.stop()


@pytest.mark.parametrize("fmt,fault", [("iceberg", "files_written:0"), ("delta", "before_view_commit:0")])
def test_sigkill_during_a_graph_backfill_then_restart_ends_equal(fmt: str, fault: str, spark, tmp_path: Path) -> None:
    """Iceberg: killed after the executors wrote a table's files, before the one transaction (nothing
    committed). Delta: killed after the state tables and mirrors committed, before the view's table did."""
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "spark": BOUNDS,
        "sources": SOURCES,
        "views": {"crashy": {"sql": VIEWS["topk"], "cadence": "manual", "namespace": NS, "format": fmt}},
    }
    project = project_on_disk(tmp_path, data)
    land_epoch(project, 0, parquet=False)
    assert refresh(tmp_path, fault) == -signal.SIGKILL
    assert tables.last_commit(project, "crashy") is None, "the view did not commit"
    state = sorted(p for p in (tmp_path / "lake").rglob("__lv_state_crashy*") if (p / "_delta_log").is_dir())
    if fmt == "delta":  # the state tables and mirrors committed the backfill before the kill
        # the join's and the top-k's state and the products mirror (the join's products side is the mirror)
        assert len(state) >= 3 and all(epochs_of(p) == ["0"] for p in state), [p.name for p in state]
    land_epoch(project, 1, parquet=False)
    refresh_in_process(spark, project, ["crashy"])  # replays epoch 0 on the executors, then epoch 1
    record = tables.last_commit(project, "crashy")
    assert record is not None and record.epoch == 1
    expected = oracle.recompute(project, "crashy", oracle.frontier_files(project, "crashy", record.frontier))
    comparison = oracle.compare(tables.read_rows(project, "crashy"), expected)
    assert comparison.equal, comparison.describe()
    epochs = Counter(c.epoch for c in tables.commit_history(project, "crashy"))
    assert epochs == Counter({0: 1, 1: 1}), f"each epoch committed once: {epochs}"
    if fmt == "delta":  # the replay wrote only the view's table: no state table holds epoch 0 twice
        for path in state:
            assert epochs_of(path).count("0") == 1, f"{path.name}: {epochs_of(path)}"


def epochs_of(path: Path) -> list[str]:
    """The epochs a Delta table's commits are stamped with, oldest first."""
    from deltalake import DeltaTable

    return [e["lakeview.epoch"] for e in reversed(DeltaTable(str(path)).history()) if "lakeview.epoch" in e]
