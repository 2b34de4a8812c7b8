"""The Iceberg writer against the real catalog: one snapshot per epoch, idempotent epochs,
null-safe keyed upserts, readable (and time-travelable) from other clients."""

from __future__ import annotations

import pyarrow as pa

from catalog_api.server import CatalogServer
from lakeview.duck import connect_catalog
from writers.base import Change, Epoch
from writers.iceberg import IcebergWriter

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_keyed_commits_one_snapshot_per_epoch_and_skip_replays(
    rest_catalog, catalog_server: CatalogServer, unique_name: str
) -> None:
    writer = IcebergWriter(rest_catalog, "writer_tests", unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    assert writer.last_commit() is None

    first = writer.commit(Epoch(unique_name, 0, {"src": 1}, rows_in=3), Change(pa.table({"k": [1, 2, None], "total": [10, 20, 5]}), ("k",)))
    assert first is not None and first.epoch == 0 and first.rows_inserted == 3 and first.rows_deleted == 0

    second = writer.commit(Epoch(unique_name, 1, {"src": 2}), Change(pa.table({"k": [2, None, 3], "total": [25, 6, 30]}), ("k",)))
    assert second is not None and second.rows_deleted == 2

    replay = writer.commit(Epoch(unique_name, 1, {"src": 2}), Change(pa.table({"k": [2], "total": [999]}), ("k",)))
    assert replay is None

    table = writer.table()
    assert rows(table.scan().to_arrow()) == rows(pa.table({"k": [1, 2, 3, None], "total": [10, 25, 30, 6]}))
    assert len(table.snapshots()) == 2, "each epoch is exactly one snapshot"
    last = writer.last_commit()
    assert last is not None and (last.epoch, last.frontier) == (1, {"src": 2})

    # Time travel: the first snapshot still shows epoch 0's state.
    at_first = table.scan(snapshot_id=first.snapshot_id).to_arrow()
    assert rows(at_first) == rows(pa.table({"k": [1, 2, None], "total": [10, 20, 5]}))

    # Another client (DuckDB over REST) reads the same rows and sees Lakeview's summary.
    con = connect_catalog(catalog_server.uri, "lakeview")
    assert sorted(con.sql(f"SELECT k, total FROM lake.writer_tests.{unique_name}").fetchall(), key=repr) == rows(
        table.scan().to_arrow()
    )
    summary = table.current_snapshot().summary.additional_properties
    assert summary["lakeview.epoch"] == "1" and summary["lakeview.view"] == unique_name


def test_lookup_is_null_safe(rest_catalog, unique_name: str) -> None:
    writer = IcebergWriter(rest_catalog, "writer_tests", unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, None, 3], "total": [1, 2, 3]}), ("k",)))
    found = writer.lookup(pa.table({"k": pa.array([None, 3, 7], pa.int64())}))
    assert rows(found) == rows(pa.table({"k": [3, None], "total": [3, 2]}))


def test_append_change_and_empty_change(rest_catalog, unique_name: str) -> None:
    writer = IcebergWriter(rest_catalog, "writer_tests", unique_name)
    writer.ensure_table(SCHEMA, None, {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 1], "total": [1, 1]})))
    writer.commit(Epoch(unique_name, 1, {}), Change(pa.table({"k": [1], "total": [1]})))
    assert writer.commit(Epoch(unique_name, 2, {}), Change(SCHEMA.empty_table())) is None
    assert writer.table().scan().to_arrow().num_rows == 3
    assert len(writer.table().snapshots()) == 2


def test_keyed_deletes_remove_rows_in_the_same_snapshot(rest_catalog, unique_name: str) -> None:
    writer = IcebergWriter(rest_catalog, "writer_tests", unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 2, None], "total": [1, 2, 3]}), ("k",)))
    record = writer.commit(
        Epoch(unique_name, 1, {}),
        Change(pa.table({"k": [1], "total": [10]}), ("k",), deletes=pa.table({"k": pa.array([2, None], pa.int64())})),
    )
    assert record is not None and record.rows_deleted == 3 and record.rows_inserted == 1
    assert rows(writer.table().scan().to_arrow()) == [(1, 10)]
    assert len(writer.table().snapshots()) == 2
