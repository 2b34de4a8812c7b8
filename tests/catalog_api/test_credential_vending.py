"""Credential vending on a SeaweedFS ``s3://`` warehouse: pyiceberg and DuckDB with no keys of their own
read (and write) a table through credentials limited to its prefix, which cannot reach another table; and on
that warehouse, commits that lose a race leave no metadata object behind."""

from __future__ import annotations

import time
from collections.abc import Iterator

import boto3
import httpx
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.config.storage import S3Config
from lakeview.sql.duck import connect
from tests.catalog_api.test_concurrency import create, race_commits, referenced_files
from tests.s3_server import ACCESS_KEY, SECRET_KEY

BUCKET = "vended-lake"
SCHEMA = pa.schema([("id", pa.int64())])
VENDED = {"header.X-Iceberg-Access-Delegation": "vended-credentials"}


@pytest.fixture(scope="module")
def vending(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CatalogServer, CatalogServer]]:
    """An open catalog and an OAuth2 one (a read-only client) on the same s3:// warehouse, both vending."""
    s3_server.create_bucket_when_ready(BUCKET)
    lake = tmp_path_factory.mktemp("vending")
    s3 = S3Config(
        endpoint=s3_server.endpoint, region="us-east-1", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
        vended_credentials_ttl=900,
    )  # fmt: skip
    store = CatalogStore(
        f"sqlite:///{lake / 'c.db'}", f"s3://{BUCKET}/wh", "lakeview", properties=s3.iceberg_properties()
    )
    clients = {"reader": Client(hash_secret("r"), {"*": Privilege.READ})}
    with CatalogServer(store) as open_server, CatalogServer(store, authenticator=Authenticator(clients)) as secured:
        yield open_server, secured
    store.close()


def scoped_s3(s3_server, credential: dict) -> object:
    config = credential["config"]
    return boto3.client(
        "s3", endpoint_url=s3_server.endpoint, region_name="us-east-1", aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"], aws_session_token=config["s3.session-token"],
    )  # fmt: skip


def denied(call) -> bool:
    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"] in ("AccessDenied", "403")
    return False


