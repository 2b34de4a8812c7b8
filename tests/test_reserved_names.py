"""User columns named like the short names Lakeview's maintenance SQL once used for its own
columns (``w``, ``d``, ``c``, ``n``, ``old_n``, ``new_n``, ``copy``, ``lo``, ``hi``,
``distinct_n``) are ordinary columns: a LEFT join projection, a join under an aggregate, a
grouped view and a keyed projection over two change feeds, run by Spark through three epochs
(the first written by the executors, the others merged by the driver), each equal the recompute.
Lakeview's own columns carry the reserved ``__lv_`` prefix, which a source schema and a view's
column names may not use: refused at load, naming the column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from lakeview.errors import ConfigError
from lakeview.ivm import oracle
from lakeview.project import parse_project
from tests.pipelines import land_parquet, run_views

A_SCHEMA = (
    "id BIGINT, w BIGINT, d BIGINT, c BIGINT, n BIGINT, old_n BIGINT, new_n BIGINT, copy BIGINT, op STRING, seq BIGINT"
)
B_SCHEMA = "w BIGINT, lo STRING, hi BIGINT, distinct_n BIGINT, op STRING, seq BIGINT"
A_ARROW = pa.schema([(c.split()[0], pa.string() if c.endswith("STRING") else pa.int64()) for c in A_SCHEMA.split(", ")])
B_ARROW = pa.schema([(c.split()[0], pa.string() if c.endswith("STRING") else pa.int64()) for c in B_SCHEMA.split(", ")])
FEED = {"operation": "op", "sequence": "seq", "insert": ["i"], "update": ["u"], "delete": ["x"]}
VIEWS = {
    "rn_left": "SELECT a.id, a.d, a.c, a.n, a.old_n, a.new_n, a.copy, b.lo, b.hi FROM a LEFT JOIN b ON a.w = b.w",
    "rn_join_agg": "SELECT b.lo AS lo, MIN(a.d) AS hi, MAX(a.c) AS distinct_n, COUNT(DISTINCT a.n) AS w, "
    "SUM(a.copy) AS d, COUNT(*) AS n FROM a JOIN b ON a.w = b.w GROUP BY b.lo",
    "rn_group": "SELECT w AS lo, d AS hi, MIN(c) AS w, MAX(c) AS distinct_n, COUNT(DISTINCT n) AS d, "
    "SUM(copy) AS copy, COUNT(*) AS n FROM a GROUP BY w, d",
    "rn_rows": "SELECT id, w, d, c, n, old_n, new_n, copy FROM a",
}


def _a(seq: list[int], op: str, ids: list[int], shift: int = 0) -> list[dict]:
    rows = []
    for i in ids:
        seq[0] += 1
        n = None if i % 3 == 0 else i % 2
        rows.append(
            {"id": i, "w": i % 4, "d": i % 2 + shift, "c": 10 * i + shift, "n": n, "old_n": 0, "new_n": 1}
            | {"copy": i, "op": op, "seq": seq[0]}
        )
    return rows


def _b(seq: list[int], op: str, keys: list[int], label: str = "") -> list[dict]:
    rows = []
    for w in keys:
        seq[0] += 1
        rows.append({"w": w, "lo": f"{label}k{w % 2}", "hi": w, "distinct_n": 0, "op": op, "seq": seq[0]})
    return rows


def _project(root: Path, lake_dir: Path, port: int, schema_a: str = A_SCHEMA, views: dict[str, str] = VIEWS):
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": port},
        "spark": {"driver_rows_max": 0},  # every first batch is written by the executors (Spark SQL)
        "sources": {
            "a": {"format": "parquet", "path": str(root / "a"), "schema": schema_a, "changes": FEED | {"key": ["id"]}},
            "b": {"format": "parquet", "path": str(root / "b"), "schema": B_SCHEMA, "changes": FEED | {"key": ["w"]}},
        },
        "views": {name: {"sql": sql, "cadence": "100ms", "namespace": "reserved"} for name, sql in views.items()},
    }
    return parse_project(data, file=str(root / "lakeview.toml"), root=root)


@pytest.fixture(scope="module")
def maintained(spark, catalog_server, lake_dir: Path, tmp_path_factory):
    """The project after three epochs: (project, views that failed and why)."""
    root = tmp_path_factory.mktemp("reserved")
    project = _project(root, lake_dir, catalog_server.port)
    sa, sb = [0], [0]
    epochs = [
        {"a": _a(sa, "i", list(range(8))), "b": _b(sb, "i", [0, 1])},  # keys 2, 3: NULL-extended
        {"a": _a(sa, "u", [1, 2], shift=5) + _a(sa, "x", [3]), "b": _b(sb, "i", [2]) + _b(sb, "x", [0])},
        {"a": _a(sa, "i", [8, 9, 12]) + _a(sa, "x", [5]), "b": _b(sb, "u", [1], label="new_")},
    ]

    def land(number: int, files: dict[str, list[dict]]) -> None:
        for source, rows in files.items():
            land_parquet(root / source, f"{number:03d}.parquet", rows, A_ARROW if source == "a" else B_ARROW)

    return project, run_views(spark, project, VIEWS, catalog_server.uri, epochs, land)


@pytest.mark.parametrize("view", list(VIEWS))
def test_user_columns_named_like_internal_ones_are_maintained_equal_to_the_recompute(maintained, view: str) -> None:
    project, failed = maintained
    assert view not in failed, failed.get(view)
    expected = oracle.recompute(project, view)
    assert expected.num_rows, "the recompute is not empty"
    comparison = oracle.compare(tables.read_rows(project, view), expected)
    assert comparison.equal, comparison.describe()
    history = [c.epoch for c in reversed(tables.commit_history(project, view))]
    # A JOIN's query (two sources) may start with an empty trigger: its epochs may be numbered 1..3.
    assert len(history) >= 3 and history == sorted(set(history)), "epochs applied once each, in order"


def test_a_source_column_with_the_reserved_prefix_is_refused_at_load(tmp_path: Path, lake_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _project(tmp_path, lake_dir, 1, schema_a=A_SCHEMA.replace("copy BIGINT", "__lv_w BIGINT"), views={})
    message = str(info.value)
    assert "sources.a.schema" in message and "'__lv_w'" in message and "reserved" in message, message


def test_a_view_column_with_the_reserved_prefix_is_refused_at_load(tmp_path: Path, lake_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _project(tmp_path, lake_dir, 1, views={"bad": "SELECT w, COUNT(*) AS __lv_rows FROM a GROUP BY w"})
    message = str(info.value)
    assert "views.bad.sql" in message and "'__lv_rows'" in message and "reserved" in message, message
