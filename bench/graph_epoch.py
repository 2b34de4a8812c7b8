"""One star-schema view kept by the operator graph (lakeview.graph, in-memory state), epoch time vs history.

``orders`` ⋈ ``products`` ⋈ ``customers`` ⋈ ``regions``, GROUP BY region, category. After a backfill of
``--orders`` rows (one big first epoch), each epoch lands ``--batch`` new orders plus ``--updates`` updates on
each dimension; the median of ``--repeats`` epochs is printed next to DuckDB's full recompute of the same SQL
over the same (arrow) inputs, with and without eager aggregation; the maintained view is checked equal to
the recompute. Pure Python + DuckDB: no Spark, no catalog,
no table format, so this measures the graph's rules and the in-memory store only. Epochs are timed as wall
and as this process's CPU seconds (the graph's DuckDB runs on one thread), as the machine may be shared.

    .venv/bin/python bench/graph_epoch.py [--orders 2000000 10000000] [--batch 10000] [--updates 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakeview.graph import WEIGHT, compile_view, explain, step

SCHEMAS = {
    "orders": pa.schema(
        [("order_id", pa.int64()), ("product_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.int64())]
    ),
    "products": pa.schema([("product_id", pa.int64()), ("category", pa.string())]),
    "customers": pa.schema([("customer_id", pa.int64()), ("region_id", pa.int64())]),
    "regions": pa.schema([("region_id", pa.int64()), ("region", pa.string())]),
}
SQL = """SELECT r.region, p.category, SUM(o.amount) AS revenue, COUNT(*) AS orders
FROM orders o JOIN products p ON o.product_id = p.product_id
JOIN customers c ON o.customer_id = c.customer_id JOIN regions r ON c.region_id = r.region_id
GROUP BY r.region, p.category"""
PRODUCTS, CUSTOMERS, REGIONS, CATEGORIES = 1_000, 10_000, 10, 20


def zset(name: str, columns: dict[str, list | pa.Array], weight: int | list[int] = 1) -> pa.Table:
    n = len(next(iter(columns.values())))
    weights = pa.array(weight, pa.int64()) if isinstance(weight, list) else pa.repeat(pa.scalar(weight, pa.int64()), n)
    return pa.table({**columns, WEIGHT: weights}, schema=SCHEMAS[name].append(pa.field(WEIGHT, pa.int64())))


def uniform(r: random.Random, n: int, high: int) -> pa.Array:
    """``n`` integers uniform in [0, high), seeded from ``r``."""
    draws = pc.random(n, initializer=r.randrange(1 << 31))
    return pc.cast(pc.floor(pc.multiply(draws, high)), pa.int64())


class Star:
    def __init__(self, orders: int, r: random.Random) -> None:
        self.r = r
        self.products = {i: f"cat{r.randrange(CATEGORIES)}" for i in range(PRODUCTS)}
        self.customers = {i: r.randrange(REGIONS) for i in range(CUSTOMERS)}
        self.regions = {i: f"region{i}" for i in range(REGIONS)}
        self.order_chunks: list[pa.Table] = []
        self.next_order = 0

    def new_orders(self, n: int) -> dict[str, pa.Array]:
        """``n`` orders with uniformly random products, customers and amounts (pyarrow's generator: 50M rows in
        seconds, no Python loop)."""
        ids = pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), self.next_order - 1)
        self.next_order += n
        return {
            "order_id": ids,
            "product_id": uniform(self.r, n, PRODUCTS),
            "customer_id": uniform(self.r, n, CUSTOMERS),
            "amount": pc.add(uniform(self.r, n, 99), 1),
        }

    def backfill(self, n: int) -> dict[str, pa.Table]:
        orders = zset("orders", self.new_orders(n))
        self.order_chunks.append(orders)
        return {
            "orders": orders,
            "products": zset("products", {"product_id": list(self.products), "category": list(self.products.values())}),
            "customers": zset(
                "customers", {"customer_id": list(self.customers), "region_id": list(self.customers.values())}
            ),
            "regions": zset("regions", {"region_id": list(self.regions), "region": list(self.regions.values())}),
        }

    def epoch(self, batch: int, updates: int) -> dict[str, pa.Table]:
        orders = zset("orders", self.new_orders(batch))
        self.order_chunks.append(orders)
        out = {"orders": orders}
        for name, table, new in (
            ("products", self.products, lambda: f"cat{self.r.randrange(CATEGORIES)}"),
            ("customers", self.customers, lambda: self.r.randrange(REGIONS)),
            ("regions", self.regions, lambda: f"region{self.r.randrange(1000)}"),
        ):
            keys = self.r.sample(sorted(table), min(updates, len(table)))
            old = [table[k] for k in keys]
            for k in keys:
                table[k] = new()
            cols = SCHEMAS[name].names
            out[name] = zset(
                name,
                {cols[0]: keys + keys, cols[1]: old + [table[k] for k in keys]},
                [-1] * len(keys) + [1] * len(keys),
            )
        return out

    def recompute(self) -> tuple[float, float, set]:
        """DuckDB's full recompute of the view (all its threads): wall and CPU seconds, and its rows."""
        con = duckdb.connect()
        con.register("orders", pa.concat_tables(self.order_chunks).drop_columns([WEIGHT]))
        for name, table in (("products", self.products), ("customers", self.customers), ("regions", self.regions)):
            cols = SCHEMAS[name].names
            con.register(name, pa.table({cols[0]: list(table), cols[1]: list(table.values())}))
        wall, cpu = time.perf_counter(), time.process_time()
        rows = con.execute(SQL).fetchall()
        return time.perf_counter() - wall, time.process_time() - cpu, {(a, b, int(c), int(d)) for a, b, c, d in rows}


