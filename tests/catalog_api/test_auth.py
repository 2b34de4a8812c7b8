"""OAuth2 client credentials: tokens, 401/403 in the spec's shape, per-namespace privileges,
through raw HTTP, pyiceberg and DuckDB; auth mode none refused off loopback."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import ForbiddenError

from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.errors import SetupError
from lakeview.sql.duck import connect

SECRETS = {"admin": "admin-secret", "writer": "writer-secret", "reader": "reader-secret"}
SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogServer]:
    lake = tmp_path_factory.mktemp("secured")
    clients = {
        "admin": Client(hash_secret(SECRETS["admin"]), {"*": Privilege.ADMIN}),
        "writer": Client(hash_secret(SECRETS["writer"]), {"sales": Privilege.WRITE, "*": Privilege.READ}),
        "reader": Client(hash_secret(SECRETS["reader"]), {"sales": Privilege.READ}),
    }
    store = CatalogStore(f"sqlite:///{lake / 'catalog.db'}", lake / "warehouse", "lakeview")
    authenticator = Authenticator(clients, token_ttl=300, signing_key=b"k" * 32)
    with CatalogServer(store, authenticator=authenticator) as server:
        yield server


def token(server: CatalogServer, client: str) -> str:
    response = httpx.post(
        f"{server.uri}/v1/oauth/tokens",
        data={
            "grant_type": "client_credentials",
            "client_id": client,
            "client_secret": SECRETS[client],
            "scope": "catalog",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["token_type"] == "bearer"
    return response.json()["access_token"]


def as_client(server: CatalogServer, client: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.uri}/v1/lakeview", headers={"Authorization": f"Bearer {token(server, client)}"}
    )


def test_token_endpoint_grants_and_refusals(secured: CatalogServer) -> None:
    basic = base64.b64encode(f"writer:{SECRETS['writer']}".encode()).decode()
    response = httpx.post(
        f"{secured.uri}/v1/oauth/tokens",
        data={"grant_type": "client_credentials"},
        headers={"Authorization": f"Basic {basic}"},
    )
    assert response.status_code == 200 and response.json()["expires_in"] == 300
    wrong = httpx.post(
        f"{secured.uri}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "writer", "client_secret": "nope"},
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    grant = httpx.post(
        f"{secured.uri}/v1/oauth/tokens", data={"grant_type": "password", "client_id": "writer", "client_secret": "x"}
    )
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"


def test_missing_forged_and_expired_tokens_are_401(secured: CatalogServer) -> None:
    url = f"{secured.uri}/v1/lakeview/namespaces"
    missing = httpx.get(url)
    assert missing.status_code == 401
    assert missing.json() == {
        "error": {"message": missing.json()["error"]["message"], "type": "NotAuthorizedException", "code": 401}
    }
    good = token(secured, "reader")
    assert httpx.get(url, headers={"Authorization": f"Bearer {good[:-2]}xx"}).status_code == 401
    expired = Authenticator(
        {"reader": Client(hash_secret(SECRETS["reader"]), {})}, token_ttl=-10, signing_key=b"k" * 32
    ).issue("reader", SECRETS["reader"])
    response = httpx.get(url, headers={"Authorization": f"Bearer {expired}"})
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]
    assert httpx.get(f"http://127.0.0.1:{secured.port}/healthz").status_code == 200


def test_privileges_per_namespace_are_403(secured: CatalogServer) -> None:
    admin, writer, reader = (as_client(secured, name) for name in ("admin", "writer", "reader"))
    assert admin.post("/namespaces", json={"namespace": ["sales"]}).status_code == 200
    assert admin.post("/namespaces", json={"namespace": ["hr"]}).status_code == 200
    forbidden = writer.post("/namespaces", json={"namespace": ["ops"]})
    assert forbidden.status_code == 403 and forbidden.json()["error"]["type"] == "ForbiddenException"
    table = {
        "name": "t",
        "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]},
    }
    assert writer.post("/namespaces/sales/tables", json=table).status_code == 200
    assert writer.post("/namespaces/hr/tables", json=table).status_code == 403
    assert writer.get("/namespaces/hr/tables").status_code == 200  # read everywhere
    assert reader.get("/namespaces/sales/tables/t").status_code == 200
    assert reader.get("/namespaces/hr").status_code == 403
    assert reader.delete("/namespaces/sales/tables/t").status_code == 403
    rename = {"source": {"namespace": ["sales"], "name": "t"}, "destination": {"namespace": ["hr"], "name": "t"}}
    assert writer.post("/tables/rename", json=rename).status_code == 403
    commit = {"table-changes": [{"identifier": {"namespace": ["hr"], "name": "t"}, "requirements": [], "updates": []}]}
    assert writer.post("/transactions/commit", json=commit).status_code == 403


def test_pyiceberg_and_duckdb_with_client_credentials(secured: CatalogServer) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    def catalog(client: str) -> RestCatalog:
        return RestCatalog(
            client,
            uri=secured.uri,
            warehouse="lakeview",
            credential=f"{client}:{SECRETS[client]}",
            **{"oauth2-server-uri": f"{secured.uri}/v1/oauth/tokens"},
        )

    admin = catalog("admin")
    if ("sales",) not in admin.list_namespaces():
        admin.create_namespace("sales")
    writer = catalog("writer")
    table = writer.create_table("sales.orders", SCHEMA)
    table.append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    con = connect("avro", "httpfs", "iceberg")
    con.execute(
        f"ATTACH 'lakeview' AS lake (TYPE iceberg, ENDPOINT '{secured.uri}', CLIENT_ID 'reader', "
        f"CLIENT_SECRET '{SECRETS['reader']}', OAUTH2_SERVER_URI '{secured.uri}/v1/oauth/tokens')"
    )
    assert ("orders",) in {(row[2],) for row in con.sql("SHOW ALL TABLES").fetchall() if row[0] == "lake"}
    assert con.sql("SELECT sum(id) FROM lake.sales.orders").fetchone() == (6,)
    with pytest.raises(ForbiddenError):  # the reader cannot write
        catalog("reader").drop_table("sales.orders")


def test_auth_none_is_refused_off_loopback(tmp_path: Path) -> None:
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w", "lakeview")
    with pytest.raises(SetupError, match="without auth"):
        CatalogServer(store, host="0.0.0.0")


def test_auth_config_is_validated() -> None:
    from lakeview.errors import ConfigError
    from lakeview.project import parse_project

    good = {"secret_hash": hash_secret("s"), "privileges": {"*": "read"}}
    config = parse_project({"server": {"host": "0.0.0.0"}, "auth": {"mode": "oauth2", "clients": {"spark": good}}})
    assert config.auth.enabled
    with pytest.raises(ConfigError, match="server.host.*oauth2"):
        parse_project({"server": {"host": "0.0.0.0"}})
    with pytest.raises(ConfigError, match="not a secret hash"):
        parse_project({"auth": {"mode": "oauth2", "clients": {"spark": {"secret_hash": "plaintext"}}}})
    with pytest.raises(ConfigError, match="read, write or admin"):
        parse_project({"auth": {"mode": "oauth2", "clients": {"spark": {**good, "privileges": {"a": "root"}}}}})


def test_a_grant_on_a_dotted_level_and_one_on_two_levels_never_match_each_other(tmp_path: Path) -> None:
    """``("a.b",)`` (one level with a dot) and ``("a", "b")`` (two levels) are different namespaces: a grant on
    either gives nothing on the other, in both directions, over HTTP with real tokens."""
    secrets = {"admin": "admin-secret", "dotted": "dotted-secret", "split": "split-secret"}
    clients = {
        "admin": Client(hash_secret(secrets["admin"]), {"*": Privilege.ADMIN}),
        "dotted": Client(hash_secret(secrets["dotted"]), {"lv%2Eb": Privilege.WRITE}),  # the one level "lv.b"
        "split": Client(hash_secret(secrets["split"]), {"lv.b": Privilege.WRITE}),  # lv → b
    }
    store = CatalogStore(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse", "lakeview")
    authenticator = Authenticator(clients, token_ttl=300, signing_key=b"g" * 32)
    with CatalogServer(store, authenticator=authenticator) as server:

        def client(name: str) -> httpx.Client:
            form = {"grant_type": "client_credentials", "client_id": name, "client_secret": secrets[name]}
            issued = httpx.post(f"{server.uri}/v1/oauth/tokens", data=form)
            assert issued.status_code == 200, issued.text
            headers = {"Authorization": f"Bearer {issued.json()['access_token']}"}
            return httpx.Client(base_url=f"{server.uri}/v1/lakeview", headers=headers)

        admin, dotted, split = client("admin"), client("dotted"), client("split")
        one_level, two_levels = "lv.b", "lv%1Fb"  # path forms of ("lv.b",) and ("lv", "b")
        for namespace in (["lv.b"], ["lv"], ["lv", "b"]):
            assert admin.post("/namespaces", json={"namespace": namespace}).status_code == 200
        table = {
            "name": "t",
            "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]},
        }
        for path in (one_level, two_levels):
            assert admin.post(f"/namespaces/{path}/tables", json=table).status_code == 200

        # each client reads and writes its own namespace ...
        assert dotted.get(f"/namespaces/{one_level}/tables/t").status_code == 200
        assert split.get(f"/namespaces/{two_levels}/tables/t").status_code == 200
        assert dotted.post(f"/namespaces/{one_level}/tables", json={**table, "name": "mine"}).status_code == 200
        assert split.post(f"/namespaces/{two_levels}/tables", json={**table, "name": "mine"}).status_code == 200
        # ... and nothing of the other one, whichever way round
        for caller, path in ((dotted, two_levels), (split, one_level)):
            refused = caller.get(f"/namespaces/{path}/tables/t")
            assert refused.status_code == 403 and refused.json()["error"]["type"] == "ForbiddenException"
            assert caller.post(f"/namespaces/{path}/tables", json={**table, "name": "x"}).status_code == 403
            assert caller.delete(f"/namespaces/{path}/tables/t").status_code == 403
            assert caller.get(f"/namespaces/{path}").status_code == 403
        assert dotted.get(f"/namespaces/{one_level}/tables").json()["identifiers"] == [
            {"namespace": ["lv.b"], "name": "mine"},
            {"namespace": ["lv.b"], "name": "t"},
        ]
        # listings show each client its own branch only
        assert dotted.get("/namespaces").json()["namespaces"] == [["lv.b"]]
        assert split.get("/namespaces").json()["namespaces"] == [["lv"]]
        assert split.get("/namespaces", params={"parent": "lv"}).status_code == 403  # no grant on lv itself
        assert admin.get(f"/namespaces/{two_levels}/tables/mine").status_code == 200
        assert admin.get(f"/namespaces/{one_level}/tables/mine").status_code == 200
