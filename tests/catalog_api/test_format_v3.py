"""Format version 3 tables through the catalog: created, upgraded, evolved with default values,
written by Spark (Iceberg 1.10.2) and read back by Spark, pyiceberg and DuckDB."""

from __future__ import annotations

import json

import httpx
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from catalog_api.server import CatalogServer
from lakeview.sql.duck import connect_catalog
from spark_jobs.session import spark_catalog_conf


def _tables(server: CatalogServer, namespace: str) -> str:
    return f"{server.uri}/v1/lakeview/namespaces/{namespace}/tables"


def _metadata_file(location: str) -> dict:
    return json.loads(open(location.removeprefix("file://")).read())


def test_pyiceberg_creates_and_evolves_a_v3_table(any_rest_catalog, unique_name: str) -> None:
    catalog = any_rest_catalog
    catalog.create_namespace(unique_name)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    table = catalog.create_table(f"{unique_name}.v3", schema, properties={"format-version": "3"})
    assert table.format_version == 3
    stored = _metadata_file(table.metadata_location)
    assert stored["format-version"] == 3 and stored["next-row-id"] == 0
    with table.update_schema() as update:
        update.add_column("qty", IntegerType(), default_value=7)  # pyiceberg sets initial- and write-default
    reloaded = catalog.load_table(f"{unique_name}.v3")
    qty = reloaded.schema().find_field("qty")
    assert reloaded.format_version == 3
    assert (qty.initial_default, qty.write_default) == (7, 7)
    assert _metadata_file(reloaded.metadata_location)["schemas"][-1]["fields"][-1]["initial-default"] == 7
    table = catalog.load_table(f"{unique_name}.v3")
    with table.transaction() as tx:
        tx.set_properties({"owner": "ops"})
    assert catalog.load_table(f"{unique_name}.v3").properties["owner"] == "ops"


def test_upgrade_to_v3_and_bad_versions_are_client_errors(any_catalog: CatalogServer, unique_name: str) -> None:
    base = f"{any_catalog.uri}/v1/lakeview/namespaces"
    assert httpx.post(base, json={"namespace": [unique_name]}).status_code == 200
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    created = httpx.post(_tables(any_catalog, unique_name), json={"name": "t", "schema": schema})
    assert created.status_code == 200 and created.json()["metadata"]["format-version"] == 2
    upgraded = httpx.post(
        f"{_tables(any_catalog, unique_name)}/t",
        json={"requirements": [], "updates": [{"action": "upgrade-format-version", "format-version": 3}]},
    )
    assert upgraded.status_code == 200, upgraded.text
    assert upgraded.json()["metadata"]["format-version"] == 3 and upgraded.json()["metadata"]["next-row-id"] == 0
    downgrade = httpx.post(
        f"{_tables(any_catalog, unique_name)}/t",
        json={"requirements": [], "updates": [{"action": "upgrade-format-version", "format-version": 2}]},
    )
    assert downgrade.status_code == 400 and "downgrade" in downgrade.json()["error"]["message"]
    for version in ("4", "zero"):
        bad = httpx.post(
            _tables(any_catalog, unique_name),
            json={"name": f"v{version}", "schema": schema, "properties": {"format-version": version}},
        )
        assert bad.status_code == 400, bad.text
    defaulted = {**schema, "fields": [{"id": 1, "name": "id", "type": "long", "required": False, "initial-default": 5}]}
    v2_default = httpx.post(_tables(any_catalog, unique_name), json={"name": "d2", "schema": defaulted})
    assert v2_default.status_code == 400 and "initial-default" in v2_default.text
    v3_default = httpx.post(
        _tables(any_catalog, unique_name),
        json={"name": "d3", "schema": defaulted, "properties": {"format-version": "3"}},
    )
    assert v3_default.status_code == 200, v3_default.text
    assert v3_default.json()["metadata"]["schemas"][0]["fields"][0]["initial-default"] == 5


@pytest.mark.spark
def test_spark_writes_a_v3_table_that_pyiceberg_and_duckdb_read(
    spark, rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    for key, value in spark_catalog_conf(catalog_server.uri, "lakeview", name="v3cat").items():
        spark.conf.set(key, value)
    ns = f"v3cat.{unique_name}"
    spark.sql(f"CREATE NAMESPACE {ns}")
    spark.sql(
        f"CREATE TABLE {ns}.orders (id BIGINT, qty INT) USING iceberg TBLPROPERTIES ('format-version'='3', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {ns}.orders VALUES (1, 10), (2, 20), (3, 30)")
    spark.sql(f"ALTER TABLE {ns}.orders ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO {ns}.orders VALUES (4, 40, 'four')")
    spark.sql(f"DELETE FROM {ns}.orders WHERE id = 2")  # v3 row-level deletes are deletion vectors
    spark.sql(f"UPDATE {ns}.orders SET qty = 31 WHERE id = 3")
    expected = [(1, 10, None), (3, 31, None), (4, 40, "four")]
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {ns}.orders").collect()) == expected
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {ns}.orders.delete_files").collect()}
    assert formats == {"PUFFIN"}  # the deletes are v3 deletion vectors

    table = rest_catalog.load_table(f"{unique_name}.orders")
    assert table.format_version == 3
    assert table.metadata.next_row_id >= 4  # row lineage: Spark assigned row ids through the catalog's commits
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["qty"], r["note"]) for r in rows] == expected

    con = connect_catalog(catalog_server.uri, "lakeview")
    assert sorted(con.sql(f"SELECT id, qty, note FROM lake.{unique_name}.orders").fetchall()) == expected


def test_v3_types_and_unsupported_v3_features_answer_4xx(any_catalog: CatalogServer, unique_name: str) -> None:
    assert httpx.post(f"{any_catalog.uri}/v1/lakeview/namespaces", json={"namespace": [unique_name]}).status_code == 200

    def create(name: str, column_type: str, version: str | None) -> httpx.Response:
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "c", "type": column_type, "required": False}],
        }
        properties = {"format-version": version} if version else {}
        return httpx.post(
            _tables(any_catalog, unique_name), json={"name": name, "schema": schema, "properties": properties}
        )

    for i, column_type in enumerate(("timestamp_ns", "timestamptz_ns", "unknown", "geometry", "geography")):
        assert create(f"v3_{i}", column_type, "3").status_code == 200
        refused = create(f"v2_{i}", column_type, None)
        assert refused.status_code == 400 and "only supported in 3" in refused.json()["error"]["message"]
    variant = create("variant", "variant", "3")  # pyiceberg 0.12's schema model has no variant type yet
    assert variant.status_code == 400 and "variant" in variant.json()["error"]["message"]
    key = {"action": "add-encryption-key", "encryption-key": {"key-id": "k", "encrypted-key-metadata": "AA=="}}
    encrypted = httpx.post(f"{_tables(any_catalog, unique_name)}/v3_0", json={"requirements": [], "updates": [key]})
    assert encrypted.status_code == 400 and "add-encryption-key" in encrypted.json()["error"]["message"]
