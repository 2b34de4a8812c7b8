"""A column type Lakeview cannot handle is refused when the project loads, naming the column,
its type and the role the view gives it (never a crash at a later epoch): types no role can
hold (INTERVAL, TIME, VARIANT ...) in a source's schema; a nested column (ARRAY, MAP, STRUCT)
as a key, a MIN/MAX/COUNT(DISTINCT)/SUM argument or read through a JOIN. Passing a nested
column through is accepted (tests/test_nested_types.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeview.errors import ConfigError
from lakeview.project import parse_project

FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["i"], "update": ["u"], "delete": ["d"]}
NESTED = "tags ARRAY<STRING>, attrs MAP<STRING, INT>, pos STRUCT<x: DOUBLE, y: DOUBLE>"


def _load(tmp_path: Path, views: dict[str, str], schema: str = f"id BIGINT, k BIGINT, {NESTED}", **source):
    data = {
        "lake": {"warehouse": str(tmp_path / "wh")},
        "sources": {
            "t": {"format": "parquet", "path": str(tmp_path / "t"), "schema": schema} | source,
            "u": {"format": "parquet", "path": str(tmp_path / "u"), "schema": f"k BIGINT, name STRING, {NESTED}"},
        },
        "views": {name: {"sql": sql} for name, sql in views.items()},
    }
    return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


@pytest.mark.parametrize(
    ("declared", "named", "why"),
    [
        ("d INTERVAL DAY TO SECOND", "INTERVAL DAY TO SECOND", "cannot store intervals"),
        ("d INTERVAL", "INTERVAL", "cannot store intervals"),
        ("d TIME", "TIME", "Spark 3.5 has no TIME type"),
        ("d VARIANT", "VARIANT", "Spark 3.5 has no VARIANT type"),
        ("d ARRAY<INTERVAL DAY>", "INTERVAL DAY", "cannot store intervals"),
        ("d STRUCT<at: TIME>", "TIME", "no TIME type"),
        ("d JSON", "JSON", "supported: BOOLEAN"),
    ],
)
def test_a_type_no_role_can_hold_is_refused_with_the_sources_schema(tmp_path, declared, named, why) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, {"v": "SELECT id FROM t"}, schema=f"id BIGINT, {declared}")
    message = str(info.value)
    assert "sources.t.schema" in message and f"column 'd' has type {named}," in message, message
    assert "in any role" in message and why in message, message


@pytest.mark.parametrize(
    ("sql", "column", "role"),
    [
        ("SELECT attrs, COUNT(*) AS n FROM t GROUP BY attrs", "attrs", "a GROUP BY (or DISTINCT) key"),
        ("SELECT DISTINCT tags FROM t", "tags", "a GROUP BY (or DISTINCT) key"),
        ("SELECT k, MIN(pos) AS lo FROM t GROUP BY k", "pos", "a MIN argument"),
        ("SELECT k, COUNT(DISTINCT tags) AS n FROM t GROUP BY k", "tags", "a COUNT(DISTINCT) argument"),
        ("SELECT k, SUM(attrs) AS s FROM t GROUP BY k", "attrs", "a SUM argument"),
        ("SELECT t.id, u.name FROM t JOIN u ON t.tags = u.tags", "tags", "a join key"),
        ("SELECT t.id, u.pos FROM t JOIN u ON t.k = u.k", "pos", "read through a JOIN"),
    ],
)
def test_a_nested_column_as_a_key_or_an_aggregated_value_is_refused_naming_its_role(tmp_path, sql, column, role):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, {"v": sql})
    message = str(info.value)
    assert "views.v.sql" in message and f"column {column!r} of source" in message, message
    assert f"cannot be {role}" in message and "can only be passed through" in message, message


def test_a_nested_change_feed_key_is_refused_naming_its_role(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, {"v": "SELECT id, k, pos FROM t"}, changes=FEED | {"key": ["pos"]}, schema=f"id BIGINT, k BIGINT, op STRING, seq BIGINT, {NESTED}")  # fmt: skip
    assert (
        "column 'pos' of source 't' has type STRUCT<x: DOUBLE, y: DOUBLE>, which cannot be the change-feed key"
        in str(info.value)
    )


def test_nested_columns_passed_through_or_taken_apart_are_accepted(tmp_path) -> None:
    project = _load(
        tmp_path,
        {
            "rows": "SELECT id, tags, attrs, pos FROM t",
            "star": "SELECT * FROM t WHERE size(tags) > 0",
            "parts": "SELECT tags[0] AS first_tag, COUNT(*) AS n, MAX(pos.x) AS x FROM t GROUP BY tags[0]",
        },
    )
    assert set(project.views) == {"rows", "star", "parts"}
