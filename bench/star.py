"""A star-schema view kept as an operator graph, epoch vs history vs DuckDB's recompute, in one run.

``orders`` (``--orders`` rows of history, Parquet, append-only) JOIN ``products``, ``customers`` and
``regions`` (change feeds landed as Parquet, so no Spark job runs at all: :mod:`spark_jobs.driver_stream`;
``--feeds json``: JSON files, read by one Spark query per epoch), ``GROUP BY region, category``: a view the per-shape planner refuses,
kept by the embedded stack through :class:`spark_jobs.graph_pipeline.GraphPipeline` (Iceberg tables for
the view, every operator's state and the mirrors, one catalog transaction per epoch). After the first
batch, each epoch lands ``--batch`` new orders plus ``--updates`` updates on each dimension and is timed
from landing to the view's snapshot committed; median of ``--repeats`` after one warm-up epoch. In the
same run: DuckDB recomputing the view's SQL over the same files (dimensions replayed to their current
rows). Prints one table row per ``--orders`` size; the epoch's phases come from the pipeline's timings, its
CPU seconds from this process and Spark's JVM (on a shared machine wall times stretch several-fold).

    .venv/bin/python bench/star.py [--orders 200000 2000000] [--batch 10000] [--updates 20] [--repeats 3]
        [--feeds parquet|json] [--history-cache DIR] [--explain] [--profile FILE]

``--explain`` prints the view's operator graph after the last epoch (each operator's state rows and what its
step took); ``--profile FILE`` (needs the `bench` extra: `pip install -e .[bench]`) writes a pyinstrument profile (text) of every trigger of the driver's stream
after the first batch (pyinstrument is not a dependency: ``.venv/bin/pip install pyinstrument``).
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
    current_rows,
    duckdb_seconds,
    land_history,
    median_phases,
    profiled,
    rss,
    spark_settings,
    timed_epochs,
    write_whole,
)
from lakeview.project import parse_project

ORDERS = "id BIGINT, pid BIGINT, cid BIGINT, qty INT"
FEED = {"operation": "op", "key": ["id"], "sequence": "seq", "insert": ["c"], "update": ["u"], "delete": ["d"]}
DIMENSIONS = {  # name: (schema, rows at the start)
    "products": ("id BIGINT, category STRING, price DOUBLE, op STRING, seq BIGINT", 10_000),
    "customers": ("id BIGINT, rid BIGINT, op STRING, seq BIGINT", 10_000),
    "regions": ("id BIGINT, region STRING, op STRING, seq BIGINT", 10),
}
SQL = (
    "SELECT r.region, p.category, COUNT(*) n, SUM(o.qty*p.price) revenue FROM orders o "
    "JOIN products p ON o.pid=p.id JOIN customers c ON o.cid=c.id JOIN regions r ON c.rid=r.id "
    "GROUP BY r.region, p.category"
)
BATCH_IDS = 10_000_000_000


def values(name: str, rng: random.Random) -> dict[str, object]:
    if name == "products":
        return {"category": f"c{rng.randrange(50)}", "price": round(rng.uniform(1, 100), 2)}
    if name == "customers":
        return {"rid": 1 + rng.randrange(DIMENSIONS["regions"][1])}
    return {"region": f"r{rng.randrange(1000)}"}


class Feeds:
    """The dimensions' change feeds: JSON or Parquet files of insert/update rows, sequenced."""

    def __init__(self, landing: Path, rng: random.Random, parquet: bool) -> None:
        self.landing, self.rng, self.feeds = landing, rng, ChangeFeeds(parquet)

    def land(self, name: str, rows: list[tuple[str, int]]) -> None:
        rows_ = [{"id": key, "op": op, **values(name, self.rng)} for op, key in rows]
        self.feeds.land(self.landing / name, "f", rows_)


def land_orders(path: Path, count: int, first_id: int) -> None:
    """``count`` orders over every product and customer as the Parquet file ``path`` (written whole)."""
    products, customers = DIMENSIONS["products"][1], DIMENSIONS["customers"][1]
    write_whole(
        path,
        f"SELECT i AS id, 1 + (i * 7919) % {products} AS pid, 1 + (i * 104729) % {customers} AS cid, "
        f"CAST(1 + i % 5 AS INT) AS qty FROM range({first_id}, {first_id + count}) t(i)",
    )


