"""Incremental refresh vs full recompute, measured in one run on one machine.

For each history size the ``orders`` history is generated once (Parquet, by DuckDB:
:mod:`bench.history`; product_id among ``--products`` distinct values). For each view: a
fresh lake, the view's streaming query takes the history in (the backfill), then a batch of
``--batch`` orders lands and the incremental epoch is timed (delta in → snapshot committed:
Spark reads the new file and computes the batch's aggregate, the driver looks up the touched
groups, merges in DuckDB and commits through the REST catalog); ``--repeats`` times, median.
Baselines over the same files, in the same run: a hand-written Spark ``MERGE INTO`` of a
batch's aggregate into a copy of the view (Iceberg, same catalog; ``sales`` only), a Spark
full recompute (``INSERT OVERWRITE`` of the full ``GROUP BY`` into an Iceberg table) and a
DuckDB full recompute (``read_parquet`` + the view's SQL). Prints a table with the ratios.

``--driver-keys-max 0`` runs every view with its tables read only on Spark's executors (as
tables past ``[spark] driver_keys_max`` are), to compare with the driver's key index.

``--scaling`` adds the cost-vs-size table: the incremental refresh for several batch sizes on
a view of ``--products`` rows and on a 1M-row view (1M products), so one sees whether a
commit's cost follows the delta or the view.

Views: ``sales`` (SUM, COUNT(*): merged into the view's own rows) and ``stats`` (AVG, MIN,
MAX, COUNT(DISTINCT): kept in Lakeview state tables, as any view over a change feed is).

Each epoch's phases include ``cpu_s`` (this process and Spark's JVM) and ``catalog_requests`` (the
round trips it made to the REST catalog): both hold better than wall time on a loaded machine.
``--duckdb-baseline-only`` skips the Spark baselines (minutes each at 50M orders).

``--history-cache DIR`` keeps each size's history file there (written once: :func:`bench._common.land_history`)
and, per view and size, the lake as its backfill left it (the catalog, the tables and Spark's checkpoint, at a
fixed path under DIR): a later run restores that copy and restarts the view from it, so a 50M-order backfill
(25 minutes on a loaded machine) runs once. The table then shows the backfill's seconds from the run that made it.

    .venv/bin/python bench/refresh.py [--history 1000000,10000000,50000000,100000000] [--batch 10000] [--repeats 3] [--scaling] [--driver-keys-max 0] [--duckdb-baseline-only] [--history-cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlglot
from rich.console import Console
from rich.table import Table

from bench._common import catalog_requests, land_history, tree_cpu
from bench.history import SCHEMA, generate_history, land_parquet
from lakeview.project import parse_project
from lakeview.sql.duck import connect
from lakeview.stack.embedded import EmbeddedStack

VIEWS = {
    "sales": "SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders FROM orders GROUP BY product_id",
    "stats": "SELECT product_id, AVG(quantity) AS avg_q, MIN(ts) AS first_ts, MAX(quantity) AS most, "
    "COUNT(DISTINCT quantity) AS sizes FROM orders GROUP BY product_id",
}
BATCH_IDS = 10_000_000_000  # incremental batches' order ids start here (past any history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--history", default="1000000,10000000,50000000,100000000", help="comma-separated history sizes (orders)"
    )
    parser.add_argument("--batch", type=int, default=10_000, help="orders per incremental batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--views", default="sales", help=f"comma-separated, of {', '.join(VIEWS)}")
    parser.add_argument(
        "--scaling", action="store_true", help="also: incremental cost vs batch size, 100k- and 1M-row views"
    )
    parser.add_argument("--no-baselines", action="store_true", help="incremental only")
    parser.add_argument(
        "--duckdb-baseline-only",
        action="store_true",
        help="of the baselines, only DuckDB's recompute (large histories)",
    )
    parser.add_argument(
        "--driver-keys-max",
        type=int,
        default=None,
        help="[spark] driver_keys_max (0: every table read on Spark's executors, no driver index)",
    )
    parser.add_argument(
        "--history-cache",
        type=Path,
        help="keep each size's history and each view's backfilled lake here; later runs restore them",
    )
    args = parser.parse_args()
    console = Console(width=220)
    console.print(f"load average at start: {os.getloadavg()}")
    results = []
    for history in (int(h) for h in args.history.split(",")):
        started = time.perf_counter()
        landing = history_landing(history, args)
        console.print(f"history {history:,}: ready in {time.perf_counter() - started:.1f} s ({landing})")
        for view in args.views.split(","):
            results.append((view, *run_one(view, landing, history, args, console)))
            console.print(results[-1])
        if args.history_cache is None:
            shutil.rmtree(landing, ignore_errors=True)
    table = Table(
        title=f"incremental refresh of a {args.batch:,}-order batch vs full recompute (median of {args.repeats}; "
        f"{args.products:,} products; load average {os.getloadavg()[1]:.1f}; CPU: this process and Spark's JVM)"
    )
    for col in (
        "view",
        "history",
        "backfill s",
        "incremental s",
        "incremental CPU s",
        "Spark MERGE s",
        "Spark recompute s",
        "DuckDB recompute s",
        "MERGE/incr",
        "Spark/incr",
        "DuckDB/incr",
    ):
        table.add_column(col, justify="right")
    for view, history, backfill, incr, cpu, merge, spark_s, duck_s in results:
        table.add_row(
            view,
            f"{history:,}",
            f"{backfill:.1f}",
            f"{incr:.3f}",
            f"{cpu:.3f}",
            f"{merge:.2f}",
            f"{spark_s:.2f}",
            f"{duck_s:.2f}",
            f"{merge / incr:.1f}x",
            f"{spark_s / incr:.1f}x",
            f"{duck_s / incr:.1f}x",
        )
    console.print(table)
    if args.scaling:
        scaling(args, console)
    console.print(f"load average at end: {os.getloadavg()}")


def history_landing(history: int, args: argparse.Namespace) -> Path:
    """The directory the ``orders`` source reads, holding ``history`` orders: generated in a temporary
    directory, or (``--history-cache``) a fixed one under the cache (a cached lake's checkpoint names its
    files) holding the cached history file; batches left by an interrupted run are removed."""
    if args.history_cache is None:
        landing = Path(tempfile.mkdtemp(prefix="lakeview-bench-landing-"))
        generate_history(landing, history, products=args.products)
        return landing
    cache = args.history_cache.resolve()
    landing = cache / f"landing-{history}-p{args.products}"
    for stale in landing.glob("b-*.parquet"):
        stale.unlink()
    if not (landing / "history.parquet").exists():
        land_history(
            landing,
            f"orders-p{args.products}",
            history,
            lambda path: land_parquet(path.parent, path.name, history, first_id=0, products=args.products),
            cache,
        )
    return landing


def cached_lake(
    view: str, landing: Path, history: int, args: argparse.Namespace, console: Console
) -> tuple[Path, float]:
    """``--history-cache``: (the lake's root, restored from the cache's copy of ``view`` after its backfill over
    ``landing``, and that backfill's seconds). The first run backfills (in a stack of its own, stopped before the
    copy is taken) and keeps the copy; the lake's root is one fixed path, since its metadata names its files."""
    # "-graph": lakes the operator graph made (a cache's older lakes without it are the one-source stack's layout)
    name = f"{view}-{history}-p{args.products}-k{args.driver_keys_max}-graph"
    kept, root = args.history_cache.resolve() / "lakes" / name, args.history_cache.resolve() / "run" / name
    shutil.rmtree(root, ignore_errors=True)
    if not (kept / "backfill.json").exists():
        with EmbeddedStack(project_for(view, landing, root, args.driver_keys_max), port=0) as stack:
            started = time.perf_counter()
            stack.start_views()
            stack.queries[view].processAllAvailable()
            backfill = time.perf_counter() - started
            stack.stop_views()
            assert stack.spark is not None
            stack.spark.stop()
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(root, kept / "root", symlinks=True)
        (kept / "backfill.json").write_text(json.dumps({"backfill_s": backfill}))
        console.print(f"{view} @ {history:,}: backfilled in {backfill:.1f} s; lake kept in {kept}")
    else:
        shutil.copytree(kept / "root", root, symlinks=True)
    return root, json.loads((kept / "backfill.json").read_text())["backfill_s"]


