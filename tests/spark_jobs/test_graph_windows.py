"""Event-time windows over a join and over a union, kept as operator graphs by real Spark and the catalog: a
tumbling window over orders ⋈ a products change feed, and a hopping window over orders UNION ALL returns.
The first batch is a backfill computed by Spark on the executors (the window's bounds and the hopping
window's expansion in Spark SQL); later epochs insert orders (NULL event times, times on a window's bound)
and update and delete products. After every epoch the view read through the catalog equals DuckDB's
recompute (what ``lakeview verify`` runs) and Spark's own ``window()`` over the inputs' current rows."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from catalog_api.server import CatalogServer
from lakeview.config.models import SparkConfig
from lakeview.ivm import oracle
from lakeview.project import is_graph_view
from tests.spark_jobs.test_changes import land
from tests.spark_jobs.test_graph_backfill import BOUNDS, by_executors
from tests.spark_jobs.test_graph_pipeline import NS, assert_recomputed, change, read, start

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
SOURCES = {
    "orders": {"format": "json", "path": "landing/orders", "schema": "id BIGINT, pid BIGINT, qty INT, ts TIMESTAMP"},
    "returns": {"format": "json", "path": "landing/returns", "schema": "id BIGINT, qty INT, ts TIMESTAMP"},
    "products": {
        "format": "json",
        "path": "landing/products",
        "schema": "id BIGINT, category STRING, op STRING, seq BIGINT",
        "changes": FEED,
    },
}
VIEWS = {
    "tumbling_join": "SELECT window(o.ts, '10 minutes').start AS ws, window(o.ts, '10 minutes').end AS we, "
    "p.category, COUNT(*) AS n, SUM(o.qty) AS qty FROM {orders} o JOIN {products} p ON o.pid = p.id "
    "GROUP BY window(o.ts, '10 minutes'), p.category",
    "hopping_union": "SELECT window.start AS ws, window.end AS we, COUNT(*) AS n, SUM(x) AS s FROM "
    "(SELECT ts, qty AS x FROM {orders} UNION ALL SELECT ts, -qty AS x FROM {returns}) u "
    "GROUP BY window(ts, '10 minutes', '4 minutes')",
}
ids = iter(range(1, 100_000))


def row(minute: float | None, qty: int, pid: int | None = None) -> str:
    ts = None if minute is None else (T0 + timedelta(minutes=minute)).isoformat()
    return json.dumps({"id": next(ids), "qty": qty, "ts": ts, **({"pid": pid} if pid is not None else {})})


EPOCHS = [
    {
        "products": [change("c", p, category=("toys", "books")[p % 2]) for p in range(1, 5)],
        "orders": [row(m * 1.7, 1 + m % 4, 1 + m % 4) for m in range(30)] + [row(None, 5, 1), row(20, 3, 2)],
        "returns": [row(m * 3.1, 1) for m in range(8)],
    },
    {
        "products": [change("u", 2, category="games"), change("d", 3)],
        "orders": [row(40, 2, 2), row(44, 1, 3), row(None, 1, 4), row(10, 9, 1)],
    },
    {"products": [change("c", 3, category="toys")], "returns": [row(40, 2), row(12, 4)]},
]


def sparks_window(spark, project, view: str, sql: str, files: dict) -> Counter:
    """The view's SQL run by Spark (its own window()) over the inputs' current rows at the commit's frontier."""
    names = {}
    for source in ("orders", "returns", "products"):
        rows = oracle.source_rows(project, source, files.get(source, []))
        schema = project.sources[source].schema_
        names[source] = f"{view}_{source}"
        spark.createDataFrame(rows.to_pylist(), schema=schema).createOrReplaceTempView(names[source])
    frame = spark.sql(sql.format(**names))
    frame = frame.select(
        [
            F.unix_micros(c) if t == TimestampType() else F.col(c)
            for c, t in [(f.name, f.dataType) for f in frame.schema]
        ]
    )
    return Counter(tuple(plain(v) for v in r) for r in frame.collect())


def plain(value: object) -> object:
    """A timestamp as microseconds since the epoch, a number as an int (Spark's and DuckDB's SUM types differ)."""
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return value if isinstance(value, str) or value is None else int(value)


def micros(table: pa.Table) -> Counter:
    return Counter(tuple(plain(v) for v in r.values()) for r in table.to_pylist())


def test_windows_over_a_join_and_a_union_equal_sparks_window_after_every_epoch(
    spark, catalog_server: CatalogServer, make_project, unique_name: str
) -> None:
    names = {f"{unique_name[:40]}_{v}": v for v in VIEWS}
    plain = {n: VIEWS[v].format(orders="orders", returns="returns", products="products") for n, v in names.items()}
    views = {n: {"sql": sql, "cadence": "100ms", "namespace": NS} for n, sql in plain.items()}
    project = make_project(views=views, sources=SOURCES).model_copy(update={"spark": SparkConfig(**BOUNDS)})
    assert all(is_graph_view(project, n) for n in names)
    for source, lines in EPOCHS[0].items():  # the history, whole before the views start: their first batch
        land(project.source_path(source), "000.json", lines)
    started = {name: start(spark, project, name, catalog_server) for name in names}
    try:
        for number, batch in enumerate(EPOCHS):
            if number:
                for source, lines in batch.items():
                    land(project.source_path(source), f"{number:03d}.json", lines)
            for name, (pipeline, query) in started.items():
                query.processAllAvailable()
                if number == 0:
                    by_executors(pipeline)
                assert_recomputed(project, name, pipeline, catalog_server)
                files = oracle.frontier_files(project, name, pipeline.writer.last_commit().frontier)
                held = micros(read(project, name, catalog_server))
                expected = sparks_window(spark, project, names[name], VIEWS[names[name]], files)
                assert held == expected, f"{name} epoch {number}: extra {held - expected}, missing {expected - held}"
                assert held
    finally:
        for _, query in started.values():
            query.stop()
