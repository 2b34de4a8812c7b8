"""Two-input joins and UNION ALL through real Spark, kept as operator graphs: one streaming query reads
every source of the view; after every batch the view read back through DuckDB equals the recompute at
the committed frontier of each source (what ``lakeview verify`` runs)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog_api.server import CatalogServer
from lakeview.ivm import oracle
from lakeview.ops.runtime import count_pending_files
from lakeview.project import explain_view
from spark_jobs.graph_pipeline import GraphPipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_pipeline import read_view, start

ORDERS = "order_id BIGINT, product_id BIGINT, amount DOUBLE"
PRODUCTS = "product_id BIGINT, category STRING, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["product_id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
seq = iter(range(1, 10_000))


def order(order_id: int, product_id: int | None, amount: float) -> str:
    return json.dumps({"order_id": order_id, "product_id": product_id, "amount": amount})


def product(op: str, product_id: int, category: str | None = None) -> str:
    return json.dumps({"product_id": product_id, "category": category, "op": op, "seq": next(seq)})


def assert_verified(project, view: str, pipeline, catalog_server: CatalogServer, namespace: str) -> None:
    """The snapshot equals the recompute over exactly the files the last commit's frontier reached."""
    record = pipeline.writer.last_commit()
    files = oracle.frontier_files(project, view, record.frontier)
    assert set(files) == set(pipeline.plan.sources)
    comparison = oracle.compare(read_view(catalog_server, namespace, view), oracle.recompute(project, view, files))
    assert comparison.equal, f"epoch {record.epoch}: {comparison.describe()}"


def test_orders_join_a_changing_products_table_with_an_aggregate(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": ORDERS},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": FEED},
    }
    sql = """SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders AS o JOIN products AS p ON o.product_id = p.product_id
GROUP BY p.category"""
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "join_tests"}}, sources=sources
    )
    batches = [
        {
            "products": [product("c", 1, "toys"), product("c", 2, "books"), product("c", 3, "food")],
            "orders": [order(1, 1, 10.0), order(2, 1, 5.0), order(3, 2, 7.0), order(4, 9, 1.0)],
        },
        {"products": [product("u", 1, "games")], "orders": [order(5, 3, 2.5)]},  # product 1 moves category
        {"products": [product("d", 2)]},  # product 2's orders leave the join
        {
            "orders": [order(6, 2, 4.0), order(7, 1, 1.0)],
            "products": [product("c", 9, "toys")],
        },  # order 4 finds product 9
    ]
    pipeline, query = start(spark, project, unique_name, catalog_server)
    assert isinstance(pipeline, GraphPipeline)
    try:
        for number, batch in enumerate(batches):
            for source, lines in batch.items():
                land(project.source_path(source), f"{number:03d}.json", lines)
            query.processAllAvailable()
            assert_verified(project, unique_name, pipeline, catalog_server, "join_tests")
    finally:
        query.stop()
    rows = {
        r["category"]: (r["total"], r["n"]) for r in read_view(catalog_server, "join_tests", unique_name).to_pylist()
    }
    assert rows == {"games": (16.0, 3), "food": (2.5, 1), "toys": (1.0, 1)}
    frontier = pipeline.writer.last_commit().frontier
    assert {frontier["orders"]["index"], frontier["products"]["index"]} == {0, 1}
    plan = explain_view(project, unique_name)
    assert "(operator graph)" in plan and f"__lv_state_{unique_name}_g_log" in plan, plan


def test_stream_stream_left_join_projection(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    """Two append-only streams: an order without a shipment shows NULLs until the shipment
    lands, then that row is replaced by the joined one."""
    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": ORDERS},
        "shipments": {"format": "json", "path": "landing/shipments", "schema": "order_id BIGINT, carrier STRING"},
    }
    sql = "SELECT o.order_id, o.amount, s.carrier FROM orders o LEFT JOIN shipments s ON o.order_id = s.order_id WHERE o.amount > 1"
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "1s", "namespace": "join_tests"}}, sources=sources
    )
    batches = [
        {
            "orders": [order(1, 1, 10.0), order(2, 1, 5.0), order(3, 1, 0.5)],
            "shipments": [json.dumps({"order_id": 1, "carrier": "ups"})],
        },
        {"shipments": [json.dumps({"order_id": 2, "carrier": "dhl"}), json.dumps({"order_id": 1, "carrier": "fedex"})]},
        {"orders": [order(4, 2, 3.0)]},
    ]
    for number, batch in enumerate(batches):  # a restart between batches: each source resumes where it was
        for source, lines in batch.items():  # landed before the start: one trigger takes the batch's files together
            land(project.source_path(source), f"{number:03d}.json", lines)
        pipeline, query = start(spark, project, unique_name, catalog_server)
        try:
            query.processAllAvailable()
            assert_verified(project, unique_name, pipeline, catalog_server, "join_tests")
        finally:
            query.stop()
    rows = sorted(
        (r["order_id"], r["carrier"] or "") for r in read_view(catalog_server, "join_tests", unique_name).to_pylist()
    )
    assert rows == [(1, "fedex"), (1, "ups"), (2, "dhl"), (4, "")]
    assert pipeline.writer.last_commit().epoch == 2  # one epoch per batch, none replayed or skipped
    land(project.source_path("shipments"), "late.json", [json.dumps({"order_id": 4, "carrier": "ups"})])
    assert count_pending_files(project, pipeline.source, project.checkpoint_path(unique_name)) == (1, 4)


