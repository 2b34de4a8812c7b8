"""The faults the chaos soak injects into a :class:`~tests.chaos.lake.ChaosLake`, one function each,
shared by the short tests (``tests/chaos/test_faults.py``) and ``bench/chaos.py``.

Each injects its fault, lifts it, waits for the lake to recover and returns a :class:`FaultRun`:
the seconds from the fault being lifted (for a kill, a bad file or a terminal error: from the
fault itself) until every view commits a new epoch — and, where the catalog went away, until it
answers a table load — then every view compared with its recompute.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from catalog_api.ops import view_tables as tables
from tests.chaos.lake import MALFORMED, VIEWS, ChaosLake, ViewCheck
from tests.waiting import wait_for


@dataclass
class FaultRun:
    kind: str
    recover_s: float | None = None  # None: not recovered within the timeout
    catalog_s: float | None = None  # until the catalog answered again (faults that take it away)
    detail: str = ""
    checks: list[ViewCheck] = field(default_factory=list)
    error: str | None = None  # what went wrong while recovering

    @property
    def lost(self) -> int:
        return sum(c.lost for c in self.checks)

    @property
    def duplicated(self) -> int:
        return sum(c.duplicated for c in self.checks)


def committed_epochs(lake: ChaosLake) -> dict[str, int | None]:
    """Each view's last committed epoch, read from its table (not from the running process)."""
    assert lake.project is not None
    found: dict[str, int | None] = {}
    for view in VIEWS:
        record = tables.last_commit(lake.project, view)
        found[view] = None if record is None else record.epoch
    return found


def sigkill(lake: ChaosLake, timeout: float) -> FaultRun:
    """SIGKILL ``lakeview up`` (with its Spark JVM) and start it again at once."""
    started = time.monotonic()
    lake.kill_up()
    before = committed_epochs(lake)
    lake.start_up()
    run = FaultRun("sigkill", detail=f"killed at epochs {before}")
    run.catalog_s = _since(started, lambda: lake.wait_catalog(timeout))
    lake.wait_views_committed(before, timeout)
    run.recover_s = time.monotonic() - started
    return run


def postgres_restart(lake: ChaosLake, timeout: float, down_s: float = 2.0) -> FaultRun:
    """Stop the catalog store's PostgreSQL (fast: sessions cut) and start it again."""
    lake.postgres.halt()
    time.sleep(down_s)
    lake.postgres.resume()
    started = time.monotonic()
    before = committed_epochs(lake)
    run = FaultRun("postgres_restart", detail=f"down {down_s:.0f} s")
    run.catalog_s = _since(started, lambda: lake.wait_catalog(timeout))
    lake.wait_views_committed(before, timeout)
    run.recover_s = time.monotonic() - started
    return run


def s3_outage(lake: ChaosLake, timeout: float, down_s: float = 20.0) -> FaultRun:
    """Stop SeaweedFS for ``down_s`` seconds, then start it on the same data directory and ports."""
    lake.s3.stop()
    time.sleep(down_s)
    lake.s3.start()
    started = time.monotonic()
    before = committed_epochs(lake)
    run = FaultRun("s3_outage", detail=f"down {down_s:.0f} s")
    run.catalog_s = _since(started, lambda: lake.wait_catalog(timeout))
    lake.wait_views_committed(before, timeout)
    run.recover_s = time.monotonic() - started
    return run


def full_disk(lake: ChaosLake, timeout: float, full_s: float = 20.0) -> FaultRun:
    """Fill the landing file system for ``full_s`` seconds (the generator's writes fail with
    ENOSPC and wait), then free it."""
    if not lake.landing_is_own_fs:
        raise RuntimeError(f"no full-disk fault: {lake.landing_mounted}")
    filler = lake.landing / ".filler"
    failures = lake.generator.write_failures
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as out:  # unbuffered: closing has nothing left to flush onto a full disk
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    time.sleep(full_s)
    failed_writes = lake.generator.write_failures - failures
    with contextlib.suppress(OSError):
        filler.unlink()
    started = time.monotonic()
    before = committed_epochs(lake)
    lake.wait_views_committed(before, timeout)
    return FaultRun(
        "full_disk", recover_s=time.monotonic() - started, detail=f"{failed_writes} landing writes failed while full"
    )


