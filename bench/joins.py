"""A join view's incremental epoch vs its full recompute, measured in one run.

``orders`` (``--orders`` rows of history, Parquet, append-only) JOIN ``products`` (``--products``
rows, a change feed keyed by ``product_id``, landed as Parquet files: ``--feeds json``, JSON lines) with a
``GROUP BY category`` on top, kept by
the embedded stack (:class:`lakeview.stack.embedded.EmbeddedStack`: the REST catalog, one streaming
query over both sources, Iceberg tables for the view, its state, the join sides and the
products mirror). After the backfill, each epoch lands ``--batch`` new orders and
``--updates`` product updates (category changes, which move every order of those products)
and is timed from landing to the view's snapshot committed; median of ``--repeats`` after one
warm-up epoch. In the same run: a DuckDB full recompute of the view's SQL over the same files
(products replayed to their current rows). Prints a table; the epoch's phases come from the
pipeline's own timings, its CPU seconds from this process and Spark's JVM (on a shared machine wall
times stretch several-fold).

    .venv/bin/python bench/joins.py [--orders 200000] [--products 10000] [--batch 10000] [--updates 20] [--repeats 3]
        [--feeds parquet|json] [--history-cache DIR] [--profile FILE]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench._common import (
    ChangeFeeds,
    cpu_seconds,
    current_rows,
    duckdb_seconds,
    land_history,
    median_phases,
    profiled,
    rss,
    timed_epochs,
)
from bench.history import SCHEMA as ORDERS
from bench.history import land_parquet
from lakeview.project import parse_project

PRODUCTS = "product_id BIGINT, category STRING, op STRING, seq BIGINT"
FEED = {"operation": "op", "key": ["product_id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
SQL = """SELECT p.category AS category, SUM(o.quantity) AS sold, COUNT(*) AS orders
FROM orders AS o JOIN products AS p ON o.product_id = p.product_id
GROUP BY p.category"""
CATEGORIES = 50
BATCH_IDS = 10_000_000_000


class Feed:
    """The products change feed: Parquet or JSON files of insert/update rows, sequenced."""

    def __init__(self, landing: Path, rng: random.Random, parquet: bool) -> None:
        self.landing = landing
        self.rng = rng
        self.feeds = ChangeFeeds(parquet)

    def land(self, rows: list[tuple[str, int, str]]) -> None:
        self.feeds.land(self.landing, "p", [{"product_id": p, "category": c, "op": op} for op, p, c in rows])

    def updates(self, products: int, count: int) -> None:
        self.land([("u", 1 + self.rng.randrange(products), f"c{self.rng.randrange(CATEGORIES)}") for _ in range(count)])


def products_scan(directory: Path, feeds: str) -> str:
    """DuckDB's scan of the products feed's files."""
    if feeds == "parquet":
        return f"read_parquet('{directory}/*.parquet')"
    columns = "{'product_id': 'BIGINT', 'category': 'VARCHAR', 'op': 'VARCHAR', 'seq': 'BIGINT'}"
    return f"read_json('{directory}/*.json', columns = {columns})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=200_000, help="orders of history")
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10_000, help="new orders per epoch")
    parser.add_argument("--updates", type=int, default=20, help="product updates per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--history-cache", type=Path, help="keep each size's history file here and reuse it")
    parser.add_argument(
        "--feeds", choices=["json", "parquet"], default="parquet",
        help="the products change-feed files (either way the driver reads every source: no Spark job per epoch)",
    )  # fmt: skip
    parser.add_argument("--profile", type=Path, help="write a pyinstrument profile (text) of the timed epochs")
    args = parser.parse_args()
    console = Console(width=200)
    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-joins-"))
    orders_dir, products_dir = root / "landing" / "orders", root / "landing" / "products"
    rng = random.Random(7)
    land_history(
        orders_dir,
        f"joins-orders-p{args.products}",
        args.orders,
        lambda path: land_parquet(path.parent, path.name, args.orders, first_id=0, products=args.products),
        args.history_cache,
    )
    feed = Feed(products_dir, rng, args.feeds == "parquet")
    feed.land(
        [("c", p, f"c{rng.randrange(CATEGORIES)}") for p in range(1, args.products + 1)]
    )  # product_id 1..products, as the orders
    project = parse_project(
        {
            "server": {"port": 0},
            "sources": {
                "orders": {"format": "parquet", "path": str(orders_dir), "schema": ORDERS},
                "products": {"format": args.feeds, "path": str(products_dir), "schema": PRODUCTS, "changes": FEED},
            },
            "views": {"by_category": {"sql": SQL, "cadence": "100ms", "namespace": "bench"}},
        },
        root=root / "project",
    )

    def land(i: int) -> None:
        first_id = BATCH_IDS + i * args.batch
        land_parquet(orders_dir, f"b-{i:06d}.parquet", args.batch, first_id=first_id, products=args.products)
        feed.updates(args.products, args.updates)

    try:
        first_batch: dict[str, object] = {}
        with profiled(args.profile, args.orders):
            backfill, epochs = timed_epochs(project, "by_category", land, args.repeats, first_batch=first_batch)
        relations = [
            f"CREATE TEMP VIEW orders AS SELECT * FROM read_parquet('{orders_dir}/*.parquet')",
            current_rows("products", products_scan(products_dir, args.feeds), key="product_id"),
        ]
        duck = duckdb_seconds(relations, SQL, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    incremental = statistics.median(s for s, _ in epochs)
    cpu, mean_cpu = cpu_seconds(epochs)
    table = Table(
        title=f"orders ⋈ products ({args.feeds} change feed) GROUP BY category: one epoch of {args.batch:,} orders + "
        f"{args.updates} product updates; median of {args.repeats}; load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    columns = ("orders", "products", "first batch s", "first batch by", "peak RSS MB driver / JVM", "epoch s",
               "epoch CPU s", "mean CPU s", "DuckDB recompute s", "DuckDB/epoch")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="right")
    recompute = statistics.median(duck)
    table.add_row(
        f"{args.orders:,}", f"{args.products:,}", f"{backfill:.1f}", str(first_batch["by"]), rss(first_batch),
        f"{incremental:.3f}", f"{cpu:.3f}", f"{mean_cpu:.3f}", f"{recompute:.3f}", f"{recompute / incremental:.2f}×",
    )  # fmt: skip
    console.print(f"epochs (s): {[round(s, 3) for s, _ in epochs]}; phases (median): {median_phases(epochs)}")
    console.print(table)


if __name__ == "__main__":
    main()