def project_for(view: str, landing: Path, root: Path, driver_keys_max: int | None = None):
    return parse_project(
        {
            "server": {"port": 0},
            "spark": {} if driver_keys_max is None else {"driver_keys_max": driver_keys_max},
            "sources": {"orders": {"format": "parquet", "path": str(landing), "schema": SCHEMA}},
            "views": {view: {"sql": VIEWS[view], "cadence": "100ms", "namespace": "bench"}},
        },
        root=root,
    )


COMMITTED: list[float] = []  # perf_counter() of each commit (the views' on_commit)


def timed_batches(
    stack: EmbeddedStack, view: str, landing: Path, sizes: list[int], products: int, tag: str
) -> list[tuple[float, dict]]:
    """Land one batch per size, wait for its epoch; (seconds from the file landing to its
    snapshot committed, the epoch's phases) per batch. ``processAllAvailable`` is only the
    barrier: it returns after a further, empty trigger, which is not part of the refresh."""
    query = stack.queries[view]
    out = []
    for i, size in enumerate(sizes):
        first = BATCH_IDS + (abs(hash((tag, i))) % 1_000_000) * 1_000_000
        before = len(COMMITTED)
        land_parquet(landing, f"b-{tag}-{i:06d}.parquet", size, first_id=first, products=products)
        started, cpu, requests = time.perf_counter(), tree_cpu(), catalog_requests()
        query.processAllAvailable()
        ended = COMMITTED[-1] if len(COMMITTED) > before else time.perf_counter()
        phases = {**epoch_phases(stack, view), "cpu_s": tree_cpu() - cpu}
        out.append((ended - started, {**phases, "catalog_requests": catalog_requests() - requests}))
    return out


