"""End to end: files land → the view's Spark query commits → the stack's registration fan-out
publishes the new pointer to Glue (moto) and as a path; the inline view over it is published in
the REST catalog. Readers find the same rows everywhere."""

from __future__ import annotations

import boto3

from catalog_api.registrars.service import degraded_reasons, published_table
from lakeview.cli.generator import land_json, make_orders
from lakeview.config.models import GlueConfig
from lakeview.sql.duck import connect, connect_catalog
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import SALES_SQL


def test_commit_is_published_to_glue_paths_and_inline_view(
    spark, moto, catalog_server, make_project, unique_name
) -> None:
    view, namespace = unique_name[:40], f"e2e_{unique_name}"[:40]
    project = make_project(
        views={
            view: {"sql": SALES_SQL, "namespace": namespace, "cadence": "manual", "register": ["glue", "filesystem"]},
            f"{view}_big": {
                "sql": f"SELECT product_id, total_sold FROM {view} WHERE total_sold > 0",
                "namespace": namespace,
                "materialize": False,
            },
        }
    )
    project = project.model_copy(update={"glue": GlueConfig(endpoint=moto.endpoint, interval="100ms")})
    land_json(project.source_path("orders"), "a.json", make_orders(100, seed=7, first_id=1))

    stack = EmbeddedStack(project, catalog_uri=catalog_server.uri)
    commits = []
    try:
        stack.start_views([view, f"{view}_big"], spark=spark, available_now=True, on_commit=commits.append)
        stack.queries[view].awaitTermination()
        assert [c.epoch for c in commits] == [0]
        assert f"{view}_big" not in stack.queries, "an inline view is not maintained"
        assert stack.registration is not None and stack.registration.wait_idle(60)
    finally:
        stack.stop_views()

    table = published_table(project, view)
    glue = boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")
    assert (
        glue.get_table(DatabaseName=namespace, Name=view)["Table"]["Parameters"]["metadata_location"]
        == table.metadata_location
    )
    assert view not in degraded_reasons(project)

    rest = sorted(
        connect_catalog(catalog_server.uri, "lakeview").sql(f"SELECT * FROM lake.{namespace}.{view}").fetchall()
    )
    path = sorted(connect("avro", "iceberg").sql(f"SELECT * FROM iceberg_scan('{table.location}')").fetchall())
    assert rest == path and sum(r[1] for r in rest) == sum(o["quantity"] for o in make_orders(100, seed=7, first_id=1))

    spark.conf.set("spark.sql.catalog.lv_e2e", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lv_e2e.type", "rest")
    spark.conf.set("spark.sql.catalog.lv_e2e.uri", catalog_server.uri)
    spark.conf.set("spark.sql.catalog.lv_e2e.warehouse", "lakeview")
    inline = spark.sql(f"SELECT product_id, total_sold FROM lv_e2e.{namespace}.{view}_big").collect()
    assert sorted(tuple(r) for r in inline) == sorted((r[0], r[1]) for r in rest if r[1] > 0)