def test_union_all_of_two_sources_and_an_aggregate_over_it(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    sources = {
        "web": {"format": "json", "path": "landing/web", "schema": ORDERS},
        "store": {
            "format": "json",
            "path": "landing/store",
            "schema": "sale_id BIGINT, product_id BIGINT, price DOUBLE",
        },
    }
    union = "SELECT order_id AS id, product_id, amount FROM web WHERE amount > 0 UNION ALL SELECT sale_id, product_id, price FROM store"
    views = {
        f"{unique_name}_all": {"sql": union, "cadence": "200ms", "namespace": "join_tests"},
        f"{unique_name}_agg": {
            "sql": f"SELECT product_id, SUM(amount) AS total, COUNT(*) AS n FROM ({union}) AS u GROUP BY product_id",
            "cadence": "200ms",
            "namespace": "join_tests",
        },
    }
    project = make_project(views=views, sources=sources)
    batches = [
        {
            "web": [order(1, 1, 10.0), order(2, 2, -1.0)],
            "store": [json.dumps({"sale_id": 1, "product_id": 1, "price": 3.0})],
        },
        {"store": [json.dumps({"sale_id": 2, "product_id": 2, "price": 4.0})]},
    ]
    started = [start(spark, project, view, catalog_server) for view in views]
    try:
        for number, batch in enumerate(batches):
            for source, lines in batch.items():
                land(project.source_path(source), f"{number:03d}.json", lines)
            for (pipeline, query), view in zip(started, views):
                query.processAllAvailable()
                assert_verified(project, view, pipeline, catalog_server, "join_tests")
    finally:
        for _, query in started:
            query.stop()
    assert read_view(catalog_server, "join_tests", f"{unique_name}_all").num_rows == 3
    totals = {
        r["product_id"]: (r["total"], r["n"])
        for r in read_view(catalog_server, "join_tests", f"{unique_name}_agg").to_pylist()
    }
    assert totals == {1: (13.0, 2), 2: (4.0, 1)}


def test_join_view_sigkilled_mid_epoch_then_verify_says_equal(spark, tmp_path) -> None:
    """`lakeview refresh` of a join view killed before its epoch's one catalog transaction (every
    table of the view: nothing committed) and after it; each restart finishes the epoch once, and
    `lakeview verify` recomputes at both sources' frontier: equal. (A kill while reading
    commits nothing; tests/spark_jobs/test_crash.py covers it.)"""
    import signal
    from collections import Counter

    from typer.testing import CliRunner

    from catalog_api.store.catalog import open_store
    from lakeview.cli.main import app
    from tests.spark_jobs.test_crash import project_on_disk, refresh
    from tests.spark_jobs.test_view_dag import refresh_in_process

    sql = (
        "SELECT p.category AS category, SUM(o.amount) AS total, COUNT(*) AS n "
        "FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.category"
    )
    data = {
        "lake": {"warehouse": "lake"},
        "server": {"port": 0},
        "sources": {
            "orders": {"format": "json", "path": "landing/orders", "schema": ORDERS},
            "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": FEED},
        },
        "views": {"crashy": {"sql": sql, "cadence": "manual", "namespace": "crash"}},
    }
    project = project_on_disk(tmp_path, data)
    land(project.source_path("products"), "000.json", [product("c", 1, "toys"), product("c", 2, "books")])
    land(project.source_path("orders"), "000.json", [order(1, 1, 10.0), order(2, 2, 5.0), order(3, 1, 1.0)])
    assert refresh(tmp_path, "before_view_commit:0") == -signal.SIGKILL
    land(project.source_path("products"), "001.json", [product("u", 1, "games"), product("d", 2)])
    land(project.source_path("orders"), "001.json", [order(4, 1, 2.0)])
    assert refresh(tmp_path, "after_commit:1") == -signal.SIGKILL
    refresh_in_process(spark, project, ["crashy"])  # the last restart in this process: one JVM start less

    verify = CliRunner().invoke(app, ["verify", "crashy", "-p", str(tmp_path)])  # in this process: no JVM start
    assert verify.exit_code == 0 and "(4 files): equal" in verify.output, verify.output
    store = open_store(project)
    assert {r["category"]: r["n"] for r in store.load_table(("crash", "crashy")).scan().to_arrow().to_pylist()} == {
        "games": 3
    }
    for name in ("crashy", "__lv_state_crashy_g_log", "__lv_state_crashy_src_products"):
        table = store.load_table(("crash", name))
        epochs = Counter(s.summary.additional_properties.get("lakeview.epoch") for s in table.snapshots() if s.summary)
        epochs.pop(None, None)
        assert set(epochs.values()) == {1} and set(epochs) == {"0", "1"}, f"{name}: {epochs}"


