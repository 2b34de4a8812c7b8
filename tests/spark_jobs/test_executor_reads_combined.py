"""Tables past ``[spark] driver_keys_max`` live rows are read only by Spark's executors, for JOIN
and UNION ALL views too (spark_jobs.multi_source): with the bound at 0 rows, a LEFT JOIN of two
change feeds (orders, products) with an aggregate on top (SUM, COUNT and MAX: a group state
and a multiset state table), a UNION ALL projection of the orders feed with an append stream
(a multiset view upserted by whole row), and an aggregate over the join view, each equal the
full recompute after every batch of inserts, updates and deletes (NULL join keys included);
deletes are folded on the executors; and the driver never builds a key index or caches a row
of any table they keep (the views, the aggregate's states, the join's side tables, every change
feed's mirror)."""

from __future__ import annotations

import json

from catalog_api.ops import view_tables as tables
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from lakeview.stack.chain_oracle import over_rows
from lakeview.stack.embedded import EmbeddedStack
from spark_jobs.executors.reads import ExecutorReads
from spark_jobs.multi_source import CombinedPipeline
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_executor_reads import MORE, assert_nothing_kept_on_the_driver, kept_tables
from tests.spark_jobs.test_view_dag import BATCHES, FEED, SCHEMA, order
from writers.iceberg.writer import IcebergWriter
from writers.maintenance import MAINTENANCE

PRODUCTS = "product_id BIGINT, category STRING, op STRING, seq BIGINT"
PRODUCT_FEED = {
    "operation": "op",
    "key": ["product_id"],
    "sequence": "seq",
    "insert": ["c"],
    "update": ["u"],
    "delete": ["d"],
}
REFUNDS = "refund_id BIGINT, product_id BIGINT, amount DOUBLE"
_seq = iter(range(1, 100_000))


def product(op: str, product_id: int, category: str | None = None) -> str:
    return json.dumps({"product_id": product_id, "category": category, "op": op, "seq": next(_seq)})


def refund(refund_id: int, product_id: int | None, amount: float) -> str:
    return json.dumps({"refund_id": refund_id, "product_id": product_id, "amount": amount})


ORDER_BATCHES = [
    *BATCHES[:2],
    [*BATCHES[2], order("c", 40, None, 3)],
    MORE[0],
]  # order 40 has no product: a NULL join key
PRODUCT_BATCHES = [
    [product("c", 0, "tools"), product("c", 1, "parts")],  # products 2 and 3 arrive later: NULL-extended until then
    [product("c", 2, "gears"), product("u", 1, "spares")],  # product 1 moves category
    [product("c", 3, "tools"), product("d", 0)],  # product 0's orders are NULL-extended again
    [product("u", 2, "tools"), product("d", 1), product("c", 0, "parts"), product("u", 3, "misc")],  # product 0 is back
]
REFUND_BATCHES = [
    [refund(1, 1, 2.0), refund(2, 0, 1.0)],
    [refund(3, None, 4.0)],
    [],
    [refund(4, 2, 3.0), refund(4, 2, 3.0), refund(6, 3, 1.5)],  # two equal rows in the multiset
]


def views_of(prefix: str) -> tuple[tuple[str, str, str], dict]:
    named, both, cats = f"{prefix}_named", f"{prefix}_both", f"{prefix}_cats"
    views = {
        named: {
            "sql": "SELECT o.product_id, p.category, SUM(o.quantity * o.price) AS revenue, COUNT(*) AS n, MAX(o.quantity) AS top "
            "FROM orders o LEFT JOIN products p ON o.product_id = p.product_id GROUP BY o.product_id, p.category"
        },
        both: {
            "sql": "SELECT order_id AS id, product_id, quantity * price AS amount FROM orders "
            "UNION ALL SELECT refund_id, product_id, amount FROM refunds"
        },
        cats: {"sql": f"SELECT category, SUM(n) AS orders, SUM(revenue) AS revenue FROM {named} GROUP BY category"},
    }
    for view in views.values():  # fold at every second delete file
        view.update(namespace="exec_combined", cadence="200ms", format="iceberg", maintenance={"delete_files_max": 2})
    return (named, both, cats), views


def combined_tables(pipeline: CombinedPipeline) -> list[IcebergWriter]:
    """Every table a join or UNION ALL view keeps."""
    m = pipeline.maintainer
    assert m.view is pipeline.writer
    return [w for w in [pipeline.writer, *m.state, *m.sides, *m.mirrors.values()] if w is not None]


def assert_views_equal_recompute(project, names: tuple[str, str, str], when: str) -> None:
    named, both, cats = names
    expected = {named: oracle.recompute(project, named), both: oracle.recompute(project, both)}
    expected[cats] = over_rows(project.views[cats].sql, named, expected[named])
    for view in names:
        comparison = oracle.compare(tables.read_rows(project, view), expected[view])
        assert comparison.equal, f"{view} {when}: {comparison.describe()}"


def folds(writer: IcebergWriter) -> int:
    return sum(1 for s in writer.table().snapshots() if s.summary and MAINTENANCE in s.summary.additional_properties)


def test_join_and_union_tables_past_the_driver_bound_are_read_by_the_executors(
    spark, catalog_server, make_project, unique_name: str
) -> None:
    names, views = views_of(unique_name[:36])
    named, both, cats = names
    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": PRODUCT_FEED},
        "refunds": {"format": "json", "path": "landing/refunds", "schema": REFUNDS},
    }
    project = make_project(views=views, sources=sources).model_copy(update={"spark": SparkConfig(driver_keys_max=0)})
    assert project.spark.driver_keys_max == 0
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        assert isinstance(stack.pipelines[named], CombinedPipeline) and isinstance(
            stack.pipelines[both], CombinedPipeline
        )
        for number, batch in enumerate(ORDER_BATCHES):
            land(project.source_path("orders"), f"{number:03d}.json", batch)
            land(project.source_path("products"), f"{number:03d}.json", PRODUCT_BATCHES[number])
            if REFUND_BATCHES[number]:
                land(project.source_path("refunds"), f"{number:03d}.json", REFUND_BATCHES[number])
            for view in (named, both, cats):
                stack.queries[view].processAllAvailable()
            assert_views_equal_recompute(project, names, f"after batch {number}")
        kept = {view: combined_tables(stack.pipelines[view]) for view in (named, both)}
        kept[cats] = kept_tables(stack.pipelines[cats])
    finally:
        stack.stop_views()

    # the join view: its table, group and MAX multiset states, two side tables, two mirrors; the union: its table, the orders mirror
    assert len(kept[named]) == 7 and len(kept[both]) == 2, {v: [w.identifier[-1] for w in ws] for v, ws in kept.items()}
    assert all(isinstance(w, IcebergWriter) for ws in kept.values() for w in ws)
    # every table: read by ExecutorReads jobs (> 0), no driver key index built, no row cached on the driver
    assert_nothing_kept_on_the_driver(kept)
    assert all(isinstance(w.live.remote, ExecutorReads) for ws in kept.values() for w in ws)

    assert folds(kept[named][0]) >= 1 and folds(kept[both][0]) >= 1, "the views' deletes were folded (by the executors)"
    rows = tables.read_rows(project, named).to_pylist()
    assert any(r["product_id"] is None for r in rows), "order 40 (no product) is a NULL-keyed group"
    assert {r["product_id"]: r["category"] for r in rows if r["product_id"] is not None}.get(0) == "parts", (
        "product 0 came back"
    )
    assert tables.read_rows(project, both).to_pylist().count({"id": 4, "product_id": 2, "amount": 3.0}) == 2, (
        "the two equal refunds kept as a multiset"
    )
