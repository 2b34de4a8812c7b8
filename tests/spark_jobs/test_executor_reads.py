"""Tables past ``[spark] driver_keys_max`` live rows are never held by the driver: a chain of views over a
change feed (a keyed projection, an aggregate with MAX state over it, a filter view over that) with the bound
at 0 rows equals the full recompute after every batch, folds its deletes on the executors, publishes its
changes exactly; its state and the feed's mirror are looked up by key in their tables, and the driver never
builds a key index or caches a row of any table it keeps (views, state logs, the feed's mirror), locally and
on S3 (SeaweedFS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.config.models import SparkConfig
from lakeview.graph.zset import summed
from lakeview.project import parse_project
from lakeview.stack.embedded import EmbeddedStack
from spark_jobs.executors.reads import ExecutorReads
from spark_jobs.graph_pipeline import GraphPipeline
from tests.s3_server import ACCESS_KEY, SECRET_KEY
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_view_dag import BATCHES, FEED, SCHEMA, assert_chain_equals_recompute, chain, order
from writers.graph_table_rows import TableRows
from writers.iceberg.writer import IcebergWriter
from writers.maintenance import MAINTENANCE
from writers.registry import make_writer
from writers.snapshot_diff import snapshot_change

MORE = [
    [order("u", i, 3, 7) for i in (2, 3, 6)] + [order("c", 20, 0, 4), order("d", 10)],
    [order("c", 30 + i, i % 5, i) for i in range(6)] + [order("d", 20), order("u", 12, 1, 9)],
]


def views_of(prefix: str) -> tuple[tuple[str, str, str], dict]:
    lines, sales, big, views = chain(prefix)
    for view in views.values():
        view.update(
            cadence="100ms", format="iceberg", maintenance={"delete_files_max": 2}
        )  # fold at every second delete file
    return (lines, sales, big), views


def run_chain(
    spark, project, names: tuple[str, str, str], catalog_uri: str, batches: list[list[str]]
) -> dict[str, GraphPipeline]:
    stack = EmbeddedStack(project, catalog_uri=catalog_uri)
    stack.start_views(spark=spark)
    try:
        for number, batch in enumerate(batches):
            land(project.source_path("orders"), f"{number:03d}.json", batch)
            for view in names:
                stack.queries[view].processAllAvailable()
            assert_chain_equals_recompute(project, names, f"after batch {number}")
        return {view: stack.pipelines[view] for view in names}
    finally:
        stack.stop_views()


def assert_nothing_kept_on_the_driver(pipelines: dict[str, GraphPipeline]) -> None:
    """Past ``[spark] driver_keys_max`` (0 here) every state table and mirror is looked up by key in its table,
    never held in the driver's memory, and no table's keys are indexed or its rows cached by the driver."""
    writers = [w for p in pipelines.values() for w in p.tables()]
    assert len(writers) >= 4, "the views, the aggregate's state and the feed's mirror"
    for view, pipeline in pipelines.items():
        assert pipeline.view_rows.memory is None, f"{view}: the view's rows are held in the driver's memory"
        held = {**pipeline.store.memory, **pipeline.mirror_store.store.memory}
        for name, memory in held.items():
            assert isinstance(memory, TableRows), f"{view}: {name} is held in the driver's memory"
    for writer in writers:
        name, live = writer.table_name, writer.live
        assert live.index_builds == 0, f"{name}: the driver indexed the table's keys"
        assert live._bytes == 0 and not live._rows, f"{name}: the driver cached the table's rows"


def folds(project, view: str) -> int:
    table = open_store(project).load_table((project.views[view].namespace, view))
    return sum(1 for s in table.snapshots() if s.summary and MAINTENANCE in s.summary.additional_properties)


def test_tables_past_the_driver_bound_are_read_by_the_executors(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    names, views = views_of(unique_name[:36])
    sources = {"orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED}}
    project = make_project(views=views, sources=sources).model_copy(update={"spark": SparkConfig(driver_keys_max=0)})
    kept = run_chain(spark, project, names, catalog_server.uri, [*BATCHES, MORE[0]])
    assert_nothing_kept_on_the_driver(kept)
    lines, sales, _ = names
    assert folds(project, lines) >= 1 and folds(project, sales) >= 1, (
        "deletes were folded (by the executors) in some commit"
    )

    # A snapshot's change derived on the executors (a new process: nothing remembered from the
    # commit) equals the driver's derivation, folds included.
    for view in (lines, sales):
        remote, local = make_writer(project, view, catalog_server.uri), make_writer(project, view, catalog_server.uri)
        remote.live.remote = ExecutorReads(spark, rows_max=0)
        for record in tables.commit_history(project, view):
            by_executors = snapshot_change(remote, record.snapshot_id)
            by_driver = snapshot_change(local, record.snapshot_id)
            assert by_executors.sort_by([(c, "ascending") for c in by_executors.column_names]).equals(
                by_driver.sort_by([(c, "ascending") for c in by_driver.column_names])
            ), f"{view} epoch {record.epoch}"
            assert summed(by_executors).num_rows == by_executors.num_rows
        assert remote.live.remote.jobs >= len(tables.commit_history(project, view))


def test_executor_reads_on_s3(
    spark, s3_server, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    bucket = "executor-reads"
    s3_server.create_bucket_when_ready(bucket)
    names, views = views_of("s3reads")
    project = parse_project(
        {
            "lake": {
                "warehouse": f"s3://{bucket}/wh",
                "catalog_store": f"sqlite:///{tmp_path / 'catalog.db'}",
                "s3": {"endpoint": s3_server.endpoint, "region": "us-east-1"},
            },
            "spark": {"driver_keys_max": 0},
            "sources": {
                "orders": {"format": "json", "path": str(tmp_path / "landing"), "schema": SCHEMA, "changes": FEED}
            },
            "views": views,
        },
        file=str(tmp_path / "lakeview.toml"),
        root=tmp_path,
    )
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        kept = run_chain(spark, project, names, server.uri, BATCHES)  # the third batch folds (delete_files_max = 2)
    assert_nothing_kept_on_the_driver(kept)
    assert folds(project, names[0]) >= 1
    local = [p for p in tmp_path.rglob("*.parquet") if not p.is_relative_to(project.changes_path(names[0]).parent)]
    assert not local, f"table files went to local disk: {local}"


# ---------------------------------------------------------------- the writer alone, against a model


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_remote_writer_equals_a_model_every_epoch(mode: str, spark, rest_catalog, unique_name: str) -> None:
    """Random upserts and deletes (NULL key included) on a table past the driver's bound: after
    every epoch the table equals a model, the snapshot's change (remembered from the commit, and
    derived again on the executors by a fresh writer) is exactly the model's, and folds (merge-on-read)
    or file rewrites (copy-on-write) were done by the executors."""
    import random

    import pyarrow as pa

    from lakeview.ivm.commits import Change, Epoch
    from writers.maintenance import MaintenancePolicy
    from writers.snapshot_diff import WEIGHT

    schema = pa.schema([("k", pa.int64()), ("total", pa.int64())])
    policy = MaintenancePolicy(keep_snapshots=None, small_file_bytes=1 << 30, compact_min_files=4, delete_files_max=3)
    writer = IcebergWriter(rest_catalog, "executor_reads", unique_name, compaction=policy)
    writer.live.remote = ExecutorReads(spark, rows_max=0)
    writer.ensure_table(schema, ("k",), {"write.update.mode": mode})
    fresh = IcebergWriter(rest_catalog, "executor_reads", unique_name)
    fresh.live.remote = ExecutorReads(spark, rows_max=0)
    rng = random.Random(23)
    model: dict = {}
    rewrites = 0
    changes: dict[int, dict] = {}
    for epoch in range(8):
        before = dict(model)
        count = 30 if epoch == 0 else 0 if epoch in (4, 5) else rng.randrange(1, 12)  # epochs 4 and 5 only delete
        upserts = {rng.choice([*range(80), None]): rng.randrange(1000) for _ in range(count)}
        deletes = [
            k for k in rng.sample(sorted(model, key=repr), min(len(model), rng.randrange(1, 5))) if k not in upserts
        ]
        rows = pa.table(
            {"k": pa.array(list(upserts), pa.int64()), "total": pa.array(list(upserts.values()), pa.int64())}
        )
        gone = pa.table({"k": pa.array(deletes, pa.int64())}) if deletes else None
        record = writer.commit(Epoch(unique_name, epoch, {"n": epoch}), Change(rows, ("k",), deletes=gone))
        model = {k: v for k, v in model.items() if k not in deletes} | upserts
        assert record is not None
        stored = writer.table().scan().to_arrow().to_pylist()
        assert {r["k"]: r["total"] for r in stored} == model and len(stored) == len(model), f"epoch {epoch}"
        expected = {
            **{(k, v): -1 for k, v in before.items() if model.get(k, object()) != v},
            **{(k, v): 1 for k, v in model.items() if before.get(k, object()) != v},
        }
        for derived_by in (writer, fresh):
            z = snapshot_change(derived_by, record.snapshot_id).to_pylist()  # type: ignore[arg-type]
            assert {(r["k"], r["total"]): r[WEIGHT] for r in z} == expected, f"epoch {epoch}"
        changes[record.snapshot_id] = expected
        rewrites += writer.timings.get("files_rewritten", 0) > 0
    for snapshot_id, expected in changes.items():  # each older commit's change, remembered apart from the others'
        z = snapshot_change(writer, snapshot_id).to_pylist()
        assert {(r["k"], r["total"]): r[WEIGHT] for r in z} == expected, f"snapshot {snapshot_id}"
    assert rewrites >= 2, "files were rewritten (by the executors) several times"
    assert writer.live.index_builds == 0 and not writer.live._rows
    assert (
        writer.live.remote.timings.get("rewrite_s") is not None
        and fresh.live.remote.timings.get("change_s") is not None
    )


# ---------------------------------------------------------------- a crash: the change derived on the executors


def test_killed_before_publishing_the_change_is_derived_on_the_executors(spark, tmp_path: Path) -> None:
    """The upstream view commits an epoch and is SIGKILLed before publishing its change. The
    restart has nothing of that commit in memory, so the change comes from the snapshot, by a
    Spark job (bound 0): the chain still equals the full recompute."""
    import signal

    from spark_jobs.sources.view_changes import reader_path
    from tests.spark_jobs.test_crash import project_on_disk
    from tests.spark_jobs.test_view_dag import refresh_in_subprocess

    names, views = views_of("crashreads")
    lines, sales, _ = names
    for view in views.values():
        view["cadence"] = "manual"
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "spark": {"driver_keys_max": 0},
        "sources": {"orders": {"format": "json", "path": "landing", "schema": SCHEMA, "changes": FEED}},
        "views": views,
    }
    project = project_on_disk(tmp_path, data)
    landing = project.source_path("orders")

    def refresh() -> dict[str, dict[str, float]]:
        """`lakeview refresh` of the chain in this process; each view's executor job timings."""
        with EmbeddedStack(project, port=0) as stack:
            timings = {}
            for view in names:
                stack.start_views([view], spark=spark, available_now=True)
                stack.queries[view].awaitTermination()
                timings[view] = dict(stack.pipelines[view].writer.live.remote.timings)
            return timings

    land(landing, "000.json", BATCHES[0])
    refresh()
    assert_chain_equals_recompute(project, names, "after the first refresh")
    land(landing, "001.json", BATCHES[1])
    assert refresh_in_subprocess(tmp_path, lines, "before_publish:1") == -signal.SIGKILL
    assert tables.last_commit(project, lines).epoch == 1
    assert not list(reader_path(project, lines, sales).glob("epoch-000000000001-*")), "killed before the publication"

    timings = refresh()
    assert "change_s" in timings[lines], "the restart derived the committed epoch's change on the executors"
    assert_chain_equals_recompute(project, names, "after the restart")
