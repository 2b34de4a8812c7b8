"""Concurrent committers: exactly one wins each round, the rest get 409, no update is lost and
no loser leaves its metadata file behind — with threads over HTTP (both stores), with processes on
PostgreSQL, and with two catalog server processes sharing one PostgreSQL store."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from catalog_api.server import CatalogServer, free_port
from catalog_api.store.local_postgres import LocalPostgres

SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def append_snapshot_body(parent: int | None, snapshot_id: int, location: str, sequence: int = 1) -> dict:
    """A commit adding one snapshot on top of ``parent`` (the catalog never reads the manifest list)."""
    return {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}],
        "updates": [
            {
                "action": "add-snapshot",
                "snapshot": {
                    "snapshot-id": snapshot_id,
                    **({"parent-snapshot-id": parent} if parent else {}),
                    "sequence-number": sequence,
                    "timestamp-ms": int(time.time() * 1000),
                    "manifest-list": f"{location}/metadata/snap-{snapshot_id}.avro",
                    "summary": {"operation": "append"},
                    "schema-id": 0,
                },
            },
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
    }


def main_chain(metadata: dict) -> list[int]:
    """Snapshot ids from main's head back to the root."""
    by_id = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    current = metadata.get("refs", {}).get("main", {}).get("snapshot-id")
    chain = []
    while current is not None:
        chain.append(current)
        current = by_id[current].get("parent-snapshot-id")
    return chain


def create(base: str, namespace: str) -> dict:
    httpx.post(f"{base}/namespaces", json={"namespace": [namespace]})
    response = httpx.post(f"{base}/namespaces/{namespace}/tables", json={"name": "t", "schema": SCHEMA_JSON})
    assert response.status_code == 200, response.text
    return response.json()


def test_threads_race_one_winner_per_round(any_catalog: CatalogServer, unique_name: str) -> None:
    base = f"{any_catalog.uri}/v1/lakeview"
    location = create(base, unique_name)["metadata"]["location"]
    loaded = race_commits(f"{base}/namespaces/{unique_name}/tables/t", location, threads=6, rounds=4)
    # the losers' metadata files (written before their pointer swap failed) are gone again
    assert metadata_files(location) == referenced_files(loaded)


