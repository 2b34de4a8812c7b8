"""The REST catalog through real clients over HTTP: pyiceberg, DuckDB, raw requests."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import NoSuchTableError

from catalog_api.server import CatalogServer
from lakeview.sql.duck import connect_catalog

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_config_advertises_prefix_and_endpoints(catalog_server: CatalogServer) -> None:
    body = httpx.get(f"{catalog_server.uri}/v1/config", params={"warehouse": "lakeview"}).json()
    assert body["overrides"] == {"prefix": "lakeview"}
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]


def test_unknown_warehouse_is_404(catalog_server: CatalogServer) -> None:
    response = httpx.get(f"{catalog_server.uri}/v1/config", params={"warehouse": "other"})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFoundException"


def test_namespace_lifecycle(rest_catalog, unique_name: str) -> None:
    rest_catalog.create_namespace(unique_name, {"owner": "tests"})
    assert (unique_name,) in rest_catalog.list_namespaces()
    assert rest_catalog.load_namespace_properties(unique_name)["owner"] == "tests"
    rest_catalog.update_namespace_properties(unique_name, removals={"owner"}, updates={"team": "data"})
    assert rest_catalog.load_namespace_properties(unique_name).get("team") == "data"
    rest_catalog.create_table(f"{unique_name}.t", SCHEMA)
    with pytest.raises(Exception, match="not empty|NamespaceNotEmpty"):
        rest_catalog.drop_namespace(unique_name)
    rest_catalog.drop_table(f"{unique_name}.t")
    rest_catalog.drop_namespace(unique_name)
    assert (unique_name,) not in rest_catalog.list_namespaces()


def test_table_written_by_pyiceberg_is_read_by_duckdb(
    rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    rest_catalog.create_namespace(unique_name)
    table = rest_catalog.create_table(f"{unique_name}.people", SCHEMA)
    table.append(pa.table({"id": [1, 2], "name": ["ada", "grace"]}, schema=SCHEMA))
    assert rest_catalog.list_tables(unique_name) == [(unique_name, "people")]
    con = connect_catalog(catalog_server.uri, "lakeview")
    assert sorted(con.sql(f"SELECT id, name FROM lake.{unique_name}.people").fetchall()) == [(1, "ada"), (2, "grace")]


def test_stale_commit_gets_409_and_client_retry_loses_nothing(
    rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    rest_catalog.create_namespace(unique_name)
    first = rest_catalog.create_table(f"{unique_name}.t", SCHEMA)
    stale = rest_catalog.load_table(f"{unique_name}.t")
    first.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    # A raw commit whose requirement no longer holds: 409 in the spec's shape.
    response = httpx.post(
        f"{catalog_server.uri}/v1/lakeview/namespaces/{unique_name}/tables/t",
        json={
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}],
            "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
        },
    )
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "CommitFailedException"
    # pyiceberg gets the same 409 for its stale table, refreshes and retries: both rows survive.
    stale.append(pa.table({"id": [2], "name": ["b"]}, schema=SCHEMA))
    ids = sorted(rest_catalog.load_table(f"{unique_name}.t").scan().to_arrow().column("id").to_pylist())
    assert ids == [1, 2]
    assert "k" not in rest_catalog.load_table(f"{unique_name}.t").properties


def test_unknown_update_action_is_400(catalog_server: CatalogServer, rest_catalog, unique_name: str) -> None:
    rest_catalog.create_namespace(unique_name)
    rest_catalog.create_table(f"{unique_name}.t", SCHEMA)
    response = httpx.post(
        f"{catalog_server.uri}/v1/lakeview/namespaces/{unique_name}/tables/t",
        json={"requirements": [], "updates": [{"action": "teleport"}]},
    )
    assert response.status_code == 400 and "teleport" in response.json()["error"]["message"]


def test_missing_table_is_404_in_spec_shape(catalog_server: CatalogServer, rest_catalog) -> None:
    response = httpx.get(f"{catalog_server.uri}/v1/lakeview/namespaces/nowhere/tables/nothing")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"message": "Table does not exist: nowhere.nothing", "type": "NoSuchTableException", "code": 404}
    }
    with pytest.raises(NoSuchTableError):
        rest_catalog.load_table("nowhere.nothing")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"name": "t"}', "schema"),
    ],
)
def test_bad_create_request_is_400(
    catalog_server: CatalogServer, rest_catalog, body: bytes, fragment: str, unique_name: str
) -> None:
    rest_catalog.create_namespace(unique_name)
    response = httpx.post(f"{catalog_server.uri}/v1/lakeview/namespaces/{unique_name}/tables", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestException" and fragment in error["message"]


@pytest.mark.parametrize("name", ["..", "a/b", "bad\x01name", "x" * 300])
def test_path_tricks_in_names_are_400(catalog_server: CatalogServer, name: str) -> None:
    response = httpx.post(f"{catalog_server.uri}/v1/lakeview/namespaces", json={"namespace": [name]})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == 400


def test_table_location_outside_warehouse_is_400(
    catalog_server: CatalogServer, rest_catalog, unique_name: str, tmp_path
) -> None:
    rest_catalog.create_namespace(unique_name)
    with pytest.raises(Exception, match="outside the warehouse"):
        rest_catalog.create_table(f"{unique_name}.t", SCHEMA, location=str(tmp_path / "elsewhere"))


def test_unknown_route_and_method(catalog_server: CatalogServer) -> None:
    assert httpx.get(f"{catalog_server.uri}/v2/whatever").json()["error"]["code"] == 404
    response = httpx.put(f"{catalog_server.uri}/v1/lakeview/namespaces")
    assert response.status_code == 405 and response.json()["error"]["code"] == 405
