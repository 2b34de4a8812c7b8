"""Issue #16 finding 3: hostile input gets a 4xx in the spec's error shape, never a 5xx, and
leaves nothing half-registered (each case from the issue, over HTTP against the real server)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.request_limits import MAX_BODY_BYTES
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore

EMPTY_SCHEMA = {"type": "struct", "fields": []}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "default-namespace": ["x"],
    "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
}


def client_error(response: httpx.Response, status: int = 400, *words: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and error["type"].endswith("Exception") and error["message"]
    for word in words:
        assert word in error["message"], error["message"]
    return error


@pytest.fixture()
def ns(catalog_server: CatalogServer, unique_name: str) -> Iterator[httpx.Client]:
    client = httpx.Client(base_url=f"{catalog_server.uri}/v1/lakeview", timeout=60)
    assert client.post("/namespaces", json={"namespace": [unique_name]}).status_code == 200
    client.headers["x-ns"] = unique_name
    yield client
    client.close()


def test_deep_nesting_is_a_400(ns: httpx.Client) -> None:
    name = ns.headers["x-ns"]
    deep_list = '{"namespace": ["deep"], "properties": ' + "[" * 1000 + "]" * 1000 + "}"
    client_error(ns.post("/namespaces", content=deep_list), 400, "nests deeper")
    deep_object = '{"a":' * 1000 + "1" + "}" * 1000
    client_error(ns.post(f"/namespaces/{name}/tables", content=deep_object), 400, "nests deeper")
    commit = '{"table-changes": ' + "[" * 5000 + "]" * 5000 + "}"
    client_error(ns.post("/transactions/commit", content=commit), 400, "nests deeper")


def test_body_over_the_size_limit_is_refused_before_parsing(ns: httpx.Client) -> None:
    client_error(ns.post("/namespaces", content=b" " * (MAX_BODY_BYTES + 1)), 413, "over the limit")
    assert ns.get("/namespaces").status_code == 200


def test_forged_page_tokens_are_a_400(ns: httpx.Client) -> None:
    name = ns.headers["x-ns"]
    for forged in (json.dumps({"x": 1}).encode().hex(), "zz", "ff" * 8, json.dumps([1, None]).encode().hex()):
        client_error(ns.get("/namespaces", params={"pageToken": forged, "pageSize": 1}), 400, "pageToken")
    forged_table = json.dumps({"namespace": 1, "name": []}).encode().hex()
    client_error(ns.get(f"/namespaces/{name}/tables", params={"pageToken": forged_table}), 400, "pageToken")


def test_names_are_limited_in_utf8_bytes(ns: httpx.Client) -> None:
    name = ns.headers["x-ns"]
    client_error(ns.post("/namespaces", json={"namespace": ["é" * 255]}), 400, "bytes in UTF-8")
    client_error(ns.post("/namespaces", json={"namespace": ["é" * 126 + "x"]}), 400, "252 bytes")
    client_error(ns.post(f"/namespaces/{name}/tables", json={"name": "é" * 255, "schema": EMPTY_SCHEMA}), 400, "bytes")
    client_error(
        ns.post(
            f"/namespaces/{name}/views", json={"name": "é" * 128, "schema": EMPTY_SCHEMA, "view-version": VIEW_VERSION}
        ),
        400,
        "bytes",
    )
    longest = "é" * 127  # 254 bytes: fits a file name
    created = ns.post(f"/namespaces/{name}/tables", json={"name": longest, "schema": EMPTY_SCHEMA})
    assert created.status_code == 200, created.text
    assert ns.get(f"/namespaces/{name}/tables/{longest}").status_code == 200
    longest_ns = "ü" * 126  # 252 bytes, + ".db"
    assert ns.post("/namespaces", json={"namespace": [longest_ns]}).status_code == 200
    assert ns.post(f"/namespaces/{longest_ns}/tables", json={"name": "t", "schema": EMPTY_SCHEMA}).status_code == 200


def test_malformed_schemas_and_properties_are_a_400(ns: httpx.Client) -> None:
    name = ns.headers["x-ns"]
    list_without_element = {
        "type": "struct",
        "fields": [
            {
                "id": 1,
                "name": "xs",
                "required": False,
                "type": {"type": "list", "element-id": 2, "element-required": False},
            }
        ],
    }
    client_error(ns.post(f"/namespaces/{name}/tables", json={"name": "l", "schema": list_without_element}))
    client_error(
        ns.post(f"/namespaces/{name}/tables", json={"name": "p", "schema": EMPTY_SCHEMA, "properties": [None]})
    )
    client_error(ns.post("/namespaces", json={"namespace": ["p"], "properties": [None]}))
    nested_default = {
        "type": "struct",
        "fields": [
            {
                "id": 1,
                "name": "s",
                "required": False,
                "initial-default": {"a": 1},
                "type": {"type": "struct", "fields": [{"id": 2, "name": "a", "type": "int", "required": False}]},
            }
        ],
    }
    client_error(ns.post(f"/namespaces/{name}/tables", json={"name": "d", "schema": nested_default}))
    update = {"requirements": [], "updates": [{"action": "add-schema", "schema": nested_default}]}
    assert ns.post(f"/namespaces/{name}/tables", json={"name": "ok", "schema": EMPTY_SCHEMA}).status_code == 200
    client_error(ns.post(f"/namespaces/{name}/tables/ok", json=update))
    names = {i["name"] for i in ns.get(f"/namespaces/{name}/tables").json()["identifiers"]}
    assert names == {"ok"}


def test_a_views_metadata_file_cannot_be_registered_as_a_table(ns: httpx.Client) -> None:
    name = ns.headers["x-ns"]
    view = ns.post(
        f"/namespaces/{name}/views", json={"name": "v", "schema": EMPTY_SCHEMA, "view-version": VIEW_VERSION}
    )
    assert view.status_code == 200, view.text
    body = {"name": "t", "metadata-location": view.json()["metadata-location"]}
    client_error(ns.post(f"/namespaces/{name}/register", json=body), 400, "view metadata")
    assert ns.get(f"/namespaces/{name}/tables").json()["identifiers"] == []
    assert ns.get(f"/namespaces/{name}/views/v").status_code == 200


def test_a_non_ascii_bearer_token_is_a_401(tmp_path) -> None:
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh", "lakeview")
    authenticator = Authenticator({"a": Client(hash_secret("s"), {"*": Privilege.ADMIN})}, signing_key=b"k" * 32)
    with CatalogServer(store, authenticator=authenticator) as server:
        for token in ("lv1.é.x".encode(), b"\xff\xfe", "Ω".encode()):
            response = httpx.get(f"{server.uri}/v1/lakeview/namespaces", headers={"Authorization": b"Bearer " + token})
            client_error(response, 401)
        basic = httpx.post(
            f"{server.uri}/v1/oauth/tokens",
            data={"grant_type": "client_credentials"},
            headers={"Authorization": b"Basic \xff\xfe"},
        )
        assert basic.status_code in (400, 401), basic.text
    store.close()


def test_metadata_that_would_break_the_table_is_a_400_and_the_table_keeps_working(ns: httpx.Client) -> None:
    """Each of these used to be accepted and then break the table (every later commit failed, or clients could
    not read the schema); now each is refused naming the problem, and the table still commits."""
    name = ns.headers["x-ns"]
    fields = [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "s", "type": "string", "required": False},
    ]
    schema = {"type": "struct", "schema-id": 0, "fields": fields}
    tables = f"/namespaces/{name}/tables"
    day_on_string = {"spec-id": 0, "fields": [{"source-id": 2, "field-id": 1000, "name": "d", "transform": "day"}]}
    client_error(ns.post(tables, json={"name": "a", "schema": schema, "partition-spec": day_on_string}), 400, "day")
    bad_max = {"write.metadata.previous-versions-max": "abc"}
    client_error(ns.post(tables, json={"name": "b", "schema": schema, "properties": bad_max}), 400, "previous-versions")
    assert ns.post(tables, json={"name": "t", "schema": schema}).status_code == 200

    def commit(*updates: dict) -> httpx.Response:
        return ns.post(f"{tables}/t", json={"requirements": [], "updates": list(updates)})

    twice = [{"id": 1, "name": "a", "type": "long", "required": False}, {"id": 1, "name": "b", "type": "int"}]
    twice[1]["required"] = False
    client_error(commit({"action": "add-schema", "schema": {**schema, "schema-id": 1, "fields": twice}}), 400, "id 1")
    unknown_column = {
        "spec-id": 1,
        "fields": [{"source-id": 42, "field-id": 1000, "name": "x", "transform": "identity"}],
    }
    client_error(commit({"action": "add-spec", "spec": unknown_column}), 400, "column id 42")
    sort = {"source-id": 99, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}
    client_error(commit({"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [sort]}}), 400, "99")
    client_error(commit({"action": "set-properties", "updates": bad_max}), 400, "previous-versions-max")

    ns.post(
        f"{tables}/t", json={"requirements": [], "updates": [{"action": "upgrade-format-version", "format-version": 3}]}
    )
    wrong_default = {"id": 3, "name": "n", "type": "int", "required": False, "initial-default": "abc"}
    v3_schema = {**schema, "schema-id": 1, "fields": [*fields, wrong_default]}
    client_error(commit({"action": "add-schema", "schema": v3_schema}), 400, "initial-default")

    fine = commit({"action": "set-properties", "updates": {"write.metadata.previous-versions-max": "5"}})
    assert fine.status_code == 200, fine.text
    loaded = ns.get(f"{tables}/t").json()["metadata"]
    assert loaded["format-version"] == 3 and len(loaded["schemas"]) == 1 and len(loaded["partition-specs"]) == 1
    assert {i["name"] for i in ns.get(tables).json()["identifiers"]} == {"t"}


def test_view_versions_and_snapshots_naming_what_does_not_exist_are_a_400(ns: httpx.Client) -> None:
    """A view version without SQL, or naming a schema the view lacks, and a snapshot naming a schema the table
    lacks used to be accepted (200) and left metadata no engine can use; each is refused naming the problem,
    and nothing changes."""
    name = ns.headers["x-ns"]
    views, tables = f"/namespaces/{name}/views", f"/namespaces/{name}/tables"
    no_sql = {**VIEW_VERSION, "representations": []}
    client_error(ns.post(views, json={"name": "a", "schema": EMPTY_SCHEMA, "view-version": no_sql}), 400, "no repr")
    created = ns.post(views, json={"name": "v", "schema": EMPTY_SCHEMA, "view-version": VIEW_VERSION})
    assert created.status_code == 200, created.text
    before = created.json()["metadata-location"]

    def add_version(version: dict) -> httpx.Response:
        updates = [
            {"action": "add-view-version", "view-version": version},
            {"action": "set-current-view-version", "view-version-id": -1},
        ]
        return ns.post(f"{views}/v", json={"updates": updates})

    client_error(add_version({**no_sql, "version-id": 2}), 400, "no representations")
    client_error(add_version({**VIEW_VERSION, "version-id": 2, "schema-id": 9}), 400, "schema 9")
    assert ns.get(f"{views}/v").json()["metadata-location"] == before

    metadata = {**created.json()["metadata"]}
    metadata["versions"] = [{**metadata["versions"][0], "schema-id": 7}]
    forged = before.rsplit("/", 1)[0] + "/00009-forged.metadata.json"
    with open(forged, "w") as handle:
        json.dump(metadata, handle)
    client_error(
        ns.post(f"/namespaces/{name}/register-view", json={"name": "f", "metadata-location": forged}),
        400,
        "schema-id 7",
    )
    assert [i["name"] for i in ns.get(views).json()["identifiers"]] == ["v"]

    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    assert ns.post(tables, json={"name": "t", "schema": schema}).status_code == 200
    snapshot = {
        "snapshot-id": 1,
        "sequence-number": 1,
        "timestamp-ms": 1,
        "manifest-list": "snap-1.avro",
        "summary": {"operation": "append"},
        "schema-id": 5,
    }
    unknown = {"requirements": [], "updates": [{"action": "add-snapshot", "snapshot": snapshot}]}
    client_error(ns.post(f"{tables}/t", json=unknown), 400, "schema-id 5")
    assert ns.get(f"{tables}/t").json()["metadata"]["snapshots"] == []
    new_schema = {
        **schema,
        "schema-id": 5,
        "fields": [*schema["fields"], {**schema["fields"][0], "id": 2, "name": "x"}],
    }
    both = {"action": "add-schema", "schema": new_schema}
    accepted = ns.post(f"{tables}/t", json={"requirements": [], "updates": [both, *unknown["updates"]]})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["metadata"]["snapshots"][0]["schema-id"] == 5