def test_a_join_view_an_older_lakeview_kept_in_per_shape_state_tables_is_rebuilt_at_start_naming_them(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before every join ran as an operator graph, a join view kept its top aggregate's state
    (``__lv_state_<view>_0``), one table per join side (``__lv_state_<view>_join_<alias>``) and a change
    feed's mirror one row per key (no weight column). Such a view is rebuilt from its sources when it starts
    (:mod:`spark_jobs.migrate`), one warning naming the tables it drops, rather than run from a state that never
    saw its earlier epochs."""
    import logging

    from pyiceberg.catalog.rest import RestCatalog

    from tests.pipelines import view_pipeline

    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": ORDERS},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": FEED},
    }
    sql = "SELECT p.category, COUNT(*) AS n FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.category"
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": "join_tests"}}, sources=sources
    )
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    catalog.create_namespace_if_not_exists("join_tests")
    older = {
        f"__lv_state_{unique_name}_0": [("category", pa.string()), ("__lv_rows", pa.int64())],
        f"__lv_state_{unique_name}_join_o": [("product_id", pa.int64()), ("__lv_n", pa.int64())],
        f"__lv_state_{unique_name}_join_p": [("product_id", pa.int64()), ("category", pa.string())],
        f"__lv_state_{unique_name}_src_products": [("product_id", pa.int64()), ("category", pa.string())],
    }
    for name, columns in older.items():
        catalog.create_table(("join_tests", name), schema=pa.schema(columns))
    land(project.source_path("products"), "000.json", [product("c", 1, "toys"), product("c", 2, "books")])
    land(project.source_path("orders"), "000.json", [order(1, 1, 10.0), order(2, 2, 5.0), order(3, 1, 1.0)])
    caplog.set_level(logging.WARNING, logger="lakeview.pipeline")
    pipeline = view_pipeline(spark, project, unique_name, catalog_server.uri)
    pipeline.prepare()
    (message,) = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert all(name in message for name in older) and "full history" in message, message
    assert not any(catalog.table_exists(("join_tests", name)) for name in older if "_src_" not in name)
    query = pipeline.start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert_verified(project, unique_name, pipeline, catalog_server, "join_tests")


def test_a_delta_min_max_view_an_older_lakeview_kept_with_each_groups_rows_is_rebuilt_at_start(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before value multisets, an aggregate's MIN/MAX/COUNT(DISTINCT) kept each group's whole input rows (a Delta
    table ``__lv_state_<view>_g_<op>_rows``). Its records and value tables would start empty beside a view of
    earlier epochs: the view is rebuilt when it starts, the table dropped and named in the warning."""
    import logging

    from deltalake import DeltaTable

    from lakeview.graph.aggregate import Aggregate
    from tests.pipelines import view_pipeline

    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": ORDERS},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": FEED},
    }
    sql = (
        "SELECT p.category, MIN(o.amount) AS lo, COUNT(DISTINCT o.order_id) AS n "
        "FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY p.category"
    )
    project = make_project(
        views={unique_name: {"sql": sql, "namespace": "join_tests", "format": "delta"}}, sources=sources
    )
    pipeline = view_pipeline(spark, project, unique_name, catalog_server.uri)
    (aggregate,) = [op for op in pipeline.graph.operators if isinstance(op, Aggregate)]
    older = f"__lv_state_{unique_name}_g_{aggregate.id}_rows"
    columns = pa.schema([("category", pa.string()), ("amount", pa.float64()), ("__lv_w", pa.int64())])
    writer = pipeline._state_writer(older)
    writer.ensure_table(columns, ("category", "amount"), {})
    caplog.set_level(logging.WARNING, logger="lakeview.pipeline")
    pipeline.prepare()
    (message,) = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert older in message and unique_name in message, message
    assert not DeltaTable.is_deltatable(writer.location)
