"""SUM and AVG near the limits of their argument's type, run by Spark across epochs of inserts,
updates and deletes: SUM of an INT is a BIGINT (retracting INT_MIN does not wrap), SUM of a
DECIMAL(38,10) keeps all ten digits of its scale, each view equal to the recompute. A sum that
leaves the recompute's type (SUM of BIGINTs past 2^63, over a change feed or an append-only
source) stops only that view with a terminal error naming the view and the column, never a
silently wrapped value."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from catalog_api.store.catalog import open_store
from lakeview.errors import AggregateOverflowError
from lakeview.ivm import oracle
from lakeview.project import parse_project
from spark_jobs.epoch_guard import failure_of
from tests.pipelines import land_parquet, run_views, stopping_error, view_pipeline
from writers.iceberg.writer import last_commit_of

D = decimal.Decimal
INT_MIN, INT_MAX, LONG_MAX = -(2**31), 2**31 - 1, 2**63 - 1
DEC_MAX = D("9999999999999999999999999999.9999999999")
TINY = D("0.0000000001")
DEC_MIN = D("-9999999999999999999999999999.9999999999")  # literals: Python's decimal context keeps 28 digits
NEAR_MIN = D("-9999999999999999999999999999.9999999998")  # DEC_MIN + TINY
FEED_ARROW = pa.schema(
    [("id", pa.int64()), ("k", pa.int64()), ("i32", pa.int32()), ("i64", pa.int64())]
    + [("dec", pa.decimal128(38, 10)), ("op", pa.string()), ("seq", pa.int64())]
)
APPEND_ARROW = pa.schema([("k", pa.int64()), ("i64", pa.int64())])
VIEWS = {
    "ovf_near": "SELECT k, SUM(i32) AS s32, AVG(i32) AS a32, SUM(dec) AS sdec, COUNT(*) AS n FROM t GROUP BY k",
    "ovf_long": "SELECT k, SUM(i64) AS total FROM t GROUP BY k",
    "ovf_append": "SELECT k, SUM(i64) AS total FROM a GROUP BY k",
}


def _change(seq: list[int], op: str, id_: int, k: int, i32: int, i64: int, dec: D) -> dict:
    seq[0] += 1
    return {"id": id_, "k": k, "i32": i32, "i64": i64, "dec": dec, "op": op, "seq": seq[0]}


@pytest.fixture(scope="module")
def run(spark, catalog_server, lake_dir: Path, tmp_path_factory):
    """Three epochs; returns (project, {view: the error that stopped it})."""
    root = tmp_path_factory.mktemp("overflow")
    feed = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["i"], "update": ["u"], "delete": ["d"]}
    schema = "id BIGINT, k BIGINT, i32 INT, i64 BIGINT, dec DECIMAL(38,10), op STRING, seq BIGINT"
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "spark": {"driver_rows_max": 2},  # the first batch over t (6 rows) is computed by Spark's executors
        "sources": {
            "t": {"format": "parquet", "path": str(root / "t"), "schema": schema, "changes": feed},
            "a": {"format": "parquet", "path": str(root / "a"), "schema": "k BIGINT, i64 BIGINT"},
        },
        "views": {name: {"sql": sql, "cadence": "200ms", "namespace": "overflow"} for name, sql in VIEWS.items()},
    }
    project = parse_project(data, file=str(root / "lakeview.toml"), root=root)
    s = [0]
    epochs = [
        {  # group 0: INT_MIN and INT_MAX twice; group 1: DEC_MAX and LONG_MAX; group 2: DEC_MIN
            "t": [
                _change(s, "i", 1, 0, INT_MIN, 1, TINY),
                _change(s, "i", 2, 0, INT_MAX, 1, TINY),
                _change(s, "i", 3, 0, INT_MAX, 1, -TINY),
                _change(s, "i", 4, 1, INT_MIN, LONG_MAX, DEC_MAX),
                _change(s, "i", 5, 1, 7, 0, -TINY),
                _change(s, "i", 6, 2, INT_MAX, -LONG_MAX, DEC_MIN),
            ],
            "a": [{"k": 0, "i64": LONG_MAX - 1}, {"k": 1, "i64": -LONG_MAX}],
        },
        {  # retract INT_MIN (weight -1 times INT_MIN); every sum stays in range (-2^63 exactly, for k 1 of a)
            "t": [
                _change(s, "d", 1, 0, INT_MIN, 1, TINY),
                _change(s, "u", 5, 1, INT_MIN, 0, D("-0.0000000003")),
                _change(s, "u", 6, 2, INT_MIN, -LONG_MAX, NEAR_MIN),
            ],
            "a": [{"k": 1, "i64": -1}],
        },
        {  # group 1: DEC_MAX exactly, and its BIGINT sum passes 2^63 - 1; the append view's group 0 too
            "t": [_change(s, "u", 5, 1, INT_MAX, 5, D(0))],
            "a": [{"k": 0, "i64": 2}],
        },
    ]

    def land(number: int, files: dict[str, list[dict]]) -> None:
        for source, rows in files.items():
            schema = FEED_ARROW if source == "t" else APPEND_ARROW
            land_parquet(root / source, f"{number:03d}.parquet", rows, schema)

    def error(query, exc: Exception) -> BaseException:  # the pipeline's own error, as the view's status shows it
        failure = failure_of(query.name)
        return failure.error if failure is not None else exc

    return project, run_views(spark, project, VIEWS, catalog_server.uri, epochs, land, error)


def test_sums_near_the_limits_of_int_and_decimal38_equal_the_recompute(run) -> None:
    project, stopped = run
    assert "ovf_near" not in stopped, stopped.get("ovf_near")
    got = {r["k"]: r for r in tables.read_rows(project, "ovf_near").to_pylist()}
    assert got[0]["s32"] == 2 * INT_MAX, "SUM of INT is a BIGINT: retracting INT_MIN did not wrap"
    assert got[1]["s32"] == -1 and got[2]["s32"] == INT_MIN
    assert (got[0]["sdec"], got[1]["sdec"], got[2]["sdec"]) == (0, DEC_MAX, NEAR_MIN), "all 10 digits kept"
    comparison = oracle.compare(tables.read_rows(project, "ovf_near"), oracle.recompute(project, "ovf_near"))
    assert comparison.equal, comparison.describe()
    assert [c.epoch for c in reversed(tables.commit_history(project, "ovf_near"))][-1] == 2


LAST_GOOD = {"ovf_long": {0: 2, 1: LONG_MAX, 2: -LONG_MAX}, "ovf_append": {0: LONG_MAX - 1, 1: -(2**63)}}


@pytest.mark.parametrize("view", ["ovf_long", "ovf_append"])
def test_a_sum_past_its_type_stops_the_view_with_an_error_naming_view_and_column(run, view: str) -> None:
    project, stopped = run
    error = stopped.get(view)
    assert isinstance(error, AggregateOverflowError), repr(error)
    assert f"view {view!r}" in str(error) and "column 'total'" in str(error) and "overflows" in str(error)
    # Its last commit is the epoch before the overflow: nothing wrapped was written.
    assert [c.epoch for c in reversed(tables.commit_history(project, view))][-1] == 1
    # Nor did its state advance: the epoch failed before any of its tables committed (each view's state log,
    # a change feed's mirror too).
    store = open_store(project)
    states = [t for t in store.list_tables(("overflow",)) if t[-1].startswith(f"__lv_state_{view}_")]
    assert states, "every aggregate keeps its groups' records in its state log"
    for name in states:
        assert last_commit_of(store.load_table(name)).epoch == 1, name
    served = {r["k"]: r["total"] for r in tables.read_rows(project, view).to_pylist()}
    assert served == LAST_GOOD[view], "the rows of epoch 1, at the edges of BIGINT, are still served"


def test_a_first_batch_written_by_the_executors_stops_on_a_sum_past_bigint_too(
    spark, catalog_server, lake_dir: Path, tmp_path: Path
) -> None:
    """Past ``[spark] driver_rows_max`` input rows a view's first batch is computed and written by
    Spark's executors, where SUM of BIGINTs wraps (no ANSI mode): the same error, nothing written."""
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "spark": {"driver_rows_max": 2},
        "sources": {"a": {"format": "parquet", "path": str(tmp_path / "a"), "schema": "k BIGINT, i64 BIGINT"}},
        "views": {"ovf_backfill": {"sql": VIEWS["ovf_append"], "namespace": "overflow_bf"}},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    rows = [{"k": 0, "i64": LONG_MAX}, {"k": 0, "i64": 1}, {"k": 1, "i64": 5}, {"k": 1, "i64": -LONG_MAX}]
    land_parquet(tmp_path / "a", "000.parquet", rows, APPEND_ARROW)
    pipeline = view_pipeline(spark, project, "ovf_backfill", catalog_server.uri)
    pipeline.prepare()
    error = stopping_error(pipeline.start())
    assert isinstance(error, AggregateOverflowError), repr(error)
    assert "view 'ovf_backfill'" in str(error) and "column 'total'" in str(error)
    assert tables.commit_history(project, "ovf_backfill") == [], "no wrapped sum was written"
