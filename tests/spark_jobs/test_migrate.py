"""A view an older Lakeview kept with the one-source stack keeps working after the upgrade, with no step by hand:
started under the operator graph it is rebuilt from its sources' full history (one WARNING names it, why and what
is dropped), or adopted as it is where its table is exactly what the graph keeps (a projection over an append-only
source). After the start the view read back equals DuckDB's recompute of its SQL over every landed file, the older
tables are gone, and the next epoch reads only its new file.

The older layouts are written with the writers directly (:func:`stack_layout`), as the stack left them: checked
once against a lake the stack made (``LAKEVIEW_ENGINE`` unset before session 16, Iceberg and Delta): the view's
table with the view's columns (``lakeview.key``: the GROUP BY columns, a change feed's key; none for a projection
over an append-only source), the group state ``__lv_state_<view>_0`` (the GROUP BY columns, ``__lv_rows``, a SUM or
AVG's ``__lv_a<i>_s``/``_c``, a COUNT's ``__lv_a<i>_c``; keyed by the GROUP BY columns), one value multiset
``__lv_state_<view>_<i>`` per MIN/MAX/COUNT(DISTINCT) argument (the GROUP BY columns, ``__lv_v``, ``__lv_n``), a
change feed's mirror ``__lv_state_<view>_src`` (the source's columns, one row per key, no ``__lv_w``), each with
``lakeview.state-of`` naming the view, every table's commits stamped with the epoch and frontier of Spark's
checkpoint, which had read every file landed so far (written here by :class:`DriverStream`, in Spark's format).
An aggregate of SUM/COUNT/MIN/MAX over an append-only source kept no state table (its table was its state)."""

from __future__ import annotations

import json
import logging
import signal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.errors import WriterError
from lakeview.ivm import oracle
from lakeview.ivm.commits import EPOCH, Change, Epoch
from spark_jobs import faults
from spark_jobs.driver_stream import DriverStream
from spark_jobs.graph_pipeline import GraphPipeline
from spark_jobs.migrate import marker_path
from tests.pipelines import view_pipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk, refresh
from tests.spark_jobs.test_graph_pipeline import SOURCES as GRAPH_SOURCES
from tests.spark_jobs.test_graph_pipeline import read as graph_read
from tests.spark_jobs.test_view_dag import refresh_in_process
from writers.delta.log import commit_infos
from writers.staged_files import WRITTEN_BY

NS = "migrate_tests"
SOURCES = {
    "orders": {"format": "json", "path": "landing/orders", "schema": "id BIGINT, pid BIGINT, qty INT"},
    "products": GRAPH_SOURCES["products"],  # a change feed
}
PRODUCTS = pa.schema(
    {"id": pa.int64(), "category": pa.string(), "price": pa.float64(), "op": pa.string(), "seq": pa.int64()}
)


def orders(ids: range) -> list[str]:
    return [json.dumps({"id": i, "pid": i % 3, "qty": 1 + i % 5}) for i in ids]


def product(op: str, i: int, seq: int, category: str | None = None, price: float | None = None) -> str:
    return json.dumps({"id": i, "category": category, "price": price, "op": op, "seq": seq})


FIRST = {  # what the older Lakeview had read
    "orders": orders(range(1, 30)),
    "products": [product("c", p, p, ("toys", "books")[p % 2], float(p)) for p in range(1, 8)],
}
WHILE_STOPPED = {  # landed while it was stopped for the upgrade: a delete and an update of keys it had read
    "orders": orders(range(30, 40)),
    "products": [product("d", 2, 20), product("u", 3, 21, "games", 2.5), product("c", 9, 22, "toys", 9.0)],
}
NEXT = {
    "orders": orders(range(40, 45)),
    "products": [product("u", 9, 30, "books", 4.0), product("d", 4, 31)],
}


def stack_layout(
    pipeline: GraphPipeline, key: tuple[str, ...] | None, state: dict[str, tuple[pa.Table, tuple[str, ...]]]
) -> None:
    """The tables the one-source stack left for ``pipeline``'s view (see the module's doc): Spark's checkpoint
    having read every landed file (one epoch), the view's rows as of it (DuckDB's recompute), and ``state``'s
    tables (by name: their rows and key), every table's commit stamped with that epoch."""
    project, view = pipeline.project, pipeline.view
    directories = [project.source_path(s) for s in pipeline.sources]
    stream = DriverStream(f"older_{view}", project.checkpoint_path(view), directories, lambda *_: None, 0.0, True)
    stream.start().awaitTermination()
    files = {s: oracle.landed_files(project.source_path(s)) for s in pipeline.sources}
    frontier = {s: {"files": len(f), "log_offset": 0} for s, f in files.items()}
    epoch = Epoch(view=view, number=0, frontier=frontier)
    rows = oracle.recompute(project, view, files)
    owned = {"lakeview.state-of": view}
    for name, (table, table_key) in state.items():
        writer = pipeline._state_writer(name)
        writer.ensure_table(table.schema, table_key, owned)
        writer.commit(epoch, Change(table, key=table_key))
    properties = {"lakeview.sql": pipeline.config.sql, "lakeview.cadence": str(pipeline.config.cadence)}
    pipeline.writer.ensure_table(rows.schema, key, properties)
    pipeline.writer.commit(epoch, Change(rows, key=key))


