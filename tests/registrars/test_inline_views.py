"""Inline views (materialize = false): published in the REST catalog as Iceberg views with SQL
for spark, trino and duckdb; Spark reads them through the REST catalog."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError
from lakeview.sql.dialects import sql_properties
from lakeview.stack.inline import publish_inline_view, publish_inline_views
from tests.registrars.conftest import commit, iceberg_writer

BASE_SQL = "SELECT product_id, SUM(quantity) AS total_sold, MAX(label) AS label FROM orders GROUP BY product_id"
SOURCES = {
    "orders": {
        "format": "json",
        "path": "/nonexistent/orders",
        "schema": "product_id BIGINT, quantity INT, label STRING",
    }
}


def project_with(make_project, base: str, namespace: str, inline_sql: str):
    return make_project(
        views={
            base: {"sql": BASE_SQL, "namespace": namespace},
            f"{base}_top": {"sql": inline_sql, "namespace": namespace, "materialize": False},
        },
        sources=SOURCES,
    )


def test_inline_view_is_an_iceberg_view_spark_can_query(
    make_project, rest_catalog, catalog_server, spark, unique_name
) -> None:
    base, namespace = f"b_{unique_name}"[:40], f"inl_{unique_name}"[:40]
    inline = f"{base}_top"
    project = project_with(
        make_project,
        base,
        namespace,
        f"SELECT product_id, total_sold * 2 AS doubled FROM {base} WHERE total_sold >= 20",
    )
    assert publish_inline_views(project)[inline].startswith("not published"), "its base table does not exist yet"
    writer = iceberg_writer(rest_catalog, project, base)
    commit(writer, base, 0, {1: (10, "a"), 2: (20, "b"), 3: (30, "c")})

    assert publish_inline_view(project, inline) == "created"
    assert publish_inline_view(project, inline) == "unchanged"
    view = rest_catalog.load_view((namespace, inline))
    version = view.metadata.versions[-1]
    sql = {r.root.dialect: r.root.sql for r in version.representations}
    assert set(sql) == {"spark", "trino", "duckdb"}
    assert f"FROM {namespace}.{base}" in sql["trino"]
    assert [f.name for f in view.metadata.schemas[-1].fields] == ["product_id", "doubled"]

    spark.conf.set("spark.sql.catalog.lv_rest", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lv_rest.type", "rest")
    spark.conf.set("spark.sql.catalog.lv_rest.uri", catalog_server.uri)
    spark.conf.set("spark.sql.catalog.lv_rest.warehouse", "lakeview")
    spark.conf.set("spark.sql.catalog.lv_rest.cache-enabled", "false")  # see each new snapshot at once
    query = f"SELECT product_id, doubled FROM lv_rest.{namespace}.{inline} ORDER BY product_id"
    assert [tuple(r) for r in spark.sql(query).collect()] == [(2, 40), (3, 60)]

    # The view follows its base: a new snapshot is visible through it with no republish.
    commit(writer, base, 1, {1: (25, "a")})
    assert [tuple(r) for r in spark.sql(query).collect()] == [(1, 50), (2, 40), (3, 60)]

    # Changing the SQL replaces the view (a new version, same view UUID).
    changed = project_with(
        make_project, base, namespace, f"SELECT product_id, total_sold AS doubled FROM {base} WHERE total_sold > 25"
    )
    assert publish_inline_view(changed, inline) == "replaced"
    reloaded = rest_catalog.load_view((namespace, inline))
    assert reloaded.metadata.view_uuid == view.metadata.view_uuid and len(reloaded.metadata.versions) == 2
    assert [tuple(r) for r in spark.sql(query).collect()] == [(3, 30)]


def test_inline_view_must_read_materialized_views(make_project) -> None:
    with pytest.raises(ConfigError, match="not a materialized view of this project"):
        make_project(views={"x": {"sql": "SELECT product_id FROM orders", "materialize": False}}, sources=SOURCES)
    with pytest.raises(ConfigError, match="lives only in the REST catalog"):
        make_project(
            views={"b": {"sql": BASE_SQL}, "x": {"sql": "SELECT * FROM b", "materialize": False, "register": ["glue"]}},
            sources=SOURCES,
        )


def test_materialized_view_sql_per_dialect() -> None:
    props = sql_properties("SELECT product_id, SIZE(COLLECT_LIST(label)) AS n FROM orders GROUP BY product_id")
    assert set(props) == {"lakeview.sql.spark", "lakeview.sql.trino", "lakeview.sql.duckdb"}
    assert "SIZE(COLLECT_LIST(label))" in props["lakeview.sql.spark"]
    assert "CARDINALITY(ARRAY_AGG(label)" in props["lakeview.sql.trino"]
    assert "ARRAY_LENGTH(ARRAY_AGG(label)" in props["lakeview.sql.duckdb"]


def test_pipeline_stamps_materialized_view_sql_per_dialect(
    spark, make_project, catalog_server, rest_catalog, unique_name
) -> None:
    from spark_jobs.graph_pipeline import GraphPipeline
    from tests.conftest import SALES_SQL
    from writers.registry import make_writer

    project = make_project(views={unique_name: {"sql": SALES_SQL, "namespace": "sql_props"}})
    GraphPipeline(spark, project, unique_name, make_writer(project, unique_name, catalog_server.uri)).prepare()
    props = rest_catalog.load_table(("sql_props", unique_name)).properties
    for dialect in ("spark", "trino", "duckdb"):
        assert props[f"lakeview.sql.{dialect}"].startswith("SELECT product_id, SUM(quantity) AS total_sold")
