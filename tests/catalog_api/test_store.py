"""The store directly: metadata files it writes (with reused snapshot JSON) read back as the
same metadata, and the Python multi-table commit other modules use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField

from catalog_api.store.catalog import CatalogStore
from catalog_api.store.pointer_cache import STAMPS_DIR_ENV
from lakeview import errors
from tests.catalog_api.test_concurrency import append_snapshot_body

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def test_metadata_files_round_trip_with_reused_snapshot_json(tmp_path: Path) -> None:
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w")
    store.create_namespace(("n",), {})
    location, metadata = store.create_table(("n", "t"), SCHEMA, None, None, None, {})
    for snapshot_id in range(1, 6):
        raw = append_snapshot_body(
            metadata.current_snapshot_id, snapshot_id, metadata.location, metadata.last_sequence_number + 1
        )
        request = CommitTableRequest.model_validate({"identifier": {"namespace": ["n"], "name": "t"}, **raw})
        result = store.commit_table(("n", "t"), request.requirements, request.updates)
        location, metadata = result.metadata_location, result.metadata
        on_disk = json.loads(Path(location).read_text())
        assert on_disk == json.loads(metadata.model_dump_json())
    fresh = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w")
    assert fresh.load_metadata(("n", "t")) == (location, metadata)
    assert [s.snapshot_id for s in metadata.snapshots] == [1, 2, 3, 4, 5]


def test_python_commit_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w")
    store.create_namespace(("n",), {})
    _, a = store.create_table(("n", "a"), SCHEMA, None, None, None, {})
    _, b = store.create_table(("n", "b"), SCHEMA, None, None, None, {})
    epoch = (SetPropertiesUpdate(updates={"epoch": "1"}),)
    results = store.commit_transaction(
        [
            (("n", "a"), (AssertTableUUID(uuid=a.table_uuid),), epoch),
            (("n", "b"), (AssertTableUUID(uuid=b.table_uuid),), epoch),
        ]
    )
    assert [r.metadata.properties["epoch"] for r in results] == ["1", "1"]
    with pytest.raises(errors.CommitConflictError):
        store.commit_transaction(
            [
                (("n", "a"), (), (SetPropertiesUpdate(updates={"epoch": "2"}),)),
                (("n", "b"), (AssertTableUUID(uuid=a.table_uuid),), (SetPropertiesUpdate(updates={"epoch": "2"}),)),
            ]
        )
    assert store.load_table(("n", "a")).properties["epoch"] == "1"
    assert store.load_table(("n", "b")).properties["epoch"] == "1"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_commits_alternating_between_processes_build_on_each_other(
    tmp_path: Path, request, monkeypatch, backend: str
) -> None:
    """A process stages a table's next commit on the pointer its own last commit set, without reading the
    database, unless a process on its host changed the table since (its stamp); when another host committed in
    between, the commit is staged again on the current pointer: it succeeds when its requirements hold there,
    keeps the other's snapshot, and is refused (409) only when they do not. SQLite: two processes of one host;
    PostgreSQL: two hosts (their own stamp files)."""
    url = f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else request.getfixturevalue("postgres").url
    one, other = CatalogStore(url, tmp_path / "w", f"alt_{tmp_path.name}"[:60]), None
    try:
        if backend == "postgresql":
            (tmp_path / "host2").mkdir()
            monkeypatch.setenv(STAMPS_DIR_ENV, str(tmp_path / "host2"))
        other = CatalogStore(url, tmp_path / "w", one.name)
        one.create_namespace(("n",), {})
        _, metadata = one.create_table(("n", "t"), SCHEMA, None, None, None, {})
        for snapshot_id in range(1, 7):
            store = one if snapshot_id % 3 else other  # one, one, other, one, one, other
            raw = append_snapshot_body(
                metadata.current_snapshot_id, snapshot_id, metadata.location, metadata.last_sequence_number + 1
            )
            change = CommitTableRequest.model_validate({"identifier": {"namespace": ["n"], "name": "t"}, **raw})
            metadata = store.commit_table(("n", "t"), change.requirements, change.updates).metadata
        assert [s.snapshot_id for s in metadata.snapshots] == [1, 2, 3, 4, 5, 6]
        assert one.load_metadata(("n", "t"))[1].current_snapshot_id == 6
        stale = append_snapshot_body(5, 7, metadata.location, metadata.last_sequence_number + 1)  # main is at 6
        change = CommitTableRequest.model_validate({"identifier": {"namespace": ["n"], "name": "t"}, **stale})
        with pytest.raises(errors.CommitConflictError):
            other.commit_table(("n", "t"), change.requirements, change.updates)
        assert len(one.load_metadata(("n", "t"))[1].snapshots) == 6
        # no requirements: the stale guess loses the compare-and-swap, and the commit is staged again
        other.commit_table(("n", "t"), (), (SetPropertiesUpdate(updates={"by": "other"}),))
        result = one.commit_table(("n", "t"), (), (SetPropertiesUpdate(updates={"also": "one"}),))
        assert {"by": "other", "also": "one"}.items() <= result.metadata.properties.items()
        assert len(result.metadata.snapshots) == 6
    finally:
        one.close()
        if other is not None:
            other.close()