def land_all(project, batch: dict[str, list[str]], name: str) -> None:
    for source, lines in batch.items():
        land(project.source_path(source), name, lines)


def read(project, view: str, catalog_server: CatalogServer) -> pa.Table:
    return graph_read(project, view, catalog_server, NS)


def exists(pipeline: GraphPipeline, name: str) -> bool:
    writer = pipeline._state_writer(name)
    if pipeline.writer.capabilities.format == "delta":
        return DeltaTable.is_deltatable(writer.location)  # type: ignore[attr-defined]
    return writer.catalog.table_exists(writer.identifier)  # type: ignore[attr-defined]


def assert_recomputed(project, view: str, catalog_server: CatalogServer, sources) -> None:
    """The view read back equals DuckDB's recompute of its SQL over every file landed."""
    files = {s: oracle.landed_files(project.source_path(s)) for s in sources}
    comparison = oracle.compare(read(project, view, catalog_server), oracle.recompute(project, view, files))
    assert comparison.equal, comparison.describe()


def upgrade_and_run(spark, project, view: str, catalog_server: CatalogServer) -> GraphPipeline:
    """Start the view under the graph with what landed while it was stopped, then one more epoch (``NEXT``):
    the view equals the recompute after each, and the last epoch read only its new files' rows."""
    pipeline = view_pipeline(spark, project, view, catalog_server.uri)
    assert isinstance(pipeline, GraphPipeline)
    pipeline.prepare()
    query = pipeline.start()
    try:
        query.processAllAvailable()
        assert_recomputed(project, view, catalog_server, pipeline.sources)
        land_all(project, {s: NEXT[s] for s in pipeline.sources}, "002.json")
        query.processAllAvailable()
        assert_recomputed(project, view, catalog_server, pipeline.sources)
    finally:
        query.stop()
    assert pipeline.last_write["rows_collected"] == sum(len(NEXT[s]) for s in pipeline.sources)
    return pipeline


@pytest.fixture()
def older(spark, make_project, unique_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """A one-view project whose FIRST files an older Lakeview read, and WHILE_STOPPED's landed since: (the view's
    graph pipeline, not prepared) for its SQL and format (``rows_max``: its ``[spark] driver_rows_max``)."""
    monkeypatch.setenv("LAKEVIEW_ENGINE", "graph")  # (until the graph is the only engine)
    caplog.set_level(logging.WARNING, logger="lakeview.pipeline")

    def make(sql: str, fmt: str, catalog_server: CatalogServer, rows_max: int | None = None) -> GraphPipeline:
        view = {"sql": sql, "cadence": "200ms", "namespace": NS, "format": fmt}
        project = make_project(views={unique_name: view}, sources=SOURCES)
        if rows_max is not None:
            project = project.model_copy(
                update={"spark": project.spark.model_copy(update={"driver_rows_max": rows_max})}
            )
        pipeline = view_pipeline(spark, project, unique_name, catalog_server.uri)
        land_all(project, {s: FIRST[s] for s in pipeline.sources}, "000.json")
        return pipeline

    return make


def rebuilt(caplog: pytest.LogCaptureFixture, view: str, tables: list[str]) -> str:
    (line,) = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "rebuilding" in r.getMessage()
    ]
    assert line.startswith(f"{view}: rebuilding the view from its sources' full history: an older Lakeview kept it")
    assert all(name in line for name in tables) and "Spark's checkpoint" in line, line
    return line


