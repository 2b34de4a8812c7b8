"""How long publishing a view's new pointer takes, per registrar, measured in one run here.

A real catalog (SQLite) and a moto Glue server on loopback; optionally (``--hms``) a real Hive
Metastore 2.3.9 in a private network namespace (needs ``unshare -n``; adds ~30 s of boot).
For ``--commits`` epochs of a keyed Iceberg view: commit, then time each registrar's
``register`` of the new metadata, and the background service's commit-to-visible latency
(``notify`` → the new ``metadata_location`` readable from Glue). Prints a table.

    .venv/bin/python bench/registration.py [--commits 30] [--hms]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import boto3
import pyarrow as pa
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from catalog_api.registrars.filesystem import FilesystemRegistrar
from catalog_api.registrars.glue import GlueRegistrar
from catalog_api.registrars.service import RegistrationService, published_table
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.ivm.commits import Change, Epoch
from lakeview.project import parse_project
from tests.registrars.conftest import MotoServer
from writers.iceberg.writer import IcebergWriter

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64())])


def ms(samples: list[float]) -> tuple[str, str, str]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.median(ordered) * 1000:.1f}", f"{p95 * 1000:.1f}", f"{ordered[-1] * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--hms", action="store_true", help="also a real HMS 2.3.9 (unshare -n)")
    args = parser.parse_args()
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)

    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-registration-"))
    moto = MotoServer().start()
    store = CatalogStore(f"sqlite:///{root / 'catalog.db'}", root / "warehouse", "lakeview")
    hms = None
    with CatalogServer(store, host="127.0.0.1", port=0) as server:
        try:
            if args.hms:
                from tests.registrars.hms import BridgedMetastore

                started = time.perf_counter()
                (root / "hms").mkdir()
                hms = BridgedMetastore(root / "hms").start()
                print(f"HMS boot: {time.perf_counter() - started:.1f} s")
            project = parse_project(
                {
                    "lake": {"warehouse": str(root / "warehouse"), "catalog_store": f"sqlite:///{root / 'catalog.db'}"},
                    "server": {"port": server.port},
                    "sources": {
                        "orders": {"format": "json", "path": str(root / "landing"), "schema": "k BIGINT, q INT"}
                    },
                    "views": {
                        "bench": {
                            "sql": "SELECT k, SUM(q) AS total FROM orders GROUP BY k",
                            "namespace": "bench",
                            "register": ["glue"],
                        }
                    },
                    "glue": {"endpoint": moto.endpoint, "interval": "100ms"},
                },
                root=root,
            )
            from pyiceberg.catalog.rest import RestCatalog

            writer = IcebergWriter(RestCatalog("bench", uri=server.uri, warehouse="lakeview"), "bench", "bench")
            writer.ensure_table(SCHEMA, ("k",), {})
            registrars = {"glue (moto)": GlueRegistrar(endpoint=moto.endpoint), "filesystem": FilesystemRegistrar()}
            if hms is not None:
                from catalog_api.registrars.hive import HiveRegistrar

                registrars["hive (HMS 2.3.9)"] = HiveRegistrar(hms.uri)
            timings: dict[str, list[float]] = {name: [] for name in registrars}
            timings["load pointer (store)"] = []
            for epoch in range(args.commits):
                writer.commit(
                    Epoch("bench", epoch, {}),
                    Change(pa.table({"k": [epoch % 7], "total": [epoch]}, schema=SCHEMA), ("k",)),
                )
                started = time.perf_counter()
                table = published_table(project, "bench")
                timings["load pointer (store)"].append(time.perf_counter() - started)
                for name, registrar in registrars.items():
                    started = time.perf_counter()
                    registrar.register(table)
                    timings[name].append(time.perf_counter() - started)

            # The background service: notify → the new pointer readable from Glue.
            glue = boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")
            service = RegistrationService(project, base_delay=0.1).start()
            visible: list[float] = []
            try:
                service.wait_idle(30)
                for epoch in range(args.commits, args.commits + min(args.commits, 15)):
                    time.sleep(0.15)  # past the 100ms interval, so each commit is published on its own
                    writer.commit(
                        Epoch("bench", epoch, {}), Change(pa.table({"k": [1], "total": [epoch]}, schema=SCHEMA), ("k",))
                    )
                    target = published_table(project, "bench").metadata_location
                    started = time.perf_counter()
                    service.notify("bench")
                    while (
                        glue.get_table(DatabaseName="bench", Name="bench")["Table"]["Parameters"]["metadata_location"]
                        != target
                    ):
                        time.sleep(0.002)
                    visible.append(time.perf_counter() - started)
            finally:
                service.stop()
            timings["commit → visible in Glue (service)"] = visible
        finally:
            if hms is not None:
                hms.stop()
            moto.stop()

    table = Table(title=f"Publishing a new pointer ({args.commits} commits, {os.cpu_count()} cores)")
    for column in ("step", "n", "p50 ms", "p95 ms", "max ms"):
        table.add_column(column)
    for name, samples in timings.items():
        table.add_row(name, str(len(samples)), *ms(samples))
    Console().print(table)


if __name__ == "__main__":
    main()
