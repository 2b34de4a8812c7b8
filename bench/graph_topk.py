"""A top-k view kept by the operator graph (lakeview.graph, in-memory state), epoch time vs history.

The top 10 products of each category by revenue, over an ``orders`` change feed joined to ``products``.
After a backfill of ``--orders`` rows (one big first epoch), each epoch lands ``--batch`` new orders,
``--changes`` updated orders (amount changed) and as many deleted ones, plus ``--updates`` products moved to
another category; the median of ``--repeats`` epochs is printed next to DuckDB's full recompute of the same
SQL over the same (arrow) inputs, and the maintained view is checked equal to the recompute. Pure Python +
DuckDB: no Spark, no catalog, no table format. Epochs are timed as wall and as this process's CPU seconds.

    .venv/bin/python bench/graph_topk.py [--orders 2000000 10000000] [--batch 10000] [--changes 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.graph_epoch import CATEGORIES, HEADER, PRODUCTS, SCHEMAS, Result, Star, row, timed_epochs, zset
from lakeview.graph import WEIGHT, compile_view, explain, step

SQL = """WITH revenue AS (
  SELECT p.category, o.product_id, SUM(o.amount) AS revenue
  FROM orders o JOIN products p ON o.product_id = p.product_id
  GROUP BY p.category, o.product_id)
SELECT category, product_id, revenue FROM revenue
QUALIFY ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue DESC, product_id) <= 10"""


class Feed(Star):
    """Orders as a change feed (inserts, updates, deletes) and products that change category."""

    def __init__(self, orders: int, r: random.Random) -> None:
        super().__init__(orders, r)
        self.base: pa.Table | None = None
        self.touched: set[int] = set()  # backfilled orders updated or deleted (each at most once)
        self.changed: list[pa.Table] = []  # their new versions

    def backfill(self, n: int) -> dict[str, pa.Table]:
        deltas = super().backfill(n)
        self.base = deltas["orders"]
        return {"orders": deltas["orders"], "products": deltas["products"]}

    def epoch(self, batch: int, changes: int, updates: int) -> dict[str, pa.Table]:
        new = zset("orders", self.new_orders(batch))
        self.order_chunks.append(new)
        victims = []
        while len(victims) < 2 * changes:
            i = self.r.randrange(self.base.num_rows)
            if i not in self.touched:
                self.touched.add(i)
                victims.append(i)
        old = self.base.take(pa.array(victims, pa.int64()))
        gone = old.set_column(
            old.schema.get_field_index(WEIGHT), WEIGHT, pa.repeat(pa.scalar(-1, pa.int64()), len(old))
        )
        kept = old.slice(0, changes)  # the first half is updated, the second half deleted
        amounts = pa.array([self.r.randrange(1, 100) for _ in range(changes)], pa.int64())
        updated = kept.set_column(kept.schema.get_field_index("amount"), "amount", amounts)
        self.changed.append(updated)
        keys = self.r.sample(sorted(self.products), updates)
        before = [self.products[k] for k in keys]
        for k in keys:
            self.products[k] = f"cat{self.r.randrange(CATEGORIES)}"
        products = zset(
            "products",
            {"product_id": keys + keys, "category": before + [self.products[k] for k in keys]},
            [-1] * len(keys) + [1] * len(keys),
        )
        return {"orders": pa.concat_tables([new, gone, updated]), "products": products}

    def recompute(self) -> tuple[float, float, set]:
        """DuckDB's full recompute over the orders as they are now (all its threads): wall, CPU, rows."""
        base = self.base.filter(pc.invert(pc.is_in(self.base["order_id"], pa.array(sorted(self.touched), pa.int64()))))
        orders = pa.concat_tables([base, *self.changed, *self.order_chunks[1:]]).drop_columns([WEIGHT])
        con = duckdb.connect()
        con.register("orders", orders)
        con.register(
            "products", pa.table({"product_id": list(self.products), "category": list(self.products.values())})
        )
        wall, cpu = time.perf_counter(), time.process_time()
        rows = con.execute(SQL).fetchall()
        return time.perf_counter() - wall, time.process_time() - cpu, {(c, p, int(v)) for c, p, v in rows}


def run(orders: int, args: argparse.Namespace) -> Result:
    """Backfill, timed epochs, recompute; exits if the view is not the recompute's."""
    feed = Feed(orders, random.Random(11))
    schemas = {name: SCHEMAS[name] for name in ("orders", "products")}
    graph = compile_view(SQL, schemas, sizes={"orders": orders, "products": PRODUCTS})
    view: Counter = Counter()

    def keep(delta: pa.Table) -> None:
        for r in delta.to_pylist():
            view[(r["category"], r["product_id"], int(r["revenue"]))] += r[WEIGHT]

    started = time.perf_counter()
    keep(step(graph, feed.backfill(orders)))
    backfill = time.perf_counter() - started
    walls, cpus = timed_epochs(graph, lambda: feed.epoch(args.batch, args.changes, args.updates), keep, args.repeats)
    if args.explain:
        print(explain(graph), file=sys.stderr)
    seconds, cpu, expected = feed.recompute()
    if {k for k, w in view.items() if w} != expected or any(w not in (0, 1) for w in view.values()):
        raise SystemExit(f"the maintained top-k differs from DuckDB's recompute at {orders} orders")
    return Result(backfill, walls, cpus, seconds, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=100, help="orders updated, and as many deleted, per epoch")
    parser.add_argument("--updates", type=int, default=20, help="products moved to another category per epoch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--explain", action="store_true", help="print each graph (last epoch's times) to stderr")
    args = parser.parse_args()
    print(HEADER.format(label="view"))
    for orders in args.orders:
        print(row(orders, "top 10 per category", run(orders, args)), flush=True)


if __name__ == "__main__":
    main()