def test_an_iceberg_aggregate_the_stack_kept_in_state_tables_is_rebuilt_at_start(
    older, catalog_server: CatalogServer, caplog, spark
) -> None:
    sql = "SELECT pid, AVG(qty) AS a, COUNT(DISTINCT qty) AS d FROM orders GROUP BY pid"
    pipeline = older(sql, "iceberg", catalog_server)
    view = pipeline.view
    groups = pa.table({"pid": pa.array([0, 1, 2], pa.int64()), "__lv_rows": pa.array([9, 10, 10], pa.int64())})
    values = pa.table({"pid": pa.array([0], pa.int64()), "__lv_v": pa.array([1], pa.int64()), "__lv_n": [1]})
    stack_layout(
        pipeline,
        ("pid",),
        {f"__lv_state_{view}_0": (groups, ("pid",)), f"__lv_state_{view}_1": (values, ("pid", "__lv_v"))},
    )
    land_all(pipeline.project, WHILE_STOPPED, "001.json")
    upgrade_and_run(spark, pipeline.project, view, catalog_server)
    rebuilt(caplog, view, [f"__lv_state_{view}_0", f"__lv_state_{view}_1"])
    assert not exists(pipeline, f"__lv_state_{view}_0") and not exists(pipeline, f"__lv_state_{view}_1")
    assert not marker_path(pipeline.checkpoint).exists()


def test_a_delta_aggregate_the_stack_kept_in_its_table_alone_is_rebuilt_not_run_from_empty_state(
    older, catalog_server: CatalogServer, caplog, spark
) -> None:
    """SUM/COUNT/MIN over an append-only source: the stack kept no state table; the graph, from empty state,
    would overwrite each group with the new rows' aggregate alone."""
    sql = "SELECT pid, COUNT(*) AS n, SUM(qty) AS s, MIN(qty) AS lo FROM orders GROUP BY pid"
    pipeline = older(sql, "delta", catalog_server)
    stack_layout(pipeline, ("pid",), {})
    land_all(pipeline.project, WHILE_STOPPED, "001.json")
    upgrade_and_run(spark, pipeline.project, pipeline.view, catalog_server)
    assert "its table was kept as its own state" in rebuilt(caplog, pipeline.view, [pipeline.view])


def test_an_iceberg_projection_over_a_change_feed_the_stack_kept_with_its_mirror_is_rebuilt(
    older, catalog_server: CatalogServer, caplog, spark
) -> None:
    """Its mirror held each key's row one per key: the graph, with a mirror of its own starting empty, would keep a
    deleted key's row and add an updated key's row again."""
    pipeline = older("SELECT id, category, price FROM products", "iceberg", catalog_server)
    view = pipeline.view
    mirror = pa.Table.from_pylist([json.loads(line) for line in FIRST["products"]], schema=PRODUCTS)
    stack_layout(pipeline, ("id",), {f"__lv_state_{view}_src": (mirror, ("id",))})
    land_all(pipeline.project, WHILE_STOPPED, "001.json")
    upgrade_and_run(spark, pipeline.project, view, catalog_server)
    rebuilt(caplog, view, [f"__lv_state_{view}_src"])
    assert not exists(pipeline, f"__lv_state_{view}_src")


def test_a_delta_projection_over_an_append_only_source_is_adopted_as_it_is(
    older, catalog_server: CatalogServer, caplog, spark
) -> None:
    """The stack appended its rows to the view's table alone, as the graph does: kept, not rebuilt (its first
    commit stays in the table's history), and continued from the same checkpoint."""
    pipeline = older("SELECT id, pid, qty * 2 AS q2 FROM orders WHERE qty > 1", "delta", catalog_server)
    stack_layout(pipeline, None, {})
    first = pipeline.writer.last_commit()
    land_all(pipeline.project, WHILE_STOPPED, "001.json")
    upgrade_and_run(spark, pipeline.project, pipeline.view, catalog_server)
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
    history = DeltaTable(pipeline.project.table_location(pipeline.view)).history()
    assert first.snapshot_id in [entry["version"] for entry in history]  # the same table, grown
    assert pipeline.writer.last_commit().epoch == 2  # epochs 1 and 2 after the stack's 0


def test_a_rebuild_a_crash_interrupted_after_dropping_state_is_finished_by_the_next_start(
    older, catalog_server: CatalogServer, caplog, spark
) -> None:
    """The rebuild names its tables in a marker before dropping any: a start after a crash that dropped the
    state but not yet the view's table nor the checkpoint finishes the rebuild, its warning saying it resumes one."""
    sql = "SELECT pid, AVG(qty) AS a FROM orders GROUP BY pid"
    pipeline = older(sql, "iceberg", catalog_server)
    view = pipeline.view
    groups = pa.table({"pid": pa.array([0, 1, 2], pa.int64()), "__lv_rows": pa.array([9, 10, 10], pa.int64())})
    stack_layout(pipeline, ("pid",), {f"__lv_state_{view}_0": (groups, ("pid",))})
    marker = marker_path(pipeline.checkpoint)
    why = "state tables kept by an engine this version does not run"
    marker.write_text(json.dumps({"view": view, "tables": [f"__lv_state_{view}_0"], "why": why}))
    pipeline._state_writer(f"__lv_state_{view}_0").drop()  # the crash: after this drop, before the others
    land_all(pipeline.project, WHILE_STOPPED, "001.json")
    upgrade_and_run(spark, pipeline.project, view, catalog_server)
    assert "resuming a rebuild an earlier start began" in rebuilt(caplog, view, [f"__lv_state_{view}_0"])
    assert not marker.exists()


