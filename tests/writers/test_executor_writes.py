"""Large append batches are written by Spark's executors, not collected to the driver: the view
still equals the recompute from DuckDB and the native readers, locally and on S3 (SeaweedFS), and
a crash between the executors' writes and the commit leaves no duplicate (the files it left are
orphans that `lakeview maintain` removes)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.cli.generator import land_json, make_orders
from lakeview.config.models import ProjectConfig, SparkConfig
from lakeview.ivm import oracle
from lakeview.project import parse_project
from lakeview.sql.duck import attach_sql, connect
from lakeview.stack.maintenance import maintain_view
from spark_jobs.graph_pipeline import GraphPipeline
from tests.conftest import ORDERS_SCHEMA
from tests.pipelines import view_pipeline
from tests.s3_server import ACCESS_KEY, SECRET_KEY
from tests.spark_jobs.test_crash import ROOT, project_on_disk
from writers.registry import make_writer, state_writer_factory
from writers.staged_files import DATA_FILES, WRITTEN_BY

SQL = "SELECT order_id, product_id, quantity * 2 AS doubled FROM orders WHERE quantity > 1"
NAMESPACE = "executor_writes"
DRIVER_ROWS_MAX = 50


def with_threshold(project: ProjectConfig) -> ProjectConfig:
    return project.model_copy(update={"spark": SparkConfig(driver_rows_max=DRIVER_ROWS_MAX)})


def newest_summary(project: ProjectConfig, view: str) -> dict[str, str]:
    """The newest commit's Lakeview keys as any reader sees them (snapshot summary / commit info)."""
    if project.views[view].format.value == "delta":
        from deltalake import DeltaTable

        from lakeview.config.models import delta_storage_options

        entry = DeltaTable(project.table_location(view), storage_options=delta_storage_options(project)).history(1)[0]
        return {k: str(v) for k, v in entry.items() if k.startswith("lakeview.")}
    snapshot = open_store(project).load_table((NAMESPACE, view)).current_snapshot()
    return dict(snapshot.summary.additional_properties)


def read_duckdb(project: ProjectConfig, view: str, catalog_uri: str):
    con = connect("avro", "httpfs", "iceberg", "delta")
    if project.is_s3:
        con.execute(project.lake.s3.duckdb_secret_sql())
    if project.views[view].format.value == "delta":
        return con.sql(f"SELECT * FROM delta_scan('{project.table_location(view)}')").to_arrow_table()
    con.execute(attach_sql(catalog_uri, project.lake.name))
    return con.sql(f"SELECT * FROM lake.{NAMESPACE}.{view}").to_arrow_table()


def assert_equals_recompute(project: ProjectConfig, view: str, catalog_uri: str) -> None:
    expected = oracle.recompute(project, view, oracle.landed_files(project.source_path("orders")))
    for rows in (read_duckdb(project, view, catalog_uri), tables.read_rows(project, view)):
        comparison = oracle.compare(rows, expected)
        assert comparison.equal, comparison.describe()


def run_batches(spark, project: ProjectConfig, view: str, catalog_uri: str, batches: list[int]) -> list[dict]:
    """Land one file per entry (that many orders), let the pipeline commit it; return each epoch's
    ``last_write`` (how its rows reached the table)."""
    writer = make_writer(project, view, catalog_uri)
    pipeline = GraphPipeline(spark, project, view, writer, state_writer=state_writer_factory(project, view))
    pipeline.prepare()
    query = pipeline.start()
    writes = []
    try:
        first = 1
        for i, count in enumerate(batches):
            land_json(project.source_path("orders"), f"{i:03d}.json", make_orders(count, seed=40 + i, first_id=first))
            first += count
            query.processAllAvailable()
            writes.append(dict(pipeline.last_write))
    finally:
        query.stop()
    return writes


