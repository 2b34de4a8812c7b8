"""The catalog on PostgreSQL outlives a restart of its database: the first commits after the
server comes back succeed (kept connections the restart cut are found and replaced before use, see
catalog_api/store/kept_connections.py) instead of answering 503, which a writer would see as the
catalog being down. Found by the chaos soak (tests/chaos)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from catalog_api.store.local_postgres import LocalPostgres
from tests.catalog_api.test_concurrency import SCHEMA_JSON, append_snapshot_body

CLIENTS = 3
WAIT = 300  # seconds: a guard against a hung test, not a measurement


def test_commits_right_after_a_postgresql_restart_succeed(tmp_path: Path) -> None:
    with LocalPostgres() as postgres:
        store = CatalogStore(postgres.url, tmp_path / "warehouse", "lakeview")
        try:
            with CatalogServer(store, host="127.0.0.1", port=0) as server:
                catalog = RestCatalog("restart", uri=server.uri, warehouse="lakeview")
                catalog.create_namespace("restart")
                table = catalog.create_table("restart.t", schema=pa.schema([("id", pa.int64())]))
                for i in range(3):  # every pooled connection in use once
                    table.append(pa.table({"id": [i]}))

                postgres.halt()
                postgres.resume()

                for i in range(3, 6):  # each would meet a connection the restart cut
                    catalog.load_table("restart.t").append(pa.table({"id": [i]}))
                rows = catalog.load_table("restart.t").scan().to_arrow().column("id").to_pylist()
                assert sorted(rows) == list(range(6))
        finally:
            store.close()


def test_stores_opened_per_call_and_dropped_do_not_hold_connections(tmp_path: Path) -> None:
    """open_store per call (status, table reads) on PostgreSQL: a dropped store's heartbeat ends and its
    pooled connections close, so PostgreSQL never runs out of client slots (the chaos soak hit
    "too many clients" after ~25 minutes before this)."""
    import gc

    from sqlalchemy import create_engine, text

    with LocalPostgres() as postgres:
        kept = CatalogStore(postgres.url, tmp_path / "warehouse", "lakeview")
        try:
            for _ in range(40):
                store = CatalogStore(postgres.url, tmp_path / "warehouse", "lakeview")
                store.list_namespaces()
                del store
            gc.collect()
            engine = create_engine(postgres.url)
            with engine.connect() as conn:
                clients = conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                ).scalar_one()
            engine.dispose()
            assert clients < 20, f"{clients} connections held after 40 stores were dropped"
        finally:
            kept.close()


class _Client(threading.Thread):
    """Commits snapshots to its own table (or loads it) over HTTP until stopped, recording every status with
    whether the request started after the database was back."""

    def __init__(self, url: str, commits: bool, back: threading.Event, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.commits, self.back, self.stop = url, commits, back, stop
        self.statuses: list[tuple[bool, int, dict]] = []
        self.acknowledged: list[int] = []
        self.progress = threading.Condition()

    def run(self) -> None:
        with httpx.Client(timeout=60) as http:
            metadata, next_id = None, 1
            while not self.stop.is_set():
                after = self.back.is_set()
                if metadata is None or not self.commits:  # (re)learn the table's state: a 503 leaves it unknown
                    response = http.get(self.url)
                    metadata = response.json()["metadata"] if response.status_code == 200 else None
                else:
                    parent = metadata.get("current-snapshot-id")
                    parent = None if parent in (None, -1) else parent
                    next_id = max([next_id, *(s["snapshot-id"] + 1 for s in metadata["snapshots"])])
                    body = append_snapshot_body(
                        parent, next_id, metadata["location"], metadata["last-sequence-number"] + 1
                    )
                    response = http.post(self.url, json=body)
                    if response.status_code == 200:
                        self.acknowledged.append(next_id)
                        metadata = response.json()["metadata"]
                    else:
                        metadata = None
                    next_id += 1
                with self.progress:
                    self.statuses.append((after, response.status_code, response.json() if response.content else {}))
                    self.progress.notify_all()

    def wait_for(self, done) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: done(self.statuses), timeout=WAIT), self.statuses[-5:]


def test_postgresql_restart_while_clients_commit_and_load(tmp_path: Path) -> None:
    """Clients commit and load while PostgreSQL restarts: while it is down they get 503 in the spec's error
    shape (retryable), never another status; every request sent after it is back succeeds at once; every
    acknowledged commit is in its table."""
    with LocalPostgres() as postgres:
        store = CatalogStore(postgres.url, tmp_path / "warehouse", "lakeview")
        try:
            with CatalogServer(store, host="127.0.0.1", port=0) as server:
                api = f"{server.uri}/v1/lakeview/namespaces"
                assert httpx.post(api, json={"namespace": ["restart"]}).status_code == 200
                urls = []
                for i in range(CLIENTS):
                    created = httpx.post(f"{api}/restart/tables", json={"name": f"t{i}", "schema": SCHEMA_JSON})
                    assert created.status_code == 200, created.text
                    urls.append(f"{api}/restart/tables/t{i}")
                back, stop = threading.Event(), threading.Event()
                clients = [_Client(url, True, back, stop) for url in urls] + [_Client(urls[0], False, back, stop)]
                for client in clients:
                    client.start()
                try:
                    for client in clients:  # everyone is working
                        client.wait_for(lambda statuses: sum(s[1] == 200 for s in statuses) >= 3)
                    postgres.halt()
                    for client in clients:  # everyone met the outage
                        client.wait_for(lambda statuses: any(s[1] == 503 for s in statuses))
                    postgres.resume()
                    back.set()
                    for client in clients:
                        client.wait_for(lambda statuses: sum(s[0] for s in statuses) >= 5)
                finally:
                    stop.set()
                    for client in clients:
                        client.join(timeout=WAIT)

                for client in clients:
                    down = [s for s in client.statuses if s[1] != 200]
                    assert {status for _, status, _ in down} <= {503}, down[:3]
                    for _, _, body in down:
                        assert body["error"]["code"] == 503 and body["error"]["type"] and body["error"]["message"]
                    assert all(status == 200 for after, status, _ in client.statuses if after), client.statuses[-10:]
                for client, url in zip(clients, urls, strict=False):
                    snapshots = [s["snapshot-id"] for s in httpx.get(url).json()["metadata"]["snapshots"]]
                    assert len(snapshots) == len(set(snapshots))
                    assert set(client.acknowledged) <= set(snapshots)
                    assert len(client.acknowledged) >= 8  # commits before the outage and after it
        finally:
            store.close()