@pytest.mark.parametrize("linked", ["group", "view over a view"])
def test_an_older_view_that_cannot_be_rebuilt_alone_is_refused_at_start_naming_what_to_drop(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, monkeypatch: pytest.MonkeyPatch, linked: str
) -> None:
    """A group's member shares the group's checkpoint; a view over a view re-reads change files that were pruned
    once read (and its readers hold what it published): refused, naming the views to rebuild together."""
    monkeypatch.setenv("LAKEVIEW_ENGINE", "graph")
    sql = "SELECT pid, AVG(qty) AS a FROM orders GROUP BY pid"
    if linked == "group":
        views = {unique_name: {"sql": sql, "group": "g"}, "other": {"sql": "SELECT id FROM orders", "group": "g"}}
    else:
        views = {
            "base": {"sql": "SELECT id, pid, qty FROM orders"},
            unique_name: {"sql": sql.replace("orders", "base")},
        }
    project = make_project(views={v: {"namespace": NS, **c} for v, c in views.items()}, sources=SOURCES)
    pipeline = view_pipeline(spark, project, unique_name, catalog_server.uri)
    groups = pa.table({"pid": pa.array([0], pa.int64()), "__lv_rows": pa.array([1], pa.int64())})
    pipeline._state_writer(f"__lv_state_{unique_name}_0").ensure_table(groups.schema, ("pid",), {})
    with pytest.raises(WriterError) as info:
        pipeline.prepare()
    message = str(info.value)
    assert message.startswith(f"{unique_name}: refused at start: an older Lakeview kept it"), message
    assert f"__lv_state_{unique_name}_0" in message
    assert ("group g's views" if linked == "group" else f"{unique_name} and base") in message, message
    assert exists(pipeline, f"__lv_state_{unique_name}_0")  # nothing dropped


def versions(pipeline: GraphPipeline) -> list[pa.Table]:
    """Every version of the view's table as a reader time-travelling to it finds it, oldest first (Iceberg: each
    snapshot through pyiceberg; Delta: each version of its log)."""
    if pipeline.writer.capabilities.format == "delta":
        location = pipeline.project.table_location(pipeline.view)
        newest = DeltaTable(location).version()
        return [DeltaTable(location, version=v).to_pyarrow_table() for v in range(newest + 1)]
    table = pipeline.writer.table()  # type: ignore[attr-defined]
    snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number or 0)
    return [table.scan(snapshot_id=s.snapshot_id).to_arrow() for s in snapshots]


def rebuild_written_by(pipeline: GraphPipeline) -> str | None:
    """Who wrote the data files of the view's newest epoch-0 commit (the rebuild's first batch): "executors"
    past ``driver_rows_max``, else None (the driver)."""
    if pipeline.writer.capabilities.format == "delta":
        infos = commit_infos(DeltaTable(pipeline.project.table_location(pipeline.view)))
        summaries = [info for info in infos if info.get(EPOCH) == "0"]
    else:
        table = pipeline.writer.table()  # type: ignore[attr-defined]
        snapshots = sorted(table.snapshots(), key=lambda s: -(s.sequence_number or 0))
        summaries = [s.summary.additional_properties for s in snapshots if s.summary]
        summaries = [summary for summary in summaries if summary.get(EPOCH) == "0"]
    return summaries[0].get(WRITTEN_BY)


def landed_rows(project, view: str, sources) -> pa.Table:
    """DuckDB's recompute of the view over every file landed so far."""
    return oracle.recompute(project, view, {s: oracle.landed_files(project.source_path(s)) for s in sources})