def assert_written_by_executors(write: dict, rows: int) -> None:
    assert write["by"] == "executors" and write["rows_collected"] == 0, write
    assert write["rows"] == rows and write["files"] >= 1
    driver = f"{socket.gethostname()}:{os.getpid()}"
    assert driver not in write["writers"], "a data file was written by the driver process"


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_large_append_batch_is_written_by_executors_and_reads_back_exactly(
    fmt: str, spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    view = unique_name
    project = with_threshold(
        make_project(views={view: {"sql": SQL, "format": fmt, "namespace": NAMESPACE, "cadence": "200ms"}})
    )
    big, small = run_batches(spark, project, view, catalog_server.uri, [300, 30])

    expected_big = sum(1 for o in make_orders(300, seed=40, first_id=1) if o["quantity"] > 1)
    assert_written_by_executors(big, expected_big)
    assert small == {"by": "driver", "rows_collected": 30}  # the batch's rows, filtered by the graph in the driver
    history = tables.commit_history(project, view)
    assert [c.epoch for c in history] == [1, 0], "one snapshot per epoch"
    assert history[1].rows_inserted == expected_big and history[1].rows_in == 300
    assert_equals_recompute(project, view, catalog_server.uri)

    # The executor-written commit is stamped like any other, plus who wrote its files.
    if fmt == "iceberg":
        first = open_store(project).load_table((NAMESPACE, view)).snapshots()[0].summary.additional_properties
    else:
        from deltalake import DeltaTable

        commits = [e for e in DeltaTable(project.table_location(view)).history() if e.get("lakeview.epoch") is not None]
        first = {k: str(v) for k, v in commits[-1].items() if k.startswith("lakeview.")}
    assert (
        first["lakeview.epoch"] == "0" and first[WRITTEN_BY] == "executors" and int(first[DATA_FILES]) == big["files"]
    )
    assert WRITTEN_BY not in newest_summary(project, view)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_executor_written_files_on_s3(
    fmt: str, spark, s3_server, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    bucket = "executor-writes"
    s3_server.create_bucket_when_ready(bucket)
    view = unique_name
    project = parse_project(
        {
            "lake": {
                "warehouse": f"s3://{bucket}/wh",
                "catalog_store": f"sqlite:///{tmp_path / 'catalog.db'}",
                "s3": {"endpoint": s3_server.endpoint, "region": "us-east-1"},
            },
            "spark": {"driver_rows_max": DRIVER_ROWS_MAX},
            "sources": {"orders": {"format": "json", "path": str(tmp_path / "landing"), "schema": ORDERS_SCHEMA}},
            "views": {view: {"sql": SQL, "format": fmt, "namespace": NAMESPACE, "cadence": "200ms"}},
        },
        file=str(tmp_path / "lakeview.toml"),
        root=tmp_path,
    )
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        (write,) = run_batches(spark, project, view, server.uri, [200])
        assert_written_by_executors(write, sum(1 for o in make_orders(200, seed=40, first_id=1) if o["quantity"] > 1))
        assert_equals_recompute(project, view, server.uri)
    assert len([k for k in s3_server.keys(bucket, f"wh/{NAMESPACE}") if k.endswith(".parquet")]) >= write["files"]
    assert not any(p.suffix == ".parquet" for p in tmp_path.rglob("*")), "data files went to local disk, not S3"


def refresh_with_fault(project_dir: Path, view: str, fault: str) -> int:
    """Run `lakeview refresh VIEW` in its own process with ``LAKEVIEW_FAULT=fault``; its exit code."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKEVIEW_FAULT": fault}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakeview.cli", "refresh", view, "-p", str(project_dir)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the JVM this process started, if it outlived it
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL, out.decode()[-3000:]
    return proc.returncode


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_crash_between_executor_writes_and_commit_replays_without_duplicates(fmt: str, spark, tmp_path: Path) -> None:
    view = f"crash_{fmt}"
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "spark": {"driver_rows_max": DRIVER_ROWS_MAX},
        "sources": {"orders": {"format": "json", "path": "landing", "schema": ORDERS_SCHEMA}},
        "views": {view: {"sql": SQL, "format": fmt, "cadence": "manual", "namespace": NAMESPACE}},
    }
    project = project_on_disk(tmp_path, data)
    land_json(project.source_path("orders"), "000.json", make_orders(200, seed=7, first_id=1))

    def data_files() -> set[Path]:
        return {
            p for p in (tmp_path / "lake").rglob("*.parquet") if view in str(p) and "_delta_log" not in p.parts
        }  # not log checkpoints

    refresh_with_fault(tmp_path, view, "files_written:0")  # killed after the executors wrote, before the commit
    orphans = data_files()
    assert orphans, "the executors wrote no file before the crash"
    assert tables.last_commit(project, view) is None, "nothing may be committed before the crash point"

    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        # The restart (in this process: one JVM start less) replays epoch 0 from Spark's checkpoint.
        pipeline = view_pipeline(spark, project, view, server.uri)
        pipeline.prepare()
        pipeline.start(available_now=True).awaitTermination()
        assert pipeline.last_write["by"] == "executors"
        history = tables.commit_history(project, view)
        assert [c.epoch for c in history] == [0], "the replayed epoch committed exactly once"
        assert newest_summary(project, view)[WRITTEN_BY] == "executors"
        assert_equals_recompute(project, view, server.uri)
        committed = data_files() - orphans
        assert committed, "the replay wrote its own files"
        # The crashed attempt's files are orphans: once older than orphan_min_age (1 h by
        # default; aged here by their mtime), `lakeview maintain` deletes them and only them.
        old = time.time() - 2 * 3600
        for path in orphans:
            os.utime(path, (old, old))
        report = maintain_view(project, view, server.uri)
        assert report.orphans_deleted >= len(orphans), report
        assert data_files() == committed
        assert_equals_recompute(project, view, server.uri)


def test_explain_states_where_each_view_kind_holds_its_delta(make_project) -> None:
    from lakeview.project import explain_view

    project = make_project(
        views={
            "appended": {"sql": SQL},
            "sums": {"sql": "SELECT product_id, SUM(quantity) AS q FROM orders GROUP BY product_id"},
        }
    )
    bounded = project.model_copy(update={"spark": SparkConfig(driver_rows_max=1000, max_files_per_trigger=20)})
    assert (
        "a first batch of more than 1000 input rows ([spark] driver_rows_max), its tables still empty (a backfill): "
        "every table's rows computed by Spark and written by the executors" in explain_view(bounded, "appended")
    )
    assert "at most 20 new files per source ([spark] max_files_per_trigger)" in explain_view(bounded, "sums")
    assert "unbounded: set [spark] max_files_per_trigger" in explain_view(project, "sums")
    assert (
        "a first batch of more than 500000 input rows ([spark] driver_rows_max), its tables still empty (a backfill)"
        in explain_view(project, "sums")
    )


@pytest.mark.parametrize(
    ("spark_conf", "key"),
    [({"driver_rows_max": -1}, "spark.driver_rows_max"), ({"max_files_per_trigger": 0}, "spark.max_files_per_trigger")],
)
def test_bad_bounds_name_the_key(spark_conf: dict, key: str) -> None:
    from lakeview.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        parse_project({"spark": spark_conf})
    assert raised.value.key == key


def test_max_files_per_trigger_bounds_each_keyed_batch(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    view = unique_name
    sql = "SELECT product_id, SUM(quantity) AS total, COUNT(*) AS n FROM orders GROUP BY product_id"
    project = make_project(views={view: {"sql": sql, "namespace": NAMESPACE, "cadence": "manual"}})
    project = project.model_copy(update={"spark": SparkConfig(max_files_per_trigger=1)})
    for i, count in enumerate([40, 25, 30]):
        land_json(project.source_path("orders"), f"{i:03d}.json", make_orders(count, seed=60 + i, first_id=1 + 100 * i))
    pipeline = GraphPipeline(spark, project, view, make_writer(project, view, catalog_server.uri))
    pipeline.prepare()
    pipeline.start(available_now=True).awaitTermination()
    # One landed file per batch (in Spark's order): each delta the driver merged came from one file.
    assert sorted(c.rows_in for c in tables.commit_history(project, view)) == [25, 30, 40]
    assert_equals_recompute(project, view, catalog_server.uri)


def test_large_unbounded_keyed_batch_warns_how_to_bound_it(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, caplog
) -> None:
    view = unique_name
    sql = "SELECT product_id, SUM(quantity) AS total FROM orders GROUP BY product_id"
    project = with_threshold(make_project(views={view: {"sql": sql, "namespace": NAMESPACE, "cadence": "manual"}}))
    for i in range(2):
        land_json(
            project.source_path("orders"),
            f"{i:03d}.json",
            make_orders(DRIVER_ROWS_MAX + 10, seed=70 + i, first_id=1 + 1000 * i),
        )
        pipeline = GraphPipeline(spark, project, view, make_writer(project, view, catalog_server.uri))
        pipeline.prepare()
        with caplog.at_level("WARNING", logger="lakeview.pipeline"):
            pipeline.start(available_now=True).awaitTermination()
        assert_equals_recompute(project, view, catalog_server.uri)
        if (
            i == 0
        ):  # a first batch: the executors write the view (spark_jobs.executors.graph_backfill), nothing to warn about
            assert pipeline.last_write.get("bootstrap") and "max_files_per_trigger" not in caplog.text
    assert "set [spark] max_files_per_trigger to bound each batch" in caplog.text, (
        "the second batch merges in the driver"
    )
