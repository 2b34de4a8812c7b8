"""The read-side price of merge-on-read: full-scan time vs the number of position-delete files.

A keyed view table of ``--rows`` rows (``product_id`` key, ``total_sold``, ``orders``) is built
through the real REST catalog (:class:`catalog_api.server.CatalogServer`, SQLite store, a temp
warehouse) with :class:`writers.iceberg.writer.IcebergWriter` directly: one epoch inserts every row,
then each epoch upserts ``--batch`` random existing keys (the writer's ``lookup`` of the keys,
then ``commit``, as a view pipeline does), which adds one data file and ONE position-delete file.

At each of ``--deletes`` delete files (i.e. after that many upsert epochs), and once more after
:func:`writers.iceberg.maintenance.maintain_iceberg` has folded them (``delete_files_max=1``):

* DuckDB through the catalog (``lakeview.sql.duck.connect_catalog``): ``SELECT count(*),
  sum(total_sold), sum(orders) FROM lake.<ns>.<table>``, a fresh connection per repeat, the
  query timed (it loads the table from the catalog, reads the manifests, applies the deletes);
* pyiceberg: ``load_table`` + ``scan().to_arrow()`` (+ the same aggregate in Arrow);
* the writer: ``lookup`` and ``commit`` of the next ``--repeats`` epochs (so those commits move
  the table from k to k+repeats delete files; each is listed);

median of ``--repeats``. Both readers' count and sums are checked against the expected values
(kept in Python as the epochs are generated). The load average is recorded per row.

    .venv/bin/python bench/reads.py [--rows 1000000] [--batch 10000] [--deletes 0,5,20,50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.rest import RestCatalog
from rich.console import Console
from rich.table import Table

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.ivm.commits import Change, Epoch
from lakeview.sql.duck import connect_catalog
from writers.iceberg.live_files import LiveFiles
from writers.iceberg.maintenance import maintain_iceberg
from writers.iceberg.writer import IcebergWriter
from writers.maintenance import MaintenancePolicy

NAMESPACE = "bench"
NAME = "reads"
KEY = ("product_id",)
SCHEMA = pa.schema([("product_id", pa.int64()), ("total_sold", pa.int64()), ("orders", pa.int64())])


class Model:
    """The table's expected contents, in Python (no numpy in the venv)."""

    def __init__(self, rows: int, rng: random.Random) -> None:
        self.rng = rng
        self.total = [rng.randint(1, 100) for _ in range(rows)]
        self.orders = [1] * rows

    def expected(self) -> tuple[int, int, int]:
        return len(self.total), sum(self.total), sum(self.orders)

    def upsert(self, batch: int) -> pa.Table:
        keys = sorted(self.rng.sample(range(len(self.total)), batch))
        for k in keys:
            self.total[k] += self.rng.randint(1, 10)
            self.orders[k] += 1
        return pa.table(
            {
                "product_id": pa.array(keys, pa.int64()),
                "total_sold": pa.array([self.total[k] for k in keys], pa.int64()),
                "orders": pa.array([self.orders[k] for k in keys], pa.int64()),
            },
            schema=SCHEMA,
        )


class Bench:
    def __init__(self, server: CatalogServer, rows: int, batch: int, seed: int) -> None:
        self.server = server
        self.catalog = RestCatalog("bench-writer", uri=server.uri, warehouse="lakeview")
        self.reader_catalog = RestCatalog("bench-reader", uri=server.uri, warehouse="lakeview")
        self.writer = IcebergWriter(self.catalog, NAMESPACE, NAME)
        self.model = Model(rows, random.Random(seed))
        self.batch = batch
        self.epoch = 0

    def create(self) -> float:
        self.writer.ensure_table(SCHEMA, KEY, {})
        rows = pa.table(
            {
                "product_id": pa.array(range(len(self.model.total)), pa.int64()),
                "total_sold": pa.array(self.model.total, pa.int64()),
                "orders": pa.array(self.model.orders, pa.int64()),
            },
            schema=SCHEMA,
        )
        started = time.perf_counter()
        self.writer.commit(self._next_epoch(), Change(rows=rows, key=KEY))
        return time.perf_counter() - started

    def _next_epoch(self) -> Epoch:
        epoch = Epoch(view=NAME, number=self.epoch, frontier={"bench": self.epoch}, rows_in=self.batch)
        self.epoch += 1
        return epoch

    def upsert(self) -> tuple[float, float, dict]:
        """One epoch as a pipeline runs it: lookup the touched keys, commit. (lookup s, commit s, writer phases)"""
        rows = self.model.upsert(self.batch)
        started = time.perf_counter()
        stored = self.writer.lookup(rows.select(list(KEY)))
        looked = time.perf_counter()
        phases = dict(self.writer.timings)
        record = self.writer.commit(self._next_epoch(), Change(rows=rows, key=KEY))
        committed = time.perf_counter()
        phases.update(self.writer.timings)
        assert record is not None, "commit skipped"
        assert stored.num_rows == rows.num_rows, f"lookup found {stored.num_rows} of {rows.num_rows} keys"
        return looked - started, committed - looked, phases

    def shape(self) -> tuple[int, int, int]:
        """(data files, delete files, positions deleted) of the current snapshot."""
        live = LiveFiles().live(self.writer.table())
        return (
            len(live.data),
            len(live.delete_files),
            sum(len(p) for per_file in live.deletes.values() for p in per_file.values()),
        )

    def duckdb_scan(self) -> tuple[float, tuple]:
        con = connect_catalog(self.server.uri, "lakeview")
        try:
            started = time.perf_counter()
            row = con.sql(f"SELECT count(*), sum(total_sold), sum(orders) FROM lake.{NAMESPACE}.{NAME}").fetchone()
            return time.perf_counter() - started, tuple(int(v) for v in row)
        finally:
            con.close()

    def pyiceberg_scan(self) -> tuple[float, tuple]:
        started = time.perf_counter()
        arrow = self.reader_catalog.load_table((NAMESPACE, NAME)).scan().to_arrow()
        elapsed = time.perf_counter() - started
        return elapsed, (
            arrow.num_rows,
            pc.sum(arrow.column("total_sold")).as_py() or 0,
            pc.sum(arrow.column("orders")).as_py() or 0,
        )


