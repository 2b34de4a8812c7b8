"""A graph view's table takes the one-source stack's column types (Spark's aggregate result types, not
DuckDB's) and its unique key; each epoch's rows are cast to the table's schema as stored."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeview.errors import AggregateOverflowError
from lakeview.graph import WEIGHT, compile_view, step
from lakeview.graph.output_types import conform, output_key, output_schema, table_schema

SCHEMAS = {
    "t": pa.schema({"k": pa.string(), "i": pa.int32(), "b": pa.int64(), "d": pa.decimal128(10, 2), "f": pa.float32()}),
    "feed": pa.schema({"id": pa.int64(), "name": pa.string(), "v": pa.int32()}),
    "u": pa.schema({"k": pa.string(), "w": pa.int32()}),
}


def typed(sql: str) -> dict[str, pa.DataType]:
    graph = compile_view(sql, SCHEMAS, eager=True)
    schema = output_schema(graph, step(graph, {}).drop_columns([WEIGHT]).schema, SCHEMAS)
    return dict(zip(schema.names, schema.types, strict=True))


def key(sql: str) -> tuple[str, ...] | None:
    return output_key(compile_view(sql, SCHEMAS), {"feed": ("id",)})


def test_aggregates_take_sparks_result_types_through_projections_and_joins() -> None:
    types = typed(
        "SELECT k, SUM(i) si, SUM(b) sb, SUM(d) sd, SUM(f) sf, AVG(i) ai, AVG(d) ad, COUNT(*) n, COUNT(d) nd, "
        "MIN(d) lo, MAX(i) hi, SUM(i) * 2 twice, SUM(i) FILTER (WHERE b > 0) pos FROM t GROUP BY k"
    )
    assert types == {
        "k": pa.string(),
        "si": pa.int64(),  # DuckDB: HUGEINT, decimal(38,0)
        "sb": pa.int64(),
        "sd": pa.decimal128(20, 2),  # DuckDB: decimal(38,2)
        "sf": pa.float64(),
        "ai": pa.float64(),
        "ad": pa.decimal128(14, 6),  # DuckDB: DOUBLE
        "n": pa.int64(),
        "nd": pa.int64(),
        "lo": pa.decimal128(10, 2),
        "hi": pa.int32(),
        "twice": pa.int64(),
        "pos": pa.int64(),
    }
    # over a join (eager aggregation pushes partial SUMs below it): the types of the SQL as written
    joined = typed(
        "SELECT t.k, SUM(t.i) si, SUM(t.d) sd, AVG(t.d) ad, COUNT(*) n FROM t JOIN u ON t.k = u.k GROUP BY t.k"
    )
    assert joined == {
        "k": pa.string(),
        "si": pa.int64(),
        "sd": pa.decimal128(20, 2),
        "ad": pa.decimal128(14, 6),
        "n": pa.int64(),
    }
    assert typed("SELECT SUM(d) s FROM t") == {"s": pa.decimal128(20, 2)}


def test_the_key_is_the_group_by_columns_or_a_change_feeds_kept_key_else_none() -> None:
    assert key("SELECT k, SUM(i) s FROM t GROUP BY k") == ("k",)
    assert key("SELECT SUM(i) s, k AS kk FROM t GROUP BY k HAVING SUM(i) > 1") == ("kk",)
    assert key("SELECT COUNT(*) n FROM t") == ()  # a global aggregate: one row
    assert key("SELECT SUM(i) s FROM t GROUP BY k") is None  # the group is not in the output
    assert key("SELECT id AS fid, name FROM feed WHERE v > 0") == ("fid",)
    assert key("SELECT name FROM feed") is None  # the feed's key dropped
    assert key("SELECT k, i FROM t") is None  # an append stream's rows: a multiset
    assert key("SELECT t.k, u.w FROM t JOIN u ON t.k = u.k") is None
    top = "SELECT k, i FROM (SELECT k, i, ROW_NUMBER() OVER (PARTITION BY k ORDER BY i) rn FROM t) s WHERE rn <= 2"
    assert key(top) is None


def test_an_existing_tables_types_stand_and_rows_are_cast_to_them() -> None:
    computed = pa.schema({"k": pa.string(), "s": pa.int64(), "a": pa.float64()})
    stored = pa.schema({"k": pa.large_string(), "s": pa.decimal128(38, 0), "a": pa.float64()})
    schema = table_schema(computed, stored)  # a table an earlier graph made: its decimal stays
    assert schema.types == [pa.string(), pa.decimal128(38, 0), pa.float64()]
    rows = pa.table({"k": ["x"], "s": pa.array([5], pa.decimal128(38, 0)), WEIGHT: pa.array([1], pa.int64())})
    assert conform(rows, computed, "v").schema.types == [pa.string(), pa.int64(), pa.int64()]
    huge = pa.table({"s": pa.array([2**70], pa.decimal128(38, 0))})
    with pytest.raises(AggregateOverflowError, match="column 's'"):
        conform(huge, computed, "v")
