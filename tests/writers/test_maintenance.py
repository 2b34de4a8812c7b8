"""Table health for every writer: after many small commits a maintenance pass expires
snapshots past retention (deleting their files), compacts small files and removes orphans;
the data, the last epoch and exactly-once are unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakeview.ivm.commits import Change, Epoch
from writers.delta.maintenance import maintain_delta
from writers.iceberg.maintenance import maintain_iceberg
from writers.maintenance import MaintenancePolicy

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])
POLICY = MaintenancePolicy(
    keep_snapshots=1, max_age_ms=1, small_file_bytes=1 << 20, compact_min_files=5, orphan_min_age_ms=0
)


def table_dir(lake, writer) -> Path:
    location = writer.table().location() if lake.format == "iceberg" else writer.location
    return Path(location.removeprefix("file://"))


def data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if "_delta_log" not in p.parts]


def maintain(lake, writer, progress=None):
    if lake.format == "iceberg":
        return maintain_iceberg(writer, POLICY, None, progress)
    return maintain_delta(writer, POLICY, progress)


def test_maintenance_expires_compacts_and_removes_orphans_without_changing_data(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, None, {})
    for epoch in range(12):
        writer.commit(
            Epoch(unique_name, epoch, {"src": epoch}), Change(pa.table({"k": [epoch], "total": [epoch * 10]}))
        )
    root = table_dir(lake, writer)
    before_rows = sorted(lake.read(writer).to_pylist(), key=repr)
    before_files = len(data_files(root))
    assert before_files >= 12
    orphan = root / "data" / "left-by-a-crashed-commit.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"not referenced by any snapshot")
    os.utime(orphan, (time.time() - 60, time.time() - 60))

    messages: list[str] = []
    report = maintain(lake, writer, messages.append)

    assert report.snapshots_expired >= 8 and report.files_compacted >= 5 and report.orphans_deleted >= 1, (
        report.describe()
    )
    assert any(m.startswith("compaction:") for m in messages) and any(m.startswith("orphans:") for m in messages)
    assert not orphan.exists()
    assert sorted(lake.read(writer).to_pylist(), key=repr) == before_rows
    assert sorted(lake.read_duckdb(writer)) == sorted((r["k"], r["total"]) for r in before_rows)
    last = writer.last_commit()
    assert last is not None and (last.epoch, last.frontier) == (11, {"src": 11})

    # Still exactly once afterwards: a replay is skipped, the next epoch commits.
    assert writer.commit(Epoch(unique_name, 11, {}), Change(pa.table({"k": [99], "total": [99]}))) is None
    assert writer.commit(Epoch(unique_name, 12, {"src": 12}), Change(pa.table({"k": [12], "total": [120]}))) is not None
    maintain(lake, writer)
    assert lake.read(writer).num_rows == 13
    assert len(data_files(root)) <= 3, "the small files went once the snapshots holding them expired"
    assert writer.last_commit().epoch == 12  # type: ignore[union-attr]
    if lake.format == "iceberg":
        assert len(writer.table().snapshots()) <= 2  # the newest, plus the newest Lakeview commit
    else:
        assert len(writer.table().history()) < 10, "log entries past retention are cleaned up behind a checkpoint"


def test_lakeview_maintain_runs_a_pass_with_progress(make_project, catalog_server, unique_name: str, capsys) -> None:
    from lakeview.cli.main import main
    from writers.registry import make_writer

    view = unique_name
    retention = {"keep_snapshots": 2}
    maintenance = {"compact_min_files": 3, "orphan_min_age": "1h"}
    project = make_project(
        views={view: {"sql": "SELECT order_id, quantity FROM orders", "format": "delta", "namespace": "maint_tests",
                      "retention": retention, "maintenance": maintenance}}
    )  # fmt: skip
    writer = make_writer(project, view, catalog_server.uri)
    writer.ensure_table(pa.schema([("order_id", pa.int64()), ("quantity", pa.int32())]), None, {})
    for epoch in range(5):
        writer.commit(
            Epoch(view, epoch, {}), Change(pa.table({"order_id": [epoch], "quantity": pa.array([1], pa.int32())}))
        )
    file = project.root / "lakeview.toml"
    file.write_text(
        f'[lake]\nwarehouse = "{project.warehouse_uri}"\ncatalog_store = "{project.catalog_store_url}"\n'
        f"[server]\nport = {catalog_server.port}\n"
        f'[sources.orders]\nformat = "json"\npath = "landing"\nschema = "order_id BIGINT, quantity INT"\n'
        f'[views.{view}]\nsql = "SELECT order_id, quantity FROM orders"\nformat = "delta"\nnamespace = "maint_tests"\n'
        f"retention = {{ keep_snapshots = 2 }}\nmaintenance = {{ compact_min_files = 3 }}\n"
    )
    capsys.readouterr()
    main(["maintain", view, "-p", str(file)])
    out = capsys.readouterr().out
    assert f"{view}: compaction: 5 file(s) -> 1" in out and f"{view}: done:" in out
    assert writer.table().to_pyarrow_table().num_rows == 5


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_background_maintenance_runs_while_commits_continue(
    fmt: str, make_project, catalog_server, unique_name: str
) -> None:
    from lakeview.stack.maintenance import MaintenanceThread
    from writers.registry import make_writer

    view = unique_name
    project = make_project(
        views={view: {"sql": "SELECT order_id, quantity FROM orders", "format": fmt, "namespace": "maint_tests",
                      "retention": {"keep_snapshots": 3},
                      "maintenance": {"interval": "200ms", "compact_min_files": 3, "orphan_min_age": "1h"}}}
    )  # fmt: skip
    writer = make_writer(project, view, catalog_server.uri)
    writer.ensure_table(pa.schema([("order_id", pa.int64()), ("quantity", pa.int32())]), None, {})
    background = MaintenanceThread(project, [view], catalog_server.uri, tick_s=0.05).start()
    try:
        epoch = 0
        # Commit until the background pass has compacted at least once (and keep committing meanwhile).
        deadline = time.monotonic() + 60
        compacted = None  # the pass that compacted (a later pass may report nothing left to do)
        while time.monotonic() < deadline and compacted is None:
            record = writer.commit(
                Epoch(view, epoch, {}), Change(pa.table({"order_id": [epoch], "quantity": pa.array([1], pa.int32())}))
            )
            assert record is not None, "every commit lands while maintenance runs"
            epoch += 1
            time.sleep(0.3)  # a cadence, not a tight loop
            report = background.reports.get(view)
            compacted = report if report is not None and report.files_compacted else None
    finally:
        background.stop()
    assert compacted is not None and compacted.files_compacted >= 3, background.reports.get(view)
    rows = writer.table().scan().to_arrow() if fmt == "iceberg" else writer.table().to_pyarrow_table()  # type: ignore[attr-defined]
    assert sorted(rows.column("order_id").to_pylist()) == list(range(epoch))
    assert writer.last_commit().epoch == epoch - 1  # type: ignore[union-attr]


def metadata_footprint(lake, writer) -> dict[str, int]:
    """What grows per commit without retention: Iceberg metadata/ files and the current snapshot's
    manifests; Delta commit files in _delta_log (and its checkpoints)."""
    root = table_dir(lake, writer)
    if lake.format == "iceberg":
        table = writer.table()
        files = [p for p in (root / "metadata").iterdir() if p.is_file()]
        return {
            "metadata_files": len(files),
            "metadata_json": sum(1 for p in files if p.name.endswith(".metadata.json")),
            "manifests": len(table.current_snapshot().manifests(table.io)),
        }
    log = root / "_delta_log"
    return {
        "commit_files": sum(1 for p in log.glob("*.json")),
        "checkpoints": sum(1 for p in log.glob("*.checkpoint*.parquet")),
    }


def test_retention_by_count_bounds_history_and_metadata_and_kept_snapshots_read_right(lake, unique_name: str) -> None:
    keep, per_round, rounds = 5, 8, 6
    # each pass folds the round's position deletes (Iceberg merge-on-read): the footprint is then the same every round
    policy = MaintenancePolicy(
        keep_snapshots=keep,
        max_age_ms=None,
        compact_min_files=1000,
        delete_files_max=per_round,
        orphan_min_age_ms=3_600_000,
    )
    writer = lake.writer(unique_name)
    writer.ensure_table(
        SCHEMA, ("k",), {"write.metadata.previous-versions-max": "5"} if lake.format == "iceberg" else {}
    )
    state: dict[int, int] = {}
    expected: dict[int, list[tuple[int, int]]] = {}  # snapshot id / version -> the view's rows then
    footprints = []
    for round_ in range(rounds):
        for epoch in range(round_ * per_round, (round_ + 1) * per_round):
            state[epoch % 4] = epoch  # an upsert of one of 4 keys: Iceberg position deletes / a Delta MERGE
            record = writer.commit(
                Epoch(unique_name, epoch, {"src": epoch}),
                Change(pa.table({"k": [epoch % 4], "total": [epoch]}), ("k",)),
            )
            assert record is not None
            expected[record.snapshot_id] = sorted(state.items())
        if lake.format == "iceberg":  # metadata files superseded this round are old enough to go
            maintain_iceberg(writer, policy)
        else:
            maintain_delta(writer, policy)
        footprints.append(metadata_footprint(lake, writer))

    # Bounded: after the first rounds nothing grows with the number of commits (48 here).
    assert footprints[-1] == footprints[2] or all(footprints[-1][k] <= footprints[2][k] + 2 for k in footprints[2]), (
        footprints
    )
    if lake.format == "iceberg":
        assert len(writer.table().snapshots()) == keep
        live_files = len(list(writer.table().scan().plan_files()))
        # no manifest without a live file is carried; the metadata log's 5 files plus the current one
        assert footprints[-1]["manifests"] <= live_files + 1 and footprints[-1]["metadata_json"] <= 5 + 1, footprints
    else:
        # the kept versions, the commits since the checkpoint they start from, the vacuums' own
        # versions; not the 48+ versions committed
        assert footprints[-1]["commit_files"] <= keep + per_round + 8 and footprints[-1]["checkpoints"] >= 1, footprints
        assert not (table_dir(lake, writer) / "_delta_log" / f"{0:020}.json").exists()

    # The kept snapshots still read right, natively and from DuckDB (time travel).
    kept = list(expected)[-keep:]  # in commit order
    if lake.format == "iceberg":  # the last pass's fold is one of the kept snapshots
        kept = [s for s in kept if writer.table().snapshot_by_id(s) is not None]
        assert len(kept) == keep - 1, kept
    for snapshot_id in kept:
        assert sorted((r["k"], r["total"]) for r in lake.read(writer, snapshot_id).to_pylist()) == expected[snapshot_id]
        assert sorted(lake.read_duckdb(writer, snapshot_id)) == expected[snapshot_id]
    assert sorted(lake.read_duckdb(writer)) == sorted(state.items())
    last = writer.last_commit()
    assert last is not None and (last.epoch, last.frontier) == (rounds * per_round - 1, {"src": rounds * per_round - 1})
    # and exactly once still holds: a replayed epoch is skipped
    assert writer.commit(Epoch(unique_name, 3, {}), Change(pa.table({"k": [0], "total": [-1]}), ("k",))) is None


def test_delta_log_retention_on_s3_deletes_old_log_entries_and_keeps_kept_versions(
    s3_server, tmp_path: Path, unique_name: str, monkeypatch
) -> None:
    from catalog_api.server import CatalogServer
    from catalog_api.store.catalog import open_store
    from tests.s3_server import ACCESS_KEY, SECRET_KEY
    from tests.writers.test_object_storage import BUCKET, s3_project
    from writers.registry import make_writer

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    project = s3_project(s3_server, tmp_path, unique_name, "delta")
    policy = MaintenancePolicy(keep_snapshots=3, max_age_ms=None, compact_min_files=1000, orphan_min_age_ms=3_600_000)
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        writer = make_writer(project, unique_name, server.uri)
        writer.ensure_table(
            pa.schema([("product_id", pa.int64()), ("total_sold", pa.int64()), ("orders", pa.int64())]),
            ("product_id",),
            {},
        )
        versions = {}
        for epoch in range(15):
            record = writer.commit(
                Epoch(unique_name, epoch, {}),
                Change(pa.table({"product_id": [1], "total_sold": [epoch], "orders": [1]}), ("product_id",)),
            )
            versions[record.snapshot_id] = epoch  # type: ignore[union-attr]
            if epoch % 5 == 4:
                maintain_delta(writer, policy)  # type: ignore[arg-type]
    # This table's log only: the S3 server (and its bucket) is shared by the session's tests.
    log_keys = [k for k in s3_server.keys(BUCKET, "wh/") if f"/{unique_name}/_delta_log/" in k and k.endswith(".json")]
    assert log_keys and not any(k.endswith(f"{0:020}.json") for k in log_keys), log_keys
    assert len(log_keys) < 15
    for version in list(versions)[-3:]:
        assert writer.table(version).to_pyarrow_table().column("total_sold").to_pylist() == [versions[version]]  # type: ignore[attr-defined]
