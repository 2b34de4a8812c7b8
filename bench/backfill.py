"""A keyed view's first batch over existing history (a backfill): merged in the driver vs written
by the executors (``spark_jobs.executors.graph_backfill``).

    python bench/backfill.py [--rows 2000000] [--groups 1000000]

Generates ``--rows`` orders as Parquet (``bench/history.py``) twice: as an append stream, and as
a change feed (every row an insert, ``seq`` = order id). Two views, each refreshed once from
empty per path, each run in a fresh process:

- ``customers``: ``SUM``/``AVG``/``MAX``/``COUNT(*)`` grouped by ``product_id`` drawn from
  ``--groups`` values over the append stream (state tables: group state and MAX's multiset);
  its first batch's delta is the whole view;
- ``current``: a keyed projection over the change feed (the view and the feed's mirror); its
  first batch's delta is the whole source.

Paths: ``driver`` (``[spark] driver_rows_max`` above the batch: the delta is collected and merged
in the driver, as before) and ``executors`` (``driver_rows_max = 0``: every table written by
Spark tasks). Prints the epoch's time and the peak RSS above the baseline of the driver's Python
process and of the JVM (in local mode it also hosts the executors), sampled every 20 ms, and
checks that both paths produced the same view.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.driver_memory import run_measured  # noqa: E402
from bench.history import SCHEMA, generate_history  # noqa: E402

FEED_SCHEMA = SCHEMA + ", op STRING, seq BIGINT"
VIEWS = {
    "customers": (
        "orders",
        "SELECT product_id, SUM(quantity) AS q, AVG(quantity) AS avg_q, MAX(quantity) AS top, COUNT(*) AS n "
        "FROM orders GROUP BY product_id",
    ),  # fmt: skip
    "current": ("changes", "SELECT order_id, product_id, quantity * 2 AS doubled, ts FROM changes"),
}


def land(directory: Path, rows: int, groups: int) -> None:
    import duckdb

    generate_history(directory / "orders", rows, products=groups, file_rows=max(1, rows // 4))
    (directory / "changes").mkdir(parents=True, exist_ok=True)
    for path in sorted((directory / "orders").glob("*.parquet")):
        duckdb.sql(
            f"COPY (SELECT *, 'c' AS op, order_id AS seq FROM '{path}') TO '{directory / 'changes' / path.name}' (FORMAT parquet)"
        )


def project_for(directory: Path, mode: str, rows: int):
    from lakeview.project import parse_project

    feed = {
        "operation": "op",
        "key": ["order_id"],
        "sequence": "seq",
        "insert": ["c"],
        "update": ["u"],
        "delete": ["d"],
    }
    return parse_project(
        {
            "lake": {
                "warehouse": str(directory / f"lake-{mode}"),
                "catalog_store": f"sqlite:///{directory / f'catalog-{mode}.db'}",
            },
            "spark": {"driver_rows_max": rows * 10 if mode == "driver" else 0},
            "sources": {
                "orders": {"format": "parquet", "path": str(directory / "orders"), "schema": SCHEMA},
                "changes": {
                    "format": "parquet",
                    "path": str(directory / "changes"),
                    "schema": FEED_SCHEMA,
                    "changes": feed,
                },
            },
            "views": {
                name: {"sql": sql, "cadence": "manual", "namespace": "bench"} for name, (_, sql) in VIEWS.items()
            },
        },
        file=str(directory / "lakeview.toml"),
        root=directory,
    )


def child(mode: str, view: str, directory: Path, rows: int) -> None:
    from catalog_api.server import CatalogServer
    from catalog_api.store.catalog import open_store
    from spark_jobs.graph_pipeline import GraphPipeline
    from spark_jobs.session import build_session
    from writers.registry import make_writer, state_writer_factory

    project = project_for(directory, mode, rows)
    spark = build_session("bench-backfill")
    with CatalogServer(open_store(project), host="127.0.0.1", port=0) as server:
        pipeline = GraphPipeline(
            spark,
            project,
            view,
            make_writer(project, view, server.uri),
            state_writer=state_writer_factory(project, view),
        )
        pipeline.prepare()
        elapsed, peaks = run_measured(spark, pipeline)
    print(json.dumps({"seconds": round(elapsed, 1), "bootstrap": bool(pipeline.last_write.get("bootstrap")), **peaks}))
    spark.stop()


def view_rows(directory: Path, mode: str, view: str, rows: int):
    from catalog_api.ops import view_tables as tables

    return tables.read_rows(project_for(directory, mode, rows), view)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--groups", type=int, default=1_000_000)
    parser.add_argument("--child", choices=["driver", "executors"])
    parser.add_argument("--view", choices=list(VIEWS))
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.view, args.dir, args.rows)
        return
    from lakeview.ivm import oracle

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        land(directory, args.rows, args.groups)
        print(f"{args.rows} orders over {args.groups} products, first batch of each view from empty tables; local[2]")
        print(
            "| view | path | epoch s | driver Python peak +RSS | JVM peak +RSS | view rows |\n|---|---|---|---|---|---|"
        )
        for view in VIEWS:
            results = {}
            for mode in ("driver", "executors"):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--view", view, "--dir", str(directory), "--rows", str(args.rows)],
                    capture_output=True, text=True, cwd=ROOT, check=True,
                ).stdout  # fmt: skip
                results[mode] = json.loads(out.strip().splitlines()[-1])
                assert results[mode]["bootstrap"] == (mode == "executors"), results[mode]
                count = view_rows(directory, mode, view, args.rows).num_rows
                r = results[mode]
                print(
                    f"| {view} | {mode} | {r['seconds']} | {r['driver_python'] / 2**20:.0f} MiB | {r['jvm'] / 2**20:.0f} MiB | {count} |",
                    flush=True,
                )
            same = oracle.compare(
                view_rows(directory, "executors", view, args.rows), view_rows(directory, "driver", view, args.rows)
            )
            assert same.equal, f"{view}: the paths disagree: {same.describe()}"
            ratio = results["driver"]["driver_python"] / max(results["executors"]["driver_python"], 1)
            speed = results["driver"]["seconds"] / results["executors"]["seconds"]
            print(f"|   | driver / executors | {speed:.2f} | {ratio:.1f} | | same rows |", flush=True)


if __name__ == "__main__":
    main()
