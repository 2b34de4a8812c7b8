"""One behaviour suite over HTTP, run against the SQLite and the PostgreSQL store."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from catalog_api.server import CatalogServer

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
SCHEMA_JSON = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
    ],
}
SEP = "%1F"


def api(server: CatalogServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.uri}/v1/lakeview", timeout=30)


def make_table(client: httpx.Client, namespace: str, name: str) -> dict:
    response = client.post(f"/namespaces/{namespace}/tables", json={"name": name, "schema": SCHEMA_JSON})
    assert response.status_code == 200, response.text
    return response.json()


def test_config_lists_exactly_the_served_endpoints(any_catalog: CatalogServer) -> None:
    body = httpx.get(f"{any_catalog.uri}/v1/config", params={"warehouse": "lakeview"}).json()
    endpoints = set(body["endpoints"])
    assert body["idempotency-key-lifetime"] == "PT30M"
    for expected in [
        "POST /v1/{prefix}/transactions/commit",
        "POST /v1/{prefix}/tables/rename",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/namespaces/{namespace}/register-view",
        "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    ]:
        assert expected in endpoints
    # Every advertised endpoint is routed: none answers "no route" (404 NotFoundException) or 405.
    for endpoint in endpoints:
        method, path = endpoint.split(" ")
        url = (
            path.replace("{prefix}", "lakeview")
            .replace("{namespace}", "nowhere")
            .replace("{table}", "t")
            .replace("{view}", "v")
        )
        response = httpx.request(method, f"{any_catalog.uri}{url}", json={})
        assert response.status_code != 405, endpoint
        if response.status_code == 404 and method != "HEAD":
            assert response.json()["error"]["type"] != "NotFoundException", endpoint


def test_nested_namespaces_parent_and_paging(any_catalog: CatalogServer, unique_name: str) -> None:
    client = api(any_catalog)
    assert client.post("/namespaces", json={"namespace": [unique_name]}).status_code == 200
    for child in ["c", "a", "b"]:
        assert client.post("/namespaces", json={"namespace": [unique_name, child]}).status_code == 200
    children = client.get("/namespaces", params={"parent": unique_name}).json()["namespaces"]
    assert children == [[unique_name, "a"], [unique_name, "b"], [unique_name, "c"]]
    assert client.head(f"/namespaces/{unique_name}{SEP}a").status_code == 204
    first = client.get("/namespaces", params={"parent": unique_name, "pageSize": 2}).json()
    assert first["namespaces"] == [[unique_name, "a"], [unique_name, "b"]]
    second = client.get(
        "/namespaces", params={"parent": unique_name, "pageSize": 2, "pageToken": first["next-page-token"]}
    ).json()
    assert second["namespaces"] == [[unique_name, "c"]] and "next-page-token" not in second
    overlap = client.post(f"/namespaces/{unique_name}/properties", json={"removals": ["a"], "updates": {"a": "1"}})
    assert overlap.status_code == 422 and overlap.json()["error"]["type"] == "UnprocessableEntityException"
    assert client.get("/namespaces", params={"pageSize": 0}).status_code == 400
    assert client.get("/namespaces", params={"pageToken": "zz"}).status_code == 400
    # Not empty while it has children; then drop bottom-up.
    assert client.delete(f"/namespaces/{unique_name}").json()["error"]["type"] == "NamespaceNotEmptyException"
    for child in ["a", "b", "c"]:
        assert client.delete(f"/namespaces/{unique_name}{SEP}{child}").status_code == 204
    assert client.delete(f"/namespaces/{unique_name}").status_code == 204
    assert client.get("/namespaces", params={"parent": unique_name}).status_code == 404


def test_tables_paging_rename_register_metrics_credentials(any_catalog: CatalogServer, unique_name: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    for name in ["t3", "t1", "t2"]:
        make_table(client, unique_name, name)
    page = client.get(f"/namespaces/{unique_name}/tables", params={"pageSize": 2}).json()
    assert [i["name"] for i in page["identifiers"]] == ["t1", "t2"]
    rest = client.get(f"/namespaces/{unique_name}/tables", params={"pageToken": page["next-page-token"]}).json()
    assert [i["name"] for i in rest["identifiers"]] == ["t3"]

    rename = {
        "source": {"namespace": [unique_name], "name": "t1"},
        "destination": {"namespace": [unique_name], "name": "renamed"},
    }
    assert client.post("/tables/rename", json=rename).status_code == 204
    assert client.head(f"/namespaces/{unique_name}/tables/t1").status_code == 404
    assert client.head(f"/namespaces/{unique_name}/tables/renamed").status_code == 204
    assert client.post("/tables/rename", json=rename).status_code == 404
    clash = {
        "source": {"namespace": [unique_name], "name": "t2"},
        "destination": {"namespace": [unique_name], "name": "t3"},
    }
    assert client.post("/tables/rename", json=clash).json()["error"]["type"] == "AlreadyExistsException"

    assert client.get(f"/namespaces/{unique_name}/tables/t2/credentials").json() == {"storage-credentials": []}
    metrics = {"report-type": "scan-report", "table-name": "t2", "snapshot-id": 1}
    assert client.post(f"/namespaces/{unique_name}/tables/t2/metrics", json=metrics).status_code == 204

    # Unregister keeps the files; register brings the table back under a new name.
    unregistered = client.post(f"/namespaces/{unique_name}/tables/t2/unregister")
    assert unregistered.status_code == 200
    location = unregistered.json()["metadata-location"]
    assert Path(location).exists()
    registered = client.post(
        f"/namespaces/{unique_name}/register", json={"name": "back", "metadata-location": location}
    )
    assert registered.status_code == 200, registered.text
    assert registered.json()["metadata"]["table-uuid"] == unregistered.json()["metadata"]["table-uuid"]
    outside = client.post(f"/namespaces/{unique_name}/register", json={"name": "x", "metadata-location": "/etc/passwd"})
    assert outside.status_code == 400
    # Neither a new location nor write.metadata.path may move the catalog's writes out of the warehouse.
    for update in [
        {"action": "set-location", "location": "/tmp/elsewhere"},
        {"action": "set-properties", "updates": {"write.metadata.path": "/tmp/elsewhere"}},
    ]:
        moved = client.post(f"/namespaces/{unique_name}/tables/t3", json={"updates": [update]})
        assert moved.status_code == 400 and "outside the warehouse" in moved.json()["error"]["message"]


def test_stage_create_then_commit_creates_the_table(
    any_catalog: CatalogServer, any_rest_catalog, unique_name: str
) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    staged = client.post(
        f"/namespaces/{unique_name}/tables", json={"name": "st", "schema": SCHEMA_JSON, "stage-create": True}
    )
    assert staged.status_code == 200 and "metadata-location" not in staged.json()
    assert client.head(f"/namespaces/{unique_name}/tables/st").status_code == 404
    # A create-transaction as pyiceberg runs it: assert-create + the staged metadata as updates.
    with any_rest_catalog.create_table_transaction(f"{unique_name}.st2", SCHEMA) as txn:
        txn.set_properties(owner="tests")
    assert any_rest_catalog.load_table(f"{unique_name}.st2").properties["owner"] == "tests"
    again = client.post(
        f"/namespaces/{unique_name}/tables/st2",
        json={
            "requirements": [{"type": "assert-create"}],
            "updates": [{"action": "set-properties", "updates": {"a": "b"}}],
        },
    )
    assert again.status_code == 409


def test_load_table_etag_304_and_snapshot_refs(any_catalog: CatalogServer, any_rest_catalog, unique_name: str) -> None:
    any_rest_catalog.create_namespace(unique_name)
    table = any_rest_catalog.create_table(f"{unique_name}.t", SCHEMA)
    for i in range(3):
        table.append(pa.table({"id": [i], "name": [str(i)]}, schema=SCHEMA))
    client = api(any_catalog)
    url = f"/namespaces/{unique_name}/tables/t"
    first = client.get(url)
    etag = first.headers["ETag"]
    assert len(first.json()["metadata"]["snapshots"]) == 3
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    refs = client.get(url, params={"snapshots": "refs"}).json()["metadata"]["snapshots"]
    assert [s["snapshot-id"] for s in refs] == [table.current_snapshot().snapshot_id]
    assert client.get(url, params={"snapshots": "some"}).status_code == 400
    table.append(pa.table({"id": [9], "name": ["9"]}, schema=SCHEMA))
    changed = client.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag


def test_drop_with_purge_deletes_files(any_catalog: CatalogServer, any_rest_catalog, unique_name: str) -> None:
    any_rest_catalog.create_namespace(unique_name)
    kept = any_rest_catalog.create_table(f"{unique_name}.kept", SCHEMA)
    purged = any_rest_catalog.create_table(f"{unique_name}.purged", SCHEMA)
    for table in (kept, purged):
        table.append(pa.table({"id": [1], "name": ["a"]}, schema=SCHEMA))
    client = api(any_catalog)
    assert client.delete(f"/namespaces/{unique_name}/tables/kept").status_code == 204
    assert (
        client.delete(f"/namespaces/{unique_name}/tables/purged", params={"purgeRequested": "true"}).status_code == 204
    )
    assert any(Path(kept.location()).rglob("*.parquet"))
    assert not Path(purged.location()).exists()
    assert client.delete(f"/namespaces/{unique_name}/tables/purged").status_code == 404


REQUIREMENTS = {
    "assert-table-uuid": ({"uuid": "{uuid}"}, {"uuid": str(uuid.UUID(int=1))}),
    "assert-ref-snapshot-id": ({"ref": "main", "snapshot-id": None}, {"ref": "main", "snapshot-id": 42}),
    "assert-last-assigned-field-id": ({"last-assigned-field-id": 2}, {"last-assigned-field-id": 7}),
    "assert-current-schema-id": ({"current-schema-id": 0}, {"current-schema-id": 3}),
    "assert-last-assigned-partition-id": ({"last-assigned-partition-id": 999}, {"last-assigned-partition-id": 1000}),
    "assert-default-spec-id": ({"default-spec-id": 0}, {"default-spec-id": 5}),
    "assert-default-sort-order-id": ({"default-sort-order-id": 0}, {"default-sort-order-id": 5}),
}


@pytest.mark.parametrize("kind", sorted(REQUIREMENTS))
def test_each_requirement_type_passes_or_gives_409(any_catalog: CatalogServer, unique_name: str, kind: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    created = make_table(client, unique_name, "t")
    holds, fails = REQUIREMENTS[kind]
    holds = {k: (created["metadata"]["table-uuid"] if v == "{uuid}" else v) for k, v in holds.items()}
    url = f"/namespaces/{unique_name}/tables/t"
    bad = client.post(
        url,
        json={
            "requirements": [{"type": kind, **fails}],
            "updates": [{"action": "set-properties", "updates": {"x": "1"}}],
        },
    )
    assert bad.status_code == 409 and bad.json()["error"]["type"] == "CommitFailedException", bad.text
    good = client.post(
        url,
        json={
            "requirements": [{"type": kind, **holds}],
            "updates": [{"action": "set-properties", "updates": {"x": "2"}}],
        },
    )
    assert good.status_code == 200, good.text
    assert client.get(url, headers={"If-None-Match": good.headers["ETag"]}).status_code == 304
    assert client.get(url).json()["metadata"]["properties"]["x"] == "2"
    unknown = client.post(url, json={"requirements": [{"type": "assert-moon-phase"}], "updates": []})
    assert unknown.status_code == 400


def test_transaction_commits_all_tables_or_none(any_catalog: CatalogServer, any_rest_catalog, unique_name: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    a, b = make_table(client, unique_name, "a"), make_table(client, unique_name, "b")

    def change(name: str, table: dict, value: str, uuid_: str | None = None) -> dict:
        return {
            "identifier": {"namespace": [unique_name], "name": name},
            "requirements": [{"type": "assert-table-uuid", "uuid": uuid_ or table["metadata"]["table-uuid"]}],
            "updates": [{"action": "set-properties", "updates": {"epoch": value}}],
        }

    ok = client.post("/transactions/commit", json={"table-changes": [change("a", a, "1"), change("b", b, "1")]})
    assert ok.status_code == 204, ok.text
    failed = client.post(
        "/transactions/commit",
        json={"table-changes": [change("a", a, "2"), change("b", b, "2", str(uuid.UUID(int=0)))]},
    )
    assert failed.status_code == 409
    for name in ("a", "b"):
        assert any_rest_catalog.load_table(f"{unique_name}.{name}").properties["epoch"] == "1"
    missing = client.post("/transactions/commit", json={"table-changes": [change("a", a, "3"), change("nope", b, "3")]})
    assert missing.status_code == 404
    assert any_rest_catalog.load_table(f"{unique_name}.a").properties["epoch"] == "1"
    assert client.post("/transactions/commit", json={"table-changes": [{"requirements": []}]}).status_code == 400


def test_views_lifecycle(any_catalog: CatalogServer, unique_name: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    version = {
        "version-id": 1,
        "schema-id": 0,
        "timestamp-ms": 1700000000000,
        "summary": {"engine-name": "lakeview"},
        "representations": [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}],
        "default-namespace": [unique_name],
    }
    created = client.post(
        f"/namespaces/{unique_name}/views", json={"name": "v", "schema": SCHEMA_JSON, "view-version": version}
    )
    assert created.status_code == 200, created.text
    metadata = created.json()["metadata"]
    assert client.head(f"/namespaces/{unique_name}/views/v").status_code == 204
    assert client.get(f"/namespaces/{unique_name}/views").json()["identifiers"] == [
        {"namespace": [unique_name], "name": "v"}
    ]
    assert client.get(f"/namespaces/{unique_name}/tables").json()["identifiers"] == []
    # A table cannot take a view's name.
    assert (
        client.post(f"/namespaces/{unique_name}/tables", json={"name": "v", "schema": SCHEMA_JSON}).status_code == 409
    )
    replaced = client.post(
        f"/namespaces/{unique_name}/views/v",
        json={
            "requirements": [{"type": "assert-view-uuid", "uuid": metadata["view-uuid"]}],
            "updates": [
                {"action": "add-schema", "schema": SCHEMA_JSON},
                {
                    "action": "add-view-version",
                    "view-version": {
                        **version,
                        "representations": [{"type": "sql", "sql": "SELECT 2 AS id", "dialect": "spark"}],
                        "schema-id": -1,
                    },
                },
                {"action": "set-current-view-version", "view-version-id": -1},
                {"action": "set-properties", "updates": {"comment": "two"}},
            ],
        },
    )
    assert replaced.status_code == 200, replaced.text
    loaded = client.get(f"/namespaces/{unique_name}/views/v").json()
    assert loaded["metadata"]["current-version-id"] == 2 and loaded["metadata"]["properties"]["comment"] == "two"
    current = next(v for v in loaded["metadata"]["versions"] if v["version-id"] == 2)
    assert current["representations"][0]["sql"] == "SELECT 2 AS id"
    stale = client.post(
        f"/namespaces/{unique_name}/views/v",
        json={"requirements": [{"type": "assert-view-uuid", "uuid": str(uuid.UUID(int=3))}], "updates": []},
    )
    assert stale.status_code == 409
    bad = client.post(f"/namespaces/{unique_name}/views/v", json={"updates": [{"action": "fly"}]})
    assert bad.status_code == 400
    rename = {
        "source": {"namespace": [unique_name], "name": "v"},
        "destination": {"namespace": [unique_name], "name": "w"},
    }
    assert client.post("/views/rename", json=rename).status_code == 204
    assert client.get(f"/namespaces/{unique_name}/views/v").json()["error"]["type"] == "NoSuchViewException"
    location = client.get(f"/namespaces/{unique_name}/views/w").json()["metadata-location"]
    assert client.delete(f"/namespaces/{unique_name}/views/w").status_code == 204
    registered = client.post(
        f"/namespaces/{unique_name}/register-view", json={"name": "again", "metadata-location": location}
    )
    assert registered.status_code == 200 and registered.json()["metadata"]["current-version-id"] == 2
    assert client.delete(f"/namespaces/{unique_name}").status_code == 409  # holds a view
    assert client.delete(f"/namespaces/{unique_name}/views/again").status_code == 204
    assert client.delete(f"/namespaces/{unique_name}/views/again").status_code == 404


def test_idempotency_key_replays_the_first_response(any_catalog: CatalogServer, unique_name: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    created = make_table(client, unique_name, "t")
    key = str(uuid.uuid4())
    body = {
        "requirements": [{"type": "assert-table-uuid", "uuid": created["metadata"]["table-uuid"]}],
        "updates": [
            {
                "action": "add-schema",
                "schema": {
                    **SCHEMA_JSON,
                    "schema-id": 1,
                    "fields": [*SCHEMA_JSON["fields"], {"id": 3, "name": "x", "type": "int", "required": False}],
                },
            },
            {"action": "set-current-schema", "schema-id": -1},
        ],
    }
    url = f"/namespaces/{unique_name}/tables/t"
    first = client.post(url, json=body, headers={"Idempotency-Key": key})
    second = client.post(url, json=body, headers={"Idempotency-Key": key})
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    metadata = client.get(url).json()["metadata"]
    assert len(metadata["metadata-log"]) == 1  # one commit, not two
    # A failed create replays its 409 too; the same key on another path is refused.
    ns_key = str(uuid.uuid4())
    again = [
        client.post("/namespaces", json={"namespace": [unique_name]}, headers={"Idempotency-Key": ns_key})
        for _ in range(2)
    ]
    assert [r.status_code for r in again] == [409, 409]
    assert client.delete(url, headers={"Idempotency-Key": key}).status_code == 422
    assert client.post(url, json=body, headers={"Idempotency-Key": "short"}).status_code == 400


@pytest.mark.parametrize(
    "path", ["/namespaces/../tables", "/namespaces/a%2F..%2Fb/tables/t", "/namespaces/ok/tables/" + "x" * 300]
)
def test_path_tricks_in_urls_are_4xx(any_catalog: CatalogServer, path: str) -> None:
    response = api(any_catalog).get(path)
    assert 400 <= response.status_code < 500 and "error" in response.json()


def test_bad_bodies_are_400_not_500(any_catalog: CatalogServer, unique_name: str) -> None:
    client = api(any_catalog)
    client.post("/namespaces", json={"namespace": [unique_name]})
    make_table(client, unique_name, "t")
    for path, payload in [
        (f"/namespaces/{unique_name}/tables/t", {"updates": [{"action": "add-snapshot"}]}),
        (f"/namespaces/{unique_name}/tables/t", {"updates": [{"action": "set-current-schema", "schema-id": 99}]}),
        (f"/namespaces/{unique_name}/tables/t", {"updates": "nope"}),
        ("/transactions/commit", {"table-changes": "x"}),
        ("/tables/rename", {"source": {"namespace": [], "name": 1}}),
        (f"/namespaces/{unique_name}/register", {"name": "r", "metadata-location": f"{os.sep}nope.json"}),
        (f"/namespaces/{unique_name}/views", {"name": "v"}),
        (f"/namespaces/{unique_name}/tables/t/metrics", {"no": "type"}),
    ]:
        response = client.post(path, json=payload)
        assert 400 <= response.status_code < 500, (path, response.text)
        assert set(response.json()["error"]) == {"message", "type", "code"}
