"""A table's rows kept as a baseline (a view rebuilt from its sources, :mod:`spark_jobs.migrate`): readers keep
reading them, the writer reads the table as holding no epoch, and the view's first epoch replaces them in ONE
commit, whatever it holds: rows, no rows, or no executor-written file. Both formats."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeview.ivm.commits import Change, Epoch, Replacement
from writers.iceberg.group import IcebergGroupWriter
from writers.staged_files import ReplacingFiles

OLD = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
OLD_ROWS = [(1, "a"), (2, "b"), (3, "c")]
NEW = pa.table({"k": pa.array([4], pa.int64()), "v": ["d"]})


@pytest.mark.parametrize("first", ["rows", "no rows", "no files"])
def test_first_epoch_replaces_baseline(lake, unique_name: str, first: str) -> None:
    name = f"{unique_name}_{lake.format}"
    writer = lake.writer(name)
    writer.ensure_table(OLD.schema, ("k",), {})
    writer.commit(Epoch(name, 0, {"s": 1}), Change(OLD, key=("k",)))
    writer.commit(Epoch(name, 1, {"s": 2}), Change(OLD.slice(1, 1), key=("k",)))  # the older Lakeview's epochs
    writer.baseline()
    writer.baseline()  # marked already: nothing more
    assert writer.last_commit() is None  # no epoch of the view: its epoch 0 is next
    assert sorted(lake.read_duckdb(writer)) == OLD_ROWS  # readers keep the rows

    epoch = Epoch(name, 0, {"s": 3})
    change = {"rows": Replacement(NEW), "no rows": Replacement(NEW.slice(0, 0)), "no files": ReplacingFiles()}[first]
    if lake.format == "iceberg":
        IcebergGroupWriter(lake.catalog, name, {name: writer}).commit(epoch, {name: change})
    elif isinstance(change, ReplacingFiles):
        writer.commit_files(epoch, change)
    else:
        writer.commit(epoch, change)
    assert sorted(lake.read_duckdb(writer)) == ([(4, "d")] if first == "rows" else [])
    record = writer.last_commit()
    assert record.epoch == 0
    if lake.format == "iceberg":
        before = writer.table().snapshot_by_id(record.snapshot_id).parent_snapshot_id
    else:
        before = record.snapshot_id - 1
    assert sorted(lake.read_duckdb(writer, before)) == OLD_ROWS  # one commit: the version before it is the old rows