@pytest.mark.parametrize(
    ("fmt", "rows_max"), [("iceberg", None), ("delta", None), ("iceberg", 10), ("delta", 10)],
    ids=["iceberg-driver", "delta-driver", "iceberg-executors", "delta-executors"],
)  # fmt: skip
def test_rebuild_keeps_old_rows_for_readers(
    older, catalog_server: CatalogServer, caplog, spark, monkeypatch: pytest.MonkeyPatch, fmt: str, rows_max
) -> None:
    """While the rebuild runs (its older tables dropped, its first batch computed and, past ``driver_rows_max``,
    written by the executors) a reader of the view still finds the rows the older Lakeview left; then ONE commit
    replaces them: no version of the view's table is empty or holds a mix of the old and the rebuilt rows."""
    sql = "SELECT pid, AVG(qty) AS a, COUNT(DISTINCT qty) AS d FROM orders GROUP BY pid"
    pipeline = older(sql, fmt, catalog_server, rows_max)
    project, view = pipeline.project, pipeline.view
    groups = pa.table({"pid": pa.array([0, 1, 2], pa.int64()), "__lv_rows": pa.array([9, 10, 10], pa.int64())})
    stack_layout(pipeline, ("pid",), {f"__lv_state_{view}_0": (groups, ("pid",))})
    old = read(project, view, catalog_server)
    assert old.num_rows == 3
    land_all(project, WHILE_STOPPED, "001.json")
    rebuilt_rows = landed_rows(project, view, ["orders"])
    seen: list[pa.Table] = []

    def before_the_commit(name: str, epoch: int | None) -> None:  # the rebuild's first batch, about to commit
        if (name, epoch) == ("before_view_commit", 0):
            seen.append(read(project, view, catalog_server))

    monkeypatch.setenv("LAKEVIEW_FAULT", "before_view_commit:0")  # (Delta: hooks the view writer's commit)
    monkeypatch.setattr(faults, "point", before_the_commit)
    done = upgrade_and_run(spark, project, view, catalog_server)
    assert "readers keep reading its old rows until that batch replaces them" in rebuilt(
        caplog, view, [f"__lv_state_{view}_0"]
    )
    assert len(seen) == 1 and oracle.compare(seen[0], old).equal, "a reader during the rebuild lost the old rows"
    assert rebuild_written_by(done) == ("executors" if rows_max is not None else None)
    kinds = []
    for rows in versions(done):
        kind = next((k for k, e in [("old", old), ("rebuilt", rebuilt_rows)] if oracle.compare(rows, e).equal), None)
        kinds.append(kind or ("empty" if rows.num_rows == 0 else "next"))
    assert [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]] == [
        *(["empty"] if fmt == "delta" else []), "old", "rebuilt", "next",
    ], kinds  # fmt: skip


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
@pytest.mark.parametrize("point", ["rebuild_dropped", "before_view_commit"])
def test_rebuild_killed_keeps_old_rows(spark, tmp_path, monkeypatch, fmt: str, point: str) -> None:
    """`lakeview refresh` upgrading the view is killed (SIGKILL) part way: its older tables dropped and its rows
    kept as a baseline but Spark's checkpoint and the marker not yet removed (``rebuild_dropped``), or the first
    batch computed but the view's commit not made (``before_view_commit``; Delta: its state tables committed). A
    reader still finds the older Lakeview's rows, and the next refresh finishes the rebuild, the view then equal to
    the recompute."""
    monkeypatch.setenv("LAKEVIEW_ENGINE", "graph")  # (until the graph is the only engine; the child inherits it)
    view = f"killed_{fmt}"
    config = {"sql": "SELECT pid, AVG(qty) AS a FROM orders GROUP BY pid", "format": fmt, "namespace": NS}
    data = {"lake": {"warehouse": "lake"}, "server": {"port": 0}, "sources": SOURCES}
    project = project_on_disk(tmp_path, {**data, "views": {view: {**config, "cadence": "manual"}}})
    land_all(project, {"orders": FIRST["orders"]}, "000.json")
    groups = pa.table({"pid": pa.array([0, 1, 2], pa.int64()), "__lv_rows": pa.array([9, 10, 10], pa.int64())})
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        pipeline = view_pipeline(spark, project, view, server.uri)
        stack_layout(pipeline, ("pid",), {f"__lv_state_{view}_0": (groups, ("pid",))})
        old = read(project, view, server)
    land_all(project, {"orders": WHILE_STOPPED["orders"]}, "001.json")
    assert refresh(tmp_path, f"{point}:0", view) == -signal.SIGKILL
    marker = marker_path(project.checkpoint_path(view))
    assert marker.exists() == (point == "rebuild_dropped")  # the next start finishes the rebuild it names
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        assert not exists(view_pipeline(spark, project, view, server.uri), f"__lv_state_{view}_0")  # rebuilding
        comparison = oracle.compare(read(project, view, server), old)
        assert comparison.equal, f"a reader after the kill lost the old rows: {comparison.describe()}"
    refresh_in_process(spark, project, [view])
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        assert_recomputed(project, view, server, ["orders"])
    assert not marker.exists()
