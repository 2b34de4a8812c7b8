"""A top-k view kept as an operator graph through the real pipeline, epoch vs history vs DuckDB's recompute.

The top 10 products of each category by revenue: ``orders`` (a change feed of ``--orders`` rows of
history, Parquet) JOIN ``products`` (a change feed of 10,000 products in 50 categories: Parquet files, so
the driver reads every source and no Spark job runs (:mod:`spark_jobs.driver_stream`), or with ``--feeds
json`` JSON files, read by one Spark query per epoch), ranked with
``ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue DESC, pid)``: a view the per-shape planner
refuses, kept by the embedded stack through :class:`spark_jobs.graph_pipeline.GraphPipeline` (Iceberg
tables for the view, every operator's state and the mirrors, one catalog transaction per epoch). After
the first batch, each epoch lands ``--batch`` new orders, ``--changes`` updated orders (a new amount)
and as many deleted ones, and moves ``--updates`` products to another category; it is timed from
landing to the view's snapshot committed; median of ``--repeats`` after one warm-up epoch. At the end
the view read back through the catalog (pyiceberg) must equal DuckDB's recompute of the same SQL over
the same files (each feed replayed to its current rows), which is also timed. Prints one table row per
``--orders`` size with the epoch's CPU seconds (this process and Spark's JVM: on a shared machine wall
times stretch several-fold) and the load average. ``--history-cache DIR`` keeps each size's history file
there and reuses it (:func:`bench._common.land_history`).

    .venv/bin/python bench/topk.py [--orders 200000 2000000] [--batch 10000] [--changes 100] [--updates 20] [--repeats 3]
        [--feeds json|parquet] [--history-cache DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from rich.console import Console
from rich.table import Table

from bench._common import (
    ChangeFeeds,
    current_rows,
    duckdb_seconds,
    land_history,
    median_phases,
    rss,
    spark_settings,
    timed_epochs,
    write_whole,
)
from lakeview.project import parse_project
from lakeview.sql.duck import connect
from lakeview.stack.embedded import EmbeddedStack

ORDERS = "id BIGINT, pid BIGINT, amount BIGINT, op STRING, seq BIGINT"
PRODUCTS = "id BIGINT, category STRING, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
PRODUCT_COUNT, CATEGORIES, K = 10_000, 50, 10
SQL = (
    "SELECT category, pid, revenue FROM (SELECT p.category, o.pid, SUM(o.amount) AS revenue, "
    "ROW_NUMBER() OVER (PARTITION BY p.category ORDER BY SUM(o.amount) DESC, o.pid) AS rn "
    f"FROM orders o JOIN products p ON o.pid = p.id GROUP BY p.category, o.pid) t WHERE rn <= {K}"
)
BATCH_IDS = 10_000_000_000  # new orders' ids and every epoch's sequence numbers start past the history's


def history_sql(count: int) -> str:
    """``count`` inserted orders (ids 0..count-1, ``seq`` = id + 1) over every product."""
    return (
        f"SELECT i AS id, 1 + (i * 7919) % {PRODUCT_COUNT} AS pid, CAST(1 + hash(i) % 100 AS BIGINT) AS amount, "
        f"'c' AS op, i + 1 AS seq FROM range(0, {count}) t(i)"
    )


class Orders:
    """The orders change feed's epochs: new orders, updates and deletes of history orders (each touched once)."""

    def __init__(self, directory: Path, history: int, rng: random.Random) -> None:
        self.directory, self.history, self.rng = directory, history, rng
        self.touched: set[int] = set()

    def land(self, i: int, batch: int, changes: int) -> None:
        victims: list[int] = []
        while len(victims) < 2 * changes:
            order = self.rng.randrange(self.history)
            if order not in self.touched:
                self.touched.add(order)
                victims.append(order)
        first = BATCH_IDS + i * batch
        ids = list(range(first, first + batch)) + victims
        pids = [1 + self.rng.randrange(PRODUCT_COUNT) for _ in range(batch)]
        pids += [1 + (v * 7919) % PRODUCT_COUNT for v in victims[:changes]] + [None] * changes  # a delete: key only
        amounts = [1 + self.rng.randrange(100) for _ in range(batch + changes)] + [None] * changes
        ops = ["c"] * batch + ["u"] * changes + ["d"] * changes
        seq = [BATCH_IDS * (i + 2) + n for n in range(len(ids))]
        rows = pa.table(
            {"id": ids, "pid": pids, "amount": amounts, "op": ops, "seq": seq},
            schema=pa.schema(
                [
                    ("id", pa.int64()),
                    ("pid", pa.int64()),
                    ("amount", pa.int64()),
                    ("op", pa.string()),
                    ("seq", pa.int64()),
                ]
            ),
        )
        tmp = self.directory / f".b-{i:06d}.parquet.tmp"
        pq.write_table(rows, tmp)
        tmp.rename(self.directory / f"b-{i:06d}.parquet")  # appear whole


