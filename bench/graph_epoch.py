"""One star-schema view kept by the operator graph (lakeview.graph, in-memory state), epoch time vs history.

``orders`` ⋈ ``products`` ⋈ ``customers`` ⋈ ``regions``, GROUP BY region, category. After a backfill of
``--orders`` rows (one big first epoch), each epoch lands ``--batch`` new orders plus ``--updates`` updates on
each dimension; the median of ``--repeats`` epochs is printed next to DuckDB's full recompute of the same SQL
over the same (arrow) inputs, with and without eager aggregation; the maintained view is checked equal to
the recompute. Pure Python + DuckDB: no Spark, no catalog,
no table format, so this measures the graph's rules and the in-memory store only.

    .venv/bin/python bench/graph_epoch.py [--orders 100000 400000] [--batch 10000] [--updates 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakeview.graph import WEIGHT, compile_view, step

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


def zset(name: str, columns: dict[str, list], weight: int | list[int] = 1) -> pa.Table:
    n = len(next(iter(columns.values())))
    weights = weight if isinstance(weight, list) else [weight] * n
    return pa.table(
        {**columns, WEIGHT: pa.array(weights, pa.int64())}, schema=SCHEMAS[name].append(pa.field(WEIGHT, pa.int64()))
    )


class Star:
    def __init__(self, orders: int, r: random.Random) -> None:
        self.r = r
        self.products = {i: f"cat{r.randrange(CATEGORIES)}" for i in range(PRODUCTS)}
        self.customers = {i: r.randrange(REGIONS) for i in range(CUSTOMERS)}
        self.regions = {i: f"region{i}" for i in range(REGIONS)}
        self.order_chunks: list[pa.Table] = []
        self.next_order = 0

    def new_orders(self, n: int) -> dict[str, list]:
        ids = list(range(self.next_order, self.next_order + n))
        self.next_order += n
        return {
            "order_id": ids,
            "product_id": [self.r.randrange(PRODUCTS) for _ in ids],
            "customer_id": [self.r.randrange(CUSTOMERS) for _ in ids],
            "amount": [self.r.randrange(1, 100) for _ in ids],
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

    def recompute(self) -> tuple[float, set]:
        con = duckdb.connect()
        con.register("orders", pa.concat_tables(self.order_chunks).drop_columns([WEIGHT]))
        for name, table in (("products", self.products), ("customers", self.customers), ("regions", self.regions)):
            cols = SCHEMAS[name].names
            con.register(name, pa.table({cols[0]: list(table), cols[1]: list(table.values())}))
        started = time.perf_counter()
        rows = con.execute(SQL).fetchall()
        return time.perf_counter() - started, {(a, b, int(c), int(d)) for a, b, c, d in rows}


def run(orders: int, eager: bool, args: argparse.Namespace) -> tuple[float, float, float]:
    """(backfill seconds, median epoch seconds, recompute seconds); exits if the view is not the recompute's."""
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
    times = []
    for _ in range(args.repeats):
        deltas = star.epoch(args.batch, args.updates)
        started = time.perf_counter()
        out = step(graph, deltas)
        times.append(time.perf_counter() - started)
        keep(out)
    seconds, expected = star.recompute()
    if {k for k, w in view.items() if w} != expected or any(w not in (0, 1) for w in view.values()):
        raise SystemExit(f"the maintained view differs from DuckDB's recompute at {orders} orders (eager={eager})")
    return backfill, statistics.median(times), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| orders | eager aggregation | backfill s | epoch s (median) | DuckDB recompute s | load (1/5/15) |")
    print("|---|---|---|---|---|---|")
    for orders in args.orders:
        for eager in (False, True):
            backfill, epoch, recompute = run(orders, eager, args)
            load = os.getloadavg()
            print(
                f"| {orders:,} | {'yes' if eager else 'no'} | {backfill:.2f} | {epoch:.3f} | {recompute:.3f} | "
                f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
