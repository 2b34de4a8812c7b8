"""Incremental refresh vs full recompute, measured in one run on one machine.

For each history size: land the history, let the view's streaming query take it in (the
backfill), then land a small batch and time the incremental epoch (read the new file, merge,
commit one Iceberg snapshot through the REST catalog). Baselines over the same files: a Spark
batch recompute of the view and a DuckDB recompute. Prints a table with the ratios.

    .venv/bin/python bench/refresh.py [--history 100000,1000000] [--batch 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lakeview import oracle
from lakeview.config import parse_project
from lakeview.embedded import EmbeddedStack
from lakeview.generator import land_json, make_orders

SQL = "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id"
FILE_ROWS = 100_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", default="100000,1000000", help="comma-separated history sizes (orders)")
    parser.add_argument("--batch", type=int, default=1000, help="orders per incremental batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--products", type=int, default=10_000)
    args = parser.parse_args()
    console = Console()
    results = []
    for history in (int(h) for h in args.history.split(",")):
        results.append(run_one(history, args.batch, args.repeats, args.products, console))
    table = Table(title=f"incremental refresh of a {args.batch}-order batch vs full recompute (median of {args.repeats})")
    for col in ("history", "incremental s", "Spark recompute s", "DuckDB recompute s", "Spark/incr", "DuckDB/incr"):
        table.add_column(col, justify="right")
    for history, incr, spark_s, duck_s in results:
        table.add_row(f"{history:,}", f"{incr:.2f}", f"{spark_s:.2f}", f"{duck_s:.2f}", f"{spark_s / incr:.1f}x", f"{duck_s / incr:.1f}x")
    console.print(table)


def run_one(history: int, batch: int, repeats: int, products: int, console: Console) -> tuple[int, float, float, float]:
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-"))
    project = parse_project(
        {
            "sources": {"orders": {"format": "json", "path": "landing", "schema": "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"}},
            "views": {"sales": {"sql": SQL, "cadence": "100ms", "namespace": "bench"}},
        },
        root=root,
    )
    landing = project.source_path("orders")
    console.print(f"history {history:,}: generating files in {root} ...")
    for start in range(0, history, FILE_ROWS):
        land_json(landing, f"h{start:012d}.json", make_orders(min(FILE_ROWS, history - start), seed=start, first_id=start, products=products))
    with EmbeddedStack(project, port=0) as stack:
        stack.start_views()
        query = stack.queries["sales"]
        query.processAllAvailable()  # the backfill
        incremental = []
        for i in range(repeats):
            land_json(landing, f"b{i:06d}.json", make_orders(batch, seed=10_000_000 + i, first_id=10_000_000 + i * batch, products=products))
            started = time.perf_counter()
            query.processAllAvailable()
            incremental.append(time.perf_counter() - started)
        stack.stop_views()
        spark = stack.spark
        assert spark is not None
        spark_times = []
        for _ in range(repeats):
            started = time.perf_counter()
            spark.read.schema(project.sources["orders"].schema_).json(str(landing)).createOrReplaceTempView("orders")
            spark.sql(SQL).collect()
            spark_times.append(time.perf_counter() - started)
    duck_times = []
    for _ in range(repeats):
        started = time.perf_counter()
        oracle.recompute(project, "sales")
        duck_times.append(time.perf_counter() - started)
    return history, statistics.median(incremental), statistics.median(spark_times), statistics.median(duck_times)


if __name__ == "__main__":
    main()