class Products:
    """The products change feed: every product inserted, then products moved to another category."""

    def __init__(self, directory: Path, rng: random.Random, parquet: bool) -> None:
        self.directory, self.rng, self.feeds = directory, rng, ChangeFeeds(parquet)
        self.feeds.land(directory, "p", [self._row("c", p) for p in range(1, PRODUCT_COUNT + 1)])

    def _row(self, op: str, product: int) -> dict:
        return {"id": product, "category": f"c{self.rng.randrange(CATEGORIES)}", "op": op}

    def move(self, count: int) -> None:
        self.feeds.land(
            self.directory, "p", [self._row("u", 1 + self.rng.randrange(PRODUCT_COUNT)) for _ in range(count)]
        )


def run(size: int, args: argparse.Namespace) -> tuple[float, float, float, float, dict, str, dict]:
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-topk-"))
    orders_dir, products_dir = root / "landing" / "orders", root / "landing" / "products"
    rng = random.Random(7)
    land_history(orders_dir, "topk-orders", size, lambda path: write_whole(path, history_sql(size)), args.history_cache)
    orders, products = Orders(orders_dir, size, rng), Products(products_dir, rng, args.feeds == "parquet")
    project = parse_project(
        {
            "server": {"port": 0},
            # the first batch of a change feed is collected through Spark (spark_jobs/source_frames.py): at 2M
            # orders the default 1 GB driver loses the task's result (TaskResultLost)
            "spark": {"conf": {"spark.driver.memory": args.driver_memory}, **spark_settings(args)},
            "sources": {
                "orders": {"format": "parquet", "path": str(orders_dir), "schema": ORDERS, "changes": FEED},
                "products": {"format": args.feeds, "path": str(products_dir), "schema": PRODUCTS, "changes": FEED},
            },
            "views": {"topk": {"sql": SQL, "cadence": "100ms", "namespace": "bench"}},
        },
        root=root / "project",
    )
    relations = [
        current_rows("orders", f"read_parquet('{orders_dir}/*.parquet')"),
        current_rows("products", products_scan(products_dir, args.feeds)),
    ]
    verdict: list[str] = []

    def land(i: int) -> None:
        orders.land(i, args.batch, args.changes)
        products.move(args.updates)

    def check(stack: EmbeddedStack) -> None:
        """The view read back through the catalog against DuckDB's recompute (a multiset of rows)."""
        catalog = RestCatalog("bench", uri=stack.catalog_uri, warehouse="lakeview")
        view = catalog.load_table(("bench", "topk")).scan().to_arrow()
        con = connect()
        for statement in relations:
            con.execute(statement)
        expected = Counter(con.execute(SQL).fetchall())
        con.close()
        got = Counter(zip(*(view.column(c).to_pylist() for c in ("category", "pid", "revenue"))))
        verdict.append(
            "equal" if got == expected else f"DIFFERS ({len(got - expected)} extra, {len(expected - got)} missing)"
        )

    try:
        backfill: dict[str, object] = {}
        first, epochs = timed_epochs(project, "topk", land, args.repeats, check, first_batch=backfill)
        duck = duckdb_seconds(relations, SQL, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cpu = statistics.median(p["cpu_s"] for _, p in epochs)
    wall = statistics.median(s for s, _ in epochs)
    return first, wall, cpu, statistics.median(duck), median_phases(epochs), verdict[0], backfill


def products_scan(directory: Path, feeds: str) -> str:
    """DuckDB's scan of the products feed's files."""
    if feeds == "parquet":
        return f"read_parquet('{directory}/*.parquet')"
    return f"read_json('{directory}/*.json', columns = {{{_columns(PRODUCTS)}}})"


def _columns(ddl: str) -> str:
    """A Spark DDL column list as DuckDB's ``columns = {…}`` entries."""
    types = {"BIGINT": "BIGINT", "STRING": "VARCHAR"}
    return ", ".join(f"'{name}': '{types[kind]}'" for name, kind in (c.split() for c in ddl.split(", ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[200_000, 2_000_000], help="orders of history")
    parser.add_argument("--batch", type=int, default=10_000, help="new orders per epoch")
    parser.add_argument("--changes", type=int, default=100, help="orders updated, and as many deleted, per epoch")
    parser.add_argument("--updates", type=int, default=20, help="products moved to another category per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--driver-keys-max",
        type=int,
        default=None,
        help="[spark] driver_keys_max (past it, the orders mirror is not held: looked up by its row groups' key ranges)",
    )
    parser.add_argument("--history-cache", type=Path, help="keep each size's history file here and reuse it")
    parser.add_argument(
        "--feeds", choices=["json", "parquet"], default="parquet",
        help="the products change feed's files (parquet: every source is read by the driver, no Spark job)",
    )  # fmt: skip
    parser.add_argument(
        "--driver-memory", default="4g", help="spark.driver.memory (the first batch goes through Spark)"
    )
    parser.add_argument(
        "--driver-rows-max", type=int, default=None,
        help="[spark] driver_rows_max: a larger first batch is computed by Spark and written by the executors "
        "(default: the config's; 10**12: stepped in the driver)",
    )  # fmt: skip
    args = parser.parse_args()
    console = Console(width=200)
    load_start = os.getloadavg()
    rows = []
    for size in args.orders:
        first, epoch, cpu, recompute, phases, verdict, backfill = run(size, args)
        console.print(f"{size:,} orders: phases (median): {phases}; view vs DuckDB's recompute: {verdict}")
        rows.append((size, first, backfill, epoch, cpu, recompute, verdict))
    table = Table(
        title=f"top {K} products per category by revenue, orders (change feed) ⋈ products (change feed), operator "
        f"graph: one epoch of {args.batch:,} new orders, {args.changes} updated, {args.changes} deleted, "
        f"{args.updates} products moved ({args.feeds} products feed); median of {args.repeats}; load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    for col in (
        "orders",
        "first batch s",
        "first batch by",
        "peak RSS MB driver / JVM",
        "epoch s",
        "epoch CPU s",
        "DuckDB recompute s",
        "DuckDB/epoch",
        "view",
    ):
        table.add_column(col, justify="right")
    for size, first, backfill, epoch, cpu, recompute, verdict in rows:
        table.add_row(
            f"{size:,}",
            f"{first:.1f}",
            str(backfill["by"]),
            rss(backfill),
            f"{epoch:.3f}",
            f"{cpu:.3f}",
            f"{recompute:.3f}",
            f"{recompute / epoch:.2f}×",
            verdict,
        )
    console.print(table)
    if any(verdict != "equal" for *_, verdict in rows):
        raise SystemExit("the maintained top-k differs from DuckDB's recompute")


if __name__ == "__main__":
    main()
