"""Injected faults: S3 going away mid-commit (the commit is retried and lands once), and a
committer killed with SIGKILL mid-commit (restart: no duplicate, no gap; orphans cleaned)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.ivm.commits import Change, Epoch
from tests.s3_server import ACCESS_KEY, SECRET_KEY
from tests.writers.commit_loop import open_writer
from tests.writers.test_object_storage import s3_project
from writers.delta.maintenance import maintain_delta
from writers.iceberg.maintenance import maintain_iceberg, reachable_files
from writers.maintenance import MaintenancePolicy
from writers.registry import make_writer

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_s3_outage_mid_commit_is_retried_and_lands_once(
    fmt: str, s3_server, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    view = unique_name
    project = s3_project(s3_server, tmp_path, view, fmt)
    schema = pa.schema([("product_id", pa.int64()), ("total_sold", pa.int64()), ("orders", pa.int64())])
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        writer = make_writer(project, view, server.uri)
        writer.ensure_table(schema, ("product_id",), {})
        writer.commit(
            Epoch(view, 0, {"n": 0}),
            Change(pa.table({"product_id": [1], "total_sold": [1], "orders": [1]}), ("product_id",)),
        )

        s3_server.stop()  # storage goes away; the next commit fails against it and retries
        outcome: dict[str, object] = {}

        def commit() -> None:
            try:
                outcome["record"] = writer.commit(
                    Epoch(view, 1, {"n": 1}),
                    Change(pa.table({"product_id": [1, 2], "total_sold": [3, 2], "orders": [2, 1]}), ("product_id",)),
                )
            except Exception as exc:
                outcome["error"] = exc

        committer = threading.Thread(target=commit)
        committer.start()
        time.sleep(1.0)
        assert committer.is_alive(), f"the commit gave up instead of retrying: {outcome}"
        s3_server.start()
        committer.join(timeout=90)
        assert "error" not in outcome, outcome.get("error")
        record = outcome.get("record")
        assert record is not None and record.epoch == 1  # type: ignore[union-attr]
        assert [c.epoch for c in tables.commit_history(project, view)] == [1, 0], "exactly one commit per epoch"
        rows = sorted(
            tuple(r.values())
            for r in tables.read_rows(project, view).select(["product_id", "total_sold", "orders"]).to_pylist()
        )
        assert rows == [(1, 3, 2), (2, 2, 1)]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_committer_killed_mid_commit_restarts_without_duplicate_or_gap(
    fmt: str, catalog_server: CatalogServer, rest_catalog, lake_dir: Path, unique_name: str
) -> None:
    where = catalog_server.uri if fmt == "iceberg" else str(lake_dir / "fault_tests" / unique_name)
    writer = open_writer(fmt, where, unique_name)
    writer.ensure_table(SCHEMA, None, {})
    child = subprocess.Popen([sys.executable, "-m", "tests.writers.commit_loop", fmt, where, unique_name], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            last = writer.last_commit()
            if last is not None and last.epoch >= 4:
                break
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)  # wherever it is: writing files, committing, or between
    finally:
        child.wait(timeout=30)
    last = writer.last_commit()
    assert last is not None

    # Restart: replay from before the last commit, as Spark would after a crash; then go on.
    for epoch in range(max(0, last.epoch - 1), last.epoch + 3):
        writer.commit(Epoch(unique_name, epoch, {"n": epoch}), Change(pa.table({"k": [epoch], "total": [epoch]})))
    if fmt == "iceberg":
        ks = sorted(writer.table().scan().to_arrow().column("k").to_pylist())  # type: ignore[attr-defined]
    else:
        ks = sorted(writer.table().to_pyarrow_table().column("k").to_pylist())  # type: ignore[attr-defined]
    assert ks == list(range(last.epoch + 3)), "every epoch exactly once: no duplicate, no gap"

    # Whatever the killed commit left behind unreferenced is removed by maintenance.
    policy = MaintenancePolicy(keep_snapshots=None, compact_min_files=1000, orphan_min_age_ms=0)
    if fmt == "iceberg":
        maintain_iceberg(writer, policy)  # type: ignore[arg-type]
        table = writer.table()  # type: ignore[attr-defined]
        root = Path(table.location().removeprefix("file://"))
        live = {p.removeprefix("file://") for p in reachable_files(table, table.snapshots())}
        on_disk = {str(p) for p in root.rglob("*") if p.is_file() and "metadata" not in p.parts}
        assert on_disk <= live
    else:
        maintain_delta(writer, policy)  # type: ignore[arg-type]
        leftover = writer.table().vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)  # type: ignore[attr-defined]
        assert leftover == []
