"""An Iceberg view's commit while the catalog's PostgreSQL is down: the catalog answers 503, the
writer treats that as transient and retries, and the epoch lands once when the database is back
(before, a 503 escaped as pyiceberg's ServiceUnavailableError, a terminal error that parked the
view FAILED; found by the chaos soak, tests/chaos)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from catalog_api.store.local_postgres import LocalPostgres
from lakeview.ivm.commits import Change, Epoch
from lakeview.ops.retrying import is_transient
from tests.writers.commit_loop import open_writer

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def test_a_commit_during_a_catalog_store_outage_is_retried_and_lands_once(tmp_path: Path) -> None:
    with LocalPostgres() as postgres:
        store = CatalogStore(postgres.url, tmp_path / "warehouse", "lakeview")
        try:
            with CatalogServer(store, host="127.0.0.1", port=0) as server:
                writer = open_writer("iceberg", server.uri, "outage")
                writer.ensure_table(SCHEMA, None, {})
                writer.commit(Epoch("outage", 0, {"n": 0}), Change(pa.table({"k": [0], "total": [0]})))

                postgres.halt()
                with pytest.raises(Exception) as refused:
                    writer.table()
                assert is_transient(refused.value), f"{type(refused.value).__name__}: {refused.value}"
                outcome: dict[str, object] = {}

                def commit() -> None:
                    try:
                        epoch = Epoch("outage", 1, {"n": 1})
                        outcome["record"] = writer.commit(epoch, Change(pa.table({"k": [1], "total": [1]})))
                    except Exception as exc:
                        outcome["error"] = exc

                committer = threading.Thread(target=commit)
                committer.start()
                time.sleep(1.5)
                assert committer.is_alive(), f"the commit gave up instead of retrying: {outcome}"
                postgres.resume()
                committer.join(timeout=60)
                assert "error" not in outcome, outcome.get("error")
                rows = sorted(writer.table().scan().to_arrow().column("k").to_pylist())  # type: ignore[attr-defined]
                assert rows == [0, 1], "epoch 1 applied exactly once"
        finally:
            store.close()
