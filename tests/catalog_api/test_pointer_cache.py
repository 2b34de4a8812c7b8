"""loadTable served from each process's pointer cache stays read-your-writes: a client never reads a
metadata location older than one its own commit returned, through another catalog process on the same
host (shared-memory stamps) or on another host sharing the PostgreSQL store (the cache switches off)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from catalog_api.store.local_postgres import LocalPostgres
from catalog_api.store.pointer_cache import STAMPS_DIR_ENV
from tests.catalog_api.test_concurrency import SCHEMA_JSON, append_snapshot_body

ROUNDS = 25


@contextmanager
def two_catalogs(url: str, warehouse: Path, stamp_dirs: tuple[str | None, str | None]) -> Iterator[list[str]]:
    """Two catalog servers (each its own store object, as two worker processes have) on one store; a stamp
    directory of its own makes a server behave as if on another host."""
    with ExitStack() as stack:
        uris = []
        for stamp_dir in stamp_dirs:
            with pytest.MonkeyPatch.context() as env:
                if stamp_dir is not None:
                    env.setenv(STAMPS_DIR_ENV, stamp_dir)
                store = CatalogStore(url, warehouse, "lakeview")
            stack.callback(store.close)
            uris.append(stack.enter_context(CatalogServer(store)).uri + "/v1/lakeview")
        yield uris


def commit_on_one_load_on_the_other(writer: str, reader: str, namespace: str) -> None:
    with httpx.Client(timeout=30) as http:
        rounds(http, writer, reader, namespace)


def rounds(httpx: httpx.Client, writer: str, reader: str, namespace: str) -> None:
    assert httpx.post(f"{writer}/namespaces", json={"namespace": [namespace]}).status_code == 200
    created = httpx.post(f"{writer}/namespaces/{namespace}/tables", json={"name": "t", "schema": SCHEMA_JSON})
    assert created.status_code == 200, created.text
    table, location = f"namespaces/{namespace}/tables/t", created.json()["metadata"]["location"]
    parent = None
    for snapshot_id in range(1, ROUNDS + 1):
        cached = httpx.get(f"{reader}/{table}")  # the reader's cache now holds the current pointer
        assert cached.status_code == 200
        committed = httpx.post(
            f"{writer}/{table}", json=append_snapshot_body(parent, snapshot_id, location, snapshot_id)
        )
        assert committed.status_code == 200, committed.text
        loaded = httpx.get(f"{reader}/{table}").json()
        assert loaded["metadata-location"] == committed.json()["metadata-location"], f"stale after commit {snapshot_id}"
        assert loaded["metadata"]["current-snapshot-id"] == snapshot_id
        parent = snapshot_id
    # a drop through the writer is seen by the reader at once, too
    assert httpx.delete(f"{writer}/{table}").status_code == 204
    assert httpx.get(f"{reader}/{table}").status_code == 404


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_commit_through_one_process_is_loaded_through_another_at_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    if backend == "postgresql":
        url = request.getfixturevalue("postgres").url
    with two_catalogs(url, tmp_path / "warehouse", (None, None)) as (writer, reader):
        commit_on_one_load_on_the_other(writer, reader, f"ryw_{backend}")
        commit_on_one_load_on_the_other(reader, writer, f"ryw_back_{backend}")


def test_a_process_on_another_host_switches_the_cache_off(postgres: LocalPostgres, tmp_path: Path) -> None:
    """Two memory domains on one PostgreSQL store (as two hosts have): neither may serve a cached pointer."""
    other_host = tmp_path / "other-host-shm"
    other_host.mkdir()
    with two_catalogs(postgres.url, tmp_path / "warehouse", (None, str(other_host))) as (here, there):
        commit_on_one_load_on_the_other(here, there, "two_hosts_a")
        commit_on_one_load_on_the_other(there, here, "two_hosts_b")
