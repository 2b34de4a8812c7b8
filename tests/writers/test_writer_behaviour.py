"""Every writer (Iceberg through the real catalog, Delta with delta-rs), one suite: one commit
per epoch, idempotent epochs, null-safe keyed upserts and deletes, time travel, and the result
readable from other clients (DuckDB, pyiceberg / deltalake)."""

from __future__ import annotations

import pyarrow as pa

from lakeview.ivm.commits import Change, Epoch

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def rows(table: pa.Table | list[tuple]) -> list[tuple]:
    if isinstance(table, pa.Table):
        table = [tuple(r.values()) for r in table.select(["k", "total"]).to_pylist()]
    return sorted(table, key=repr)


def test_keyed_commits_one_snapshot_per_epoch_and_skip_replays(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, ("k",), {"lakeview.sql": "SELECT 1"})
    writer.ensure_table(SCHEMA, ("k",), {})  # idempotent
    assert writer.last_commit() is None

    first = writer.commit(
        Epoch(unique_name, 0, {"src": 1}, rows_in=3),
        Change(pa.table({"k": [1, 2, None], "total": [10, 20, 5]}), ("k",)),
    )
    assert first is not None and first.epoch == 0 and first.rows_inserted == 3 and first.rows_deleted == 0

    second = writer.commit(
        Epoch(unique_name, 1, {"src": 2}, newest_input_ms=0),
        Change(pa.table({"k": [2, None, 3], "total": [25, 6, 30]}), ("k",)),
    )
    assert second is not None and second.rows_deleted == 2 and second.lag_ms is not None

    replay = writer.commit(Epoch(unique_name, 1, {"src": 2}), Change(pa.table({"k": [2], "total": [999]}), ("k",)))
    assert replay is None
    older = writer.commit(Epoch(unique_name, 0, {"src": 1}), Change(pa.table({"k": [7], "total": [7]}), ("k",)))
    assert older is None

    expected = [(1, 10), (2, 25), (3, 30), (None, 6)]
    assert rows(lake.read(writer)) == rows(expected)
    assert lake.commits(writer) == 2, "each epoch is exactly one snapshot"
    last = writer.last_commit()
    assert last is not None and (last.view, last.epoch, last.frontier, last.rows_deleted) == (
        unique_name,
        1,
        {"src": 2},
        2,
    )
    assert last.snapshot_id == second.snapshot_id

    # Time travel, natively and from DuckDB: the first snapshot still shows epoch 0's state.
    assert rows(lake.read(writer, first.snapshot_id)) == rows([(1, 10), (2, 20), (None, 5)])
    assert rows(lake.read_duckdb(writer, first.snapshot_id)) == rows([(1, 10), (2, 20), (None, 5)])
    assert rows(lake.read_duckdb(writer)) == rows(expected)


def test_lookup_is_null_safe(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, None, 3], "total": [1, 2, 3]}), ("k",)))
    found = writer.lookup(pa.table({"k": pa.array([None, 3, 7], pa.int64())}))
    assert rows(found) == rows([(3, 3), (None, 2)])


def test_append_change_and_empty_change(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, None, {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 1], "total": [1, 1]})))
    writer.commit(Epoch(unique_name, 1, {}), Change(pa.table({"k": [1], "total": [1]})))
    assert writer.commit(Epoch(unique_name, 1, {}), Change(pa.table({"k": [1], "total": [1]}))) is None
    # Nothing changed: no snapshot at all.
    assert writer.commit(Epoch(unique_name, 2, {}), Change(SCHEMA.empty_table())) is None
    assert lake.read(writer).num_rows == 3
    assert len(lake.read_duckdb(writer)) == 3
    assert lake.commits(writer) == 2


def test_keyed_deletes_remove_rows_in_the_same_snapshot(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    writer.ensure_table(SCHEMA, ("k",), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 2, None], "total": [1, 2, 3]}), ("k",)))
    record = writer.commit(
        Epoch(unique_name, 1, {}),
        Change(
            pa.table({"k": [1], "total": [10]}), ("k",), deletes=pa.table({"k": pa.array([2, None, 1], pa.int64())})
        ),
    )
    assert record is not None and record.rows_deleted == 3 and record.rows_inserted == 1
    assert rows(lake.read(writer)) == [(1, 10)]
    assert lake.commits(writer) == 2


def test_empty_key_replaces_the_one_row_and_stamps_read_back(lake, unique_name: str) -> None:
    """A global aggregate's view has the empty key: each commit's row replaces the table's row."""
    schema = pa.schema([("n", pa.int64()), ("total", pa.int64())])
    writer = lake.writer(unique_name)
    writer.ensure_table(schema, (), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"n": [2], "total": [30]}), ()))
    assert writer.lookup(pa.table({"n": [0]}).select([])).to_pylist() == [{"n": 2, "total": 30}]
    record = writer.commit(
        Epoch(unique_name, 1, {}, stamps={"lakeview.watermark-us": "5"}),
        Change(pa.table({"n": [0], "total": pa.array([None], pa.int64())}), ()),
    )
    assert record is not None and record.rows_deleted == 1
    assert lake.read(writer).to_pylist() == [{"n": 0, "total": None}]
    assert lake.read_duckdb(writer) == [(0, None)]
    assert writer.last_commit().extra == {"lakeview.watermark-us": "5"}
    assert lake.commits(writer) == 2


def test_empty_key_change_with_rows_and_deletes_replaces_the_row(lake, unique_name: str) -> None:
    """An empty-key change that both deletes the table's row and writes a new one leaves only the new row
    (pyarrow concatenates zero-column tables to 0 rows, so the touched keys were empty and the old row stayed)."""
    schema = pa.schema([("n", pa.int64())])
    writer = lake.writer(unique_name)
    writer.ensure_table(schema, (), {})
    writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"n": [1]}), ()))
    writer.commit(Epoch(unique_name, 1, {}), Change(pa.table({"n": [2]}), (), deletes=pa.table({"n": [1]}).select([])))
    assert lake.read(writer).to_pylist() == [{"n": 2}]
    assert lake.read_duckdb(writer) == [(2,)]


def test_keys_of_two_columns_upsert_and_delete(lake, unique_name: str) -> None:
    """A key of two columns (a multi-column GROUP BY, or a value multiset keyed by (group, value)
    as MIN/MAX/COUNT DISTINCT keep it): upserts and deletes match on both, null-safe."""
    schema = pa.schema([("g", pa.int64()), ("v", pa.float64()), ("n", pa.int64())])
    writer = lake.writer(unique_name)
    writer.ensure_table(schema, ("g", "v"), {})
    writer.commit(
        Epoch(unique_name, 0, {}),
        Change(pa.table({"g": [1, 1, 2, None], "v": [1.0, 2.0, 1.0, 1.0], "n": [1, 1, 1, 1]}), ("g", "v")),
    )
    writer.commit(
        Epoch(unique_name, 1, {}),
        Change(
            pa.table({"g": [1, None], "v": [1.0, 1.0], "n": [5, 7]}),
            ("g", "v"),
            deletes=pa.table({"g": [2], "v": [1.0]}),
        ),
    )
    stored = sorted(((r["g"], r["v"], r["n"]) for r in lake.read(writer).to_pylist()), key=repr)
    assert stored == sorted([(1, 1.0, 5), (1, 2.0, 1), (None, 1.0, 7)], key=repr)
