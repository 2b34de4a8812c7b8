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
