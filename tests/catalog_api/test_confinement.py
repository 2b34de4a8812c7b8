"""Issue #16 finding 2: a privilege on a namespace confines the files a client can reach.

A client that may write only ``sales`` tries each attack from the issue against ``finance``
(on the SQLite and PostgreSQL stores and an ``s3://`` warehouse on SeaweedFS); every attempt
is refused with 403/400 and finance's table still loads with its rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa
import pytest

from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore

SECRETS = {"admin": "admin-secret", "sales_writer": "sw-secret", "sales_admin": "sa-secret"}
GRANTS = {
    "admin": {"*": Privilege.ADMIN},
    "sales_writer": {"sales": Privilege.WRITE},
    "sales_admin": {"sales": Privilege.ADMIN},
}
ARROW = pa.schema([pa.field("id", pa.int64())])
SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "default-namespace": ["sales"],
    "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
}
_AUTHENTICATOR = Authenticator(
    {name: Client(hash_secret(SECRETS[name]), GRANTS[name]) for name in SECRETS}, token_ttl=600, signing_key=b"c" * 32
)


@dataclass
class Lake:
    server: CatalogServer
    warehouse: str
    outside: str  # a location outside the warehouse
    io_properties: dict[str, str]

    def catalog(self, client: str) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(
            client, uri=self.server.uri, warehouse=self.server.store.name, credential=f"{client}:{SECRETS[client]}",
            **{"oauth2-server-uri": f"{self.server.uri}/v1/oauth/tokens"}, **self.io_properties,
        )  # fmt: skip

    def api(self, client: str) -> httpx.Client:
        response = httpx.post(
            f"{self.server.uri}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": client, "client_secret": SECRETS[client]},
        )
        token = response.json()["access_token"]
        base = f"{self.server.uri}/v1/{self.server.store.name}"
        return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def exists(self, location: str) -> bool:
        from pyiceberg.io import load_file_io

        return load_file_io(self.io_properties, location).new_input(location).exists()


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("confined")
    name = f"conf_{uuid.uuid4().hex[:8]}"
    io_properties: dict[str, str] = {}
    if request.param == "s3":
        from tests.s3_server import ACCESS_KEY, SECRET_KEY

        s3 = request.getfixturevalue("s3_server")
        s3.create_bucket_when_ready("confined")
        io_properties = {
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": s3.endpoint, "s3.region": "us-east-1",
            "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
        }  # fmt: skip
        warehouse, outside = f"s3://confined/{name}", f"s3://confined/elsewhere_{name}"
    else:
        warehouse, outside = str(root / "warehouse"), str(root / "elsewhere")
    url = request.getfixturevalue("postgres").url if request.param == "postgresql" else f"sqlite:///{root / 'c.db'}"
    store = CatalogStore(url, warehouse, name, properties=io_properties)
    with CatalogServer(store, authenticator=_AUTHENTICATOR) as server:
        lake = Lake(server, warehouse, outside, io_properties)
        admin = lake.catalog("admin")
        for namespace in ("sales", "finance"):
            admin.create_namespace(namespace)
        admin.create_table("finance.ledger", ARROW).append(pa.table({"id": [1, 2, 3]}, schema=ARROW))
        yield lake
    store.close()


def assert_refused(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    for word in words:
        assert word in error["message"], error["message"]


def finance_intact(lake: Lake) -> None:
    ledger = lake.catalog("admin").load_table("finance.ledger")
    assert sorted(ledger.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert lake.exists(ledger.metadata_location)


def test_table_locations_outside_the_namespace_are_refused(lake: Lake) -> None:
    sales = lake.api("sales_writer")
    wh = lake.warehouse
    for location in (f"{wh}/finance", f"{wh}/finance.db", f"{wh}/finance.db/ledger", f"{wh}/sales.db/../finance.db/x"):
        if lake.warehouse.startswith("s3://") and ".." in location:
            assert_refused(
                sales.post(
                    "/namespaces/sales/tables", json={"name": "evil", "schema": SCHEMA_JSON, "location": location}
                ),
                400,
                "outside the warehouse",
            )
            continue
        assert_refused(
            sales.post("/namespaces/sales/tables", json={"name": "evil", "schema": SCHEMA_JSON, "location": location}),
            403,
            "outside namespace 'sales'",
        )
        staged = {"name": "evil", "schema": SCHEMA_JSON, "location": location, "stage-create": True}
        assert_refused(sales.post("/namespaces/sales/tables", json=staged), 403, "outside namespace 'sales'")
    assert_refused(
        sales.post("/namespaces/sales/tables", json={"name": "evil", "schema": SCHEMA_JSON, "location": lake.outside}),
        400,
        "outside the warehouse",
    )
    ok = sales.post(
        "/namespaces/sales/tables", json={"name": "mine", "schema": SCHEMA_JSON, "location": f"{wh}/sales/mine"}
    )
    assert ok.status_code == 200, ok.text
    # set-location into finance
    move = {"requirements": [], "updates": [{"action": "set-location", "location": f"{wh}/finance.db/ledger"}]}
    assert_refused(sales.post("/namespaces/sales/tables/mine", json=move), 403, "outside namespace 'sales'")
    change = {"identifier": {"namespace": ["sales"], "name": "mine"}, **move}
    assert_refused(sales.post("/transactions/commit", json={"table-changes": [change]}), 403, "outside namespace")
    # write.*.path properties, on create and on commit
    for key in ("write.data.path", "write.object-storage.path", "write.folder-storage.path", "write.metadata.path"):
        for target, status in ((f"{wh}/finance.db/ledger/data", 403), (lake.outside, 400)):
            body = {"name": "paths", "schema": SCHEMA_JSON, "properties": {key: target}}
            assert_refused(
                sales.post("/namespaces/sales/tables", json=body), status, key if status == 403 else "outside"
            )
            update = {"requirements": [], "updates": [{"action": "set-properties", "updates": {key: target}}]}
            assert_refused(sales.post("/namespaces/sales/tables/mine", json=update), status)
    inside = {
        "requirements": [],
        "updates": [{"action": "set-properties", "updates": {"write.data.path": f"{wh}/sales/mine/d"}}],
    }
    assert sales.post("/namespaces/sales/tables/mine", json=inside).status_code == 200
    names = {i["name"] for i in sales.get("/namespaces/sales/tables").json()["identifiers"]}
    assert names == {"mine"}
    finance_intact(lake)


def test_register_only_table_metadata_of_the_callers_namespace(lake: Lake) -> None:
    sales = lake.api("sales_writer")
    ledger = lake.catalog("admin").load_table("finance.ledger")
    stolen = {"name": "stolen", "metadata-location": ledger.metadata_location}
    assert_refused(sales.post("/namespaces/sales/register", json=stolen), 403, "metadata-location", "finance")
    # a copy of finance's metadata inside sales's storage still points at finance's location
    admin = lake.catalog("admin")
    copy = f"{lake.warehouse}/sales.db/copied/metadata/00000-{uuid.uuid4()}.metadata.json"
    io = admin._load_file_io(location=copy)
    with io.new_output(copy).create() as stream:
        stream.write(io.new_input(ledger.metadata_location).open().read())
    assert_refused(
        sales.post("/namespaces/sales/register", json={"name": "copied", "metadata-location": copy}), 403, "finance"
    )
    # a view's metadata file is not a table
    view = sales.post(
        "/namespaces/sales/views", json={"name": "v", "schema": SCHEMA_JSON, "view-version": VIEW_VERSION}
    )
    assert view.status_code == 200, view.text
    as_table = {"name": "from_view", "metadata-location": view.json()["metadata-location"]}
    assert_refused(sales.post("/namespaces/sales/register", json=as_table), 400, "view metadata")
    names = {i["name"] for i in sales.get("/namespaces/sales/tables").json()["identifiers"]}
    assert "stolen" not in names and "copied" not in names and "from_view" not in names
    finance_intact(lake)


def test_views_and_namespace_locations_are_confined(lake: Lake) -> None:
    sales, sales_admin = lake.api("sales_writer"), lake.api("sales_admin")
    wh = lake.warehouse
    body = {"name": "vv", "schema": SCHEMA_JSON, "view-version": VIEW_VERSION, "location": f"{wh}/finance.db/vv"}
    assert_refused(sales.post("/namespaces/sales/views", json=body), 403, "view location")
    assert sales.post("/namespaces/sales/views", json={**body, "location": f"{wh}/sales/vv"}).status_code == 200
    move = {"requirements": [], "updates": [{"action": "set-location", "location": f"{wh}/finance.db/vv"}]}
    assert_refused(sales.post("/namespaces/sales/views/vv", json=move), 403, "view location")
    # a namespace admin may not point its namespace's storage at another namespace's
    grant = {"updates": {"location": f"{wh}/finance.db"}}
    assert_refused(sales_admin.post("/namespaces/sales/properties", json=grant), 403, "warehouse admin")
    assert_refused(sales.post("/namespaces/sales/properties", json=grant), 403)
    # ... while the warehouse admin may grant a prefix, which the namespace then owns
    shared = f"{wh}/shared/sales_area"
    assert (
        lake.api("admin").post("/namespaces/sales/properties", json={"updates": {"location": shared}}).status_code
        == 200
    )
    granted = sales.post(
        "/namespaces/sales/tables", json={"name": "g", "schema": SCHEMA_JSON, "location": f"{shared}/g"}
    )
    assert granted.status_code == 200, granted.text
    finance_intact(lake)


def test_purge_deletes_only_the_tables_own_files_under_its_namespace(lake: Lake) -> None:
    """A sales table whose manifest lists finance's data file (add_files) is purged: finance keeps its rows."""
    admin, writer = lake.catalog("admin"), lake.catalog("sales_writer")
    ledger = admin.load_table("finance.ledger")
    finance_files = [task.file.file_path for task in ledger.scan().plan_files()]
    evil = writer.create_table("sales.evil_purge", ARROW)
    evil.add_files(finance_files)
    evil.append(pa.table({"id": [9]}, schema=ARROW))
    own = [task.file.file_path for task in evil.scan().plan_files() if task.file.file_path not in finance_files]
    assert own and all(lake.exists(f) for f in own)
    assert writer.purge_table("sales.evil_purge") is None
    assert not any(lake.exists(f) for f in own)  # its own files went
    assert all(lake.exists(f) for f in finance_files)
    finance_intact(lake)


def test_namespace_listing_shows_only_namespaces_with_a_privilege(lake: Lake) -> None:
    listed = lake.api("sales_writer").get("/namespaces").json()["namespaces"]
    assert ["sales"] in listed and ["finance"] not in listed
    assert ["finance"] in lake.api("admin").get("/namespaces").json()["namespaces"]
