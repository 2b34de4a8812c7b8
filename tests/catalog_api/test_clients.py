"""Real Iceberg clients against the catalog: pyiceberg (both stores), Spark 3.5 (Iceberg's Java
REST client, which Trino shares) and DuckDB, each reading what the others wrote."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from catalog_api.server import CatalogServer
from lakeview.sql.duck import connect_catalog
from spark_jobs.session import spark_catalog_conf

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def ids(table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def test_pyiceberg_table_and_view_lifecycle(any_rest_catalog, unique_name: str) -> None:
    catalog = any_rest_catalog
    catalog.create_namespace(unique_name)
    table = catalog.create_table(f"{unique_name}.people", SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA))
    table.overwrite(pa.table({"id": [10, 20], "name": ["x", "y"]}, schema=SCHEMA))
    table.delete(EqualTo("id", 10))
    assert ids(catalog.load_table(f"{unique_name}.people")) == [20]
    with table.update_schema() as update:
        update.add_column("age", LongType())
    reloaded = catalog.load_table(f"{unique_name}.people")
    assert [f.name for f in reloaded.schema().fields] == ["id", "name", "age"]
    assert len(reloaded.history()) == 4  # append, overwrite (delete + append), delete
    catalog.rename_table(f"{unique_name}.people", f"{unique_name}.persons")
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{unique_name}.people")
    assert ids(catalog.load_table(f"{unique_name}.persons")) == [20]

    version = ViewVersion(
        version_id=1,
        schema_id=0,
        summary={"engine-name": "pyiceberg"},
        representations=[
            ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT id FROM persons", dialect="spark"))
        ],
        default_namespace=(unique_name,),
    )
    view_schema = Schema(NestedField(1, "id", LongType(), required=False))
    catalog.create_view(f"{unique_name}.ids", view_schema, version)
    assert catalog.list_views(unique_name) == [(unique_name, "ids")]
    assert catalog.view_exists(f"{unique_name}.ids")
    assert (
        catalog.load_view(f"{unique_name}.ids").metadata.versions[0].representations[0].root.sql
        == "SELECT id FROM persons"
    )
    catalog.drop_view(f"{unique_name}.ids")
    assert not catalog.view_exists(f"{unique_name}.ids")
    catalog.drop_table(f"{unique_name}.persons")
    catalog.drop_namespace(unique_name)


def test_duckdb_lists_reads_and_time_travels(rest_catalog, catalog_server: CatalogServer, unique_name: str) -> None:
    rest_catalog.create_namespace(unique_name)
    table = rest_catalog.create_table(f"{unique_name}.events", SCHEMA)
    table.append(pa.table({"id": [1], "name": ["first"]}, schema=SCHEMA))
    first = table.current_snapshot().snapshot_id
    table.append(pa.table({"id": [2], "name": ["second"]}, schema=SCHEMA))
    con = connect_catalog(catalog_server.uri, "lakeview")
    tables = {(row[1], row[2]) for row in con.sql("SHOW ALL TABLES").fetchall() if row[0] == "lake"}
    assert (unique_name, "events") in tables
    assert con.sql(f"SELECT count(*) FROM lake.{unique_name}.events").fetchone() == (2,)
    assert con.sql(f"SELECT id FROM lake.{unique_name}.events AT (VERSION => {first})").fetchall() == [(1,)]


@pytest.mark.spark
def test_spark_and_pyiceberg_read_each_other(
    spark, rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    for key, value in spark_catalog_conf(catalog_server.uri, "lakeview", name="restcat").items():
        spark.conf.set(key, value)
    ns = f"restcat.{unique_name}"
    spark.sql(f"CREATE NAMESPACE {ns}")
    spark.sql(f"CREATE TABLE {ns}.orders (id BIGINT, qty INT) USING iceberg")
    spark.sql(f"INSERT INTO {ns}.orders VALUES (1, 10), (2, 20), (3, 30)")
    first = spark.sql(f"SELECT snapshot_id FROM {ns}.orders.snapshots ORDER BY committed_at").collect()[0][0]
    spark.sql(
        f"MERGE INTO {ns}.orders t USING (SELECT 2 AS id, 25 AS qty UNION ALL SELECT 4, 40) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET qty = s.qty WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(f"DELETE FROM {ns}.orders WHERE id = 1")
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {ns}.orders").collect()) == [(2, 25), (3, 30), (4, 40)]
    assert spark.sql(f"SELECT count(*) FROM {ns}.orders VERSION AS OF {first}").collect()[0][0] == 3
    # Iceberg views through the REST view endpoints: create, read, replace (a view commit), drop.
    spark.sql(f"CREATE VIEW {ns}.big AS SELECT id FROM {ns}.orders WHERE qty > 26")
    assert sorted(r[0] for r in spark.sql(f"SELECT * FROM {ns}.big").collect()) == [3, 4]
    spark.sql(f"CREATE OR REPLACE VIEW {ns}.big AS SELECT id FROM {ns}.orders WHERE qty > 35")
    assert [r[0] for r in spark.sql(f"SELECT * FROM {ns}.big").collect()] == [4]
    assert rest_catalog.load_view(f"{unique_name}.big").metadata.current_version_id == 2
    spark.sql(f"DROP VIEW {ns}.big")
    # pyiceberg reads what Spark wrote (including Spark's deletes).
    arrow = rest_catalog.load_table(f"{unique_name}.orders").scan().to_arrow()
    assert sorted(zip(arrow.column("id").to_pylist(), arrow.column("qty").to_pylist())) == [(2, 25), (3, 30), (4, 40)]
    # Spark reads what pyiceberg wrote.
    written = rest_catalog.create_table(
        f"{unique_name}.people", Schema(NestedField(1, "id", LongType()), NestedField(2, "name", StringType()))
    )
    written.append(pa.table({"id": [7], "name": ["ada"]}))
    assert [tuple(r) for r in spark.sql(f"SELECT id, name FROM {ns}.people").collect()] == [(7, "ada")]


class RequestLog:
    """ASGI middleware that records each request line (to see which endpoints a client used)."""

    def __init__(self, app, lines: list[str]) -> None:
        self.app, self.lines = app, lines

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.lines.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


def test_duckdb_multi_table_write_is_one_transaction_commit(tmp_path) -> None:
    import httpx
    from starlette.middleware import Middleware

    from catalog_api.store.catalog import CatalogStore

    lines: list[str] = []
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w", "lakeview")
    with CatalogServer(store, middleware=[Middleware(RequestLog, lines=lines)]) as server:
        httpx.post(f"{server.uri}/v1/lakeview/namespaces", json={"namespace": ["dw"]})
        con = connect_catalog(server.uri, "lakeview")
        con.execute("CREATE TABLE lake.dw.a (id BIGINT)")
        con.execute("CREATE TABLE lake.dw.b (id BIGINT)")
        con.execute("BEGIN")
        con.execute("INSERT INTO lake.dw.a VALUES (1)")
        con.execute("INSERT INTO lake.dw.b VALUES (10)")
        con.execute("COMMIT")
        assert con.sql("SELECT * FROM lake.dw.a").fetchall() == [(1,)]
        assert con.sql("SELECT * FROM lake.dw.b").fetchall() == [(10,)]
    assert "POST /iceberg/v1/lakeview/transactions/commit" in lines
