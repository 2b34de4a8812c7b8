"""Ingest endpoint throughput and latency, and the cost of the status routes and /metrics.

A real catalog server (uvicorn on a free loopback port, SQLite store) with an ``ingest``
source; ``--clients`` threads POST batches of ``--rows`` orders for ``--seconds`` each, with
and without an ``Idempotency-Key``. Every acknowledged batch is fsynced and renamed into the
landing directory before the response, so this measures durable acknowledgements. Then the
latency of ``GET /lakeview/v1/views`` and ``GET /metrics`` for a view with ``--snapshots``
synthetic commits in its history (the SLO window math over the snapshots).

    .venv/bin/python bench/ingest.py [--clients 1,4] [--rows 1,100,1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from catalog_api.ops.routes import lakeview_app_options
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import open_store
from lakeview.cli.generator import make_orders
from lakeview.ivm.commits import Change, Epoch
from lakeview.project import parse_project
from writers.registry import make_writer

SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"


def project_in(root: Path):
    data = {
        "lake": {"warehouse": str(root / "lake")},
        "sources": {"orders": {"format": "ingest", "path": str(root / "landing"), "schema": SCHEMA}},
        "views": {
            "sales": {
                "sql": "SELECT product_id, SUM(quantity) AS total FROM orders GROUP BY product_id",
                "cadence": "1s",
            }
        },
    }
    return parse_project(data, file=str(root / "lakeview.toml"), root=root)


def run_clients(url: str, clients: int, rows: int, seconds: float, keyed: bool) -> tuple[int, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(n: int) -> None:
        body = make_orders(rows, seed=n, first_id=n * 10_000_000)
        with httpx.Client(timeout=60) as http:
            while time.monotonic() < deadline:
                headers = {"Idempotency-Key": str(uuid.uuid4())} if keyed else {}
                start = time.perf_counter()
                response = http.post(url, json=body, headers=headers)
                elapsed = time.perf_counter() - start
                assert response.status_code == 200 and response.json()["accepted"] == rows, response.text
                with lock:
                    latencies.append(elapsed)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--rows", default="1,100,1000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--snapshots", type=int, default=500)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        project = project_in(Path(tmp))
        store = open_store(project)
        with CatalogServer(store, host="127.0.0.1", port=0, **lakeview_app_options(project, store)) as server:
            base = server.uri.removesuffix("/iceberg")
            url = f"{base}/lakeview/v1/sources/orders/rows"
            table = Table(title=f"POST /lakeview/v1/sources/orders/rows ({args.seconds:.0f} s each, durable ack)")
            for column in ("clients", "rows/request", "Idempotency-Key", "requests/s", "rows/s", "p50 ms", "p95 ms"):
                table.add_column(column, justify="right")
            for clients in map(int, args.clients.split(",")):
                for rows in map(int, args.rows.split(",")):
                    for keyed in (False, True):
                        count, latencies = run_clients(url, clients, rows, args.seconds, keyed)
                        q = statistics.quantiles(latencies, n=20) if len(latencies) >= 20 else [max(latencies)] * 19
                        table.add_row(
                            str(clients),
                            str(rows),
                            "yes" if keyed else "no",
                            f"{count / args.seconds:,.0f}",
                            f"{count * rows / args.seconds:,.0f}",
                            f"{statistics.median(latencies) * 1000:.1f}",
                            f"{q[18] * 1000:.1f}",
                        )
            console.print(table)

            # A view table with a long commit history: what status/metrics cost per request.
            writer = make_writer(project, "sales", server.uri)
            writer.ensure_table(pa.schema([("product_id", pa.int64()), ("total", pa.int64())]), None, {})
            start = time.perf_counter()
            for epoch in range(args.snapshots):
                rows = pa.table({"product_id": [epoch], "total": [1]})
                writer.commit(
                    Epoch("sales", epoch, {}, rows_in=1, newest_input_ms=int(time.time() * 1000) - 500), Change(rows)
                )
            build = time.perf_counter() - start
            status = Table(title=f"status cost with {args.snapshots} snapshots (built in {build:.0f} s)")
            for column in ("request", "p50 ms", "max ms"):
                status.add_column(column, justify="right")
            for path in ("/lakeview/v1/views", "/lakeview/v1/views/sales", "/metrics"):
                times = []
                for _ in range(20):
                    start = time.perf_counter()
                    assert httpx.get(base + path, timeout=60).status_code == 200
                    times.append(time.perf_counter() - start)
                status.add_row(path, f"{statistics.median(times) * 1000:.1f}", f"{max(times) * 1000:.1f}")
            console.print(status)


if __name__ == "__main__":
    main()
