"""A two-input JOIN or UNION ALL reading views (operator graphs), through real Spark and the real catalog: a change feed of
orders (inserts, updates, deletes) -> a per-order projection and a per-product aggregate;
over them, in one project, a LEFT JOIN of the aggregate with a declared source (products), an
inner JOIN of the two views, a UNION ALL of the two views, and an aggregate over the LEFT JOIN
view and over the UNION ALL view (a join or union view publishes its changes too). The
upstreams' updates and deletes reach the downstreams as −1/+1 rows, so join results and union
rows are retracted and emitted again. After every batch each downstream equals its SQL
recomputed over the upstreams' current rows (and the declared source's files), and the chain
oracle (`lakeview verify`) agrees at the committed frontier."""

from __future__ import annotations

import json

from catalog_api.ops import view_tables as tables
from lakeview.ivm import oracle
from lakeview.stack.chain_oracle import expected_rows, over_relations
from lakeview.stack.embedded import EmbeddedStack
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_view_dag import BATCHES, FEED, SCHEMA

PRODUCTS = "product_id BIGINT, name STRING"


def product(product_id: int, name: str) -> str:
    return json.dumps({"product_id": product_id, "name": name})


PRODUCT_BATCHES = [
    [product(0, "bolt"), product(1, "nut")],  # products 2 and 3 arrive later: NULL-extended until then
    [product(2, "gear")],
    [product(3, "cog"), product(1, "washer")],  # a second row for product 1: its join rows double
]


def test_join_and_union_over_views_equal_the_recompute_after_every_batch(
    spark, catalog_server, make_project, unique_name: str
) -> None:
    prefix = unique_name[:36]
    lines, sales = f"{prefix}_lines", f"{prefix}_sales"
    named, paired, both = f"{prefix}_named", f"{prefix}_paired", f"{prefix}_both"
    per_product, totals = f"{prefix}_pp", f"{prefix}_totals"
    views = {
        lines: {"sql": "SELECT order_id, product_id, quantity * price AS amount FROM orders"},
        sales: {"sql": f"SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n FROM {lines} GROUP BY product_id"},
        named: {
            "sql": f"SELECT s.product_id, s.revenue, s.n, p.name FROM {sales} s LEFT JOIN products p ON s.product_id = p.product_id"
        },
        paired: {
            "sql": f"SELECT l.order_id, l.amount, s.revenue FROM {lines} l JOIN {sales} s ON l.product_id = s.product_id"
        },
        both: {"sql": f"SELECT product_id, amount FROM {lines} UNION ALL SELECT product_id, revenue FROM {sales}"},
        per_product: {"sql": f"SELECT product_id, SUM(n) AS orders, COUNT(*) AS k FROM {named} GROUP BY product_id"},
        totals: {"sql": f"SELECT product_id, SUM(amount) AS total, COUNT(*) AS k FROM {both} GROUP BY product_id"},
    }
    for view in views.values():
        view.update({"namespace": "dag_tests", "cadence": "100ms"})  # each downstream waits for a trigger
    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS},
    }
    declared = (totals, both, per_product, named, paired, sales, lines)  # downstreams first: the DAG orders them
    project = make_project(views={name: views[name] for name in declared}, sources=sources)
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        order = list(stack.pipelines)
        assert order.index(lines) < order.index(sales) < min(order.index(named), order.index(paired))
        assert order.index(lines) < order.index(both) and order.index(sales) < order.index(both), (
            "every upstream starts first"
        )
        assert order.index(named) < order.index(per_product) and order.index(both) < order.index(totals)
        for number, batch in enumerate(BATCHES):
            land(project.source_path("orders"), f"{number:03d}.json", batch)
            land(project.source_path("products"), f"{number:03d}.json", PRODUCT_BATCHES[number])
            for view in (lines, sales, named, paired, both, per_product, totals):
                stack.queries[view].processAllAvailable()
            current = {view: tables.read_rows(project, view) for view in (lines, sales, named, both)}
            current["products"] = oracle.source_rows(
                project, "products", oracle.landed_files(project.source_path("products"))
            )
            for view in (named, paired, both, per_product, totals):
                expected = over_relations(project.views[view].sql, current)
                stored = tables.read_rows(project, view)
                comparison = oracle.compare(stored, expected)
                assert comparison.equal, f"{view} after batch {number}: {comparison.describe()}"
                record = tables.last_commit(project, view)
                at_frontier, how = expected_rows(project, view, record)  # what `lakeview verify` checks
                comparison = oracle.compare(tables.read_rows(project, view, record.snapshot_id), at_frontier)
                assert comparison.equal, f"{view} at its frontier after batch {number} ({how}): {comparison.describe()}"
    finally:
        stack.stop_views()
    rows = {r["product_id"]: r for r in tables.read_rows(project, named).to_pylist() if r["name"] != "washer"}
    assert 0 in rows and rows[0]["n"] == 1, (
        "product 0 lost two of its three orders: its joined row was retracted and re-emitted"
    )
    assert rows[3]["name"] == "cog", "a NULL-extended row is replaced when its match arrives"
    assert not [r for r in tables.read_rows(project, paired).to_pylist() if r["order_id"] in (1, 4, 5, 8, 9)], (
        "deleted orders left the join"
    )
    counted = {r["product_id"]: r["k"] for r in tables.read_rows(project, per_product).to_pylist()}
    assert counted[1] == 2 and counted[0] == 1, (
        "product 1 joins two product rows; the aggregate over the join view follows"
    )
