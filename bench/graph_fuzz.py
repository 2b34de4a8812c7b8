"""Fuzz the operator graph: random view queries and random change sequences, each epoch compared with
DuckDB's recompute of the same SQL over the same inputs (as multisets).

Prints a table of the seeds run and every failure found (seed, query, epoch, difference). The grammar and
the check are tests/lakeview/graph/view_grammar.py, the same as the property test's fixed-seed slice.

    .venv/bin/python bench/graph_fuzz.py --seeds 200 [--start 0] [--epochs 6]
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
    args = parser.parse_args()
    if args.show is not None:
        print(random_query(args.show))
        return 0
    started = time.perf_counter()
    failures = []
    for seed in range(args.start, args.start + args.seeds):
        failure = run_seed(seed, args.epochs)
        if failure is not None:
            failures.append(failure)
            print(f"seed {seed}: FAIL at epoch {failure.epoch}", flush=True)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()
    print()
    print("| seeds | first | last | epochs each | failures | seconds | load (1/5/15 min) |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.seeds} | {args.start} | {args.start + args.seeds - 1} | {args.epochs} | {len(failures)} | "
        f"{elapsed:.0f} | {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} |"
    )
    for f in failures:
        print()
        print(f"seed {f.seed}, epoch {f.epoch}")
        print(f"  query: {f.query}")
        print(f"  diff:  {f.diff}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