def run(size: int, args: argparse.Namespace) -> tuple[float, float, tuple[float, float], float, dict, dict]:
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-star-"))
    landing = root / "landing"
    rng = random.Random(7)
    land_history(landing / "orders", "orders", size, lambda path: land_orders(path, size, 0), args.history_cache)
    parquet = args.feeds == "parquet"
    feeds = Feeds(landing, rng, parquet)
    for name, (_, rows) in DIMENSIONS.items():
        feeds.land(name, [("c", k) for k in range(1, rows + 1)])
    sources = {"orders": {"format": "parquet", "path": str(landing / "orders"), "schema": ORDERS}}
    for name, (schema, _) in DIMENSIONS.items():
        sources[name] = {"format": args.feeds, "path": str(landing / name), "schema": schema, "changes": FEED}
    project = parse_project(
        {
            "server": {"port": 0},
            "spark": spark_settings(args),
            "sources": sources,
            "views": {"star": {"sql": SQL, "cadence": "100ms", "namespace": "bench"}},
        },
        root=root / "project",
    )

    def land(i: int) -> None:
        land_orders(landing / "orders" / f"b-{i:06d}.parquet", args.batch, BATCH_IDS + i * args.batch)
        for name, (_, rows) in DIMENSIONS.items():
            feeds.land(name, [("u", 1 + rng.randrange(rows)) for _ in range(args.updates)])

    def explain(stack) -> None:  # type: ignore[no-untyped-def]
        if args.explain:
            from lakeview.graph import explain as explained

            print(explained(stack.pipelines["star"].graph), file=sys.stderr)

    try:
        backfill: dict[str, object] = {}
        with profiled(args.profile, size):
            first, epochs = timed_epochs(project, "star", land, args.repeats, explain, first_batch=backfill)
        relations = [f"CREATE TEMP VIEW orders AS SELECT * FROM read_parquet('{landing}/orders/*.parquet')"]
        reader = "read_parquet" if parquet else "read_json_auto"
        relations += [current_rows(name, f"{reader}('{landing}/{name}/*.{args.feeds}')") for name in DIMENSIONS]
        duck = duckdb_seconds(relations, SQL, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    phases = median_phases(epochs)
    cpu = statistics.median(p["cpu_s"] for _, p in epochs), statistics.mean(p["cpu_s"] for _, p in epochs)
    return first, statistics.median(s for s, _ in epochs), cpu, statistics.median(duck), phases, backfill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[200_000, 2_000_000], help="orders of history")
    parser.add_argument("--batch", type=int, default=10_000, help="new orders per epoch")
    parser.add_argument("--updates", type=int, default=20, help="updates on each dimension per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--history-cache", type=Path, help="keep each size's history file here and reuse it")
    parser.add_argument(
        "--feeds", choices=["json", "parquet"], default="parquet",
        help="the dimensions' change-feed files (parquet: every source is read by the driver, no Spark job)",
    )  # fmt: skip
    parser.add_argument(
        "--driver-rows-max", type=int, default=None,
        help="[spark] driver_rows_max: a larger first batch is computed by Spark and written by the executors "
        "(default: the config's; 10**12: stepped in the driver)",
    )  # fmt: skip
    parser.add_argument("--explain", action="store_true", help="print the operator graph after the last epoch")
    parser.add_argument("--profile", type=Path, help="write a pyinstrument profile of the epochs (one file per size)")
    args = parser.parse_args()
    console = Console(width=200)
    load_start = os.getloadavg()
    rows = []
    for size in args.orders:
        first, epoch, cpu, recompute, phases, backfill = run(size, args)
        console.print(f"{size:,} orders: phases (median): {phases}")
        rows.append((size, first, epoch, cpu, recompute, backfill))
    table = Table(
        title=f"orders ⋈ products ⋈ customers ⋈ regions GROUP BY region, category (operator graph): one epoch of "
        f"{args.batch:,} orders + {args.updates} updates per dimension ({args.feeds} change feeds); "
        f"median of {args.repeats}; "
        f"load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    columns = ("orders", "first batch s", "first batch by", "peak RSS MB driver / JVM", "epoch s", "epoch CPU s",
               "mean CPU s", "DuckDB recompute s", "DuckDB/epoch")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="right")
    for size, first, epoch, (cpu, mean_cpu), recompute, backfill in rows:
        table.add_row(
            f"{size:,}", f"{first:.1f}", str(backfill["by"]), rss(backfill), f"{epoch:.3f}", f"{cpu:.3f}", f"{mean_cpu:.3f}", f"{recompute:.3f}",
            f"{recompute / epoch:.2f}×",
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
