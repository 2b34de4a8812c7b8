"""Views the per-shape planner refuses, kept as operator graphs through real Spark, the embedded catalog
and real tables: a star join (Iceberg and Delta), a top-k over an aggregate, a FULL OUTER join, a CTE with
an IN subquery, and a restart. After EVERY epoch the view read back (DuckDB over the catalog or the Delta
log, and pyiceberg) equals DuckDB's recompute of the view's SQL over exactly the files the commit reached
(what ``lakeview verify`` runs)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from typer.testing import CliRunner

from catalog_api.server import CatalogServer
from lakeview.cli.main import app
from lakeview.config.models import SparkConfig
from lakeview.graph import WEIGHT as GRAPH_WEIGHT
from lakeview.graph import explain
from lakeview.ivm import oracle
from lakeview.project import is_graph_view
from lakeview.sql.duck import arrow_sql, connect
from spark_jobs.driver_stream import DriverStream
from spark_jobs.graph_pipeline import GraphPipeline
from spark_jobs.sources.quarantine import quarantined_rows
from tests.pipelines import land_parquet, view_pipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_crash import project_on_disk
from tests.spark_jobs.test_pipeline import read_view
from writers import graph_state

NS = "graph_tests"
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
SOURCES = {
    "orders": {"format": "json", "path": "landing/orders", "schema": "id BIGINT, pid BIGINT, cid BIGINT, qty INT"},
    "products": {
        "format": "json",
        "path": "landing/products",
        "schema": "id BIGINT, category STRING, price DOUBLE, op STRING, seq BIGINT",
        "changes": FEED,
    },
    "customers": {
        "format": "json",
        "path": "landing/customers",
        "schema": "id BIGINT, rid BIGINT, op STRING, seq BIGINT",
        "changes": FEED,
    },
    "regions": {
        "format": "json",
        "path": "landing/regions",
        "schema": "id BIGINT, region STRING, op STRING, seq BIGINT",
        "changes": FEED,
    },
}
ARROW = {  # the sources' schemas, for landing them as Parquet
    "orders": pa.schema({"id": pa.int64(), "pid": pa.int64(), "cid": pa.int64(), "qty": pa.int32()}),
    "products": pa.schema(
        {"id": pa.int64(), "category": pa.string(), "price": pa.float64(), "op": pa.string(), "seq": pa.int64()}
    ),
    "customers": pa.schema({"id": pa.int64(), "rid": pa.int64(), "op": pa.string(), "seq": pa.int64()}),
    "regions": pa.schema({"id": pa.int64(), "region": pa.string(), "op": pa.string(), "seq": pa.int64()}),
}
STAR = (
    "SELECT r.region, p.category, COUNT(*) n, SUM(o.qty*p.price) revenue FROM orders o "
    "JOIN products p ON o.pid=p.id JOIN customers c ON o.cid=c.id JOIN regions r ON c.rid=r.id "
    "GROUP BY r.region, p.category"
)
TOPK = (
    "SELECT category, pid, revenue FROM (SELECT p.category, o.pid, SUM(o.qty*p.price) revenue, "
    "ROW_NUMBER() OVER (PARTITION BY p.category ORDER BY SUM(o.qty*p.price) DESC) rn "
    "FROM orders o JOIN products p ON o.pid=p.id GROUP BY p.category, o.pid) t WHERE rn <= 3"
)
OUTER = (
    "SELECT c.id cid, c.rid, o.id oid, o.qty FROM customers c FULL OUTER JOIN orders o ON o.cid = c.id AND o.qty > 1"
)
CTE = (
    "WITH big AS (SELECT id, category FROM products WHERE price >= 5) "
    "SELECT b.category, COUNT(*) n, SUM(o.qty) qty FROM orders o JOIN big b ON o.pid = b.id "
    "WHERE o.cid IN (SELECT id FROM customers WHERE rid = 1) GROUP BY b.category"
)
seq = itertools.count(1)


def order(i: int, pid: int, cid: int, qty: int) -> str:
    return json.dumps({"id": i, "pid": pid, "cid": cid, "qty": qty})


def change(op: str, i: int, **values: object) -> str:
    return json.dumps({"id": i, "op": op, "seq": next(seq), **values})


# Each epoch: new orders, and inserts, updates and deletes on the change-feed dimensions. Prices and
# quantities keep every product's revenue distinct, so a top-k has no ties.
EPOCHS: list[dict[str, list[str]]] = [
    {
        "regions": [change("c", 1, region="north"), change("c", 2, region="south")],
        "customers": [change("c", c, rid=1 + c % 2) for c in range(1, 7)],
        "products": [
            change("c", p, category=("toys", "books")[p % 2], price=float(p) + 0.5 * (p % 3)) for p in range(1, 10)
        ],
        "orders": [order(i, 1 + i % 9, 1 + i % 6, 1 + i % 4) for i in range(1, 40)],
    },
    {
        "products": [change("u", 2, category="games", price=7.25), change("d", 9)],
        "customers": [change("u", 3, rid=1), change("c", 7, rid=2)],
        "orders": [order(i, 1 + i % 9, 1 + i % 7, 1 + i % 5) for i in range(40, 60)],
    },
    {
        "regions": [change("u", 2, region="east"), change("c", 3, region="west")],
        "customers": [change("d", 1), change("u", 7, rid=3)],
        "products": [change("c", 9, category="toys", price=3.75), change("u", 4, category="books", price=11.0)],
    },
    {
        "orders": [order(i, 1 + i % 9, 1 + i % 7, 2 + i % 3) for i in range(60, 75)],
        "products": [change("d", 5)],
        "regions": [change("d", 1)],
    },
]


@pytest.fixture(scope="module")
def landed() -> dict[str, int]:
    return {}


def start(spark, project, view: str, catalog_server: CatalogServer) -> tuple[GraphPipeline, object]:
    pipeline = view_pipeline(spark, project, view, catalog_server.uri)
    assert isinstance(pipeline, GraphPipeline)
    pipeline.prepare()
    return pipeline, pipeline.start()


def read(project, view: str, catalog_server: CatalogServer, namespace: str = NS) -> pa.Table:
    if project.views[view].format.value == "delta":
        con = connect("delta")
        try:
            return con.sql(f"SELECT * FROM delta_scan('{project.table_location(view)}')").to_arrow_table()
        finally:
            con.close()
    return read_view(catalog_server, namespace, view)


def assert_recomputed(project, view: str, pipeline: GraphPipeline, catalog_server: CatalogServer) -> None:
    """The view as read back equals DuckDB's recompute over exactly the files its last commit reached."""
    record = pipeline.writer.last_commit()
    files = oracle.frontier_files(project, view, record.frontier)
    expected = oracle.recompute(project, view, files)
    comparison = oracle.compare(read(project, view, catalog_server), expected)
    assert comparison.equal, f"{view} epoch {record.epoch}: {comparison.describe()}"


