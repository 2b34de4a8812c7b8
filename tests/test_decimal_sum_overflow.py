"""A DECIMAL(38, 0) sum past 38 digits in a later epoch, whether the driver (DuckDB) steps it or Spark reduces it
first (past ``[spark] driver_rows_max`` input rows, where Spark's partial sum past 38 digits is NULL with ANSI
off): the view stops with ``AggregateOverflowError`` naming the view, the column and the argument, before
anything of the epoch is committed; the view still serves its last epoch's rows, equal to DuckDB's recompute
over the files that epoch read."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from lakeview.errors import AggregateOverflowError
from lakeview.ivm import oracle
from lakeview.project import parse_project
from tests.pipelines import land_parquet, started, stopping_error

D = decimal.Decimal
ARROW = pa.schema([("k", pa.int64()), ("amount", pa.decimal128(38, 0))])
BIG = D("6E+37")  # two of them pass DECIMAL(38, 0)'s 10^38 - 1
SQL = "SELECT k, SUM(amount) AS total, COUNT(*) AS n FROM t GROUP BY k"


@pytest.mark.parametrize(("path", "later_rows"), [("driver", 3), ("spark", 9)], ids=["driver", "spark_reduced"])
def test_a_decimal_sum_past_38_digits_in_a_later_epoch_stops_the_view_naming_view_column_and_argument(
    spark, catalog_server, lake_dir: Path, tmp_path: Path, path: str, later_rows: int
) -> None:
    view = f"dec_overflow_{path}"
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": catalog_server.port},
        "spark": {"driver_rows_max": 5},
        "sources": {
            "t": {"format": "parquet", "path": str(tmp_path / "t"), "schema": "k BIGINT, amount DECIMAL(38,0)"}
        },
        "views": {view: {"sql": SQL, "cadence": "200ms", "namespace": "dec_overflow"}},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)
    first = [{"k": 0, "amount": D(1)}, {"k": 1, "amount": BIG}]
    land_parquet(tmp_path / "t", "000.parquet", first, ARROW)
    pipeline, query = started(spark, project, view, catalog_server.uri)
    try:
        query.processAllAvailable()
        served = tables.read_rows(project, view)
        assert oracle.compare(served, oracle.recompute(project, view)).equal
        # k 0's sum in this epoch alone passes 38 digits (Spark's partial: NULL, once merged as 0)
        later = [{"k": 0, "amount": BIG}, {"k": 0, "amount": BIG}, {"k": 1, "amount": D(-1)}]
        later += [{"k": 2, "amount": D(i)} for i in range(later_rows - len(later))]
        land_parquet(tmp_path / "t", "001.parquet", later, ARROW)
    except BaseException:
        query.stop()
        raise
    error = stopping_error(query)
    assert isinstance(error, AggregateOverflowError), repr(error)
    assert f"view {view!r}" in str(error) and "column 'total'" in str(error) and "SUM(amount)" in str(error), error
    assert pipeline.last_write.get("reduced_by") == ("spark" if path == "spark" else None), pipeline.last_write
    assert [c.epoch for c in reversed(tables.commit_history(project, view))][-1] == 0, "nothing of epoch 1 committed"
    assert oracle.compare(tables.read_rows(project, view), served).equal, "epoch 0's rows are still served"