def malformed_file(lake: ChaosLake, timeout: float) -> FaultRun:
    """Land a file of broken lines in the events and the accounts landing directories; recovered
    when every view committed again and the views reading them hold the broken lines in quarantine."""
    from spark_jobs.sources.quarantine import quarantined_rows  # lazy: pyspark's modules only for this fault

    assert lake.project is not None
    before = committed_epochs(lake)
    started = time.monotonic()
    stamp = time.strftime("%H%M%S")
    names = {}
    for source in ("events", "accounts"):
        path = lake.landing / source / f"malformed-{stamp}-{random.randrange(10**6)}.json"
        hidden = path.with_name(f".{path.name}.tmp")
        hidden.write_bytes(MALFORMED[source])
        os.replace(hidden, path)
        names[source] = path.name
    readers = {"events": "events_log", "accounts": "balances"}

    def quarantined() -> dict[str, int]:
        return {
            view: sum(1 for r in quarantined_rows(lake.project, s, view) if str(r.get("file", "")).endswith(names[s]))  # type: ignore[arg-type]
            for s, view in readers.items()
        }

    lake.wait_views_committed(before, timeout)
    wait_for(lambda: all(quarantined().values()), timeout, "the broken lines in the quarantine", interval=1.0)
    counts = quarantined()
    return FaultRun(
        "malformed_file",
        recover_s=time.monotonic() - started,
        detail="quarantined " + ", ".join(f"{v} {n}" for v, n in counts.items()),
    )


def terminal_error(lake: ChaosLake, timeout: float, view: str | None = None) -> FaultRun:
    """Make every epoch of one view fail with a terminal error until it is parked FAILED; check the
    other views keep committing meanwhile; clear the fault and resume the view."""
    view = view or random.choice(list(VIEWS))
    others = [v for v in VIEWS if v != view]
    lake.fault_file.write_text(f"error:{view}:*\n")
    try:
        wait_for(lambda: view in lake.failed_views(), timeout, f"{view} to be parked FAILED", interval=1.0)
        parked = committed_epochs(lake)
        lake.wait_views_committed(parked, timeout, others)  # the others go on while it is parked
    finally:
        lake.fault_file.write_text("")
    failed = (lake.statuses() or {}).get(view, {})
    started = time.monotonic()
    before = committed_epochs(lake)
    answer = lake.resume(view)
    run = FaultRun(
        "terminal_error",
        detail=f"{view} FAILED at epoch {failed.get('failed_epoch')}: {str(failed.get('error'))[:60]}; resume → {answer}",
    )
    lake.wait_views_committed(before, timeout, [view])
    run.recover_s = time.monotonic() - started
    return run


def _since(started: float, wait: Callable[[], float]) -> float:
    wait()
    return time.monotonic() - started


FAULTS: dict[str, Callable[..., FaultRun]] = {
    "sigkill": sigkill,
    "postgres_restart": postgres_restart,
    "s3_outage": s3_outage,
    "full_disk": full_disk,
    "malformed_file": malformed_file,
    "terminal_error": terminal_error,
}


def inject(lake: ChaosLake, kind: str, timeout: float = 300.0, **options: float) -> FaultRun:
    """Inject one fault, wait for the recovery, then check every view against its recompute.
    Never raises for a lake that does not recover: the run says so (``recover_s`` None, ``error``)."""
    try:
        run = FAULTS[kind](lake, timeout, **options)
    except AssertionError as exc:  # a wait timed out: not recovered
        run = FaultRun(kind, error=str(exc))
    except Exception as exc:  # the fault itself could not be injected or lifted
        run = FaultRun(kind, error=f"{exc.__class__.__name__}: {exc}")
    try:
        run.checks = lake.check()
    except Exception as exc:
        run.error = (run.error + "; " if run.error else "") + f"check failed: {exc.__class__.__name__}: {exc}"
    return run