def run(
    spark, project, view: str, catalog_server: CatalogServer, epochs=EPOCHS, restart: bool = False
) -> GraphPipeline:
    """Land each epoch's files (as each source's format says), process them (one epoch), and check the view
    after every epoch; with ``restart`` a new pipeline (and query) for every epoch."""
    pipeline, query = start(spark, project, view, catalog_server)
    try:
        for number, batch in enumerate(epochs):
            if restart and number:
                query.stop()
                pipeline, query = start(spark, project, view, catalog_server)
            for source, lines in batch.items():
                if project.sources[source].format.reader_format == "parquet":
                    rows = [json.loads(line) for line in lines]
                    land_parquet(project.source_path(source), f"{number:03d}.parquet", rows, ARROW[source])
                else:
                    land(project.source_path(source), f"{number:03d}.json", lines)
            query.processAllAvailable()
            assert_recomputed(project, view, pipeline, catalog_server)
    finally:
        query.stop()
    return pipeline


def project_with(make_project, views: dict[str, str], **extra):
    return make_project(
        views={n: {"sql": sql, "cadence": "200ms", "namespace": NS, **extra} for n, sql in views.items()},
        sources=SOURCES,
    )


def test_star_join_aggregate_on_iceberg_commits_every_table_in_one_transaction(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    project = project_with(make_project, {unique_name: STAR})
    assert is_graph_view(project, unique_name)
    pipeline = run(spark, project, unique_name, catalog_server)
    rows = {(r["region"], r["category"]): r["n"] for r in read(project, unique_name, catalog_server).to_pylist()}
    assert ("north", "toys") not in rows and rows  # region 1 deleted in the last epoch
    # pyiceberg reads the same rows through the catalog
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    table = catalog.load_table((NS, unique_name)).scan().to_arrow()
    assert oracle.compare(table, read(project, unique_name, catalog_server)).equal
    # every table of the view (view, state tables, mirrors) holds each epoch exactly once, in one snapshot each
    last = pipeline.writer.last_commit().epoch
    assert last >= len(EPOCHS) - 1
    names = [w.table_name for w in pipeline.tables()]
    # the view, ONE table for every operator's state (the log) and a mirror per change feed
    assert len(names) == 5 and f"__lv_state_{unique_name}_g_log" in names
    for name in names:
        snapshots = catalog.load_table((NS, name)).snapshots()
        epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in snapshots if s.summary)
        epochs.pop(None, None)
        assert set(epochs.values()) == {1} and set(epochs) == {str(e) for e in range(last + 1)}, f"{name}: {epochs}"
    assert "Join INNER" in explain(pipeline.graph) and "rows" in explain(pipeline.graph)