def epoch_phases(stack: EmbeddedStack, view: str) -> dict[str, float]:
    """The last epoch's phases: the pipeline's (Spark read/delta, maintain), the view writer's
    (lookup, stage = read + rewrite files, catalog commit) and Spark's own per-trigger
    overhead outside foreachBatch (listing, offset and commit logs: trigger - addBatch)."""
    pipeline = stack.pipelines[view]
    phases = dict(pipeline.timings)
    phases.update({f"view_{k}": v for k, v in getattr(pipeline.writer, "timings", {}).items()})
    remote = getattr(getattr(pipeline.writer, "live", None), "remote", None)
    if remote is not None and remote.timings:
        phases.update({f"executors_{k}": v for k, v in remote.timings.items()})
    progress = stack.queries[view].lastProgress or {}
    durations = progress.get("durationMs", {})
    if durations:
        phases["spark_trigger_overhead_s"] = (
            durations.get("triggerExecution", 0) - durations.get("addBatch", 0)
        ) / 1000
        phases.update(
            {f"spark_{k}_s": v / 1000 for k, v in durations.items() if k not in ("triggerExecution", "addBatch") and v}
        )
    return phases


def run_one(
    view: str, landing: Path, history: int, args: argparse.Namespace, console: Console
) -> tuple[int, float, float, float, float, float, float]:
    cached = args.history_cache is not None
    root, backfill = (
        cached_lake(view, landing, history, args, console)
        if cached
        else (Path(tempfile.mkdtemp(prefix="lakeview-bench-")), 0.0)
    )
    sql = VIEWS[view]
    with EmbeddedStack(project_for(view, landing, root, args.driver_keys_max), port=0) as stack:
        started = time.perf_counter()
        stack.start_views(on_commit=lambda record: COMMITTED.append(time.perf_counter()))
        stack.queries[view].processAllAvailable()  # the backfill (a cached lake: nothing new, a restart)
        backfill = backfill if cached else time.perf_counter() - started
        timed_batches(
            stack, view, landing, [args.batch], args.products, f"{view}-warm"
        )  # first epoch after the backfill warms up
        runs = timed_batches(stack, view, landing, [args.batch] * args.repeats, args.products, view)
        incremental = [s for s, _ in runs]
        phases = {k: round(statistics.median(p.get(k, 0.0) for _, p in runs), 3) for k in runs[-1][1]}
        console.print(
            f"{view} @ {history:,}: incremental {[round(s, 3) for s in incremental]}; epoch phases (median) {phases}"
        )
        stack.stop_views()
        spark = stack.spark
        assert spark is not None
        merge_times, spark_times = [], []
        if not args.no_baselines and not args.duckdb_baseline_only:
            merge_times = hand_written_merge(spark, view, landing, args) if view == "sales" else []
            spark.sql(
                f"CREATE OR REPLACE TABLE lakeview.bench.{view}_recompute USING iceberg AS SELECT * FROM lakeview.bench.{view} LIMIT 0"
            )
            for _ in range(args.repeats):
                started = time.perf_counter()
                spark.read.schema(SCHEMA).parquet(str(landing)).createOrReplaceTempView("orders")
                spark.sql(f"INSERT OVERWRITE lakeview.bench.{view}_recompute {sql}")
                spark_times.append(time.perf_counter() - started)
        spark.stop()
    duck_times = []
    duck_sql = sqlglot.transpile(sql, read="spark", write="duckdb")[0]
    for _ in range(0 if args.no_baselines else args.repeats):
        con = connect()
        started = time.perf_counter()
        con.execute(f"CREATE TEMP VIEW orders AS SELECT * FROM read_parquet('{landing}/*.parquet')")
        con.execute(duck_sql).to_arrow_table()
        duck_times.append(time.perf_counter() - started)
        con.close()
    for f in landing.glob("b-*.parquet"):
        f.unlink()
    shutil.rmtree(root, ignore_errors=True)
    nan = float("nan")
    return (
        history,
        backfill,
        statistics.median(incremental),
        statistics.median(p["cpu_s"] for _, p in runs),
        statistics.median(merge_times) if merge_times else nan,
        statistics.median(spark_times) if spark_times else nan,
        statistics.median(duck_times) if duck_times else nan,
    )


