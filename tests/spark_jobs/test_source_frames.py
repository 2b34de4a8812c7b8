"""Reading a Parquet source's files in the driver (the graph pipeline's direct read) gives the rows Spark
would, sets aside the rows Spark would, and a file whose values do not fit the declared types is refused
naming file and column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeview.errors import TerminalError
from lakeview.ivm.changefeed import OP
from lakeview.project import parse_project
from spark_jobs.source_frames import read_direct, read_parquet_files
from spark_jobs.sources.quarantine import Quarantine, quarantined_rows

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


def test_a_parquet_change_feed_read_in_the_driver_sets_aside_rows_as_spark_would(tmp_path: Path) -> None:
    """A Parquet change feed read by the driver: each row gets its normalised operation; a row missing a
    required column and a row with an unknown operation go to the source's quarantine with Spark's reasons,
    and are counted."""
    feed = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
    source = {
        "format": "parquet",
        "path": str(tmp_path / "landing"),
        "schema": "id BIGINT, category STRING, op STRING, seq BIGINT",
        "changes": feed,
        "required": ["category"],
    }
    project = parse_project(
        {"sources": {"products": source}, "views": {"v": {"sql": "SELECT * FROM products"}}}, root=tmp_path
    )
    schema = pa.schema([("id", pa.int64()), ("category", pa.string()), ("op", pa.string()), ("seq", pa.int64())])
    rows = [(1, "toys", "c", 1), (2, None, "c", 2), (3, "books", "zz", 3), (1, "games", "u", 4), (4, "x", "d", 5)]
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema), path)
    config = project.sources["products"]
    good, bad = read_direct([path], schema, config, Quarantine(project, "products", "v"), 7)
    assert bad == 2
    assert [(r["id"], r[OP]) for r in good.to_pylist()] == [(1, "insert"), (1, "update"), (4, "delete")]
    set_aside = quarantined_rows(project, "products", "v")
    assert [(r["reason"], json.loads(r["record"])["id"], r["epoch"]) for r in set_aside] == [
        ("missing required column category", 2, 7),
        ("unknown operation zz", 3, 7),
    ]
