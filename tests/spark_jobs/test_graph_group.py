"""Operator-graph views in a view group (real Spark, the embedded stack): the group's one query keeps a top-k
beside a one-source aggregate, and every table of the group — both views and their state logs —
is committed in one catalog transaction per epoch (the first batch's files written by Spark's executors
included); a restart continues from the group's checkpoint, and each view equals the recompute of its SQL."""

from __future__ import annotations

from lakeview.cli.generator import land_json, make_orders
from lakeview.config.models import SparkConfig
from lakeview.project import explain_view, is_graph_view
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import SALES_SQL
from tests.spark_jobs.test_group_pipeline import NS, assert_together_and_recomputed, group_tables, summary
from writers.staged_files import WRITTEN_BY

TOP_SQL = (
    "SELECT product_id, order_id, quantity FROM (SELECT product_id, order_id, quantity, ROW_NUMBER() OVER "
    "(PARTITION BY product_id ORDER BY quantity DESC, order_id) AS rn FROM orders) t WHERE rn <= 2"
)


def test_a_graph_view_commits_with_its_group_in_one_transaction(
    spark, catalog_server, make_project, unique_name: str
) -> None:
    group = unique_name[-40:]
    sums, top = f"{group}_sums", f"{group}_top"
    project = make_project(
        views={
            sums: {"sql": SALES_SQL, "cadence": "200ms", "namespace": NS, "group": group},
            top: {"sql": TOP_SQL, "cadence": "200ms", "namespace": NS, "group": group},
        }
    )
    project = project.model_copy(update={"spark": SparkConfig(driver_rows_max=60)})
    assert is_graph_view(project, top) and is_graph_view(project, sums)
    assert f"group {group}: one streaming query keeps {top}, {sums}" in explain_view(project, top)
    landing = project.source_path("orders")
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        assert stack.queries[sums] is stack.queries[top], "one query keeps the group"
        land_json(landing, "a.json", make_orders(80, seed=1, first_id=1))
        stack.queries[sums].processAllAvailable()
        land_json(landing, "b.json", make_orders(40, seed=2, first_id=101))
        stack.queries[top].processAllAvailable()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert len(tables) == 4, f"both views and each one's state log: {sorted(tables)}"
    assert_together_and_recomputed(tables, project, (sums, top), files=2)
    assert [summary(s).get(WRITTEN_BY) for s in tables[top].snapshots()] == ["executors", None], (
        "the 80-order first batch was written by the executors, in the group's transaction; the next by the driver"
    )

    land_json(landing, "c.json", make_orders(30, seed=3, first_id=201))
    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    stack.start_views(spark=spark)
    try:
        stack.queries[top].processAllAvailable()
        land_json(landing, "d.json", make_orders(20, seed=4, first_id=301))
        stack.queries[top].processAllAvailable()
        tables = group_tables(stack, group)
    finally:
        stack.stop_views()
    assert_together_and_recomputed(tables, project, (sums, top), files=4)
    for name, table in tables.items():
        assert summary(table.current_snapshot())["lakeview.rows-in"] == "20", f"{name}: the last epoch read d.json"