def test_clients_without_keys_read_and_write_through_vended_credentials(vending, s3_server, unique_name: str) -> None:
    server, _ = vending
    keyless = RestCatalog("keyless", uri=server.uri, warehouse="lakeview", **VENDED)
    keyless.create_namespace(unique_name)
    table = keyless.create_table(f"{unique_name}.orders", SCHEMA)
    table = keyless.load_table(f"{unique_name}.orders")  # the load carries the vended keys into its FileIO
    table.append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    other = keyless.create_table(f"{unique_name}.other", SCHEMA)
    keyless.load_table(f"{unique_name}.other").append(pa.table({"id": [9]}, schema=SCHEMA))
    assert sorted(keyless.load_table(f"{unique_name}.orders").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]

    loaded = httpx.get(
        f"{server.uri}/v1/lakeview/namespaces/{unique_name}/tables/orders",
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
    ).json()
    credential = loaded["storage-credentials"][0]
    assert credential["prefix"] == loaded["metadata"]["location"] and credential["config"]["s3.session-token"]
    expires = int(credential["config"]["s3.session-token-expires-at-ms"]) / 1000
    assert time.time() < expires <= time.time() + 900 + 5
    plain = httpx.get(f"{server.uri}/v1/lakeview/namespaces/{unique_name}/tables/orders").json()
    assert "storage-credentials" not in plain and plain["config"] == {}  # only when asked for

    scoped = scoped_s3(s3_server, credential)
    prefix = credential["prefix"].removeprefix(f"s3://{BUCKET}/")
    own = [o["Key"] for o in scoped.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/").get("Contents", [])]
    assert own and all(key.startswith(prefix + "/") for key in own)
    scoped.get_object(Bucket=BUCKET, Key=own[0])
    other_prefix = other.location().removeprefix(f"s3://{BUCKET}/")
    other_key = s3_server.keys(BUCKET, other_prefix + "/")[0]
    assert denied(lambda: scoped.get_object(Bucket=BUCKET, Key=other_key))
    assert denied(lambda: scoped.list_objects_v2(Bucket=BUCKET, Prefix=other_prefix + "/"))
    assert denied(lambda: scoped.put_object(Bucket=BUCKET, Key=other_prefix + "/x", Body=b"x"))
    scoped.put_object(Bucket=BUCKET, Key=prefix + "/scratch", Body=b"x")  # a writer may write its own table
    scoped.delete_object(Bucket=BUCKET, Key=prefix + "/scratch")

    con = connect("avro", "httpfs", "iceberg")  # no S3 secret of its own
    con.execute(
        f"ATTACH 'lakeview' AS lake (TYPE iceberg, ENDPOINT '{server.uri}', AUTHORIZATION_TYPE 'none', "
        "ACCESS_DELEGATION_MODE 'vended_credentials')"
    )
    assert con.sql(f"SELECT sum(id) FROM lake.{unique_name}.orders").fetchone() == (6,)


def test_read_only_callers_get_read_only_credentials(vending, s3_server, unique_name: str) -> None:
    server, secured = vending
    writer = RestCatalog("w", uri=server.uri, warehouse="lakeview", **VENDED)
    writer.create_namespace(unique_name)
    writer.create_table(f"{unique_name}.t", SCHEMA)
    writer.load_table(f"{unique_name}.t").append(pa.table({"id": [5]}, schema=SCHEMA))

    oauth = {"oauth2-server-uri": f"{secured.uri}/v1/oauth/tokens"}
    reader = RestCatalog("r", uri=secured.uri, warehouse="lakeview", credential="reader:r", **VENDED, **oauth)
    table = reader.load_table(f"{unique_name}.t")
    assert table.scan().to_arrow().column("id").to_pylist() == [5]
    token = httpx.post(
        f"{secured.uri}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "reader", "client_secret": "r"},
    ).json()["access_token"]
    answer = httpx.get(
        f"{secured.uri}/v1/lakeview/namespaces/{unique_name}/tables/t/credentials",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200
    credential = answer.json()["storage-credentials"][0]
    scoped = scoped_s3(s3_server, credential)
    prefix = credential["prefix"].removeprefix(f"s3://{BUCKET}/")
    assert scoped.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")["KeyCount"] > 0
    assert denied(lambda: scoped.put_object(Bucket=BUCKET, Key=prefix + "/data/forged.parquet", Body=b"x"))
    with pytest.raises(Exception, match="(?i)denied|forbidden|403"):
        table.append(pa.table({"id": [6]}, schema=SCHEMA))  # pyiceberg's write through read-only credentials
    assert writer.load_table(f"{unique_name}.t").scan().to_arrow().column("id").to_pylist() == [5]


def test_a_local_warehouse_vends_nothing(rest_catalog, catalog_server: CatalogServer, unique_name: str) -> None:
    rest_catalog.create_namespace(unique_name)
    rest_catalog.create_table(f"{unique_name}.t", SCHEMA)
    url = f"{catalog_server.uri}/v1/lakeview/namespaces/{unique_name}/tables"
    assert httpx.get(f"{url}/t/credentials").json() == {"storage-credentials": []}
    assert httpx.get(f"{url}/missing/credentials").status_code == 404


def test_lost_races_leave_no_metadata_object(vending, s3_server, unique_name: str) -> None:
    base = f"{vending[0].uri}/v1/lakeview"
    location = create(base, unique_name)["metadata"]["location"]
    loaded = race_commits(f"{base}/namespaces/{unique_name}/tables/t", location, threads=4, rounds=3)
    prefix = location.removeprefix(f"s3://{BUCKET}/") + "/metadata/"
    listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    stored = {f"s3://{BUCKET}/{o['Key']}" for o in listed if o["Key"].endswith(".metadata.json")}
    assert stored == referenced_files(loaded)
