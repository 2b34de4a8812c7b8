"""Reading a Parquet or JSON-lines source's files in the driver (the graph pipeline's direct read) gives the
rows Spark would, sets aside the rows Spark would, and a Parquet file whose values do not fit the declared
types is refused naming file and column; a JSON file with a line Spark would set aside is left to Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeview.errors import TerminalError
from lakeview.ivm.changefeed import OP
from lakeview.project import parse_project
from spark_jobs.source_frames import file_frame, read_direct, read_parquet_files
from spark_jobs.sources.json_lines import json_line_count, read_json_lines
from spark_jobs.sources.quarantine import Quarantine, quarantined_rows

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int32()), ("note", pa.string())])
JSON_SCHEMA = pa.schema(
    [("id", pa.int64()), ("qty", pa.int32()), ("price", pa.float64()), ("note", pa.string()), ("ok", pa.bool_())]
)


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


def test_json_lines_read_in_the_driver_are_the_rows_spark_reads(spark, tmp_path: Path) -> None:
    """Blank lines skipped, fields matched by exact name, a missing one NULL, an unknown one (even nested)
    ignored, an integer in a DOUBLE column a double: the rows Spark's JSON reader gives for the same files."""
    lines = [
        '{"id": 1, "qty": 2, "price": 3, "note": "a \\u00e9 \\"q\\"", "ok": true}',
        "",
        '  {"id": 2, "extra": {"deep": [1, {"x": null}]}, "Qty": 9, "price": -0.5e3, "note": null}  ',
        "{}",
        '{"id": -9223372036854775808, "qty": 2147483647, "ok": false}\r',
    ]
    (tmp_path / "a.json").write_text("\n".join(lines) + "\n")
    (tmp_path / "empty.json").write_text("")
    files = [tmp_path / "a.json", tmp_path / "empty.json"]
    rows = read_json_lines(files, JSON_SCHEMA)
    assert rows is not None and rows.schema == JSON_SCHEMA
    config = parse_project(
        {
            "sources": {
                "s": {
                    "format": "json",
                    "path": str(tmp_path),
                    "schema": "id BIGINT, qty INT, price DOUBLE, note STRING, ok BOOLEAN",
                }
            },
            "views": {"v": {"sql": "SELECT * FROM s"}},
        },
        root=tmp_path,
    )
    by_spark = file_frame(spark, Quarantine(config, "s", "v"), files).drop("__lv_corrupt", "__lv_file")
    assert rows.to_pylist() == [r.asDict() for r in by_spark.collect()]


@pytest.mark.parametrize(
    "text",
    [
        '{"id": 1}\n{not json\n',  # does not parse
        '{"id": "1"}\n',  # a string for a BIGINT
        '{"qty": 2147483648}\n',  # out of INT's range
        '{"id": 1.5}\n',  # a fraction for a BIGINT
        '{"note": 5}\n',  # a number for a STRING (Spark keeps its text)
        '{"id": 1}{"id": 2}\n',  # two objects on one line
        '{"id":\n1}\n',  # one object over two lines
        '[{"id": 1}]\n',  # not an object
        '{"id": 1, "id": 2}\n',  # a field twice
        b'{"id": 1, "note": "k\xff"}\n',  # not UTF-8 (Spark reads U+FFFD)
    ],
)
def test_a_json_line_spark_would_read_otherwise_leaves_the_file_to_spark(tmp_path: Path, text: str | bytes) -> None:
    (tmp_path / "f.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    assert read_json_lines([tmp_path / "f.json"], JSON_SCHEMA) is None


def test_a_compressed_json_file_is_left_to_spark_and_not_counted_by_its_lines(tmp_path: Path) -> None:
    """Spark decompresses a file by its suffix: the driver neither reads nor counts it (the first batch's size
    is then counted by Spark); a plain file's rows are its non-blank lines."""
    import gzip

    (tmp_path / "f.json.gz").write_bytes(gzip.compress(b'{"id": 1}\n{"id": 2}\n'))
    (tmp_path / "g.json").write_text('{"id": 1}\n\n{not json\n')
    assert read_json_lines([tmp_path / "f.json.gz"], JSON_SCHEMA) is None
    assert json_line_count([tmp_path / "f.json.gz", tmp_path / "g.json"]) is None
    assert json_line_count([tmp_path / "g.json"]) == 2
