"""Chaos soak: four views at a 1 s cadence kept by ``lakeview up`` while faults are injected at
random; at the end nothing is lost, nothing doubled, no epoch applied twice or skipped.

The project (tests/chaos/lake.py): an append view, a keyed aggregate over a change feed, a join
and a Delta view; catalog store on PostgreSQL 15, warehouse on SeaweedFS, landing directory on a
tmpfs of its own, ``lakeview up`` a subprocess, a generator landing known rows every second.
Faults (tests/chaos/faults.py), in random rounds where every kind comes once: SIGKILL of ``lakeview
up`` (and its Spark JVM) then a restart, a PostgreSQL restart, an S3 outage (SeaweedFS stopped,
then started on the same data and ports), a full landing disk, malformed files, a view's terminal
error (parked FAILED, resumed through the status API). After each: the time until every view
commits again (and the catalog answers a table load) and every view against DuckDB's recompute at
its frontier. At the end: the generator stops, every view catches up, every landed event is in
the append view once, ``lakeview verify`` per view, and the snapshot summaries' epochs.

    .venv/bin/python bench/chaos.py [--minutes 30] [--seed 18] [--faults sigkill,s3_outage,...]
        [--s3-down 20] [--disk-full 20] [--pause 10,40]

``--minutes`` is how long new faults are injected; the last one's recovery and the final checks
come after. Needs root for the tmpfs (else the full-disk fault is left out, and the table says so).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chaos.faults import FAULTS, FaultRun, inject  # noqa: E402
from tests.chaos.lake import VIEWS, ChaosLake, load_average  # noqa: E402


def p(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--faults", default=",".join(FAULTS), help="the fault kinds, comma-separated")
    parser.add_argument("--s3-down", type=float, default=20.0, help="seconds of each S3 outage")
    parser.add_argument("--disk-full", type=float, default=20.0, help="seconds the landing disk stays full")
    parser.add_argument("--pause", default="10,40", help="seconds between faults: MIN,MAX (random)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a recovery")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    kinds = [k for k in args.faults.split(",") if k]
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        parser.error(f"unknown fault {unknown[0]!r}; faults: {', '.join(FAULTS)}")
    low, high = (float(x) for x in args.pause.split(","))
    options = {"s3_outage": {"down_s": args.s3_down}, "full_disk": {"full_s": args.disk_full}}

    root = Path(tempfile.mkdtemp(prefix="lakeview-chaos-"))
    print(f"chaos soak in {root}: {args.minutes} min of faults ({', '.join(kinds)}), load {load_average()}", flush=True)
    runs: list[FaultRun] = []
    loads: list[float] = []
    began = time.monotonic()
    with ChaosLake(root) as lake:
        if not lake.landing_is_own_fs and "full_disk" in kinds:
            print(f"full_disk left out: {lake.landing_mounted}", flush=True)
            kinds.remove("full_disk")
        print(f"up and committing after {time.monotonic() - began:.0f} s, load {load_average()}", flush=True)
        lake.generator.start(interval_s=1.0)
        deadline = time.monotonic() + args.minutes * 60
        round_: list[str] = []
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(low, high))
            if not round_:
                round_ = rng.sample(kinds, len(kinds))
            kind = round_.pop()
            extra = dict(options.get(kind, {}))
            if kind == "terminal_error":
                extra["view"] = rng.choice(list(VIEWS))
            run = inject(lake, kind, args.timeout, **extra)
            runs.append(run)
            loads.append(os.getloadavg()[0])
            bad = [f"{c.view}: {c.describe}" for c in run.checks if c.lost or c.duplicated]
            print(
                f"{time.strftime('%H:%M:%S')} {kind:<17} recovered {seconds(run.recover_s):>8}  "
                f"catalog {seconds(run.catalog_s):>8}  {run.detail[:90]}  {run.error or ''} {bad or ''} "
                f"load {load_average()}",
                flush=True,
            )
            for view in lake.failed_views():  # left FAILED by a fault that should not have: say so, go on
                print(f"  {view} left FAILED after {kind}; resuming it: {lake.resume(view)}", flush=True)
                run.error = (run.error or "") + f" {view} left FAILED"
        print(f"faults done; quiescing, load {load_average()}", flush=True)
        lake.quiesce(args.timeout)
        lost, duplicated = lake.events_end_to_end()
        final = lake.check()
        verified = lake.verify_cli()
        ledger = {v: (len(lake.ledger.seen.get(v, {})), lake.ledger.twice(v), lake.unexplained_gaps(v)) for v in VIEWS}
        empty = {v: len(lake.ledger.gaps(v)) - len(ledger[v][2]) for v in VIEWS}
        events = len(lake.generator.landed_ids)
        write_failures = lake.generator.write_failures
        up_starts = lake.up_starts
        stopped = lake.stop_up()

    minutes = (time.monotonic() - began) / 60
    print()
    print(f"## Chaos soak: {args.minutes:g} min of faults ({minutes:.1f} min in all), seed {args.seed}")
    print(f"load average (1 min) over the faults: min {min(loads, default=0):.1f}, max {max(loads, default=0):.1f}; "
          f"at the end {load_average()}")  # fmt: skip
    print()
    print("| fault | count | recovered p50 | p99 | catalog answers p50 | not recovered | rows lost | rows duplicated |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in FAULTS:
        of_kind = [r for r in runs if r.kind == kind]
        if not of_kind:
            continue
        times = [r.recover_s for r in of_kind if r.recover_s is not None]
        catalog = [r.catalog_s for r in of_kind if r.catalog_s is not None]
        print(
            f"| {kind} | {len(of_kind)} | {seconds(p(times, 0.5))} | {seconds(p(times, 0.99))} | "
            f"{seconds(statistics.median(catalog) if catalog else None)} | {sum(r.error is not None for r in of_kind)} | "
            f"{sum(r.lost for r in of_kind)} | {sum(r.duplicated for r in of_kind)} |"
        )
    print()
    print(
        "| view | epochs committed (seen) | epochs twice | epochs skipped | empty epochs (no snapshot) | final check | lakeview verify |"
    )
    print("|---|---|---|---|---|---|---|")
    for check in final:
        seen, twice, skipped = ledger[check.view]
        code, line = verified[check.view]
        print(
            f"| {check.view} | {seen} | {len(twice)} | {len(skipped)} | {empty[check.view]} | "
            f"lost {check.lost}, duplicated {check.duplicated} | {'pass' if code == 0 else 'FAIL'}: {line.partition(': ')[2]} |"
        )
    print()
    print(f"events landed {events}: lost {lost}, duplicated {duplicated} (append view against the generator); "
          f"landing writes refused by the full disk and retried: {write_failures}; `lakeview up` started {up_starts}x; "
          f"last stop (SIGTERM) exit {stopped}")  # fmt: skip
    failed = (
        lost or duplicated or any(r.error or r.lost or r.duplicated for r in runs)
        or any(code for code, _ in verified.values()) or any(t or s for _, t, s in ledger.values())
    )  # fmt: skip
    print(f"result: {'FAIL' if failed else 'PASS'}   (run directory {root})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
