"""A JOIN or UNION ALL view's large first batch (a backfill) is computed by Spark and written by
the executors, never collected (spark_jobs.combined_bootstrap): a LEFT JOIN of two change feeds
with an aggregate on top (SUM, COUNT, MAX: group state and a multiset; side tables; two
mirrors; NULL join keys and NULL-extended rows), an INNER JOIN projection of a feed and an
append stream (a multiset view), and a UNION ALL of a feed and an append stream. Every table
each view keeps is written by Spark tasks in the first epoch; each view equals the full
recompute after it, and after two later batches of updates and deletes the driver merges into
those tables (so every state, side and mirror table the executors wrote is exact)."""

from __future__ import annotations

import json

from catalog_api.ops import view_tables as tables
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from lakeview.stack.embedded import EmbeddedStack
from spark_jobs.multi_source import CombinedPipeline
from tests.spark_jobs.test_bootstrap import ROWS_MAX, by_executors
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_executor_reads_combined import (
    PRODUCT_FEED,
    PRODUCTS,
    REFUNDS,
    combined_tables,
    product,
    refund,
)
from tests.spark_jobs.test_view_dag import FEED, SCHEMA, order


def batches() -> list[dict[str, list[str]]]:
    """Per batch and source, its lines. Built when the test runs, so sequence numbers rise by batch."""
    first = {
        # 44 orders over products 0..9, 4 of them without a product (NULL join key); in the same batch order 3
        # moves to product 5, order 7 is deleted, a delete of an unknown key
        "orders": [order("c", i, None if i % 11 == 0 else i % 10, i % 7 + 1) for i in range(1, 45)]
        + [order("u", 3, 5, 9), order("d", 7), order("d", 99)],
        # products 0..7 (8 and 9 never arrive: their orders are NULL-extended), 6 deleted, 1 renamed
        "products": [product("c", i, ("tools", "parts", "misc")[i % 3]) for i in range(8)]
        + [product("d", 6), product("u", 1, "spares")],
        "refunds": [refund(i, i % 4, 1.5) for i in range(1, 9)]
        + [refund(2, 2, 1.5), refund(9, None, 4.0)],  # two equal rows
    }
    later = [
        {
            # order 7 and product 6, deleted in the backfill, come back (their mirrors must hold no row for them)
            "orders": [
                order("u", 1, 1, 40),
                order("u", 2, 8, 2),
                order("d", 4),
                order("c", 50, 6, 5, price=10.0),
                order("c", 7, 6, 3),
            ],
            "products": [
                product("c", 8, "gears"),
                product("d", 0),
                product("c", 6, "misc"),
            ],  # product 8's orders join; 0's NULL-extended
            "refunds": [refund(10, 1, 2.0)],
        },
        {
            "orders": [order("d", i) for i in (1, 5, 9)] + [order("u", 50, 0, 6, price=10.0)],
            "products": [product("c", 0, "parts"), product("u", 2, "tools")],  # product 0 is back
            "refunds": [refund(2, 2, 1.5)],
        },
    ]
    return [first, *later]


def views_of(prefix: str) -> dict[str, dict]:
    views = {
        f"{prefix}_named": "SELECT o.product_id, p.category, SUM(o.quantity * o.price) AS revenue, COUNT(*) AS n, MAX(o.quantity) AS top "
        "FROM orders o LEFT JOIN products p ON o.product_id = p.product_id GROUP BY o.product_id, p.category",
        f"{prefix}_lines": "SELECT o.order_id, r.refund_id, o.quantity, r.amount FROM orders o JOIN refunds r ON o.product_id = r.product_id "
        "WHERE o.quantity > 1",
        f"{prefix}_both": "SELECT order_id AS id, product_id, quantity * price AS amount FROM orders "
        "UNION ALL SELECT refund_id, product_id, amount FROM refunds",
    }
    return {name: {"sql": sql, "namespace": "bootstrap_combined", "cadence": "200ms"} for name, sql in views.items()}


def test_join_and_union_views_backfill_on_the_executors(spark, catalog_server, make_project, unique_name: str) -> None:
    views = views_of(unique_name[:30])
    sources = {
        "orders": {"format": "json", "path": "landing/orders", "schema": SCHEMA, "changes": FEED},
        "products": {"format": "json", "path": "landing/products", "schema": PRODUCTS, "changes": PRODUCT_FEED},
        "refunds": {"format": "json", "path": "landing/refunds", "schema": REFUNDS},
    }
    project = make_project(views=views, sources=sources).model_copy(
        update={"spark": SparkConfig(driver_rows_max=ROWS_MAX)}
    )
    landed = batches()

    def land_batch(number: int) -> None:
        for source, lines in landed[number].items():
            land(project.source_path(source), f"{number:03d}.json", lines)

    # The history is there before the views start, so their first trigger reads every source's part
    # of it (landed while a query runs, a trigger may see one source's file and not another's yet).
    land_batch(0)
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        for number in range(len(landed)):
            if number:
                land_batch(number)
            for view in views:
                pipeline = stack.pipelines[view]
                assert isinstance(pipeline, CombinedPipeline)
                stack.queries[view].processAllAvailable()
                comparison = oracle.compare(tables.read_rows(project, view), oracle.recompute(project, view))
                assert comparison.equal, f"{view} after batch {number}: {comparison.describe()}"
                if number == 0:
                    by_executors(pipeline.last_write)
                    kept = {w.identifier[-1] for w in combined_tables(pipeline)}
                    assert set(pipeline.last_write["tables"]) == kept, "every table the view keeps"
                    stamped = {
                        w.identifier[-1]: getattr(w.last_commit(), "epoch", None) for w in combined_tables(pipeline)
                    }
                    assert set(stamped.values()) == {0}, f"each table holds rows, committed as epoch 0: {stamped}"
                else:
                    assert pipeline.last_write["by"] == "driver", f"{view}: batch {number} is merged by the driver"
        named, lines, both = views
        kept = {view: len(combined_tables(stack.pipelines[view])) for view in views}
        assert json.dumps(sorted(stack.pipelines[named].last_write)) == json.dumps(["by", "rows_collected"])
    finally:
        stack.stop_views()
    # the join aggregate: view, group state, MAX's multiset, two side tables, two mirrors; the join projection: view, two side
    # tables, the orders mirror; the union: view, the orders mirror
    assert kept == {named: 7, lines: 4, both: 2}, kept
    rows = tables.read_rows(project, named).to_pylist()
    assert any(r["product_id"] is None for r in rows), "orders without a product: a NULL-keyed group"
    assert any(r["product_id"] == 9 and r["category"] is None for r in rows), "product 9 never arrived: NULL-extended"
    assert tables.read_rows(project, both).to_pylist().count({"id": 2, "product_id": 2, "amount": 1.5}) == 3, (
        "equal refunds kept as a multiset"
    )
