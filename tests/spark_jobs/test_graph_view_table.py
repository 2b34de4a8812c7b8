"""A graph view's table as the one-source stack made it, through real Spark and the catalog: its columns have
Spark's types for the view's SQL (SUM(INT) a bigint, not DuckDB's HUGEINT; SUM and AVG of a decimal Spark's
decimals) and it is keyed by its GROUP BY columns (a group that empties is deleted by its key), read back
through the catalog by DuckDB and pyiceberg (Iceberg) or the Delta log, and equal to DuckDB's recompute after
every epoch."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.rest import RestCatalog
from pyspark.sql.pandas.types import to_arrow_schema

from catalog_api.server import CatalogServer
from lakeview.project import is_graph_view
from tests.spark_jobs.test_graph_pipeline import FEED, NS, read, run
from writers import graph_view

SOURCES = {
    "orders": {
        "format": "json",
        "path": "landing/orders",
        "schema": "id BIGINT, pid BIGINT, qty INT, amount DECIMAL(10,2)",
    },
    "products": {
        "format": "json",
        "path": "landing/products",
        "schema": "id BIGINT, category STRING, op STRING, seq BIGINT",
        "changes": FEED,
    },
}
SQL = (
    "SELECT p.category, COUNT(*) n, SUM(o.qty) units, SUM(o.amount) amount, AVG(o.qty) avg_qty, "
    "AVG(o.amount) avg_amount, MAX(o.amount) top FROM orders o JOIN products p ON o.pid = p.id GROUP BY p.category"
)
seq = iter(range(1, 1000))


def order(i: int) -> str:
    return json.dumps({"id": i, "pid": 1 + i % 3, "qty": 1 + i % 4, "amount": round(1.25 * i + 0.01 * (i % 7), 2)})


def product(op: str, i: int, category: str | None = None) -> str:
    return json.dumps({"id": i, "op": op, "seq": next(seq), "category": category})


EPOCHS = [
    {
        "products": [product("c", 1, "toys"), product("c", 2, "books"), product("c", 3, "toys")],
        "orders": [order(i) for i in range(1, 13)],
    },
    {"products": [product("u", 2, "games")], "orders": [order(i) for i in range(13, 21)]},  # books: gone
    {"products": [product("d", 1), product("d", 3)], "orders": [order(i) for i in range(21, 25)]},  # toys: gone
]


def kinds(schema: pa.Schema) -> dict[str, pa.DataType]:
    """Each column's type, a string as a string however it is stored."""
    string = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return {f.name: pa.string() if any(s(f.type) for s in string) else f.type for f in schema}


def sparks_types(spark) -> dict[str, pa.DataType]:
    """What Spark's analysis of the view's SQL gives (the one-source stack's table schema)."""
    for name, source in SOURCES.items():
        spark.createDataFrame([], schema=source["schema"]).createOrReplaceTempView(name)
    return kinds(to_arrow_schema(spark.sql(SQL).schema))


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_graph_views_table_has_sparks_types_and_its_group_key(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, fmt: str, monkeypatch
) -> None:
    monkeypatch.setattr(graph_view, "REPLACE_ROWS", 0)  # Iceberg too: changed by key, not replaced whole
    views = {unique_name: {"sql": SQL, "cadence": "200ms", "namespace": NS, "format": fmt}}
    project = make_project(views=views, sources=SOURCES)
    assert is_graph_view(project, unique_name)
    expected = sparks_types(spark)
    assert expected["units"] == pa.int64() and expected["amount"] == pa.decimal128(20, 2)
    assert expected["avg_amount"] == pa.decimal128(14, 6)
    run(spark, project, unique_name, catalog_server, epochs=EPOCHS)  # equal to the recompute after every epoch
    rows = read(project, unique_name, catalog_server)
    assert kinds(rows.schema) == expected  # DuckDB through the catalog, or the Delta log
    assert rows.column("category").to_pylist() == ["games"]  # books' and toys' rows deleted by their key
    if fmt == "iceberg":
        table = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview").load_table((NS, unique_name))
        assert kinds(table.scan().to_arrow().schema) == expected
        assert table.properties["lakeview.key"] == "category"
    else:
        log = DeltaTable(str(project.table_location(unique_name)))
        assert kinds(pa.schema(log.schema().to_arrow())) == expected
        assert any(entry.get("lakeview.key") == "category" for entry in log.history())


T_SCHEMA = "id BIGINT, g BIGINT, i INT, d DECIMAL(10,2)"
SHAPES = {  # view SQL over ``t``, and the format its table takes (each shape once: both formats are typed alike)
    "ranked_expanded": (
        "SELECT x.g, x.id, x.rn, o.k, o.f FROM (SELECT g, id, rn FROM (SELECT g, id, RANK() OVER "
        "(PARTITION BY g ORDER BY id) AS rn FROM t) r WHERE rn <= 2) x CROSS JOIN (VALUES (0, 1.5), (1, 2)) AS o(k, f)",
        "iceberg",
    ),
    "unions": (
        "SELECT g, v, n FROM (SELECT g, i AS v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY id) AS n FROM t) r "
        "WHERE n <= 1 UNION ALL SELECT g, d, 7 FROM t UNION SELECT g, id, i FROM t",
        "delta",
    ),
}


def t_row(i: int) -> str:
    return json.dumps({"id": i, "g": i % 2, "i": 10 * i, "d": round(1.5 * i, 2)})


@pytest.mark.parametrize("shape", SHAPES)
def test_union_top_k_and_constant_rows_keep_sparks_types(
    spark, catalog_server: CatalogServer, make_project, unique_name: str, shape: str
) -> None:
    """ROW_NUMBER() and RANK() are INT (DuckDB: BIGINT), a UNION's column the branches' wider type as Spark
    widens it (INT, DECIMAL(10,2) and BIGINT: DECIMAL(22,2)), a VALUES column its literals' wider type."""
    sql, fmt = SHAPES[shape]
    sources = {"t": {"format": "json", "path": "landing/t", "schema": T_SCHEMA}}
    project = make_project(
        views={unique_name: {"sql": sql, "cadence": "200ms", "namespace": NS, "format": fmt}}, sources=sources
    )
    spark.createDataFrame([], schema=T_SCHEMA).createOrReplaceTempView("t")
    expected = kinds(to_arrow_schema(spark.sql(sql).schema))
    assert pa.int32() in expected.values()  # a rank (and a constant) as Spark types them
    run(spark, project, unique_name, catalog_server, epochs=[{"t": [t_row(i) for i in range(1, 7)]}])
    assert kinds(read(project, unique_name, catalog_server).schema) == expected
