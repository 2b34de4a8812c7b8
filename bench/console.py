"""What the console costs the process serving it: the time of each of its JSON routes (one browser
tab polls lineage every 2 s, the selected view's history or snapshots, and sources every 4 s) and
of one history sample, over ``--views`` running append views with ``--epochs`` commits each.

    .venv/bin/python bench/console.py [--views 4] [--epochs 5] [--requests 20]

Prints a table (median and max per route) and the machine's ``uptime`` load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from lakeview.cli.generator import land_json, make_orders
from lakeview.project import parse_project
from lakeview.stack.embedded import EmbeddedStack

SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-console-"))
    views = {
        f"v{i}": {"sql": "SELECT order_id, quantity FROM orders", "cadence": "1s", "namespace": "bench"}
        for i in range(args.views)
    }
    data = {
        "lake": {"warehouse": str(root / "lake")},
        "server": {"host": "127.0.0.1", "port": 0},
        "sources": {"orders": {"format": "json", "path": str(root / "orders"), "schema": SCHEMA}},
        "views": views,
    }
    project = parse_project(data, file=str(root / "lakeview.toml"), root=root)
    stack = EmbeddedStack(project, port=0).start_catalog(history=False)
    base = stack.catalog_uri.removesuffix("/iceberg")
    try:
        stack.start_views()
        for epoch in range(args.epochs):
            orders = make_orders(100, seed=epoch, first_id=epoch * 100)
            land_json(project.source_path("orders"), f"{epoch}.json", orders)
            for query in stack.queries.values():
                query.processAllAvailable()
        from lakeview.stack.history_sampler import HistorySampler

        sampler = HistorySampler(project, stack.server.store)
        rows = [("history sample (all views and sources)", _time(sampler.sample, args.requests))]
        for route in (
            "lineage",
            "sources",
            "views/v0/history?window=1h",
            "views/v0/history?window=1d",
            "views/v0/snapshots",
            "views/v0/plan",
        ):
            with httpx.Client() as client:
                url = f"{base}/lakeview/v1/{route}"
                rows.append(
                    (f"GET /lakeview/v1/{route}", _time(lambda u=url: client.get(u).raise_for_status(), args.requests))
                )
    finally:
        stack.stop()
        if stack.spark is not None:
            stack.spark.stop()
    print(f"\n{args.views} views x {args.epochs} epochs, {args.requests} calls each")
    print(f"{'what':<48} {'median ms':>10} {'max ms':>8}")
    for what, times in rows:
        print(f"{what:<48} {statistics.median(times):>10.1f} {max(times):>8.1f}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def _time(call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


if __name__ == "__main__":
    main()
