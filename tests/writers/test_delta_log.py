"""A Delta view's commit history names each epoch at the version that holds its rows, whenever the
reader's table object was loaded and whatever maintenance committed since (the chaos soak saw a
whole page of epochs at two versions, and a frontier beside the previous version's rows, from
delta-rs's ``history()`` numbering the newest commits from an older loaded version)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from lakeview.ivm.commits import Change, Epoch
from writers.delta.maintenance import maintain_delta
from writers.delta.writer import DeltaWriter, history_of, last_commit_of
from writers.maintenance import MaintenancePolicy


def commit(writer: DeltaWriter, epoch: int):
    return writer.commit(Epoch("v", epoch, {"n": epoch}), Change(pa.table({"id": [epoch]})))


def ids_at(writer: DeltaWriter, version: int) -> list[int]:
    return sorted(writer.table(version).to_pyarrow_table().column("id").to_pylist())


def test_a_table_loaded_before_newer_commits_names_each_epoch_at_its_own_version(tmp_path: Path) -> None:
    writer = DeltaWriter(str(tmp_path / "v"), "v")
    writer.ensure_table(pa.schema([("id", pa.int64())]), None, {})
    for epoch in (1, 2, 3):
        commit(writer, epoch)
    loaded = DeltaTable(writer.location)  # a reader's table object (status, verify, a checker) ...
    commit(writer, 4)  # ... and a commit landing before it reads the history
    commit(writer, 5)

    records = history_of(loaded)
    assert [r.epoch for r in records] == [3, 2, 1]
    for record in records:
        assert ids_at(writer, record.snapshot_id) == list(range(1, record.epoch + 1)), record
    last = last_commit_of(loaded)
    assert (last.epoch, last.frontier) == (3, {"n": 3})
    assert ids_at(writer, last.snapshot_id) == [1, 2, 3], "the frontier and the rows are of one version"
    newest = last_commit_of(DeltaTable(writer.location))
    assert newest.epoch == 5 and ids_at(writer, newest.snapshot_id) == [1, 2, 3, 4, 5]


def test_maintenance_commits_are_not_epochs_and_each_epoch_is_in_the_history_once(tmp_path: Path) -> None:
    writer = DeltaWriter(str(tmp_path / "v"), "v")
    writer.ensure_table(pa.schema([("id", pa.int64())]), None, {})
    made = [commit(writer, epoch) for epoch in range(1, 7)]
    maintain_delta(writer, MaintenancePolicy(compact_min_files=2))  # compaction, vacuum: commits of their own
    assert writer.table().version() > made[-1].snapshot_id, "maintenance committed"
    commit(writer, 7)

    records = history_of(DeltaTable(writer.location))
    assert [r.epoch for r in records] == [7, 6, 5, 4, 3, 2, 1]
    assert [r.snapshot_id for r in records[1:]] == [m.snapshot_id for m in reversed(made)]
    for record in records:
        assert ids_at(writer, record.snapshot_id) == list(range(1, record.epoch + 1)), record


def test_a_keyed_epoch_that_changes_no_row_commits_nothing_and_the_next_epoch_commits(tmp_path: Path) -> None:
    """Deleting a key the table does not hold: delta-rs's MERGE changes no row and writes no commit, so
    the epoch has no version of its own (it failed 8 times as 'committed but not found in the log')."""
    writer = DeltaWriter(str(tmp_path / "v"), "v")
    writer.ensure_table(pa.schema([("id", pa.int64()), ("n", pa.int64())]), ("id",), {})
    first = writer.commit(Epoch("v", 1, {"n": 1}), Change(pa.table({"id": [1], "n": [10]}), key=("id",)))
    nothing = Change(pa.table({"id": pa.array([], pa.int64()), "n": pa.array([], pa.int64())}), key=("id",),
                     deletes=pa.table({"id": [99]}))  # fmt: skip
    assert writer.commit(Epoch("v", 2, {"n": 2}), nothing) is None
    assert writer.table().version() == first.snapshot_id, "no version for an epoch that changed nothing"
    third = writer.commit(Epoch("v", 3, {"n": 3}), Change(pa.table({"id": [1], "n": [30]}), key=("id",)))
    assert third is not None and third.epoch == 3 and third.snapshot_id == first.snapshot_id + 1
    assert writer.table().to_pyarrow_table().to_pylist() == [{"id": 1, "n": 30}]
    assert [r.epoch for r in history_of(DeltaTable(writer.location))] == [3, 1]


def test_timestamps_with_a_zone_are_stored_in_utc_also_inside_structs_lists_and_maps(tmp_path: Path) -> None:
    """DuckDB (an operator graph's state) names UTC "Etc/UTC", which delta-rs refuses: the table is created with
    UTC at every depth, and rows in the other name commit and read back as the same instants."""
    stamp = pa.timestamp("us", "Etc/UTC")
    kinds = {
        "t": stamp,
        "s": pa.struct([("at", stamp), ("n", pa.int64())]),
        "l": pa.list_(stamp),
        "m": pa.map_(pa.string(), stamp),
    }
    writer = DeltaWriter(str(tmp_path / "v"), "v")
    writer.ensure_table(pa.schema(list(kinds.items())), None, {})
    instant = 1_700_000_000_000_000
    rows = pa.table(
        {
            "t": pa.array([instant], stamp),
            "s": pa.array([{"at": instant, "n": 1}], kinds["s"]),
            "l": pa.array([[instant, None]], kinds["l"]),
            "m": pa.array([[("a", instant)]], kinds["m"]),
        }
    )
    writer.commit(Epoch("v", 0, {"n": 0}), Change(rows))

    stored = writer.table().to_pyarrow_table()
    assert stored.schema.field("s").type.field("at").type == pa.timestamp("us", "UTC")
    assert stored.cast(rows.schema).to_pylist() == rows.to_pylist()
