"""Soak: one keyed view committing at a 1 s cadence for a long time, with table maintenance on
and off. Reports data-file count, metadata size and commit latency p50/p99 at the start and the
end of each run: latency over the first and last tenth of its commits; footprint after the first
minute (retention has reached its steady state by then) and at the end. The load average of the
machine during the run is reported too (latency on a shared machine follows it).

The view's epochs are driven straight into the writer (the part whose cost grows with table
age: files, manifests, log); epoch 0 writes every one of ``--groups`` groups, so the table's
size is the same at the start and the end, then each epoch upserts ``--touch`` random groups,
like a keyed aggregate. Iceberg commits through Lakeview's REST catalog (SQLite store); Delta with
delta-rs. With maintenance on, a background pass runs every ``--maintain-every`` seconds
(keep 20 snapshots, compact at 10 small files, orphans older than 60 s).

    .venv/bin/python bench/soak.py [--minutes 30] [--format iceberg,delta] [--maintenance on,off]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.ivm.commits import Change, Epoch
from writers.base import SnapshotWriter
from writers.delta.writer import DeltaWriter
from writers.maintenance import MaintenancePolicy

SCHEMA = pa.schema([("group_id", pa.int64()), ("total", pa.int64()), ("orders", pa.int64())])
POLICY = MaintenancePolicy(
    keep_snapshots=20, max_age_ms=None, small_file_bytes=8 << 20, compact_min_files=10, orphan_min_age_ms=60_000
)


@dataclass
class Sample:
    at_s: float
    latency_ms: float


@dataclass
class Run:
    fmt: str
    maintenance: bool
    minutes: float
    samples: list[Sample] = field(default_factory=list)
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    passes: int = 0
    pass_errors: int = 0
    load: list[float] = field(default_factory=list)  # 1-minute load average, sampled every 30 s


def table_root(fmt: str, writer: SnapshotWriter) -> Path:
    if fmt == "iceberg":
        return Path(writer.table().location().removeprefix("file://"))  # type: ignore[attr-defined]
    return Path(writer.location)  # type: ignore[attr-defined]


def footprint(fmt: str, writer: SnapshotWriter) -> dict[str, float]:
    """Data files on disk, metadata bytes (Iceberg metadata/ or Delta _delta_log/), snapshots."""
    root = table_root(fmt, writer)
    meta_dir = root / ("metadata" if fmt == "iceberg" else "_delta_log")
    data = [p for p in root.rglob("*.parquet") if meta_dir not in p.parents]
    meta = sum(p.stat().st_size for p in meta_dir.rglob("*") if p.is_file())
    snapshots = len(writer.table().snapshots()) if fmt == "iceberg" else len(writer.table().history())  # type: ignore[attr-defined]
    return {"data_files": len(data), "metadata_kb": meta / 1024, "snapshots": snapshots}


def maintain(fmt: str, writer: SnapshotWriter) -> None:
    if fmt == "iceberg":
        from writers.iceberg.maintenance import maintain_iceberg, self_compacting

        # as `lakeview up` does: a keyed merge-on-read table's writer compacts within its commits
        maintain_iceberg(writer, POLICY, compact=not self_compacting(writer.table()))  # type: ignore[arg-type,attr-defined]
    else:
        from writers.delta.maintenance import maintain_delta

        maintain_delta(writer, POLICY)  # type: ignore[arg-type]


def soak(
    fmt: str,
    with_maintenance: bool,
    minutes: float,
    groups: int,
    touch: int,
    every_s: float,
    work: Path,
    catalog_uri: str,
) -> Run:
    name = f"soak_{fmt}_{'on' if with_maintenance else 'off'}"
    if fmt == "iceberg":
        from pyiceberg.catalog.rest import RestCatalog

        from writers.iceberg.writer import IcebergWriter

        writer: SnapshotWriter = IcebergWriter(
            RestCatalog(name, uri=catalog_uri, warehouse="lakeview"), "soak", name, compaction=POLICY
        )
    else:
        writer = DeltaWriter(str(work / "delta" / name), name)
    writer.ensure_table(SCHEMA, ("group_id",), {})
    run = Run(fmt, with_maintenance, minutes)
    stop = threading.Event()

    # Maintenance uses its own writer, as the stack's background thread does.
    maintainer_writer = writer if fmt == "iceberg" else DeltaWriter(writer.location, name)  # type: ignore[attr-defined]

    def maintenance_loop() -> None:
        while not stop.wait(every_s):
            try:
                maintain(fmt, maintainer_writer)
                run.passes += 1
            except Exception:
                run.pass_errors += 1

    maintainer = threading.Thread(target=maintenance_loop, daemon=True)
    if with_maintenance:
        maintainer.start()
    rng = random.Random(7)
    totals: dict[int, tuple[int, int]] = {k: (0, 0) for k in range(groups)}
    seed = pa.table({"group_id": list(totals), "total": [0] * groups, "orders": [0] * groups}, schema=SCHEMA)
    writer.commit(Epoch(name, 0, {"n": 0}, rows_in=groups), Change(seed, ("group_id",)))
    began = time.monotonic()
    epoch = 1
    next_load_at = 0.0
    try:
        while time.monotonic() - began < minutes * 60:
            tick = time.monotonic()
            keys = rng.sample(range(groups), touch)
            for k in keys:
                total, orders = totals.get(k, (0, 0))
                totals[k] = (total + rng.randint(1, 9), orders + 1)
            rows = pa.table(
                {"group_id": keys, "total": [totals[k][0] for k in keys], "orders": [totals[k][1] for k in keys]},
                schema=SCHEMA,
            )
            writer.commit(Epoch(name, epoch, {"n": epoch}, rows_in=touch), Change(rows, ("group_id",)))
            run.samples.append(Sample(tick - began, (time.monotonic() - tick) * 1000))
            epoch += 1
            if epoch == 1 + min(60, max(5, int(minutes * 60 / 10))):
                run.start = footprint(fmt, writer)
            if tick - began >= next_load_at:
                run.load.append(os.getloadavg()[0])
                next_load_at += 30.0
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))  # 1 s cadence
    finally:
        stop.set()
        if with_maintenance:
            maintainer.join(timeout=120)
    run.end = footprint(fmt, writer)
    stored = {r["group_id"]: (r["total"], r["orders"]) for r in _read(fmt, writer).to_pylist()}
    if stored != totals:
        raise SystemExit(f"{name}: the table does not hold what was committed ({len(stored)} vs {len(totals)} groups)")
    return run


def _read(fmt: str, writer: SnapshotWriter) -> pa.Table:
    return writer.table().scan().to_arrow() if fmt == "iceberg" else writer.table().to_pyarrow_table()  # type: ignore[attr-defined]


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def report(runs: list[Run], console: Console) -> None:
    table = Table(
        title="Soak: one keyed view at a 1 s cadence (latency: first vs last tenth of commits; footprint: after 1 min vs end)"
    )
    for column in (
        "format", "maintenance", "minutes", "commits", "passes",
        "data files start→end", "metadata KiB start→end", "snapshots start→end",
        "p50 ms start→end", "p99 ms start→end", "load avg min/mean/max",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for run in runs:
        tenth = max(1, len(run.samples) // 10)
        first = [s.latency_ms for s in run.samples[:tenth]]
        last = [s.latency_ms for s in run.samples[-tenth:]]
        load = run.load or [float("nan")]
        table.add_row(
            run.fmt, "on" if run.maintenance else "off", f"{run.minutes:g}", str(len(run.samples)),
            f"{run.passes} ({run.pass_errors} failed)" if run.maintenance else "-",
            f"{run.start.get('data_files', 0):.0f} → {run.end['data_files']:.0f}",
            f"{run.start.get('metadata_kb', 0):.0f} → {run.end['metadata_kb']:.0f}",
            f"{run.start.get('snapshots', 0):.0f} → {run.end['snapshots']:.0f}",
            f"{percentile(first, 50):.0f} → {percentile(last, 50):.0f}",
            f"{percentile(first, 99):.0f} → {percentile(last, 99):.0f}",
            f"{min(load):.1f}/{statistics.fmean(load):.1f}/{max(load):.1f}",
        )  # fmt: skip
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of EACH run (format x maintenance)")
    parser.add_argument("--format", default="iceberg,delta", help="comma-separated: iceberg, delta")
    parser.add_argument("--maintenance", default="on,off", help="comma-separated: on, off")
    parser.add_argument("--groups", type=int, default=10_000, help="distinct keys of the view")
    parser.add_argument("--touch", type=int, default=50, help="groups upserted per epoch")
    parser.add_argument("--maintain-every", type=float, default=10.0, help="seconds between maintenance passes")
    args = parser.parse_args()
    console = Console(width=220)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="lakeview-soak-") as tmp:
        work = Path(tmp)
        store = CatalogStore(f"sqlite:///{work / 'catalog.db'}", work / "warehouse", "lakeview")
        with CatalogServer(store, host="127.0.0.1", port=0) as server:
            for fmt in args.format.split(","):
                for mode in args.maintenance.split(","):
                    console.print(f"[bold]{fmt}, maintenance {mode}[/]: {args.minutes:g} min ...")
                    runs.append(
                        soak(
                            fmt,
                            mode == "on",
                            args.minutes,
                            args.groups,
                            args.touch,
                            args.maintain_every,
                            work,
                            server.uri,
                        )
                    )
    report(runs, console)


if __name__ == "__main__":
    main()
