"""What the graph benches share (bench/joins.py, bench/star.py, bench/topk.py): landing change-feed files,
timing a view's epochs from landing to commit through the embedded stack, and timing DuckDB's recompute."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeview.config.models import ProjectConfig
from lakeview.sql.duck import connect
from lakeview.stack.embedded import EmbeddedStack

Epochs = list[tuple[float, dict]]  # per timed epoch: seconds from landing to commit, the pipeline's phases


class ChangeFeeds:
    """Change-feed files (JSON lines, one sequence over every feed), each written whole then renamed."""

    def __init__(self, parquet: bool = False) -> None:
        self.seq = 0
        self.files = 0
        self.parquet = parquet  # land Parquet files (a change feed the driver reads itself), else JSON lines

    def land(self, directory: Path, prefix: str, rows: list[dict]) -> None:
        """``rows`` (each with its ``op``) as the next file of ``directory``, each stamped with the next ``seq``."""
        directory.mkdir(parents=True, exist_ok=True)
        stamped = []
        for row in rows:
            self.seq += 1
            stamped.append({**row, "seq": self.seq})
        name = f"{prefix}-{self.files:06d}.{'parquet' if self.parquet else 'json'}"
        tmp = directory / f".{name}.tmp"
        if self.parquet:
            pq.write_table(pa.Table.from_pylist(stamped), tmp)
        else:
            tmp.write_text("\n".join(json.dumps(row) for row in stamped) + "\n")
        tmp.rename(directory / name)  # appear whole
        self.files += 1


def land_history(directory: Path, kind: str, size: int, write: Callable[[Path], None], cache: Path | None) -> None:
    """``size`` rows of history as ``directory/history.parquet``, made by ``write(path)``; with ``cache``, written
    once there (as ``{kind}-{size}.parquet``) and hard-linked (50M rows take minutes to write on a loaded machine)."""
    directory.mkdir(parents=True, exist_ok=True)
    if cache is None:
        write(directory / "history.parquet")
        return
    kept = cache / f"{kind}-{size}.parquet"
    if not kept.exists():
        cache.mkdir(parents=True, exist_ok=True)
        write(kept)
    os.link(kept, directory / "history.parquet")


def write_whole(path: Path, sql: str) -> None:
    """DuckDB's rows of ``sql`` as the Parquet file ``path``: written beside it, then renamed (appear whole)."""
    tmp = path.parent / f".{path.name}.tmp"
    con = connect()
    con.execute(f"COPY ({sql}) TO '{tmp}' (FORMAT parquet)")
    con.close()
    tmp.rename(path)


def timed_epochs(
    project: ProjectConfig,
    view: str,
    land: Callable[[int], None],
    repeats: int,
    check: Callable[[EmbeddedStack], None] | None = None,
    first_batch: dict[str, object] | None = None,
) -> tuple[float, Epochs]:
    """Run ``view`` in the embedded stack: its first batch (what has landed), then ``repeats`` + 1 epochs,
    each ``land(i)`` then processed; the first of those warms up. Returns the first batch's seconds and
    each timed epoch's seconds (landing to the view's snapshot committed) and phases, with ``cpu_s``: the
    CPU seconds the epoch took in this process and Spark's JVM (``tree_cpu``). ``check(stack)`` runs after
    the last epoch, while the catalog still serves the view (e.g. to compare it with a recompute).
    ``first_batch`` (optional) receives how the first batch went (``by``: driver or executors) and the
    peak resident MB of this process and of Spark's JVM during it (``driver_mb``, ``jvm_mb``)."""
    committed: list[float] = []
    epochs: Epochs = []
    with EmbeddedStack(project, port=0) as stack:
        reset_peak_rss()
        started = time.perf_counter()
        stack.start_views(on_commit=lambda record: committed.append(time.perf_counter()))
        query = stack.queries[view]
        query.processAllAvailable()
        first = time.perf_counter() - started
        if first_batch is not None:
            driver_mb, jvm_mb = peak_rss_mb()
            by = dict(getattr(stack.pipelines[view], "last_write", {})).get("by", "?")
            first_batch.update(by=by, driver_mb=driver_mb, jvm_mb=jvm_mb)
        for i in range(repeats + 1):
            before = len(committed)
            land(i)
            landed, cpu = time.perf_counter(), tree_cpu()
            query.processAllAvailable()
            ended = committed[-1] if len(committed) > before else time.perf_counter()
            if i:  # the first epoch after the first batch warms up
                timings = dict(getattr(stack.pipelines[view], "timings", {}))
                epochs.append((ended - landed, {**timings, "cpu_s": tree_cpu() - cpu}))
        if check is not None:
            check(stack)
        stack.stop_views()
    return first, epochs