def test_star_join_aggregate_on_delta_then_lakeview_verify_says_equal(
    spark, catalog_server: CatalogServer, lake_dir, tmp_path, unique_name: str
) -> None:
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "sources": SOURCES,
        "views": {unique_name: {"sql": STAR, "cadence": "200ms", "namespace": NS, "format": "delta"}},
    }
    project = project_on_disk(tmp_path, data)
    pipeline = run(spark, project, unique_name, catalog_server)
    assert all(w.capabilities.format == "delta" for w in pipeline.tables())
    assert pipeline.group is None  # no multi-table transaction: table by table, the view last
    verify = CliRunner().invoke(app, ["verify", unique_name, "-p", str(tmp_path)])
    assert verify.exit_code == 0 and "files): equal" in verify.output, verify.output


def test_bad_rows_of_every_source_are_set_aside_and_counted_on_the_epoch(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """JSON sources read by the driver (no Spark query runs), but for an epoch's file with a line that does not
    parse (orders), which one Spark query reads: that line and a change with an unknown operation (products)
    go to their sources' quarantines, the view equals the recompute over the good rows, and each epoch's
    snapshot counts them."""
    epochs = [
        {**EPOCHS[0], "orders": [*EPOCHS[0]["orders"], "{not json"]},
        {**EPOCHS[1], "products": [*EPOCHS[1]["products"], change("x", 3, category="toys", price=1.0)]},
    ]
    project = project_with(make_project, {unique_name: STAR})
    pipeline = run(spark, project, unique_name, catalog_server, epochs=epochs)
    assert pipeline.direct == list(SOURCES)
    # (a 200 ms trigger may list one source's file before the next lands, so the epoch numbers are not fixed:
    # each bad row carries the epoch that read it, and that epoch's snapshot counts it)
    orders = [(r["reason"], r["record"], r["epoch"]) for r in quarantined_rows(project, "orders", unique_name)]
    products = [(r["reason"], r["epoch"]) for r in quarantined_rows(project, "products", unique_name)]
    assert [o[:2] for o in orders] == [("malformed row: does not parse into the schema", "{not json")]
    assert [p[0] for p in products] == ["unknown operation x"]
    (bad_order_epoch,), (bad_change_epoch,) = [o[2] for o in orders], [p[1] for p in products]
    assert bad_order_epoch < bad_change_epoch  # the second batch's change landed after the first batch's line
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    stamped = {
        s.summary.additional_properties.get("lakeview.epoch"): s.summary.additional_properties.get(
            "lakeview.rows-quarantined"
        )
        for s in catalog.load_table((NS, unique_name)).snapshots()
        if s.summary
    }
    counted = {epoch: count for epoch, count in stamped.items() if count not in (None, "0")}
    assert counted == {str(bad_order_epoch): "1", str(bad_change_epoch): "1"}


def test_a_parquet_fact_table_is_read_by_the_driver_and_the_view_matches_the_recompute(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """An append-only Parquet source (nothing in it can be set aside) is read from its files of the epoch by
    the driver, not by Spark (a large first batch never passes through the JVM's heap): columns matched by
    name whatever their case and order, a column the file lacks NULL, a column it adds ignored. A JSON source
    with a column the driver does not read as Spark would (SMALLINT) keeps Spark's streaming query, which
    reads it beside the sources the driver reads."""
    customers = {**SOURCES["customers"], "schema": "id BIGINT, rid SMALLINT, op STRING, seq BIGINT"}
    sources = {**SOURCES, "orders": {**SOURCES["orders"], "format": "parquet"}, "customers": customers}
    project = make_project(views={unique_name: {"sql": STAR, "cadence": "200ms", "namespace": NS}}, sources=sources)
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        for number, batch in enumerate(EPOCHS):
            for source, lines in batch.items():
                if source != "orders":
                    land(project.source_path(source), f"{number:03d}.json", lines)
                    continue
                rows = [json.loads(line) for line in lines]
                table = pa.table(
                    {
                        "QTY": pa.array([r["qty"] for r in rows], pa.int32()),
                        "extra": pa.array(["x"] * len(rows)),
                        "id": [r["id"] for r in rows],
                        "pid": [r["pid"] for r in rows],
                        "cid": [r["cid"] for r in rows],
                    }
                )
                directory = project.source_path(source)
                directory.mkdir(parents=True, exist_ok=True)
                pq.write_table(table, directory / f".{number:03d}.parquet")
                (directory / f".{number:03d}.parquet").rename(directory / f"{number:03d}.parquet")
            query.processAllAvailable()
            assert_recomputed(project, unique_name, pipeline, catalog_server)
    finally:
        query.stop()
    assert pipeline.direct == ["orders", "products", "regions"] and not isinstance(query, DriverStream)
    assert pipeline.writer.last_commit().epoch >= 2


# a CTE over regions that the query never reads: regions is a source of the view but no input of its graph
UNUSED_CTE = "WITH r AS (SELECT id FROM regions), " + CTE.removeprefix("WITH ")


@pytest.mark.parametrize(
    "sql",
    [TOPK, OUTER, CTE, UNUSED_CTE],
    ids=["top3_per_category", "full_outer_join", "cte_in_subquery", "unused_cte_over_another_source"],
)
def test_graph_shapes_match_the_recompute_after_every_epoch(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, sql: str
) -> None:
    project = project_with(make_project, {unique_name: sql})
    run(spark, project, unique_name, catalog_server)
    assert read(project, unique_name, catalog_server).num_rows > 0


def test_restart_and_a_replayed_epoch_apply_no_epoch_twice(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """A new pipeline (and query) for every epoch, then Spark replays the last epoch (its commit log entry
    removed, as after a crash between the tables' commit and Spark's): the tables skip it."""
    project = project_with(make_project, {unique_name: TOPK})
    pipeline = run(spark, project, unique_name, catalog_server, restart=True)
    before = read(project, unique_name, catalog_server)
    commits = project.checkpoint_path(unique_name) / "commits"
    newest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(newest)).unlink()
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert oracle.compare(read(project, unique_name, catalog_server), before).equal
    assert_recomputed(project, unique_name, pipeline, catalog_server)
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    for writer in pipeline.tables():
        snapshots = catalog.load_table((NS, writer.table_name)).snapshots()
        epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in snapshots if s.summary)
        epochs.pop(None, None)
        assert set(epochs.values()) == {1} and int(max(epochs, key=int)) == newest, f"{writer.table_name}: {epochs}"


def test_delta_view_killed_between_its_state_commits_and_its_own_then_replayed(spark, tmp_path) -> None:
    """`lakeview refresh` of a Delta graph view killed after its state tables and mirrors committed epoch 1
    and before the view's table did: the restart replays epoch 1, reading the tables that hold it as they
    stood before it (Delta time travel), so the view ends equal to the recompute and no table holds an
    epoch twice."""
    import signal

    from deltalake import DeltaTable

    from tests.spark_jobs.test_crash import refresh
    from tests.spark_jobs.test_view_dag import refresh_in_process
    from writers.registry import make_writer

    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": SOURCES,
        "views": {"crashy": {"sql": STAR, "cadence": "manual", "namespace": NS, "format": "delta"}},
    }
    project = project_on_disk(tmp_path, data)
    for number in (0, 1):
        for source, lines in EPOCHS[number].items():
            land(project.source_path(source), f"{number:03d}.json", lines)
        if number == 0:
            refresh_in_process(spark, project, ["crashy"])
    assert refresh(tmp_path, "before_view_commit:1") == -signal.SIGKILL
    writer = make_writer(project, "crashy", "http://unused")
    assert writer.last_commit().epoch == 0  # the view's table missed epoch 1; its state tables hold it
    refresh_in_process(spark, project, ["crashy"])
    record = writer.last_commit()
    assert record.epoch == 1
    expected = oracle.recompute(project, "crashy", oracle.frontier_files(project, "crashy", record.frontier))
    comparison = oracle.compare(read(project, "crashy", None), expected)  # type: ignore[arg-type]
    assert comparison.equal, comparison.describe()
    base = Path(project.table_location("crashy")).parent
    tables = [p for p in base.iterdir() if p.name.startswith("__lv_state_crashy")]
    assert len(tables) > 8  # Delta: one table per operator state (no log) and the mirrors
    for path in tables:
        epochs = Counter(e.get("lakeview.epoch") for e in DeltaTable(str(path)).history() if "lakeview.epoch" in e)
        assert set(epochs.values()) == {1} and "0" in epochs, f"{path.name}: {epochs}"  # none twice
    mirror = DeltaTable(str(base / "__lv_state_crashy_src_products")).history()
    assert sorted(e["lakeview.epoch"] for e in mirror if "lakeview.epoch" in e) == ["0", "1"]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_state_an_older_version_made_with_the_graphs_old_column_names_is_refused_at_start_naming_it(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, fmt: str
) -> None:
    """The graph's own columns now carry the reserved ``__lv_`` prefix (a user column may be named ``__w`` or
    ``__cnt``). State tables an earlier version left with the old names (the weight ``__w``) are refused when
    the view starts, naming the tables to drop, rather than read as if they were empty."""
    from deltalake import DeltaTable, write_deltalake

    from lakeview.errors import WriterError

    project = project_with(make_project, {unique_name: STAR}, format=fmt)
    pipeline = run(spark, project, unique_name, catalog_server, epochs=EPOCHS[:1])
    old = next(w.table_name for w in pipeline.state.values())
    if fmt == "iceberg":
        catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
        with catalog.load_table((NS, old)).update_schema() as update:
            update.rename_column("__lv_w", "__w")
    else:
        path = str(Path(project.table_location(unique_name)).parent / old)
        rows = DeltaTable(path).to_pyarrow_table()
        renamed = rows.rename_columns(["__w" if n == "__lv_w" else n for n in rows.column_names])
        write_deltalake(path, renamed, mode="overwrite", schema_mode="overwrite")
    again = view_pipeline(spark, project, unique_name, catalog_server.uri)
    with pytest.raises(WriterError) as info:
        again.prepare()
    assert old in str(info.value) and "drop the view's table and its __lv_state_ tables" in str(info.value)