def measure(bench: Bench, label: str, repeats: int) -> dict:
    shape = bench.shape()
    expected = bench.model.expected()
    duck = [bench.duckdb_scan() for _ in range(repeats)]
    iceberg = [bench.pyiceberg_scan() for _ in range(repeats)]
    results = {r for _, r in duck} | {r for _, r in iceberg}
    load_at_reads = os.getloadavg()
    epochs = [bench.upsert() for _ in range(repeats)]
    return {
        "label": label,
        "shape": shape,
        "expected": expected,
        "results": results,
        "same": results == {expected},
        "duck": [s for s, _ in duck],
        "iceberg": [s for s, _ in iceberg],
        "lookup": [e[0] for e in epochs],
        "commit": [e[1] for e in epochs],
        "phases": [e[2] for e in epochs],
        "delete_files_after": bench.shape()[1],
        "load": load_at_reads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="view rows (keys)")
    parser.add_argument("--batch", type=int, default=10_000, help="keys upserted per epoch")
    parser.add_argument(
        "--deletes", default="0,5,20,50", help="comma-separated delete-file counts to measure at, ascending"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(width=220)
    console.print(f"load average at start: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-reads-"))
    rows_out = []
    try:
        store = CatalogStore(f"sqlite:///{root / 'catalog.db'}", root / "warehouse", "lakeview")
        with CatalogServer(store, host="127.0.0.1", port=0) as server:
            bench = Bench(server, args.rows, args.batch, args.seed)
            console.print(f"{args.rows:,}-row table: committed in {bench.create():.2f} s")
            upserts = 0
            for target in sorted(int(d) for d in args.deletes.split(",")):
                while upserts < target:
                    bench.upsert()
                    upserts += 1
                rows_out.append(measure(bench, f"{bench.shape()[1]} delete files", args.repeats))
                upserts += args.repeats
                console.print(summary(rows_out[-1]))
            started = time.perf_counter()
            report = maintain_iceberg(bench.writer, MaintenancePolicy(delete_files_max=1))
            folded_s = time.perf_counter() - started
            console.print(f"maintain_iceberg (delete_files_max=1): {folded_s:.2f} s; {report}")
            rows_out.append(measure(bench, "folded", args.repeats))
            console.print(summary(rows_out[-1]))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    table = Table(
        title=f"reading a {args.rows:,}-row keyed Iceberg view vs position-delete files ({args.batch:,}-key upserts per epoch; "
        f"median of {args.repeats}; maintenance fold {folded_s:.2f} s)"
    )
    for col in (
        "state",
        "data files",
        "delete files",
        "deleted positions",
        "DuckDB scan s",
        "pyiceberg to_arrow s",
        "next lookup s",
        "next commit s",
        f"next {args.repeats} commits s",
        "readers agree",
        "count / sum(total_sold) / sum(orders)",
        "load 1/5/15",
    ):
        table.add_column(col, justify="right")
    for r in rows_out:
        data, deletes, positions = r["shape"]
        table.add_row(
            r["label"],
            str(data),
            str(deletes),
            f"{positions:,}",
            f"{statistics.median(r['duck']):.3f}",
            f"{statistics.median(r['iceberg']):.3f}",
            f"{statistics.median(r['lookup']):.3f}",
            f"{statistics.median(r['commit']):.3f}",
            " ".join(f"{s:.3f}" for s in r["commit"]) + f" (→{r['delete_files_after']} del)",
            "yes" if r["same"] else f"NO: {sorted(r['results'])}",
            " / ".join(f"{v:,}" for v in r["expected"]),
            " ".join(f"{v:.1f}" for v in r["load"]),
        )
    console.print(table)
    console.print(f"load average at end: {os.getloadavg()}")
    if not all(r["same"] for r in rows_out):
        sys.exit(1)


def summary(r: dict) -> str:
    phases = {k: round(statistics.median(p.get(k, 0.0) for p in r["phases"]), 3) for k in r["phases"][-1]}
    return (
        f"{r['label']} {r['shape']}: duckdb {[round(s, 3) for s in r['duck']]} pyiceberg {[round(s, 3) for s in r['iceberg']]} "
        f"lookup {[round(s, 3) for s in r['lookup']]} commit {[round(s, 3) for s in r['commit']]} writer phases (median) {phases} "
        f"results {sorted(r['results'])} expected {r['expected']} load {r['load']}"
    )


if __name__ == "__main__":
    main()
