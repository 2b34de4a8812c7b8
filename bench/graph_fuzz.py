"""Fuzz the operator graph: random view queries and random change sequences, each epoch compared with
DuckDB's recompute of the same SQL over the same inputs (as multisets).

Prints a table of the seeds run and every failure found (seed, query, epoch, difference). The grammar and
the check are tests/lakeview/graph/view_grammar.py, the same as the property test's fixed-seed slice.

``--catalog``: each seed whose query has rows after most of its epochs (other seeds are skipped and counted;
every view is an operator graph) runs as a view kept by GraphPipeline (real Spark, an embedded catalog over HTTP on
SQLite, Iceberg tables; ``--format delta`` or ``both`` for Delta), its inputs landing as change-feed files,
and after every epoch the view is read back through the catalog (DuckDB; Delta: its log) and compared with
DuckDB's recompute (tests/spark_jobs/graph_fuzz_catalog.py, as tests/spark_jobs/test_graph_properties.py).

    .venv/bin/python bench/graph_fuzz.py --seeds 200 [--start 0] [--epochs 6]
    .venv/bin/python bench/graph_fuzz.py --catalog --seeds 50 [--start 0] [--epochs 4] [--format iceberg|delta|both]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.lakeview.graph.view_grammar import random_query, run_seed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--epochs", type=int, default=6, help="epochs of random changes per seed")
    parser.add_argument("--show", type=int, help="print the query of this seed and exit")
    parser.add_argument("--catalog", action="store_true", help="through GraphPipeline, Spark and the catalog")
    parser.add_argument("--format", choices=["iceberg", "delta", "both"], default="iceberg", help="with --catalog")
    args = parser.parse_args()
    if args.show is not None:
        print(random_query(args.show))
        return 0
    started = time.perf_counter()
    seeds = range(args.start, args.start + args.seeds)
    if args.catalog:
        failures, skipped, formats = through_catalog(seeds, args.epochs, args.format)
    else:
        failures, skipped, formats = [], 0, "in memory"
        for seed in seeds:
            failure = run_seed(seed, args.epochs)
            if failure is not None:
                failures.append(failure)
                print(f"seed {seed}: FAIL at epoch {failure.epoch}", flush=True)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()
    print()
    print(
        "| seeds | first | last | run | skipped (not graph views) | epochs each | tables | failures | seconds | load (1/5/15 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.seeds} | {args.start} | {args.start + args.seeds - 1} | {args.seeds - skipped} | {skipped} | "
        f"{args.epochs} | {formats} | {len(failures)} | {elapsed:.0f} | {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} |"
    )
    for f in failures:
        print()
        print(f"seed {f.seed}, epoch {f.epoch}")
        print(f"  query: {f.query}")
        print(f"  diff:  {f.diff}")
    return 1 if failures else 0


def through_catalog(seeds: range, epochs: int, fmt: str) -> tuple[list, int, str]:
    """Every graph-view seed through GraphPipeline and the catalog: (failures, seeds skipped, formats)."""
    import tempfile

    from catalog_api.server import CatalogServer
    from catalog_api.store.catalog import CatalogStore
    from spark_jobs.session import build_session
    from tests.spark_jobs.graph_fuzz_catalog import is_graph_query, run_seed_through_catalog

    formats = ["iceberg", "delta"] if fmt == "both" else [fmt]
    failures, skipped = [], 0
    spark = build_session("lakeview-graph-fuzz")
    with tempfile.TemporaryDirectory(prefix="graph-fuzz-") as tmp:
        lake = Path(tmp) / "lake"
        store = CatalogStore(f"sqlite:///{lake / 'catalog.db'}", lake / "warehouse", "lakeview")
        with CatalogServer(store, host="127.0.0.1", port=0) as server:
            for seed in seeds:
                if not is_graph_query(seed):
                    skipped += 1
                    continue
                for f in formats:
                    root = Path(tmp) / f"{f}-{seed}"
                    failure = run_seed_through_catalog(spark, server.uri, server.port, lake, root, seed, f, epochs)
                    print(
                        f"seed {seed} ({f}): {'ok' if failure is None else f'FAIL at epoch {failure.epoch}'}",
                        flush=True,
                    )
                    if failure is not None:
                        failure.diff = f"[{f}] {failure.diff}"
                        failures.append(failure)
    spark.stop()
    return failures, skipped, "/".join(formats)


if __name__ == "__main__":
    raise SystemExit(main())
