"""Issue #16 finding 6: a request whose catalog process was killed mid-request leaves its
Idempotency-Key pending; a retry with the same key (on a new catalog process sharing the store)
takes the key over and runs, instead of hanging until the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from catalog_api.server import free_port
from catalog_api.store.catalog import CatalogStore

SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def start_catalog(tmp_path: Path, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "LAKEVIEW_CATALOG_STORE": f"sqlite:///{tmp_path / 'c.db'}",
        "LAKEVIEW_WAREHOUSE": str(tmp_path / "wh"),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "catalog_api.asgi:create_app",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, env=env)
    for _ in range(1200):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            assert process.poll() is None, "the catalog exited"
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the catalog did not start")


def test_retry_after_the_server_was_killed_mid_request_runs(tmp_path: Path) -> None:
    port = free_port()
    first = start_catalog(tmp_path, port)
    base = f"http://127.0.0.1:{port}/iceberg/v1/lakeview"
    try:
        assert httpx.post(f"{base}/namespaces", json={"namespace": ["ns"]}).status_code == 200
        made = httpx.post(f"{base}/namespaces/ns/tables", json={"name": "src", "schema": SCHEMA_JSON}).json()
        # A metadata "file" that is a FIFO: reading it blocks, so the register request hangs mid-request.
        target = tmp_path / "wh" / "ns.db" / "reg" / "metadata" / "00000-x.metadata.json"
        target.parent.mkdir(parents=True)
        os.mkfifo(target)
        key = str(uuid.uuid4())
        body = {"name": "reg", "metadata-location": str(target)}
        hung = threading.Thread(
            target=lambda: _quietly(
                lambda: httpx.post(
                    f"{base}/namespaces/ns/register", json=body, headers={"Idempotency-Key": key}, timeout=600
                )
            )
        )
        hung.start()
        store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh", "lakeview")
        from sqlalchemy import select

        from catalog_api.idempotency import PENDING, idempotency_keys

        for _ in range(1200):  # wait until the server holds the key pending
            with store.engine.connect() as conn:
                row = conn.execute(
                    select(idempotency_keys.c.status).where(idempotency_keys.c.idempotency_key == key)
                ).first()
            if row is not None and row[0] == PENDING:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the request never claimed its key")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    hung.join(timeout=60)
    target.unlink()
    target.write_text(json.dumps(made["metadata"]))  # the file is real now
    second = start_catalog(tmp_path, free_port())
    try:
        base = f"http://127.0.0.1:{second.args[second.args.index('--port') + 1]}/iceberg/v1/lakeview"
        retry = httpx.post(f"{base}/namespaces/ns/register", json=body, headers={"Idempotency-Key": key}, timeout=120)
        assert retry.status_code == 200, retry.text
        assert retry.json()["metadata-location"] == str(target)
        replay = httpx.post(f"{base}/namespaces/ns/register", json=body, headers={"Idempotency-Key": key}, timeout=120)
        assert replay.status_code == 200 and replay.headers.get("idempotent-replay") == "true"
        assert httpx.get(f"{base}/namespaces/ns/tables/reg").status_code == 200
    finally:
        second.terminate()
        second.wait(timeout=30)
        store.close()


def _quietly(call) -> None:
    try:
        call()
    except httpx.HTTPError:
        pass  # the server was killed under this request


def test_a_pending_key_whose_lease_ran_out_on_another_host_is_taken_over(catalog_server, unique_name: str) -> None:
    """Another host's process (its pid cannot be checked from here) stopped renewing: the lease decides."""
    from sqlalchemy import insert

    from catalog_api.idempotency import PENDING, idempotency_keys

    key, now = str(uuid.uuid4()), int(time.time())
    path = "/iceberg/v1/lakeview/namespaces"
    with catalog_server.store.engine.begin() as conn:
        conn.execute(
            insert(idempotency_keys).values(
                idempotency_key=key, request=f"- POST {path}", status=PENDING, created_at=now - 60,
                owner="a-host-that-died:4242", lease_until=now - 1,
            )
        )  # fmt: skip
    url = f"http://127.0.0.1:{catalog_server.port}{path}"
    response = httpx.post(url, json={"namespace": [unique_name]}, headers={"Idempotency-Key": key}, timeout=60)
    assert response.status_code == 200, response.text
    assert httpx.get(f"{url}/{unique_name}").status_code == 200
