"""Every column type users have, in both table formats, in every role: a GROUP BY key, a join key,
a change-feed key and an aggregated value. One project, few rows, several epochs of inserts,
updates and deletes (a change feed whose key holds every type), all views run together; each view
read back by DuckDB and by pyiceberg / deltalake equals the recompute."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from lakeview.ivm import oracle
from tests.duck_readers import catalog_reader, delta_reader
from tests.pipelines import land_parquet, run_views

D = decimal.Decimal
UTC = dt.UTC
# column -> (Spark type, Arrow type, values: edge cases and NULL)
TYPES = {
    "b": ("BOOLEAN", pa.bool_(), [True, False, None]),
    "i8": ("TINYINT", pa.int8(), [-128, 127, 0, None]),
    "i16": ("SMALLINT", pa.int16(), [-32768, 32767, None]),
    "i32": ("INT", pa.int32(), [-(2**31), 2**31 - 1, 0, None]),
    "i64": ("BIGINT", pa.int64(), [-(2**63), 2**63 - 1, None]),
    "d": (
        "DECIMAL(38,10)",
        pa.decimal128(38, 10),
        [D("9999999999999999999999999999.9999999999"), D("-0.0000000001"), None],
    ),
    "f": ("FLOAT", pa.float32(), [float("nan"), -0.0, float("inf"), float("-inf"), 1.5, None]),
    "x": ("DOUBLE", pa.float64(), [float("nan"), 0.0, float("-inf"), 2.5, None]),
    "s": ("STRING", pa.string(), ["", "é日本🙂", "a", None]),
    "bin": ("BINARY", pa.binary(), [b"", b"\x00\xff", None]),
    "dt": ("DATE", pa.date32(), [dt.date(1969, 12, 31), dt.date(9999, 12, 31), None]),
    "ts": (
        "TIMESTAMP",
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC), None],
    ),
    "tsn": ("TIMESTAMP_NTZ", pa.timestamp("us"), [dt.datetime(2000, 1, 1), dt.datetime(1900, 6, 1, 12), None]),
}
COLUMNS = list(TYPES)
FEED_SCHEMA = "id BIGINT, grp BIGINT, v BIGINT, op STRING, seq BIGINT, " + ", ".join(
    f"{c} {t[0]}" for c, t in TYPES.items()
)
ARROW = pa.schema(
    [("id", pa.int64()), ("grp", pa.int64()), ("v", pa.int64()), ("op", pa.string()), ("seq", pa.int64())]
    + [(c, t[1]) for c, t in TYPES.items()]
)
DIM_SCHEMA = "w BIGINT, " + ", ".join(f"{c} {t[0]}" for c, t in TYPES.items())
DIM_ARROW = pa.schema([("w", pa.int64())] + [(c, t[1]) for c, t in TYPES.items()])
FEED = {
    "operation": "op",
    "key": ["id", *COLUMNS],
    "sequence": "seq",
    "insert": ["c"],
    "update": ["u"],
    "delete": ["d"],
}
KEYS = ", ".join(COLUMNS)
AGGREGATES = ", ".join(
    [f"COUNT({c}) AS n_{c}, MIN({c}) AS lo_{c}, MAX({c}) AS hi_{c}" for c in COLUMNS]
    # SUM(i32) retracts INT_MIN (a BIGINT sum). Not summed: d and i64, whose edge values sum past their type
    # (a genuine overflow, an error naming the view: tests/test_sum_overflow.py).
    + [f"SUM({c}) AS sum_{c}" for c in ("i8", "i16", "i32", "x")]
    + [f"AVG({c}) AS avg_{c}" for c in ("i8", "i16", "i32")]
)
SQL = {
    "group": f"SELECT {KEYS}, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY {KEYS}",
    "agg": f"SELECT grp, COUNT(*) AS n, {AGGREGATES} FROM t GROUP BY grp",
    "join": "SELECT t.id, t.v, u.w FROM t JOIN u ON " + " AND ".join(f"t.{c} = u.{c}" for c in COLUMNS),
}


def _row(i: int) -> dict:
    """Row ``i``: each column cycles through its values, so rows share keys and NULLs; every third
    row has no NULL (NULL never matches in a join, and the join is keyed on every column)."""
    return {
        c: (values if i % 3 else values[:-1])[(i + k) % (len(values) - (0 if i % 3 else 1))]
        for k, (c, (_, _, values)) in enumerate(TYPES.items())
    }


def _changes(seq: list[int], op: str, ids: list[int], base: int = 0) -> list[dict]:
    rows = []
    for i in ids:
        seq[0] += 1
        rows.append({"id": i, "grp": i % 3, "v": i + base, "op": op, "seq": seq[0], **_row(i)})
    return rows


def _normal(value: object) -> object:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return 0.0 if value == 0 else round(value, 6)  # -0.0 and 0.0 are one value
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    return value


def _multiset(rows: list[dict], names: list[str]) -> list[tuple]:
    return sorted((tuple(_normal(r[n]) for n in names) for r in rows), key=repr)


@pytest.fixture(scope="module")
def typed_project(spark, catalog_server, tmp_path_factory, lake_dir: Path):
    """The project, run through three epochs: (project, views, the views that failed and why)."""
    from lakeview.project import parse_project

    root = tmp_path_factory.mktemp("types")
    views = {
        f"types_{role}_{fmt}": {"sql": sql, "format": fmt, "cadence": "100ms", "namespace": "types"}
        for role, sql in SQL.items()
        for fmt in ("iceberg", "delta")
    }
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "sources": {
            "t": {"format": "parquet", "path": str(root / "landing" / "t"), "schema": FEED_SCHEMA, "changes": FEED},
            "u": {"format": "parquet", "path": str(root / "landing" / "u"), "schema": DIM_SCHEMA},
        },
        "views": views,
    }
    project = parse_project(data, file=str(root / "lakeview.toml"), root=root)
    seq = [0]
    epochs = [
        ({"t": _changes(seq, "c", list(range(12))), "u": [{"w": i, **_row(i)} for i in range(0, 12, 2)]}),
        ({"t": _changes(seq, "u", [0, 3, 5], base=100) + _changes(seq, "d", [1, 4]) + _changes(seq, "c", [12, 13])}),
        ({"t": _changes(seq, "d", [0, 12]) + _changes(seq, "u", [5], base=1000), "u": [{"w": 99, **_row(3)}]}),
    ]

    def land(number: int, files: dict[str, list[dict]]) -> None:
        for source, rows in files.items():
            schema = ARROW if source == "t" else DIM_ARROW
            land_parquet(project.source_path(source), f"{number:03d}.parquet", rows, schema)

    failed = run_views(spark, project, views, catalog_server.uri, epochs, land)  # view -> the error that stopped it
    return project, views, failed


@pytest.mark.parametrize(
    "fmt, role",
    [
        ("iceberg", "group"),
        ("delta", "group"),
        ("iceberg", "agg"),
        ("delta", "agg"),
        ("iceberg", "join"),
        ("delta", "join"),
    ],
)
def test_every_type_in_every_role_equals_the_recompute(typed_project, catalog_server, role: str, fmt: str) -> None:
    project, views, failed = typed_project
    view = f"types_{role}_{fmt}"
    assert view not in failed, failed.get(view)
    expected = oracle.recompute(project, view)
    names = expected.column_names
    want = _multiset(expected.to_pylist(), names)
    assert want, "the recompute is not empty"
    native = tables.read_rows(project, view)  # pyiceberg or deltalake
    assert _multiset(native.to_pylist(), names) == want
    if fmt == "iceberg":
        duck = catalog_reader(catalog_server.uri, "lakeview").sql(f"SELECT * FROM lake.types.{view}").to_arrow_table()
    else:
        duck = delta_reader().sql(f"SELECT * FROM delta_scan('{project.table_location(view)}')").to_arrow_table()
    assert _multiset(duck.to_pylist(), names) == want
    history = [c.epoch for c in reversed(tables.commit_history(project, view))]
    # Once each, in order; a JOIN's query (several sources) may start with an empty trigger, so its numbers may be 1..3.
    assert history == sorted(set(history)) and len(history) >= 3, "epochs applied once each, in order"
