"""A keyed epoch's writer cost vs the size of the view: found through the key index, or by probing.

For each ``--rows`` size, a keyed Iceberg view (``product_id`` key, ``total_sold``, ``orders``)
is built through the real REST catalog (:class:`catalog_api.server.CatalogServer`, SQLite
store, a temp warehouse) with :class:`writers.iceberg.writer.IcebergWriter`: one epoch inserts every
row, then each epoch upserts ``--batch`` random existing keys as a view pipeline does (the
writer's ``lookup`` of the keys, then ``commit``: one data file and one position-delete file).

Four ways to find the stored rows, same rows: ``int64`` keys through the writer's key index
(:mod:`writers.key_index`: cost per key of the delta); the same keys by probing every live row
(``LiveFiles(use_index=False)``: one pyarrow membership test over the table, what every epoch
cost before the index); ``float64`` keys, which cannot be indexed (NaN and -0.0 do not hash as
the writers compare) and are probed file by file; ``int64`` keys on Spark's executors, as for a
table past ``[spark] driver_keys_max`` (:mod:`spark_jobs.executors.reads`: a Spark job reads the
live files, the driver holds no row; local[2] here, so two executor threads). The first upsert epoch (which builds the index) and one
more are warm-up; then the median of ``--repeats`` epochs of: lookup, commit (stage + catalog
commit), and their sum. Every lookup must find every key. Prints one table; the last column is
each row's cost over the smallest view's, same key type, same run.

    .venv/bin/python bench/lookup.py [--rows 100000,1000000,5000000] [--batch 10000] [--repeats 5] [--ways "int64 keys, index;int64 keys, executors"]
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
from pyiceberg.catalog.rest import RestCatalog
from rich.console import Console
from rich.table import Table

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.ivm.commits import Change, Epoch
from spark_jobs.executors.reads import ExecutorReads
from writers.iceberg.live_files import LiveFiles
from writers.iceberg.writer import IcebergWriter

NAMESPACE = "bench"
KEY = ("product_id",)
WAYS = {
    "int64 keys, index": (pa.int64(), True, False),
    "int64 keys, probe": (pa.int64(), False, False),
    "float64 keys, probe": (pa.float64(), True, False),
    "int64 keys, executors": (pa.int64(), True, True),
}


def schema_for(key_type: pa.DataType) -> pa.Schema:
    return pa.schema([("product_id", key_type), ("total_sold", pa.int64()), ("orders", pa.int64())])


def run(
    server: CatalogServer,
    name: str,
    rows: int,
    key_type: pa.DataType,
    use_index: bool,
    remote: ExecutorReads | None,
    args: argparse.Namespace,
) -> dict[str, float]:
    """Medians (seconds) of lookup, commit and epoch over the measured epochs of one table."""
    schema = schema_for(key_type)
    writer = IcebergWriter(RestCatalog(f"bench-{name}", uri=server.uri, warehouse="lakeview"), NAMESPACE, name)
    writer.live = LiveFiles(use_index=use_index, remote=remote)
    writer.ensure_table(schema, KEY, {})
    rng = random.Random(args.seed)
    totals = [1] * rows
    everything = pa.table(
        {
            "product_id": pa.array(range(rows), pa.int64()).cast(key_type),
            "total_sold": pa.array(totals, pa.int64()),
            "orders": pa.array(totals, pa.int64()),
        },
        schema=schema,
    )
    writer.commit(Epoch(name, 0, {"bench": 0}), Change(rows=everything, key=KEY))
    lookups, commits, builds = [], [], 0
    for epoch in range(1, args.repeats + 3):
        keys = sorted(rng.sample(range(rows), args.batch))
        for k in keys:
            totals[k] += 1
        delta = pa.table(
            {
                "product_id": pa.array(keys, pa.int64()).cast(key_type),
                "total_sold": pa.array([totals[k] for k in keys], pa.int64()),
                "orders": pa.array([totals[k] for k in keys], pa.int64()),
            },
            schema=schema,
        )
        started = time.perf_counter()
        stored = writer.lookup(delta.select(list(KEY)))
        looked = time.perf_counter()
        record = writer.commit(Epoch(name, epoch, {"bench": epoch}), Change(rows=delta, key=KEY))
        committed = time.perf_counter()
        if stored.num_rows != len(keys) or record is None:
            raise SystemExit(f"{name}: epoch {epoch} found {stored.num_rows} of {len(keys)} keys (record {record})")
        builds = writer.live.index_builds
        if epoch > 2:  # epoch 1 builds the index (or reads the files), epoch 2 warms up
            lookups.append(looked - started)
            commits.append(committed - looked)
    return {
        "lookup": statistics.median(lookups),
        "commit": statistics.median(commits),
        "epoch": statistics.median(a + b for a, b in zip(lookups, commits)),
        "builds": builds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000,5000000", help="comma-separated view sizes (rows = keys)")
    parser.add_argument("--batch", type=int, default=10_000, help="keys upserted per epoch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ways", default=";".join(WAYS), help="semicolon-separated, of: " + "; ".join(WAYS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(width=200)
    load_start = os.getloadavg()
    sizes = [int(r) for r in args.rows.split(",")]
    root = Path(tempfile.mkdtemp(prefix="lakeview-bench-lookup-"))
    results: dict[tuple[str, int], dict[str, float]] = {}
    spark = None
    try:
        store = CatalogStore(f"sqlite:///{root / 'catalog.db'}", root / "warehouse", "lakeview")
        with CatalogServer(store, host="127.0.0.1", port=0) as server:
            chosen = [w.strip() for w in args.ways.split(";")]
            for n, (label, (key_type, use_index, on_executors)) in enumerate(WAYS.items()):
                if label not in chosen:
                    continue
                if on_executors and spark is None:
                    from spark_jobs.session import build_session

                    spark = build_session("lakeview-bench-lookup")
                for rows in sizes:
                    remote = ExecutorReads(spark, rows_max=0) if on_executors else None
                    results[(label, rows)] = run(server, f"v{rows}_{n}", rows, key_type, use_index, remote, args)
                    console.print(f"{label} @ {rows:,}: {results[(label, rows)]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if spark is not None:
            spark.stop()
    table = Table(
        title=f"one keyed epoch ({args.batch:,} random keys upserted) vs view size; median of {args.repeats}; "
        f"load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    for col in (
        "keys found by",
        "view rows",
        "lookup s",
        "commit s",
        "lookup + commit s",
        "index builds",
        f"vs {sizes[0]:,} rows",
    ):
        table.add_column(col, justify="right")
    for (label, rows), r in results.items():
        base = results[(label, sizes[0])]["epoch"]
        table.add_row(
            label,
            f"{rows:,}",
            f"{r['lookup']:.3f}",
            f"{r['commit']:.3f}",
            f"{r['epoch']:.3f}",
            str(r["builds"]),
            f"{r['epoch'] / base:.2f}×",
        )
    console.print(table)


if __name__ == "__main__":
    main()
