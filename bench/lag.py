"""End-to-end lag of the streaming pipeline: a row lands → it is visible in DuckDB.

The ``sales`` view (SUM, COUNT(*) by product over ``orders``, 100,000 products) runs at a
``--cadence`` (5 s) over a ``--history`` backfilled first; then a batch of ``--batch`` orders
(10,000) lands on average every cadence for ``--minutes``, at random phases of Spark's trigger
(intervals uniform in 0.5-1.5 cadences, so a lag includes 0 to 5 s of waiting). A
poller queries the view through the REST catalog with DuckDB (a fresh ``ATTACH`` per poll,
as a reader would) every ``--poll`` seconds; a batch is visible once the view's
``SUM(orders)`` counts it. Prints p50/p95/p99/max of the lag and the epochs' phases.

    .venv/bin/python bench/lag.py [--minutes 3] [--cadence 5s] [--batch 10000] [--format parquet|json]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb

from bench.history import SCHEMA, generate_history, land_parquet, orders_sql
from lakeview.project import parse_project
from lakeview.sql.duck import connect_catalog
from lakeview.stack.embedded import EmbeddedStack

SQL = "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id"


def land(landing: Path, fmt: str, name: str, count: int, first_id: int, products: int) -> None:
    if fmt == "parquet":
        land_parquet(landing, f"{name}.parquet", count, first_id=first_id, products=products)
        return
    hidden, final = landing / f".{name}.json.tmp", landing / f"{name}.json"
    duckdb.execute(f"COPY ({orders_sql(count, first_id, products)}) TO '{hidden}' (FORMAT json)")
    os.replace(hidden, final)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def read_forever(catalog_uri: str, warehouse: str, poll_s: float) -> None:
    """The reader process: print ``<time> <SUM(orders)>`` after each query of the view."""
    while True:
        try:
            con = connect_catalog(catalog_uri, warehouse)
            while True:
                (total,) = con.sql("SELECT COALESCE(SUM(orders), 0) FROM lake.bench.sales").fetchone()
                print(time.time(), int(total), flush=True)
                time.sleep(poll_s)
        except duckdb.Error:  # a busy catalog: reconnect and go on
            time.sleep(poll_s)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--reader":
        read_forever(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--cadence", default="5s")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between DuckDB polls")
    parser.add_argument("--format", choices=("parquet", "json"), default="parquet")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    landing = Path(tempfile.mkdtemp(prefix="lakeview-lag-landing-"))
    root = Path(tempfile.mkdtemp(prefix="lakeview-lag-"))
    if args.format == "parquet":
        generate_history(landing, args.history, products=args.products)
    else:
        land(landing, "json", "history", args.history, 0, args.products)
    project = parse_project(
        {
            "server": {"port": 0},
            "sources": {"orders": {"format": args.format, "path": str(landing), "schema": SCHEMA}},
            "views": {"sales": {"sql": SQL, "cadence": args.cadence, "namespace": "bench"}},
        },
        root=root,
    )
    cadence_s = project.views["sales"].cadence.seconds or 5.0
    landed: list[tuple[float, int]] = []  # (landed at, orders counted once this batch is in)
    seen: dict[int, float] = {}
    phases: list[dict] = []
    with EmbeddedStack(project, port=0) as stack:
        stack.start_views(on_commit=lambda record: phases.append(dict(stack.pipelines["sales"].timings)))
        stack.queries["sales"].processAllAvailable()  # the backfill
        phases.clear()
        # The reader is its own process, as a user's DuckDB would be (and keeps its CPU and
        # GIL out of the pipeline's).
        reader = subprocess.Popen(
            [sys.executable, __file__, "--reader", stack.catalog_uri, project.lake.name, str(args.poll)],
            stdout=subprocess.PIPE,
            text=True,
        )

        def poll() -> None:
            assert reader.stdout is not None
            for line in reader.stdout:
                at, total = line.split()
                for i, (_, expected) in enumerate(list(landed)):
                    if i not in seen and int(total) >= expected:
                        seen[i] = float(at)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        total = args.history
        deadline = time.time() + args.minutes * 60
        i = 0
        rng = random.Random(6)
        while time.time() < deadline:
            started = time.time()
            land(landing, args.format, f"lag-{i:05d}", args.batch, 10_000_000_000 + i * args.batch, args.products)
            total += args.batch
            landed.append((time.time(), total))
            i += 1
            # on average one batch per cadence, at a random phase of Spark's trigger
            time.sleep(max(0.0, rng.uniform(0.5, 1.5) * cadence_s - (time.time() - started)))
        wait_until = time.time() + 4 * cadence_s + 30
        while len(seen) < len(landed) and time.time() < wait_until:
            time.sleep(0.2)
        reader.terminate()
        reader.wait()
        poller.join()
        stack.stop_views()
    lags = [seen[i] - at for i, (at, _) in enumerate(landed) if i in seen]
    print(
        f"{len(landed)} batches of {args.batch:,} orders every {args.cadence} ({args.format}), {len(lags)} seen; "
        f"history {args.history:,}, {args.products:,} products, poll {args.poll} s"
    )
    if lags:
        print(
            f"end-to-end lag (landed -> visible in DuckDB): p50 {percentile(lags, 0.5):.2f} s, p95 {percentile(lags, 0.95):.2f} s, "
            f"p99 {percentile(lags, 0.99):.2f} s, max {max(lags):.2f} s, mean {statistics.mean(lags):.2f} s"
        )
    if phases:
        keys = sorted({k for p in phases for k in p})
        print("epoch phases (median s):", {k: round(statistics.median(p.get(k, 0.0) for p in phases), 3) for k in keys})
    print(f"load average at end: {os.getloadavg()}")
    shutil.rmtree(landing, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
