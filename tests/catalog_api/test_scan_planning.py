"""Server-side scan planning, checked against pyiceberg's client-side planning on the same snapshots:
filters, partitions, pagination of plan tasks, time travel, and position deletes written by Spark."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import And, EqualTo, GreaterThan, GreaterThanOrEqual, In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from spark_jobs.session import spark_catalog_conf

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False), NestedField(2, "region", StringType(), required=False)
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
ARROW = pa.schema([("id", pa.int64()), ("region", pa.string())])
FILTERS = [
    None,
    EqualTo("region", "eu"),
    GreaterThan("id", 25),
    And(In("region", ["us", "ap"]), GreaterThanOrEqual("id", 12)),
]


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogServer]:
    """A catalog that puts at most 2 data manifests in a plan task (pagination on small tables)."""
    lake = tmp_path_factory.mktemp("planning")
    store = CatalogStore(f"sqlite:///{lake / 'c.db'}", lake / "w", "lakeview")
    with CatalogServer(store, plan_manifests_per_task=2) as server:
        yield server
    store.close()


def catalogs(server: CatalogServer) -> tuple[RestCatalog, RestCatalog]:
    client = RestCatalog("client", uri=server.uri, warehouse="lakeview")
    remote = RestCatalog("server", uri=server.uri, warehouse="lakeview", **{"scan-planning-mode": "server"})
    return client, remote


def planned(table, row_filter=None, snapshot_id=None) -> list[str]:
    scan = (
        table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
        if row_filter
        else table.scan(snapshot_id=snapshot_id)
    )
    return sorted(task.file.file_path for task in scan.plan_files())


def rows(table, row_filter=None, snapshot_id=None) -> list[tuple]:
    scan = (
        table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
        if row_filter
        else table.scan(snapshot_id=snapshot_id)
    )
    return sorted(tuple(r.values()) for r in scan.to_arrow().to_pylist())


def test_server_planning_equals_client_planning_with_pages_and_time_travel(
    paged: CatalogServer, unique_name: str
) -> None:
    client, remote = catalogs(paged)
    assert remote.supports_server_side_planning()
    client.create_namespace(unique_name)
    table = client.create_table(f"{unique_name}.events", SCHEMA, partition_spec=SPEC)
    snapshots = []
    for batch in range(5):  # five appends: five data manifests, so three plan tasks of at most two
        ids = list(range(batch * 10, batch * 10 + 10))
        regions = [("eu", "us", "ap")[i % 3] for i in ids]
        table.append(pa.table({"id": ids, "region": regions}, schema=ARROW))
        snapshots.append(table.current_snapshot().snapshot_id)
    local, served = client.load_table(f"{unique_name}.events"), remote.load_table(f"{unique_name}.events")
    for row_filter in FILTERS:
        assert planned(served, row_filter) == planned(local, row_filter)
        assert rows(served, row_filter) == rows(local, row_filter)
    assert len(planned(served, EqualTo("region", "eu"))) < len(planned(served))  # partitions were pruned
    assert (
        rows(served, snapshot_id=snapshots[1]) == rows(local, snapshot_id=snapshots[1])
        and len(rows(served, snapshot_id=snapshots[1])) == 20
    )
    assert planned(served, GreaterThan("id", 25), snapshots[2]) == planned(local, GreaterThan("id", 25), snapshots[2])

    url = f"{paged.uri}/v1/lakeview/namespaces/{unique_name}/tables/events"
    plan = httpx.post(f"{url}/plan", json={}).json()
    assert plan["status"] == "completed" and len(plan["plan-tasks"]) == 3 and plan["plan-id"]
    files = []
    for token in plan["plan-tasks"]:
        tasks = httpx.post(f"{url}/tasks", json={"plan-task": token})
        assert tasks.status_code == 200
        files += [t["data-file"]["file-path"] for t in tasks.json()["file-scan-tasks"]]
    assert sorted(files) == planned(local)
    again = httpx.get(f"{url}/plan/{plan['plan-id']}")
    assert again.status_code == 200 and again.json()["plan-tasks"] == plan["plan-tasks"]
    assert httpx.delete(f"{url}/plan/{plan['plan-id']}").status_code == 204


def test_planning_endpoints_are_advertised_and_refuse_bad_input(any_catalog: CatalogServer, unique_name: str) -> None:
    endpoints = httpx.get(f"{any_catalog.uri}/v1/config").json()["endpoints"]
    table_path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    for endpoint in ("POST @/plan", "GET @/plan/{plan-id}", "DELETE @/plan/{plan-id}", "POST @/tasks"):
        assert endpoint.replace("@", table_path) in endpoints
    client, _ = catalogs(any_catalog)
    client.create_namespace(unique_name)
    client.create_table(f"{unique_name}.t", SCHEMA).append(pa.table({"id": [1], "region": ["eu"]}, schema=ARROW))
    url = f"{any_catalog.uri}/v1/lakeview/namespaces/{unique_name}/tables/t"

    def error(response: httpx.Response, status: int, kind: str) -> str:
        assert response.status_code == status, response.text
        assert response.json()["error"]["type"] == kind
        return response.json()["error"]["message"]

    unknown_column = {"filter": {"type": "eq", "term": "nope", "value": 1}}
    assert "nope" in error(httpx.post(f"{url}/plan", json=unknown_column), 400, "BadRequestException")
    error(httpx.post(f"{url}/plan", json={"filter": {"type": "frobnicate"}}), 400, "BadRequestException")
    error(httpx.post(f"{url}/plan", json={"snapshot-id": 42}), 400, "BadRequestException")
    error(httpx.post(f"{url}/plan", content=b"{not json"), 400, "BadRequestException")
    error(
        httpx.post(f"{url}/plan", json={"start-snapshot-id": 1, "end-snapshot-id": 2}),
        406,
        "UnsupportedOperationException",
    )
    error(httpx.get(f"{url}/plan/bogus"), 404, "NoSuchPlanIdException")
    error(httpx.delete(f"{url}/plan/{quote('%%%')}"), 404, "NoSuchPlanIdException")
    error(httpx.post(f"{url}/tasks", json={"plan-task": "bogus"}), 404, "NoSuchPlanTaskException")
    error(httpx.post(f"{url}/tasks", json={}), 400, "BadRequestException")
    plan_id = httpx.post(f"{url}/plan", json={}).json()["plan-id"]
    error(httpx.post(f"{url}/tasks", json={"plan-task": plan_id}), 404, "NoSuchPlanTaskException")
    forged = httpx.post(f"{url}/tasks", json={"plan-task": _token({"s": None, "f": None, "c": True, "m": [7]})})
    error(forged, 404, "NoSuchPlanTaskException")
    missing = f"{any_catalog.uri}/v1/lakeview/namespaces/{unique_name}/tables/missing/plan"
    error(httpx.post(missing, json={}), 404, "NoSuchTableException")


def _token(body: dict) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


@pytest.mark.spark
def test_position_deletes_written_by_spark(spark, catalog_server: CatalogServer, unique_name: str) -> None:
    for key, value in spark_catalog_conf(catalog_server.uri, "lakeview", name="plancat").items():
        spark.conf.set(key, value)
    ns = f"plancat.{unique_name}"
    spark.sql(f"CREATE NAMESPACE {ns}")
    spark.sql(
        f"CREATE TABLE {ns}.orders (id BIGINT, region STRING) USING iceberg PARTITIONED BY (region) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {ns}.orders VALUES (1, 'eu'), (2, 'eu'), (3, 'us'), (4, 'us'), (5, 'ap')")
    before = spark.sql(f"SELECT snapshot_id FROM {ns}.orders.snapshots").collect()[0][0]
    spark.sql(f"DELETE FROM {ns}.orders WHERE id IN (2, 3)")
    expected = sorted(tuple(r) for r in spark.sql(f"SELECT id, region FROM {ns}.orders").collect())
    assert expected == [(1, "eu"), (4, "us"), (5, "ap")]

    client, remote = catalogs(catalog_server)
    local, served = client.load_table(f"{unique_name}.orders"), remote.load_table(f"{unique_name}.orders")
    tasks = list(served.scan().plan_files())
    assert sum(len(t.delete_files) for t in tasks) >= 2  # the position deletes travel with their data files
    assert rows(served) == rows(local) == expected
    assert rows(served, EqualTo("region", "us")) == [(4, "us")]
    assert (
        rows(served, snapshot_id=before) == rows(local, snapshot_id=before)
        and len(rows(served, snapshot_id=before)) == 5
    )