@dataclass
class Result:
    backfill: float
    epochs: list[float]  # wall seconds per epoch
    epochs_cpu: list[float]  # this process's CPU seconds per epoch (the graph runs DuckDB on one thread)
    recompute: float
    recompute_cpu: float


def timed_epochs(graph, make_delta, keep, repeats: int) -> tuple[list[float], list[float]]:
    """Run ``repeats`` epochs; wall and CPU seconds of each ``step`` alone (not the delta's making)."""
    walls, cpus = [], []
    for _ in range(repeats):
        deltas = make_delta()
        wall, cpu = time.perf_counter(), time.process_time()
        out = step(graph, deltas)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        keep(out)
    return walls, cpus


def run(orders: int, eager: bool, args: argparse.Namespace) -> Result:
    """Backfill, timed epochs, recompute; exits if the view is not the recompute's."""
    star = Star(orders, random.Random(7))
    sizes = {"orders": orders, "products": PRODUCTS, "customers": CUSTOMERS, "regions": REGIONS}
    graph = compile_view(SQL, SCHEMAS, sizes=sizes, eager=eager)
    view: Counter = Counter()

    def keep(delta: pa.Table) -> None:
        for row in delta.to_pylist():
            view[(row["region"], row["category"], int(row["revenue"]), int(row["orders"]))] += row[WEIGHT]

    started = time.perf_counter()
    keep(step(graph, star.backfill(orders)))
    backfill = time.perf_counter() - started
    walls, cpus = timed_epochs(graph, lambda: star.epoch(args.batch, args.updates), keep, args.repeats)
    if args.explain:
        print(explain(graph), file=sys.stderr)
    seconds, cpu, expected = star.recompute()
    if {k for k, w in view.items() if w} != expected or any(w not in (0, 1) for w in view.values()):
        raise SystemExit(f"the maintained view differs from DuckDB's recompute at {orders} orders (eager={eager})")
    return Result(backfill, walls, cpus, seconds, cpu)


def row(orders: int, label: str, r: Result) -> str:
    """One table row: medians of the epochs, the slowest epoch, the recompute and the ratio, the load."""
    load = os.getloadavg()
    epoch, epoch_cpu = statistics.median(r.epochs), statistics.median(r.epochs_cpu)
    return (
        f"| {orders:,} | {label} | {r.backfill:.1f} | {epoch:.3f} | {epoch_cpu:.3f} | {max(r.epochs):.3f} | "
        f"{r.recompute:.3f} | {r.recompute_cpu:.3f} | {r.recompute / epoch:.1f}× | "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} |"
    )


HEADER = (
    "| orders | {label} | backfill s | epoch s (median) | epoch CPU s (median) | slowest epoch s | "
    "DuckDB recompute s | recompute CPU s | recompute / epoch | load (1/5/15) |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--explain", action="store_true", help="print each graph (last epoch's times) to stderr")
    parser.add_argument("--lazy", action="store_true", help="also run without eager aggregation (slow at scale)")
    args = parser.parse_args()
    print(HEADER.format(label="eager aggregation"))
    for orders in args.orders:
        for eager in (False, True) if args.lazy else (True,):
            print(row(orders, "yes" if eager else "no", run(orders, eager, args)), flush=True)


if __name__ == "__main__":
    main()
