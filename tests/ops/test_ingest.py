"""POST /lakeview/v1/sources/{name}/rows against a running stack with a real Spark view:
concurrent clients, retries with the same Idempotency-Key, bad rows, and a server restart."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

from lakeview.cli.generator import make_orders
from lakeview.ivm import oracle
from lakeview.stack.embedded import EmbeddedStack
from tests.conftest import ORDERS_SCHEMA

APPEND_SQL = "SELECT order_id, product_id, quantity, ts FROM orders"
CLIENTS = 4
BATCHES = 3


def batch(client: int, number: int) -> tuple[list[dict], int]:
    """20 good orders (ids unique per client/batch) and, every other batch, 2 bad rows."""
    rows = make_orders(20, seed=client * 100 + number, first_id=client * 10_000 + number * 100)
    bad = 0
    if number % 2 == 0:
        rows.insert(3, {"order_id": 1, "product_id": 1, "quantity": "three"})  # wrong type
        rows.insert(7, {"order_id": 2, "product_id": 1, "quantity": 1, "coupon": "X"})  # not in the schema
        bad = 2
    return rows, bad


def post(base: str, rows: list[dict], key: str | None, ndjson: bool) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    if ndjson:
        body = "\n".join(json.dumps(r) for r in rows)
        headers["Content-Type"] = "application/x-ndjson"
        return httpx.post(f"{base}/lakeview/v1/sources/orders/rows", content=body, headers=headers, timeout=30)
    return httpx.post(f"{base}/lakeview/v1/sources/orders/rows", json=rows, headers=headers, timeout=30)


def view_ids(stack: EmbeddedStack, view: str) -> list[int]:
    table = stack.pipelines[view].writer.table().scan().to_arrow()
    assert table.column("ts").null_count == 0, "timestamps landed in a form Spark parses"
    return table.column("order_id").to_pylist()


def test_concurrent_ingest_is_exactly_once_across_a_restart(spark, make_project, unique_name: str) -> None:
    view = unique_name
    project = make_project(
        views={view: {"sql": APPEND_SQL, "cadence": "1s", "namespace": "ops_tests"}},
        sources={"orders": {"format": "ingest", "path": "landing/orders", "schema": ORDERS_SCHEMA}},
    )
    accepted: dict[str, list[int]] = {}  # idempotency key -> order ids acknowledged
    keys: dict[str, tuple[list[dict], bool]] = {}

    def client(n: int, base: str) -> None:
        for b in range(BATCHES):
            rows, bad = batch(n, b)
            key = str(uuid.uuid4())
            ndjson = (n + b) % 2 == 1
            first = post(base, rows, key, ndjson)
            assert first.status_code == 200, first.text
            result = first.json()
            assert result["accepted"] == 20 and len(result["rejected"]) == bad and not result["replayed"]
            if bad:
                reasons = " ".join(r["reason"] for r in result["rejected"])
                assert "'quantity'" in reasons and "'coupon'" in reasons
                assert [r["index"] for r in result["rejected"]] == [3, 7]
            for _ in range(b % 2 + 1):  # a client that never saw the answer retries
                retry = post(base, rows, key, ndjson)
                assert retry.json() == {**result, "replayed": True}
                assert retry.headers["Idempotency-Replayed"] == "true"
            accepted[key] = [r["order_id"] for i, r in enumerate(rows) if not (bad and i in (3, 7))]
            keys[key] = (rows, ndjson)

    stack = EmbeddedStack(project, port=0).start_catalog()
    try:
        stack.start_views([view], spark=spark)
        base = stack.catalog_uri.removesuffix("/iceberg")
        with ThreadPoolExecutor(CLIENTS) as pool:
            for future in [pool.submit(client, n, base) for n in range(CLIENTS)]:
                future.result()
        # Rows nobody may post: a source that is not `ingest`, a body that is not JSON.
        assert httpx.post(f"{base}/lakeview/v1/sources/nope/rows", json=[{}]).status_code == 404
        assert httpx.post(f"{base}/lakeview/v1/sources/orders/rows", content=b"[{").status_code == 400
    finally:
        stack.stop()  # stops mid-flight: some acknowledged rows are not in the view yet

    # Restart: retries of old keys are no-ops, new rows land, nothing acknowledged is lost.
    stack = EmbeddedStack(project, port=0).start_catalog()
    try:
        base = stack.catalog_uri.removesuffix("/iceberg")
        for key, (rows, ndjson) in list(keys.items())[:3]:
            assert post(base, rows, key, ndjson).json()["replayed"] is True
        extra = make_orders(15, seed=99, first_id=900_000)
        result = post(base, extra, None, ndjson=False).json()
        assert result["accepted"] == 15
        accepted["no-key"] = [r["order_id"] for r in extra]
        stack.start_views([view], spark=spark)
        stack.queries[view].processAllAvailable()
        ids = view_ids(stack, view)
    finally:
        stack.stop()

    expected = sorted(i for batch_ids in accepted.values() for i in batch_ids)
    assert len(expected) == CLIENTS * BATCHES * 20 + 15
    assert sorted(ids) == expected, "every acknowledged row exactly once"
    landed = oracle.landed_files(project.source_path("orders"))
    assert len(landed) == CLIENTS * BATCHES + 1, "one file per first request; retries landed nothing"
    recomputed = oracle.recompute(project, view, landed)
    assert sorted(recomputed.column("order_id").to_pylist()) == expected


def test_ingest_and_status_honour_catalog_auth(
    spark, catalog_server, lake_dir, tmp_path, unique_name: str, monkeypatch
) -> None:
    from catalog_api.auth.authenticator import hash_secret
    from lakeview.project import parse_project

    view = unique_name
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": 0},
        "auth": {
            "mode": "oauth2",
            "clients": {
                "writer": {
                    "secret_hash": hash_secret("w-secret"),
                    "privileges": {"ops_auth": "admin"},
                },  # creates the namespace
                "reader": {"secret_hash": hash_secret("r-secret"), "privileges": {"ops_auth": "read"}},
                "other": {"secret_hash": hash_secret("o-secret"), "privileges": {"elsewhere": "write"}},
            },
        },
        "sources": {"orders": {"format": "ingest", "path": str(tmp_path / "landing"), "schema": ORDERS_SCHEMA}},
        "views": {view: {"sql": APPEND_SQL, "cadence": "1s", "namespace": "ops_auth"}},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    # The view's writer commits through the catalog as client `writer` (what the cluster views job does).
    monkeypatch.setenv("LAKEVIEW_CATALOG_CREDENTIAL", "writer:w-secret")
    stack = EmbeddedStack(project, port=0).start_catalog()
    base = stack.catalog_uri.removesuffix("/iceberg")

    def bearer(client: str, secret: str) -> dict[str, str]:
        token = httpx.post(
            f"{base}/iceberg/v1/oauth/tokens", data={"grant_type": "client_credentials"}, auth=(client, secret)
        )
        return {"Authorization": f"Bearer {token.json()['access_token']}"}

    rows = make_orders(10, seed=5)
    url = f"{base}/lakeview/v1/sources/orders/rows"
    try:
        assert httpx.post(url, json=rows).status_code == 401
        assert httpx.post(url, json=rows, headers=bearer("reader", "r-secret")).status_code == 403
        assert httpx.post(url, json=rows, headers=bearer("other", "o-secret")).status_code == 403
        assert oracle.landed_files(project.source_path("orders")) == [], "refused requests land nothing"
        accepted = httpx.post(url, json=rows, headers=bearer("writer", "w-secret"))
        assert accepted.status_code == 200 and accepted.json()["accepted"] == 10

        stack.start_views([view], spark=spark)
        stack.queries[view].processAllAvailable()
        assert sorted(view_ids(stack, view)) == sorted(r["order_id"] for r in rows)
        assert httpx.get(f"{base}/lakeview/v1/views").status_code == 401
        reader_views = httpx.get(f"{base}/lakeview/v1/views", headers=bearer("reader", "r-secret")).json()["views"]
        assert [v["view"] for v in reader_views] == [view] and reader_views[0]["commits"] == 1
        assert httpx.get(f"{base}/lakeview/v1/views", headers=bearer("other", "o-secret")).json()["views"] == []
        assert httpx.get(f"{base}/lakeview/v1/views/{view}", headers=bearer("other", "o-secret")).status_code == 403
    finally:
        stack.stop()
