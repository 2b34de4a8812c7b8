"""The oracle (``lakeview verify``) over a landing file that is not valid UTF-8: the lines that do
not decode are malformed, as Spark's JSON reader makes them, and the rest are recomputed — before,
DuckDB's ``read_text`` refused the whole file and verify crashed."""

from __future__ import annotations

from pathlib import Path

from lakeview.ivm import oracle
from lakeview.project import parse_project


def test_a_line_that_is_not_utf8_is_malformed_and_the_others_count(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.json").write_bytes(
        b'{"k": "a", "v": 1}\n{"k": "b\xff", "v": 10}\n\x00\x01\xfe binary\n{"k": "\xc3\xa9t\xc3\xa9", "v": 2}\n'
    )
    (landing / "b.json").write_text('{"k": "a", "v": 5}\n')
    data = {
        "lake": {"warehouse": str(tmp_path / "wh")},
        "sources": {"s": {"format": "json", "path": str(landing), "schema": "k STRING, v BIGINT"}},
        "views": {"totals": {"sql": "SELECT k, SUM(v) AS total FROM s GROUP BY k"}},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    rows = oracle.recompute(project, "totals", oracle.landed_files(landing)).to_pylist()
    assert sorted((r["k"], r["total"]) for r in rows) == [("a", 6), ("été", 2)]