def hand_written_merge(spark, view: str, landing: Path, args: argparse.Namespace) -> list[float]:
    """The baseline the issue names: Spark ``MERGE INTO`` a copy of the view of one batch's
    aggregate (Iceberg copy-on-write, through the same REST catalog), the batch persisted
    first (a copy-on-write MERGE reads its source twice)."""
    spark.sql(
        f"CREATE OR REPLACE TABLE lakeview.bench.{view}_merge USING iceberg AS SELECT * FROM lakeview.bench.{view}"
    )
    times = []
    for i in range(args.repeats + 1):  # the first one warms up
        path = land_parquet(
            landing.parent / f"{landing.name}-merge",
            f"m{i}.parquet",
            args.batch,
            first_id=BATCH_IDS * 2 + i * args.batch,
            products=args.products,
        )
        started = time.perf_counter()
        batch = spark.read.schema(SCHEMA).parquet(str(path))
        delta = (
            batch.groupBy("product_id")
            .agg({"quantity": "sum", "*": "count"})
            .toDF("product_id", "total_sold", "orders")
            .persist()
        )
        delta.createOrReplaceTempView("delta")
        spark.sql(
            f"MERGE INTO lakeview.bench.{view}_merge t USING delta d ON t.product_id = d.product_id "
            "WHEN MATCHED THEN UPDATE SET t.total_sold = t.total_sold + d.total_sold, t.orders = t.orders + d.orders "
            "WHEN NOT MATCHED THEN INSERT *"
        )
        delta.unpersist()
        if i:
            times.append(time.perf_counter() - started)
    shutil.rmtree(landing.parent / f"{landing.name}-merge", ignore_errors=True)
    return times


def scaling(args: argparse.Namespace, console: Console) -> None:
    """Incremental cost vs batch size on a view of ``--products`` rows and of 1M rows."""
    sizes = [1_000, 10_000, 100_000]
    table = Table(title=f"incremental refresh vs batch size and view size (sales; median of {args.repeats})")
    for col in ("view rows", *[f"batch {s:,} s" for s in sizes], "phases @ 10,000"):
        table.add_column(col, justify="right")
    for products in (args.products, 1_000_000):
        landing = Path(tempfile.mkdtemp(prefix="lakeview-bench-landing-"))
        root = Path(tempfile.mkdtemp(prefix="lakeview-bench-"))
        generate_history(landing, products * 5, products=products)  # ~every product present: a full-size view
        with EmbeddedStack(project_for("sales", landing, root, args.driver_keys_max), port=0) as stack:
            stack.start_views(on_commit=lambda record: COMMITTED.append(time.perf_counter()))
            stack.queries["sales"].processAllAvailable()
            timed_batches(stack, "sales", landing, [args.batch], products, "warm")
            cells, phases = [], {}
            for size in sizes:
                runs = timed_batches(stack, "sales", landing, [size] * args.repeats, products, f"s{size}")
                cells.append(f"{statistics.median(s for s, _ in runs):.3f}")
                if size == 10_000:
                    phases = {k: round(statistics.median(p.get(k, 0.0) for _, p in runs), 3) for k in runs[-1][1]}
            stack.stop_views()
            assert stack.spark is not None
            stack.spark.stop()
        table.add_row(f"{products:,}", *cells, str(phases))
        shutil.rmtree(landing, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    console.print(table)


if __name__ == "__main__":
    main()
