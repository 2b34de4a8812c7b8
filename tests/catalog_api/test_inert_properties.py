"""Issue #16 finding 1 (remote code execution): properties naming implementations are refused on
every route that takes properties, and no request makes the catalog import a module of the
client's choosing; a module that writes a marker file when imported is on the server's path."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import TABLE_TYPE

PROBE = "lv_import_probe"
KEYS = ["write.py-location-provider.impl", "py-io-impl", "write.location-provider.impl", "io-impl"]
SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "default-namespace": ["x"],
    "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
}


@pytest.fixture()
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable module that, if the server ever imported or called it, leaves a marker file."""
    marker = tmp_path / "imported.marker"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
    code += (
        "class Provider:\n    def __init__(self, *a, **k):\n        pathlib.Path("
        + repr(str(marker))
        + ").write_text('called')\n"
    )
    (tmp_path / f"{PROBE}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield marker
    assert not marker.exists(), "the catalog imported a module a client named"
    assert PROBE not in sys.modules
    sys.modules.pop(PROBE, None)


def api(server: CatalogServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.uri}/v1/lakeview", timeout=30)


def refused(response: httpx.Response, key: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["type"] == "BadRequestException"
    assert key in error["message"] and "implementation" in error["message"]


def test_every_route_taking_properties_refuses_implementation_names(
    catalog_server: CatalogServer, unique_name: str, marker: Path
) -> None:
    client, ns = api(catalog_server), unique_name
    assert client.post("/namespaces", json={"namespace": [ns]}).status_code == 200
    assert client.post(f"/namespaces/{ns}/tables", json={"name": "t", "schema": SCHEMA_JSON}).status_code == 200
    assert (
        client.post(
            f"/namespaces/{ns}/views", json={"name": "v", "schema": SCHEMA_JSON, "view-version": VIEW_VERSION}
        ).status_code
        == 200
    )
    table = client.get(f"/namespaces/{ns}/tables/t").json()
    view = client.get(f"/namespaces/{ns}/views/v").json()
    for key in KEYS:
        props = {key: f"{PROBE}.Provider"}
        refused(client.post("/namespaces", json={"namespace": [f"{ns}_2"], "properties": props}), key)
        refused(client.post(f"/namespaces/{ns}/properties", json={"updates": props}), key)
        refused(
            client.post(f"/namespaces/{ns}/tables", json={"name": "c", "schema": SCHEMA_JSON, "properties": props}), key
        )
        staged = {"name": "s", "schema": SCHEMA_JSON, "properties": props, "stage-create": True}
        refused(client.post(f"/namespaces/{ns}/tables", json=staged), key)
        set_props = {"action": "set-properties", "updates": props}
        refused(client.post(f"/namespaces/{ns}/tables/t", json={"requirements": [], "updates": [set_props]}), key)
        change = {"identifier": {"namespace": [ns], "name": "t"}, "requirements": [], "updates": [set_props]}
        refused(client.post("/transactions/commit", json={"table-changes": [change]}), key)
        creating = {
            "identifier": {"namespace": [ns], "name": "via_txn"},
            "requirements": [{"type": "assert-create"}],
            "updates": [
                {"action": "assign-uuid", "uuid": str(uuid.uuid4())},
                {"action": "upgrade-format-version", "format-version": 2},
                {"action": "add-schema", "schema": SCHEMA_JSON, "last-column-id": 1},
                {"action": "set-current-schema", "schema-id": -1},
                {"action": "set-location", "location": f"{catalog_server.store.warehouse}/{ns}.db/via_txn"},
                set_props,
            ],
        }
        refused(client.post("/transactions/commit", json={"table-changes": [creating]}), key)
        # register: a crafted table metadata file in the namespace's own storage
        crafted = dict(table["metadata"], properties=props)
        path = (
            Path(catalog_server.store.warehouse) / f"{ns}.db" / "crafted" / "metadata" / f"{uuid.uuid4()}.metadata.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(crafted))
        refused(client.post(f"/namespaces/{ns}/register", json={"name": "r", "metadata-location": str(path)}), key)
        view_props = {"name": "w", "schema": SCHEMA_JSON, "view-version": VIEW_VERSION, "properties": props}
        refused(client.post(f"/namespaces/{ns}/views", json=view_props), key)
        refused(client.post(f"/namespaces/{ns}/views/v", json={"requirements": [], "updates": [set_props]}), key)
        view_path = path.with_name(f"{uuid.uuid4()}.view.metadata.json")
        view_path.write_text(json.dumps(dict(view["metadata"], properties=props)))
        refused(
            client.post(f"/namespaces/{ns}/register-view", json={"name": "rv", "metadata-location": str(view_path)}),
            key,
        )
    names = {i["name"] for i in client.get(f"/namespaces/{ns}/tables").json()["identifiers"]}
    assert names == {"t"}  # nothing refused was registered
    assert client.get(f"/namespaces/{ns}/tables/t").json()["metadata"]["properties"].get(KEYS[0]) is None


def test_a_legacy_table_carrying_an_implementation_property_is_served_without_loading_it(
    catalog_server: CatalogServer, unique_name: str, marker: Path
) -> None:
    """A table written before the refusal (pointer inserted directly) loads, commits and purges as data."""
    client, ns, store = api(catalog_server), unique_name, catalog_server.store
    assert client.post("/namespaces", json={"namespace": [ns]}).status_code == 200
    assert client.post(f"/namespaces/{ns}/tables", json={"name": "t", "schema": SCHEMA_JSON}).status_code == 200
    metadata = client.get(f"/namespaces/{ns}/tables/t").json()["metadata"]
    legacy = dict(metadata, properties={key: f"{PROBE}.Provider" for key in KEYS})
    path = Path(metadata["location"]) / "metadata" / f"00009-{uuid.uuid4()}.metadata.json"
    path.write_text(json.dumps(legacy))
    with store.engine.begin() as conn:
        store._insert_pointer(conn, (ns, "legacy"), str(path), TABLE_TYPE)
    assert client.get(f"/namespaces/{ns}/tables/legacy").status_code == 200
    committed = client.post(
        f"/namespaces/{ns}/tables/legacy",
        json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"owner": "ops"}}]},
    )
    assert committed.status_code == 200, committed.text
    assert committed.json()["metadata"]["properties"]["owner"] == "ops"
    assert store.load_table((ns, "legacy")).metadata.properties["owner"] == "ops"
    assert client.delete(f"/namespaces/{ns}/tables/legacy", params={"purgeRequested": "true"}).status_code == 204
