"""Driver memory for one large append batch: collected to the driver vs written by the executors.

    python bench/driver_memory.py [--rows 2000000]

Lands ``--rows`` orders (Parquet, with a 40-character note per row) and refreshes one append view
(a projection, Delta format, local warehouse) once per path, each in a fresh process: ``collect``
(``[spark] driver_rows_max`` above the batch: the batch is collected as Arrow and written by the
driver) and ``executors`` (``driver_rows_max = 0``: Spark tasks write the files, the driver
commits their metadata). Reports the peak RSS above the baseline of the Python driver process
and of the JVM (in local mode the JVM also hosts the executors, so its number is not the driver's
alone), sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SQL = "SELECT order_id, product_id, quantity, note FROM orders WHERE quantity > 0"
SCHEMA = "order_id BIGINT, product_id BIGINT, quantity INT, note STRING"


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


class PeakSampler(threading.Thread):
    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.base = {name: rss_bytes(pid) for name, pid in pids.items()}
        self.peak = dict(self.base)
        self.running = True

    def run(self) -> None:
        while self.running:
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_bytes(pid))
            time.sleep(0.02)


def run_measured(spark, pipeline) -> tuple[float, dict[str, int]]:
    """Run ``pipeline`` over what has landed; its seconds and the peak RSS above the baseline of
    this (the driver's) Python process and of the JVM."""
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    sampler = PeakSampler({"driver_python": os.getpid(), "jvm": jvm})
    sampler.start()
    started = time.perf_counter()
    pipeline.start(available_now=True).awaitTermination()
    elapsed = time.perf_counter() - started
    sampler.running = False
    sampler.join()
    return elapsed, {name: sampler.peak[name] - sampler.base[name] for name in sampler.pids}


def land(directory: Path, rows: int, files: int = 8) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per = rows // files
    for i in range(files):
        start = i * per
        ids = pa.array(range(start, start + per), pa.int64())
        table = pa.table({
            "order_id": ids,
            "product_id": pa.array([n % 1000 for n in range(start, start + per)], pa.int64()),
            "quantity": pa.array([1 + n % 5 for n in range(start, start + per)], pa.int32()),
            "note": pa.array([f"order {n:032d}" for n in range(start, start + per)]),
        })  # fmt: skip
        pq.write_table(table, directory / f"part-{i:03d}.parquet")


def child(mode: str, directory: Path, rows: int) -> None:
    from lakeview.project import parse_project
    from spark_jobs.graph_pipeline import GraphPipeline
    from spark_jobs.session import build_session
    from writers.registry import make_writer

    limit = rows * 10 if mode == "collect" else 0
    project = parse_project(
        {
            "lake": {"warehouse": str(directory / f"lake-{mode}")},
            "spark": {"driver_rows_max": limit},
            "sources": {"orders": {"format": "parquet", "path": str(directory / "landing"), "schema": SCHEMA}},
            "views": {"big": {"sql": SQL, "format": "delta", "cadence": "manual"}},
        },
        file=str(directory / "lakeview.toml"),
        root=directory,
    )
    spark = build_session("bench-driver-memory")
    pipeline = GraphPipeline(spark, project, "big", make_writer(project, "big", "http://unused"))
    pipeline.prepare()
    elapsed, result = run_measured(spark, pipeline)
    print(
        json.dumps(
            {
                "mode": mode,
                "seconds": round(elapsed, 1),
                "last_write": {k: v for k, v in pipeline.last_write.items() if k != "writers"},
                **result,
            }
        )
    )
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--child", choices=["collect", "executors"])
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir, args.rows)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        land(directory / "landing", args.rows)
        print(
            f"{args.rows} rows, {sum(p.stat().st_size for p in (directory / 'landing').iterdir()) / 2**20:.0f} MiB of Parquet"
        )
        print(f"{'path':<10} {'seconds':>8} {'driver Python peak +RSS':>24} {'JVM peak +RSS':>14}")
        for mode in ("collect", "executors"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--dir", str(directory), "--rows", str(args.rows)],
                capture_output=True, text=True, cwd=ROOT, check=True,
            ).stdout  # fmt: skip
            result = json.loads(out.strip().splitlines()[-1])
            print(
                f"{mode:<10} {result['seconds']:>8} {result['driver_python'] / 2**20:>21.0f} MiB {result['jvm'] / 2**20:>10.0f} MiB  {result['last_write']}"
            )


if __name__ == "__main__":
    main()
