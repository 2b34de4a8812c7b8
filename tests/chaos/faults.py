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


def sigkill(lake: ChaosLake, timeout: float) -> FaultRun:
    """SIGKILL ``lakeview up`` (with its Spark JVM) and start it again at once."""
    started = time.monotonic()
    lake.kill_up()
    before = lake.committed_epochs()
    lake.start_up()
    return _recovery(lake, FaultRun("sigkill", detail=f"killed at epochs {before}"), started, timeout, before)


def postgres_restart(lake: ChaosLake, timeout: float, down_s: float = 2.0) -> FaultRun:
    """Stop the catalog store's PostgreSQL (fast: sessions cut) and start it again."""
    lake.postgres.halt()
    time.sleep(down_s)
    lake.postgres.resume()
    return _recovery(lake, FaultRun("postgres_restart", detail=f"down {down_s:.0f} s"), time.monotonic(), timeout)


def s3_outage(lake: ChaosLake, timeout: float, down_s: float = 20.0) -> FaultRun:
    """Stop SeaweedFS for ``down_s`` seconds, then start it on the same data directory and ports."""
    lake.s3.stop()
    time.sleep(down_s)
    lake.s3.start()
    return _recovery(lake, FaultRun("s3_outage", detail=f"down {down_s:.0f} s"), time.monotonic(), timeout)


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
    run = FaultRun("full_disk", detail=f"{failed_writes} landing writes failed while full")
    return _recovery(lake, run, time.monotonic(), timeout, catalog=False)


def malformed_file(lake: ChaosLake, timeout: float) -> FaultRun:
    """Land a file of broken lines in the events and the accounts landing directories; recovered
    when every view committed again and the views reading them hold the broken lines in quarantine."""
    from spark_jobs.sources.quarantine import quarantined_rows  # lazy: pyspark's modules only for this fault

    assert lake.project is not None
    before = lake.committed_epochs()
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
    wait_for(lambda: all(quarantined().values()), timeout, "the broken lines in the quarantine")
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
        wait_for(lambda: view in lake.failed_views(), timeout, f"{view} to be parked FAILED")
        parked = lake.committed_epochs()
        lake.wait_views_committed(parked, timeout, others)  # the others go on while it is parked
    finally:
        lake.fault_file.write_text("")
    failed = (lake.statuses() or {}).get(view, {})
    started = time.monotonic()
    before = lake.committed_epochs()
    answer = lake.resume(view)
    run = FaultRun(
        "terminal_error",
        detail=f"{view} FAILED at epoch {failed.get('failed_epoch')}: {str(failed.get('error'))[:60]}; resume → {answer}",
    )
    lake.wait_views_committed(before, timeout, [view])
    run.recover_s = time.monotonic() - started
    return run


def _recovery(
    lake: ChaosLake,
    run: FaultRun,
    started: float,
    timeout: float,
    before: dict[str, int | None] | None = None,
    catalog: bool = True,
) -> FaultRun:
    """``run`` with the seconds from ``started`` (the fault lifted) until the catalog answers a
    table load (faults that take it away: ``catalog``) and every view has committed an epoch past
    ``before`` (read now when not given)."""
    before = lake.committed_epochs() if before is None else before
    if catalog:
        lake.wait_catalog(timeout)
        run.catalog_s = time.monotonic() - started
    lake.wait_views_committed(before, timeout)
    run.recover_s = time.monotonic() - started
    return run


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
