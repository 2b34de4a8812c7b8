"""Reading an append-only Parquet source's files in the driver (the graph pipeline's direct read) gives the
rows Spark would, and a file whose values do not fit the declared types is refused naming file and column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeview.errors import TerminalError
from spark_jobs.source_frames import read_parquet_files

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int32()), ("note", pa.string())])


def test_columns_are_matched_by_name_whatever_the_case_absent_ones_null(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"QTY": pa.array([3, 4], pa.int32()), "Id": [1, 2], "extra": ["x", "y"]}), tmp_path / "a.parquet"
    )
    pq.write_table(pa.table({"id": [5], "qty": pa.array([6], pa.int32()), "note": ["n"]}), tmp_path / "b.parquet")
    rows = read_parquet_files([tmp_path / "a.parquet", tmp_path / "b.parquet"], SCHEMA)
    assert rows.schema == SCHEMA
    assert rows.to_pylist() == [
        {"id": 1, "qty": 3, "note": None},
        {"id": 2, "qty": 4, "note": None},
        {"id": 5, "qty": 6, "note": "n"},
    ]


def test_a_column_of_another_type_is_refused_naming_the_file_and_column(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": ["one"], "qty": pa.array([1], pa.int32())}), tmp_path / "bad.parquet")
    with pytest.raises(TerminalError, match=r"bad\.parquet: column id holds string, not the declared int64"):
        read_parquet_files([tmp_path / "bad.parquet"], SCHEMA)