def median_phases(epochs: Epochs) -> dict[str, float]:
    """Each phase's median over the timed epochs (the pipeline's own timings)."""
    return {k: round(statistics.median(p.get(k, 0.0) for _, p in epochs), 3) for k in epochs[-1][1]}


def cpu_seconds(epochs: Epochs) -> tuple[float, float]:
    """The timed epochs' CPU seconds (this process and Spark's JVM): median and mean."""
    return statistics.median(p["cpu_s"] for _, p in epochs), statistics.mean(p["cpu_s"] for _, p in epochs)


def current_rows(name: str, scan: str, key: str = "id") -> str:
    """DuckDB's view ``name`` of a change feed's current rows: the files ``scan`` reads (e.g.
    ``read_json_auto('…/*.json')``) replayed, the newest change (by ``seq``) of each ``key`` kept unless a delete."""
    return (
        f"CREATE TEMP VIEW {name} AS SELECT * EXCLUDE (r) FROM (SELECT *, row_number() OVER "
        f"(PARTITION BY {key} ORDER BY seq DESC) AS r FROM {scan}) WHERE r = 1 AND op <> 'd'"
    )


def duckdb_seconds(relations: list[str], sql: str, repeats: int) -> list[float]:
    """Seconds of DuckDB recomputing ``sql`` from the files, ``repeats`` times: each time a new connection,
    the ``relations`` statements (the sources' views over the files), then the query."""
    seconds = []
    for _ in range(repeats):
        con = connect()
        started = time.perf_counter()
        for statement in relations:
            con.execute(statement)
        con.execute(sql).fetchall()
        seconds.append(time.perf_counter() - started)
        con.close()
    return seconds


def descendants() -> list[int]:
    """The pids of every process this one started, transitively (Spark's JVM)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu() -> float:
    """CPU seconds of this process and every descendant (Spark's JVM): a machine shared with other work
    stretches wall times several-fold, the CPU an epoch costs much less."""
    total = time.process_time()
    for pid in descendants():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def catalog_requests() -> int:
    """Requests the in-process REST catalog has answered so far (every route and status): an epoch's
    difference is its catalog round trips (loads, commits), a count no load on the machine changes."""
    from catalog_api.ops.metrics import CATALOG_REQUEST_SECONDS  # the embedded stack's catalog runs in this process

    return int(
        sum(
            sample.value
            for metric in CATALOG_REQUEST_SECONDS.collect()
            for sample in metric.samples
            if sample.name.endswith("_count")
        )
    )


def reset_peak_rss() -> None:
    """Start the peak resident memory (VmHWM) of this process and its descendants again from now (Linux)."""
    for pid in [os.getpid(), *descendants()]:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            pass


def peak_rss_mb() -> tuple[float, float]:
    """The peak resident memory in MB since :func:`reset_peak_rss` of this process (the Python driver, where
    the graph's state is held) and of its largest descendant (Spark's JVM)."""

    def hwm(pid: int) -> float:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    return hwm(os.getpid()), max((hwm(pid) for pid in descendants()), default=0.0)


def spark_settings(args) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The ``[spark]`` bounds a bench's ``--driver-rows-max`` / ``--driver-keys-max`` set (unset: the defaults)."""
    names = ("driver_rows_max", "driver_keys_max")
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def rss(first_batch: dict[str, object]) -> str:
    """The first batch's peak resident MB, this process (the driver) / Spark's JVM."""
    return f"{first_batch['driver_mb']:,.0f} / {first_batch['jvm_mb']:,.0f}"


@contextlib.contextmanager
def profiled(path: Path | None, size: int) -> Iterator[None]:
    """With ``path``: every trigger of the driver's stream after the first batch and the warm-up epoch profiled by
    pyinstrument (the stream runs epochs in its own thread), the text report written to ``path`` (suffixed
    by ``size``)."""
    if path is None:
        yield
        return
    from pyinstrument import Profiler

    from spark_jobs.driver_stream import DriverStream

    profiler, original, processed = Profiler(interval=0.0005), DriverStream._trigger, [0]

    def trigger(self: DriverStream) -> bool:
        if processed[0] < 2:  # the first batch and the warm-up epoch
            done = original(self)
            processed[0] += done
            return done
        profiler.start()
        try:
            return original(self)
        finally:
            profiler.stop()

    DriverStream._trigger = trigger  # type: ignore[method-assign]
    try:
        yield
    finally:
        DriverStream._trigger = original  # type: ignore[method-assign]
        if profiler.last_session is not None:
            out = path.with_name(f"{path.stem}-{size}{path.suffix or '.txt'}")
            out.write_text(profiler.output_text(unicode=True, show_all=False))
