"""The catalog on PostgreSQL outlives a restart of its database: the first commits after the
server comes back succeed (pooled connections are pinged and replaced) instead of answering 503,
which a writer would see as the catalog being down. Found by the chaos soak (tests/chaos)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from catalog_api.store.local_postgres import LocalPostgres


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
