"""Incremental refresh vs full recompute, measured in one run on one machine.

For each history size the orders history is generated once (JSON files; product_id among
``--products`` distinct values). For each view: a fresh lake, the view's streaming query takes
the history in (the backfill), then a batch of ``--batch`` orders lands and the incremental
epoch is timed (read the new file, compute the delta, look up the touched groups' state,
merge, commit the snapshot(s) through the REST catalog); repeated ``--repeats`` times.
Baselines: a hand-written Spark ``MERGE INTO`` of a batch's aggregate into a copy of the
view (``sales`` only), and over the same files a Spark batch recompute of the view (``collect``) and a
DuckDB recompute (``read_json`` + the view's SQL). Prints a table with the ratios.

Views: ``sales`` (SUM, COUNT(*): merged into the view's own rows) and ``stats`` (AVG, MIN,
MAX, COUNT(DISTINCT): kept in Lakeview state tables, as any view over a change feed is).

    .venv/bin/python bench/refresh.py [--history 1000000,10000000] [--batch 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import sqlglot

from lakeview.config import parse_project
from lakeview.embedded import EmbeddedStack
from lakeview.duck import connect
from lakeview.generator import land_json, make_orders
from lakeview.schema import duckdb_columns

VIEWS = {
    "sales": "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id",
    "stats": "SELECT product_id, AVG(quantity) AS avg_q, MIN(ts) AS first_ts, MAX(quantity) AS most, "
    "COUNT(DISTINCT quantity) AS sizes FROM orders GROUP BY product_id",
}
SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"
FILE_ROWS = 250_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", default="1000000,10000000", help="comma-separated history sizes (orders)")
    parser.add_argument("--batch", type=int, default=10_000, help="orders per incremental batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--views", default=",".join(VIEWS), help=f"comma-separated, of {', '.join(VIEWS)}")
    args = parser.parse_args()
    console = Console()
    results = []
    for history in (int(h) for h in args.history.split(",")):
        landing = Path(tempfile.mkdtemp(prefix="lakeview-bench-landing-"))
        started = time.perf_counter()
        for start in range(0, history, FILE_ROWS):
            land_json(landing, f"h{start:012d}.json", make_orders(min(FILE_ROWS, history - start), seed=start, first_id=start, products=args.products))
        console.print(f"history {history:,}: generated in {time.perf_counter() - started:.0f} s ({landing})")
        for view in args.views.split(","):
            results.append((view, *run_one(view, landing, history, args, console)))
            console.print(results[-1])
        shutil.rmtree(landing, ignore_errors=True)
    table = Table(title=f"incremental refresh of a {args.batch:,}-order batch vs full recompute (median of {args.repeats}; "
                        f"{args.products:,} products)")
    for col in ("view", "history", "backfill s", "incremental s", "Spark MERGE s", "Spark recompute s", "DuckDB recompute s",
                "MERGE/incr", "Spark/incr", "DuckDB/incr"):
        table.add_column(col, justify="right")
    for view, history, backfill, incr, merge, spark_s, duck_s in results:
        table.add_row(view, f"{history:,}", f"{backfill:.1f}", f"{incr:.2f}", f"{merge:.2f}", f"{spark_s:.2f}", f"{duck_s:.2f}",
                      f"{merge / incr:.1f}x", f"{spark_s / incr:.1f}x", f"{duck_s / incr:.1f}x")
    console.print(table)


def run_one(view: str, landing: Path, history: int, args: argparse.Namespace, console: Console) -> tuple[int, float, float, float, float, float]:
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-"))
    sql = VIEWS[view]
    project = parse_project(
        {
            "server": {"port": 0},
            "sources": {"orders": {"format": "json", "path": str(landing), "schema": SCHEMA}},
            "views": {view: {"sql": sql, "cadence": "100ms", "namespace": "bench"}},
        },
        root=root,
    )
    batch_files = []
    with EmbeddedStack(project, port=0) as stack:
        started = time.perf_counter()
        stack.start_views()
        query = stack.queries[view]
        query.processAllAvailable()  # the backfill
        backfill = time.perf_counter() - started
        incremental = []
        for i in range(args.repeats):
            first = 100_000_000 + i * args.batch
            batch_files.append(land_json(landing, f"b-{view}-{i:06d}.json", make_orders(args.batch, seed=first, first_id=first, products=args.products)))
            started = time.perf_counter()
            query.processAllAvailable()
            incremental.append(time.perf_counter() - started)
        phases = dict(stack.pipelines[view].timings)  # the last incremental epoch, by phase
        console.print(f"{view} @ {history:,}: last incremental epoch by phase: {({k: round(v, 2) for k, v in phases.items()})}")
        stack.stop_views()
        spark = stack.spark
        assert spark is not None
        merge_times = hand_written_merge(spark, view, landing, args) if view == "sales" else []
        spark_times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            spark.read.schema(SCHEMA).json(str(landing)).createOrReplaceTempView("orders")
            spark.sql(sql).collect()
            spark_times.append(time.perf_counter() - started)
        spark.stop()
    duck_times = []
    spec = "{" + ", ".join(f"'{n}': '{t}'" for n, t in duckdb_columns(SCHEMA).items()) + "}"
    duck_sql = sqlglot.transpile(sql, read="spark", write="duckdb")[0]
    for _ in range(args.repeats):
        con = connect()
        started = time.perf_counter()
        con.execute(f"CREATE TEMP VIEW orders AS SELECT * FROM read_json('{landing}/*.json', columns={spec}, format='newline_delimited')")
        con.execute(duck_sql).to_arrow_table()
        duck_times.append(time.perf_counter() - started)
        con.close()
    for f in batch_files:
        f.unlink()
    shutil.rmtree(root, ignore_errors=True)
    merge = statistics.median(merge_times) if merge_times else float("nan")
    return history, backfill, statistics.median(incremental), merge, statistics.median(spark_times), statistics.median(duck_times)


def hand_written_merge(spark, view: str, landing: Path, args: argparse.Namespace) -> list[float]:  # noqa: ANN001
    """The baseline the issue names: Spark ``MERGE INTO`` a copy of the view of one batch's
    aggregate (Iceberg copy-on-write, through the same REST catalog)."""
    spark.sql(f"CREATE OR REPLACE TABLE lakeview.bench.{view}_merge USING iceberg AS SELECT * FROM lakeview.bench.{view}")
    times = []
    for i in range(args.repeats):
        first = 200_000_000 + i * args.batch
        path = land_json(landing.parent / f"{landing.name}-merge", f"m{i}.json", make_orders(args.batch, seed=first, first_id=first, products=args.products))
        started = time.perf_counter()
        batch = spark.read.schema(SCHEMA).json(str(path))
        batch.groupBy("product_id").agg({"quantity": "sum", "*": "count"}).toDF("product_id", "total_sold", "orders").persist().createOrReplaceTempView("delta")
        spark.sql(
            f"MERGE INTO lakeview.bench.{view}_merge t USING delta d ON t.product_id = d.product_id "
            "WHEN MATCHED THEN UPDATE SET t.total_sold = t.total_sold + d.total_sold, t.orders = t.orders + d.orders "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        times.append(time.perf_counter() - started)
        path.unlink()
    return times


if __name__ == "__main__":
    main()