def test_iceberg_state_kept_in_one_table_per_operator_by_an_older_version_is_refused_at_start_naming_them(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """An earlier version kept each operator's state in its own table (``__lv_state_<view>_g_<operator>``); this
    one keeps them all in one log table. A view whose table has commits but whose log has none (its state is
    in the older tables) is refused when it starts, naming the tables to drop, rather than run from no state."""
    from lakeview.errors import WriterError
    from writers.graph_log import log_table_name

    project = project_with(make_project, {unique_name: STAR})
    run(spark, project, unique_name, catalog_server, epochs=EPOCHS[:1])
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    older = f"__lv_state_{unique_name}_g_aggregate4_groups"
    catalog.create_table((NS, older), schema=pa.schema([("g_pid", pa.int64()), ("__lv_w", pa.int64())]))
    catalog.drop_table((NS, log_table_name(unique_name)))  # as if this version had never run the view
    again = view_pipeline(spark, project, unique_name, catalog_server.uri)
    with pytest.raises(WriterError) as info:
        again.prepare()
    message = str(info.value)
    assert older in message and log_table_name(unique_name) in message, message
    assert "drop the view's table and its __lv_state_ tables" in message


def test_iceberg_state_log_of_an_older_layout_is_refused_at_start_naming_it(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """The state log's layout (a table property) says which state's columns are where. An earlier version also
    kept each join side that is a change feed's rows by its key in the log (now read from the feed's mirror,
    kept once): a log of that layout is refused when the view starts, naming it, rather than read wrongly."""
    from lakeview.errors import WriterError
    from writers.graph_log import LAYOUT, log_table_name

    project = project_with(make_project, {unique_name: STAR})
    run(spark, project, unique_name, catalog_server, epochs=EPOCHS[:1])
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    log = catalog.load_table((NS, log_table_name(unique_name)))
    layout = json.loads(log.properties[LAYOUT])
    older = {**layout, "join9.left": [["p_id", "__lv_int64_0"], ["p_category", "__lv_string_0"]]}  # products
    with log.transaction() as txn:
        txn.set_properties({LAYOUT: json.dumps(older, sort_keys=True)})
    again = view_pipeline(spark, project, unique_name, catalog_server.uri)
    with pytest.raises(WriterError) as info:
        again.prepare()
    assert log_table_name(unique_name) in str(info.value), str(info.value)
    assert "drop the view's table and its __lv_state_ tables" in str(info.value)


def test_a_view_over_parquet_files_only_runs_its_epochs_without_spark_and_replays_exactly_once(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """Every source Parquet (the fact table and the three change feeds): the driver lists and reads the files
    itself, no Spark query runs (its checkpoint is written in Spark's formats, so ``verify``'s oracle reads
    each epoch's files from it). The view equals the recompute after every epoch and across restarts; a
    change with an unknown operation is set aside; an epoch planned but not marked done (a crash between
    the tables' commit and the checkpoint's) is replayed and applied once."""
    sources = {name: {**source, "format": "parquet"} for name, source in SOURCES.items()}
    epochs = [EPOCHS[0], {**EPOCHS[1], "products": [*EPOCHS[1]["products"], change("x", 3, price=1.0)]}, *EPOCHS[2:]]
    project = make_project(views={unique_name: {"sql": STAR, "cadence": "200ms", "namespace": NS}}, sources=sources)
    pipeline = run(spark, project, unique_name, catalog_server, epochs=epochs, restart=True)
    assert pipeline.direct == list(SOURCES)
    set_aside = quarantined_rows(project, "products", unique_name)
    assert [r["reason"] for r in set_aside] == ["unknown operation x"] and set_aside[0]["epoch"] >= 1
    before = read(project, unique_name, catalog_server)
    commits = project.checkpoint_path(unique_name) / "commits"
    newest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(newest)).unlink()
    pipeline, query = start(spark, project, unique_name, catalog_server)
    try:
        assert isinstance(query, DriverStream)
        query.processAllAvailable()
        assert (commits / str(newest)).exists()
    finally:
        query.stop()
    assert oracle.compare(read(project, unique_name, catalog_server), before).equal
    assert_recomputed(project, unique_name, pipeline, catalog_server)
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    snapshots = catalog.load_table((NS, unique_name)).snapshots()
    epochs_done = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in snapshots if s.summary)
    epochs_done.pop(None, None)
    # a trigger may take an epoch's files in two (landing is file by file), never one file twice
    assert set(epochs_done.values()) == {1} and int(max(epochs_done, key=int)) == newest >= len(epochs) - 1


def test_change_feed_mirrors_past_driver_keys_max_are_folded_logs_that_restarts_read_back(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every table past ``[spark] driver_keys_max`` (0): the change feeds' mirrors are looked up by key in their
    tables (on Iceberg by the row groups whose key range can hold the keys: writers/iceberg/key_ranges), and
    on Iceberg each epoch appends its netted change to them, folded whenever the
    log outgrows the mirror (here: every epoch; tests/writers/test_graph_mirrors.py reads a log of folded and
    appended rows). A new pipeline every epoch reads them back: the view equals the recompute after every
    epoch, and each mirror nets to the feed's current rows."""
    monkeypatch.setattr(graph_state, "FOLD_FACTOR", 1)  # a log longer than when read is folded: every epoch
    monkeypatch.setattr(graph_state, "FOLD_SLACK", 0)
    project = project_with(make_project, {unique_name: TOPK})
    project = project.model_copy(update={"spark": SparkConfig(driver_keys_max=0)})
    pipeline = run(spark, project, unique_name, catalog_server, restart=True)
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    current: dict[str, dict[int, dict]] = {"products": {}, "customers": {}, "regions": {}}
    for batch in EPOCHS:
        for source, lines in batch.items():
            for row in map(json.loads, lines) if source in current else []:
                if row["op"] == "d":
                    current[source].pop(row["id"], None)
                else:
                    current[source][row["id"]] = row
    folded = 0
    for source, writer in pipeline.mirrors.items():
        table = catalog.load_table((NS, writer.table_name))
        folded += sum(int(s.summary.get("deleted-data-files") or 0) > 0 for s in table.snapshots() if s.summary)
        stored = table.scan().to_arrow()
        columns = ", ".join(c for c in stored.column_names if c != GRAPH_WEIGHT)
        netted = arrow_sql(f"SELECT {columns} FROM t GROUP BY ALL HAVING SUM({GRAPH_WEIGHT}) <> 0", t=stored)
        assert sorted(netted.to_pylist(), key=lambda r: r["id"]) == [
            current[source][k] for k in sorted(current[source])
        ]
    assert folded > 0
