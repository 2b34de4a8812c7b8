"""``COUNT(DISTINCT a, b)`` is refused at load (the graph's state keeps one scalar per distinct value; it
crashed at start); the nearest form its error names — ``COUNT(*)`` over a ``SELECT DISTINCT`` of the pairs
without NULLs, in a subquery — is kept by the operator graph on every path an epoch takes (a first batch on
Spark's executors past ``[spark] driver_rows_max`` rows, a small later batch on the driver, a large one reduced
by Spark first), over a change feed whose deletes and updates retract pairs. After every epoch the view read
back through the catalog equals DuckDB's recompute of ``COUNT(DISTINCT a, b)`` over the same files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog_api.ops import view_tables as tables
from lakeview.errors import ConfigError
from lakeview.ivm import oracle
from lakeview.project import parse_project
from lakeview.sql.duck import arrow_sql
from lakeview.sql.graph_plan import graph_sql
from tests.pipelines import land_parquet, started

ARROW = pa.schema(
    [("id", pa.int64()), ("k", pa.int64()), ("a", pa.int64()), ("b", pa.string())]
    + [("op", pa.string()), ("seq", pa.int64())]
)
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["i"], "update": ["u"], "delete": ["d"]}
REFUSED = "SELECT k, COUNT(DISTINCT a, b) AS pairs FROM t GROUP BY k"
NEAREST = (
    "SELECT k, COUNT(*) AS pairs FROM (SELECT DISTINCT k, a, b FROM t WHERE a IS NOT NULL AND b IS NOT NULL) d "
    "GROUP BY k"
)


def change(op: str, seq: int, i: int, k: int, a: int | None, b: str | None) -> dict:
    return {"id": i, "k": k, "a": a, "b": b, "op": op, "seq": seq}


# epoch 0: 8 rows (past driver_rows_max = 4: computed by Spark's executors); epoch 1: 3 rows (the driver);
# epoch 2: 8 rows (a later batch Spark reduces first). Pairs repeat, NULLs sit in either column, and deletes
# and updates retract pairs (one of two equal pairs, a pair's last row, a pair updated to a NULL).
EPOCHS = [
    [
        change("i", 1, 1, 0, 1, "x"), change("i", 2, 2, 0, 1, "x"), change("i", 3, 3, 0, 1, None),
        change("i", 4, 4, 0, None, "x"), change("i", 5, 5, 0, 2, "x"), change("i", 6, 6, 1, None, None),
        change("i", 7, 7, 1, 3, "y"), change("i", 8, 8, 1, 3, "z"),
    ],
    [change("d", 9, 1, 0, 1, "x"), change("u", 10, 8, 1, 3, None), change("d", 11, 5, 0, 2, "x")],
    [
        change("i", 12, 12, 0, 1, "y"), change("i", 13, 13, 1, 3, "y"), change("i", 14, 14, 2, 4, "w"),
        change("i", 15, 15, 2, 4, "w"), change("i", 16, 16, 2, 4, None), change("i", 17, 17, 0, 5, "x"),
        change("d", 18, 2, 0, 1, "x"), change("u", 19, 7, 1, 9, "y"),
    ],
]  # fmt: skip


def project_of(lake_dir: Path, tmp_path: Path, port: int, sql: str):
    source = {
        "format": "parquet",
        "path": str(tmp_path / "t"),
        "schema": "id BIGINT, k BIGINT, a BIGINT, b STRING, op STRING, seq BIGINT",
        "changes": FEED,
    }
    data = {
        "lake": {"warehouse": str(lake_dir / "warehouse"), "catalog_store": f"sqlite:///{lake_dir / 'catalog.db'}"},
        "server": {"host": "127.0.0.1", "port": port},
        "spark": {"driver_rows_max": 4},
        "sources": {"t": source},
        "views": {"pairs": {"sql": sql, "cadence": "200ms", "namespace": "distinct_pairs"}},
    }
    return parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)


def test_count_distinct_of_two_columns_is_refused_and_its_nearest_form_equals_the_recompute_on_every_path(
    spark, catalog_server, lake_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"COUNT\(DISTINCT a, b\).*DISTINCT over several columns is not maintained"):
        project_of(lake_dir, tmp_path, catalog_server.port, REFUSED)
    project = project_of(lake_dir, tmp_path, catalog_server.port, NEAREST)
    pipeline, query = started(spark, project, "pairs", catalog_server.uri)
    paths = []
    try:
        for number, rows in enumerate(EPOCHS):
            land_parquet(tmp_path / "t", f"{number:03d}.parquet", rows, ARROW)
            query.processAllAvailable()
            paths.append((pipeline.last_write.get("by"), pipeline.last_write.get("reduced_by")))
            got = tables.read_rows(project, "pairs")
            # DuckDB's own COUNT(DISTINCT a, b) over the rows as the feed leaves them (a group without a pair:
            # no row in the nearest form)
            current = oracle.recompute(project_of(lake_dir, tmp_path, catalog_server.port, "SELECT * FROM t"), "pairs")
            counted = graph_sql(REFUSED, "spark")  # Spark's COUNT(DISTINCT a, b) in DuckDB's dialect
            expected = arrow_sql(f"SELECT * FROM ({counted}) WHERE pairs > 0", t=current)
            comparison = oracle.compare(got, expected)
            assert comparison.equal, f"epoch {number}: {comparison.describe()}"
    finally:
        query.stop()
    assert paths == [("executors", None), ("driver", None), ("driver", "spark")], paths
