"""Namespace levels holding any character the spec allows (dots and percent signs included), on
both stores, and stores written before levels were escaped."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore

SCHEMA = pa.schema([("id", pa.int64())])


def test_pyiceberg_keeps_dotted_and_split_namespaces_apart(any_rest_catalog, unique_name: str) -> None:
    catalog = any_rest_catalog
    dotted, split = (f"{unique_name}", "new.db"), (f"{unique_name}", "new", "db")
    odd = (f"{unique_name}", "50% off.v2 ü")
    for namespace in (dotted, split, odd):
        catalog.create_namespace(namespace, {"kind": "/".join(namespace)})
    catalog.create_table((*dotted, "t"), SCHEMA).append(pa.table({"id": [1]}, schema=SCHEMA))
    catalog.create_table((*split, "t"), SCHEMA).append(pa.table({"id": [2, 3]}, schema=SCHEMA))
    catalog.create_table((*odd, "t"), SCHEMA).append(pa.table({"id": [4, 5, 6]}, schema=SCHEMA))

    assert sorted(catalog.list_namespaces((unique_name,))) == sorted([dotted, (unique_name, "new"), odd])
    assert catalog.list_namespaces((unique_name, "new")) == [split]
    assert catalog.list_tables(dotted) == [(*dotted, "t")]
    assert catalog.load_namespace_properties(dotted)["kind"] == f"{unique_name}/new.db"
    assert catalog.load_table((*dotted, "t")).scan().to_arrow().num_rows == 1
    assert catalog.load_table((*split, "t")).scan().to_arrow().num_rows == 2
    assert catalog.load_table((*odd, "t")).scan().to_arrow().num_rows == 3
    assert catalog.load_table((*dotted, "t")).location() != catalog.load_table((*split, "t")).location()

    catalog.rename_table((*dotted, "t"), (*odd, "moved"))
    assert catalog.list_tables(dotted) == []
    assert catalog.load_table((*odd, "moved")).scan().to_arrow().num_rows == 1
    for identifier in ((*odd, "moved"), (*odd, "t"), (*split, "t")):
        catalog.drop_table(identifier)
    for namespace in (dotted, split, odd):  # ("…", "new") only exists through its child
        catalog.drop_namespace(namespace)
    assert (unique_name,) not in catalog.list_namespaces()  # nothing left under it


def test_rest_paths_with_dotted_levels(any_catalog: CatalogServer, unique_name: str) -> None:
    base = f"{any_catalog.uri}/v1/lakeview/namespaces"
    namespace = [unique_name, "new.db"]
    path = quote("\x1f".join(namespace), safe="")
    assert httpx.post(base, json={"namespace": namespace}).status_code == 200
    assert httpx.post(base, json={"namespace": namespace}).status_code == 409
    assert httpx.get(f"{base}/{path}").json()["namespace"] == namespace
    assert httpx.get(f"{base}/{quote(unique_name + chr(0x1F) + 'new', safe='')}").status_code == 404
    assert httpx.get(base, params={"parent": unique_name}).json()["namespaces"] == [namespace]
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    assert httpx.post(f"{base}/{path}/tables", json={"name": "t.x", "schema": schema}).status_code == 200
    listed = httpx.get(f"{base}/{path}/tables").json()["identifiers"]
    assert listed == [{"namespace": namespace, "name": "t.x"}]
    assert httpx.get(f"{base}/{path}/tables/t.x").status_code == 200
    assert httpx.delete(f"{base}/{path}").status_code == 409  # not empty
    assert httpx.delete(f"{base}/{path}/tables/t.x").status_code == 204
    assert httpx.delete(f"{base}/{path}").status_code == 204
    assert httpx.get(f"{base}/{path}").status_code == 404


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_written_before_escaping_keeps_working(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, unique_name: str
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        url = request.getfixturevalue("postgres").url
    name = f"old_{unique_name}"[:60]  # its own catalog name: the PostgreSQL database is shared
    old = SqlCatalog(name, uri=url, warehouse=str(tmp_path / "w"))  # what pyiceberg / older Lakeview wrote
    old.create_namespace("sales.eu")
    old.create_namespace("100%")
    old.create_table("sales.eu.orders", SCHEMA).append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    old.create_table("100%.pct", SCHEMA).append(pa.table({"id": [3]}, schema=SCHEMA))
    old.engine.dispose()

    for _ in range(2):  # the migration runs once; a second open changes nothing
        store = CatalogStore(url, tmp_path / "w", name)
        with CatalogServer(store, host="127.0.0.1", port=0) as server:
            from pyiceberg.catalog.rest import RestCatalog

            catalog = RestCatalog("t", uri=server.uri, warehouse=name)
            assert ("sales",) in catalog.list_namespaces() and ("100%",) in catalog.list_namespaces()
            assert catalog.list_namespaces(("sales",)) == [("sales", "eu")]
            assert catalog.load_table(("sales", "eu", "orders")).scan().to_arrow().num_rows == 2
            assert catalog.load_table(("100%", "pct")).scan().to_arrow().num_rows == 1
        store.close()
    reopened = SqlCatalog(name, uri=url, warehouse=str(tmp_path / "w"))  # iceberg's JDBC layout for plain names
    assert reopened.load_table("sales.eu.orders").scan().to_arrow().num_rows == 2
    reopened.engine.dispose()