def race_commits(url: str, location: str, threads: int, rounds: int) -> dict:
    """``rounds`` of ``threads`` commits racing from one parent: asserts one winner per round, 409 for the others,
    and main's chain made of the winners. Returns the table's loadTable answer after the last round."""
    winners: list[int] = []
    with httpx.Client(timeout=60) as client:
        for round_ in range(rounds):
            metadata = client.get(url).json()["metadata"]
            parent = (main_chain(metadata) or [None])[0]
            sequence = metadata["last-sequence-number"] + 1
            barrier = threading.Barrier(threads)
            statuses: dict[int, int] = {}

            def commit(
                i: int, round_=round_, barrier=barrier, statuses=statuses, parent=parent, sequence=sequence
            ) -> None:
                snapshot_id = 1000 * (round_ + 1) + i
                barrier.wait()
                statuses[snapshot_id] = client.post(
                    url, json=append_snapshot_body(parent, snapshot_id, location, sequence)
                ).status_code

            workers = [threading.Thread(target=commit, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            assert sorted(statuses.values()) == [200] + [409] * (threads - 1), statuses
            winners += [sid for sid, status in statuses.items() if status == 200]
        loaded = client.get(url).json()
    assert main_chain(loaded["metadata"]) == winners[::-1]
    return loaded


def test_creates_race_one_winner_no_stray_file(any_catalog: CatalogServer, unique_name: str) -> None:
    base = f"{any_catalog.uri}/v1/lakeview"
    assert httpx.post(f"{base}/namespaces", json={"namespace": [unique_name]}).status_code == 200
    threads, barrier, statuses = 6, threading.Barrier(6), []

    def create_t() -> None:
        barrier.wait()
        body = {"name": "t", "schema": SCHEMA_JSON}
        statuses.append(httpx.post(f"{base}/namespaces/{unique_name}/tables", json=body, timeout=60).status_code)

    workers = [threading.Thread(target=create_t) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(statuses) == [200] + [409] * (threads - 1)
    loaded = httpx.get(f"{base}/namespaces/{unique_name}/tables/t").json()
    assert metadata_files(loaded["metadata"]["location"]) == referenced_files(loaded) == {loaded["metadata-location"]}


def metadata_files(table_location: str) -> set[str]:
    """The metadata JSON files in a (local) table's metadata directory."""
    return {str(p) for p in Path(table_location.removeprefix("file://"), "metadata").glob("*.metadata.json")}


def referenced_files(loaded: dict) -> set[str]:
    """The metadata files a loadTable answer references: the current one and its metadata log."""
    log = {entry["metadata-file"] for entry in loaded["metadata"].get("metadata-log", [])}
    return {path.removeprefix("file://") for path in {loaded["metadata-location"], *log}}


def _append_with_retries(url: str, warehouse: str, namespace: str, worker: int, count: int, queue) -> None:
    """A separate process: ``count`` appends to one table, reloading and retrying on conflict."""
    from pyiceberg.table import CommitTableRequest

    from catalog_api.store.catalog import CatalogStore, TableChange
    from lakeview import errors

    store = CatalogStore(url, warehouse, "lakeview")
    conflicts = 0
    for n in range(count):
        while True:
            _, metadata = store.load_metadata((namespace, "t"))
            raw = append_snapshot_body(
                metadata.current_snapshot_id,
                (worker + 1) * 100000 + n,
                metadata.location,
                metadata.last_sequence_number + 1,
            )
            request = CommitTableRequest.model_validate({"identifier": {"namespace": [namespace], "name": "t"}, **raw})
            try:
                store.commit_transaction([TableChange((namespace, "t"), request.requirements, request.updates)])
                break
            except errors.CommitConflictError:
                conflicts += 1
    queue.put(conflicts)


def test_processes_on_postgres_lose_no_update(
    postgres: LocalPostgres, pg_catalog_server: CatalogServer, pg_warehouse: Path, unique_name: str
) -> None:
    base = f"{pg_catalog_server.uri}/v1/lakeview"
    create(base, unique_name)
    processes, per_process = 3, 8
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(
            target=_append_with_retries, args=(postgres.url, str(pg_warehouse), unique_name, i, per_process, queue)
        )
        for i in range(processes)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * processes
    conflicts = sum(queue.get(timeout=5) for _ in workers)
    chain = main_chain(httpx.get(f"{base}/namespaces/{unique_name}/tables/t").json()["metadata"])
    assert len(chain) == processes * per_process  # every append landed exactly once
    assert len(set(chain)) == len(chain)
    print(f"{conflicts} conflicts retried")


SERVE = """
import sys, time
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
server = CatalogServer(CatalogStore(sys.argv[1], sys.argv[2], "lakeview"), host="127.0.0.1", port=int(sys.argv[3])).start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


def test_two_server_processes_on_one_postgres_are_one_catalog(
    postgres: LocalPostgres, pg_warehouse: Path, unique_name: str
) -> None:
    ports = [free_port("127.0.0.1"), free_port("127.0.0.1")]
    servers = [
        subprocess.Popen(
            [sys.executable, "-c", SERVE, postgres.url, str(pg_warehouse), str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for port in ports
    ]
    try:
        for server in servers:
            assert server.stdout.readline().strip() == "ready"
        a, b = (f"http://127.0.0.1:{port}/iceberg/v1/lakeview" for port in ports)
        location = create(a, unique_name)["metadata"]["location"]
        assert httpx.head(f"{b}/namespaces/{unique_name}/tables/t").status_code == 204
        # Both servers race from the same base: one commit wins, the other gets 409.
        results = [
            httpx.post(
                f"{url}/namespaces/{unique_name}/tables/t", json=append_snapshot_body(None, 7 + i, location), timeout=30
            ).status_code
            for i, url in enumerate([a, b])
        ]
        assert sorted(results) == [200, 409]
        seen_a = httpx.get(f"{a}/namespaces/{unique_name}/tables/t").json()["metadata"]
        seen_b = httpx.get(f"{b}/namespaces/{unique_name}/tables/t").json()["metadata"]
        assert main_chain(seen_a) == main_chain(seen_b) and len(main_chain(seen_a)) == 1
        # A rename on one is seen by the other.
        rename = {
            "source": {"namespace": [unique_name], "name": "t"},
            "destination": {"namespace": [unique_name], "name": "u"},
        }
        assert httpx.post(f"{b}/tables/rename", json=rename).status_code == 204
        assert httpx.head(f"{a}/namespaces/{unique_name}/tables/u").status_code == 204
    finally:
        for server in servers:
            server.communicate("", timeout=30)


def test_view_commits_race_no_stray_file(any_catalog: CatalogServer, unique_name: str) -> None:
    base = f"{any_catalog.uri}/v1/lakeview/namespaces/{unique_name}/views"
    assert httpx.post(f"{any_catalog.uri}/v1/lakeview/namespaces", json={"namespace": [unique_name]}).is_success
    version = {"version-id": 1, "schema-id": 0, "timestamp-ms": 1700000000000, "summary": {"engine-name": "lakeview"},
               "representations": [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}],
               "default-namespace": [unique_name]}  # fmt: skip
    created = httpx.post(base, json={"name": "v", "schema": SCHEMA_JSON, "view-version": version}).json()["metadata"]
    requirement = [{"type": "assert-view-uuid", "uuid": created["view-uuid"]}]
    # rounds of 6 racing commits until one loses (a 409; on a loaded machine the server may take a round's
    # requests one after another, and all of them win): at least 3 rounds, at most 15
    threads, statuses = 6, []
    for round_ in range(15):
        if round_ >= 3 and 409 in statuses:
            break
        barrier = threading.Barrier(threads)

        def commit(i: int, round_=round_, barrier=barrier) -> None:
            body = {
                "requirements": requirement,
                "updates": [{"action": "set-properties", "updates": {"k": f"{round_}.{i}"}}],
            }
            barrier.wait()
            statuses.append(httpx.post(f"{base}/v", json=body, timeout=60).status_code)

        workers = [threading.Thread(target=commit, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert set(statuses) <= {200, 409} and 409 in statuses, statuses
    # one file per winning commit and the create's; the losers' are gone again
    assert len(metadata_files(created["location"])) == 1 + statuses.count(200)
