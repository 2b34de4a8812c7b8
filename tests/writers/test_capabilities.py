"""Writers declare what they support (``WriterCapabilities``) and callers read the declaration:
what a writer declares it does on a real table, and what it does not declare is refused with an
error naming the writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeview.errors import WriterError
from lakeview.ivm.commits import Change, Epoch
from tests.lakeview.memory_writer import MemoryWriter
from writers.base import SnapshotWriter
from writers.delta.writer import DeltaWriter
from writers.iceberg.group import IcebergGroupWriter, StagedWriter
from writers.iceberg.writer import IcebergWriter

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def test_every_declared_capability_works_on_a_real_table(lake, unique_name: str) -> None:
    writer = lake.writer(unique_name)
    declared = writer.capabilities
    assert declared.format == lake.format
    writer.ensure_table(SCHEMA, ("k",), {})
    first = writer.commit(Epoch(unique_name, 0, {}), Change(pa.table({"k": [1, 2], "total": [10, 20]}), ("k",)))
    assert first is not None and writer.table_name == unique_name

    assert declared.schema_evolution
    assert writer.add_columns(pa.schema([*SCHEMA, ("label", pa.string())])) == ["label"]
    writer.commit(Epoch(unique_name, 1, {}), Change(pa.table({"k": [2], "total": [25], "label": ["b"]}), ("k",)))
    read = sorted((r["k"], r["total"], r["label"]) for r in lake.read(writer).to_pylist())
    assert read == [(1, 10, None), (2, 25, "b")], "rows committed before the new column read NULL"

    assert declared.snapshot_changes
    from writers.snapshot_diff import commits_after

    assert [c.epoch for c in commits_after(writer, 0)] == [1]
    assert declared.multi_table_transactions == (lake.format == "iceberg")
    assert declared.catalog_commits == hasattr(writer, "catalog")


def test_a_writer_declaring_nothing_is_refused_by_name(unique_name: str) -> None:
    from spark_jobs.executors.writes import files_on_executors
    from writers.snapshot_diff import snapshot_change

    writer = MemoryWriter(SCHEMA)
    assert not writer.capabilities.executor_writes and not writer.capabilities.snapshot_changes
    with pytest.raises(WriterError, match="MemoryWriter cannot commit files written by executors"):
        files_on_executors(writer, None, Epoch(unique_name, 0, {}), None)  # type: ignore[arg-type]
    with pytest.raises(WriterError, match="no snapshot reader for MemoryWriter"):
        snapshot_change(writer, 1)
    with pytest.raises(NotImplementedError, match="MemoryWriter cannot evolve its schema"):
        writer.add_columns(SCHEMA)


def test_a_group_refuses_a_member_without_multi_table_transactions(lake_dir, unique_name: str) -> None:
    delta = DeltaWriter(str(lake_dir / "capabilities" / unique_name), unique_name)
    assert not delta.capabilities.multi_table_transactions
    with pytest.raises(WriterError, match=f"{unique_name} cannot join a multi-table transaction"):
        IcebergGroupWriter(None, "g", {unique_name: delta})  # type: ignore[arg-type, dict-item]


@pytest.mark.parametrize("cls", [IcebergWriter, StagedWriter, DeltaWriter, MemoryWriter, IcebergGroupWriter])
def test_declarations_name_only_methods_the_class_has(cls: type) -> None:
    """A capability is a promise callers act on without probing: its method must exist."""
    declared = cls.capabilities
    methods = {"executor_writes": "commit_files", "closed_window_reads": "rows_ending_by"}
    for flag, method in methods.items():
        if getattr(declared, flag):
            assert callable(getattr(cls, method, None)), f"{cls.__name__} declares {flag} without {method}"
    if declared.schema_evolution:
        assert cls.add_columns is not SnapshotWriter.add_columns
