"""A Lakeview deployment to break on purpose, shared by the short fault tests
(``tests/chaos/test_faults.py``) and the soak (``bench/chaos.py``).

One project with four views at a 1 s cadence — an append view, a keyed aggregate over a change
feed, a join and a Delta view — its catalog store on a private PostgreSQL 15, its warehouse on
SeaweedFS, its landing directory on a small file system of its own (a tmpfs, so it can be filled),
and ``lakeview up`` as a subprocess. A generator lands files of known rows; :meth:`ChaosLake.check`
compares every view with DuckDB's recompute at the view's committed frontier (what ``lakeview
verify`` does) and counts epochs committed twice or skipped from the snapshot summaries.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from catalog_api.ops import view_tables as tables
from catalog_api.server import free_port
from catalog_api.store.local_postgres import LocalPostgres
from lakeview.cli.generator import land_json
from lakeview.config.models import ProjectConfig
from lakeview.ivm import oracle
from lakeview.ops.retrying import retry_transient
from lakeview.sql.planner import view_plan
from tests.s3_server import SeaweedS3
from tests.spark_jobs.test_crash import project_on_disk
from tests.waiting import wait_for

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "chaos"
BUCKET = "chaos"
EVENTS_SCHEMA = "id BIGINT, k STRING, v BIGINT"
ACCOUNTS_SCHEMA = "id BIGINT, grp STRING, balance BIGINT, op STRING, seq BIGINT"
VIEWS: dict[str, dict] = {
    # append-only: every event once
    "events_log": {"sql": "SELECT id, k, v FROM events"},
    # a keyed aggregate over a change feed (inserts, updates, deletes)
    "balances": {"sql": "SELECT grp, COUNT(*) AS accounts, SUM(balance) AS total FROM accounts GROUP BY grp"},
    # a join of two append sources (k9 never gets a label: those events never join)
    "enriched": {"sql": "SELECT e.id, e.v, d.label FROM events e JOIN dims d ON e.k = d.k"},
    # the Delta view (delta-rs on S3)
    "totals_delta": {"sql": "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY k", "format": "delta"},
}
# Lines a producer should never write: cut short, not JSON, binary, and (the last one) JSON whose
# string is not UTF-8. Every one is malformed: quarantined by the pipeline, left out by the oracle.
MALFORMED = {
    "events": b'{"id": 1, "k": \nnot json at all\n\x00\x01\x02\xff binary\n{"id": -1, "k": "k\xff", "v": 1}\n',
    "accounts": b'{"id": 1, "grp": \n\x00\xfe\n{"id": -1, "grp": "g\xff", "balance": 1, "op": "insert", "seq": 0}\n',
}


def load_average() -> str:
    """The machine's 1/5/15-minute load average, as benchmarks print it."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class Generator:
    """Lands files of known rows: events (ids 0, 1, 2, ... each once), a change feed of accounts
    and, once, the labels of k0..k8. A write that fails (a full disk) is kept and tried again at
    the next tick, so every row the generator counts as landed is in a complete, visible file."""

    def __init__(self, landing: Path, rows_per_file: int = 20, seed: int = 18) -> None:
        self.landing = landing
        self.rows_per_file = rows_per_file
        self.random = random.Random(seed)
        self.next_id = 0
        self.seq = 0
        self.ticks = 0
        self.accounts: dict[int, str] = {}  # live account id -> group
        self.next_account = 0
        self.landed_ids: list[int] = []
        self.write_failures = 0
        self.pending: list[tuple[str, str, list[dict]]] = []  # (source, file name, rows) not landed yet
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def tick(self) -> None:
        """Make one file per source (and the labels at the first tick), then land what is pending."""
        with self.lock:
            n = self.ticks
            self.ticks += 1
            if n == 0:
                labels = [{"k": f"k{i}", "label": f"label-{i}"} for i in range(9)]
                self.pending.append(("dims", "dims-0.json", labels))
            events = [
                {"id": i, "k": f"k{i % 10}", "v": i % 1000}
                for i in range(self.next_id, self.next_id + self.rows_per_file)
            ]
            self.next_id += self.rows_per_file
            self.pending.append(("events", f"events-{n:06d}.json", events))
            self.pending.append(("accounts", f"accounts-{n:06d}.json", self._changes()))
            self._land_pending()

    def _changes(self) -> list[dict]:
        rows = []
        for _ in range(5):
            self.seq += 1
            live = list(self.accounts)
            roll = self.random.random()
            if not live or roll < 0.5:
                account, group = self.next_account, f"g{self.random.randrange(6)}"
                self.next_account += 1
                self.accounts[account] = group
                rows.append(
                    {
                        "id": account,
                        "grp": group,
                        "balance": self.random.randrange(1000),
                        "op": "insert",
                        "seq": self.seq,
                    }
                )
            elif roll < 0.85:
                account = self.random.choice(live)
                group = self.accounts[account] = f"g{self.random.randrange(6)}"
                rows.append(
                    {
                        "id": account,
                        "grp": group,
                        "balance": self.random.randrange(1000),
                        "op": "update",
                        "seq": self.seq,
                    }
                )
            else:
                account = self.random.choice(live)
                del self.accounts[account]
                rows.append({"id": account, "op": "delete", "seq": self.seq})
        return rows

    def _land_pending(self) -> None:
        while self.pending:
            source, name, rows = self.pending[0]
            try:
                land_json(self.landing / source, name, rows)
            except OSError:  # a full disk: the hidden temporary file goes, the batch waits
                self.write_failures += 1
                with contextlib.suppress(OSError):
                    (self.landing / source / f".{name}.tmp").unlink()
                return
            self.pending.pop(0)
            if source == "events":
                self.landed_ids += [r["id"] for r in rows]

    def start(self, interval_s: float = 1.0) -> Generator:
        def run() -> None:
            while not self._stop.wait(interval_s):
                if not self._paused.is_set():
                    self.tick()

        self._thread = threading.Thread(target=run, name="chaos-generator", daemon=True)
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop landing (a tick under way finishes first)."""
        self._paused.set()
        with self.lock:
            pass

    def resume(self) -> None:
        self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


@dataclass
class ViewCheck:
    """One view compared with DuckDB's recompute at its committed frontier."""

    view: str
    epoch: int
    lost: int  # rows of the recompute missing from the snapshot
    duplicated: int  # rows in the snapshot the recompute does not have
    describe: str


@dataclass
class EpochLedger:
    """Every Lakeview commit seen per view: epoch -> snapshot ids (two ids: the epoch applied twice)."""

    seen: dict[str, dict[int, set]] = field(default_factory=dict)

    def record(self, project: ProjectConfig, view: str) -> None:
        for commit in tables.commit_history(project, view, limit=100):
            self.seen.setdefault(view, {}).setdefault(commit.epoch, set()).add(commit.snapshot_id)

    def twice(self, view: str) -> list[int]:
        return sorted(e for e, ids in self.seen.get(view, {}).items() if len(ids) > 1)

    def gaps(self, view: str) -> list[int]:
        epochs = self.seen.get(view, {})
        return [e for e in range(min(epochs), max(epochs)) if e not in epochs] if epochs else []


class UpExitedError(AssertionError):
    """``lakeview up`` exited while the rig waited for it (a wait that cannot succeed)."""


class ChaosLake:
    """The servers, the project, ``lakeview up`` and the generator; every fault in
    ``tests/chaos/faults.py`` acts on one of these. ``start()`` / ``stop()``."""

    def __init__(self, root: Path, *, landing_mb: int = 64) -> None:
        self.root = root
        self.landing = root / "landing"
        self.landing_mb = landing_mb
        self.fault_file = root / "faults.txt"
        self.up_log = root / "up.log"
        self.postgres = LocalPostgres()
        self.s3 = SeaweedS3(root / "seaweedfs")
        self.port = free_port("127.0.0.1")
        self.base = f"http://127.0.0.1:{self.port}"
        self.up: subprocess.Popen | None = None
        self.up_starts = 0
        self.generator = Generator(self.landing)
        self.ledger = EpochLedger()
        self.landing_mounted: str | None = None  # why the landing is not its own file system, if it is not
        self.project: ProjectConfig | None = None
        self._saved_env: dict[str, str | None] = {}

    # -- servers ----------------------------------------------------------------------------
    def start(self) -> ChaosLake:
        self.root.mkdir(parents=True, exist_ok=True)
        self._mount_landing()
        self.postgres.start()
        self.s3.start()
        self.s3.create_bucket_when_ready(BUCKET)
        self._saved_env = {k: os.environ.get(k) for k in self.s3.env}
        os.environ.update(self.s3.env)  # this process reads the tables too (checks); put back by stop()
        data = {
            "lake": {
                "warehouse": f"s3://{BUCKET}/wh",
                "catalog_store": self.postgres.url,
                "s3": {"endpoint": self.s3.endpoint, "region": "us-east-1"},
            },
            "server": {"host": "127.0.0.1", "port": self.port},
            "sources": {
                "events": {"format": "json", "path": str(self.landing / "events"), "schema": EVENTS_SCHEMA},
                "dims": {"format": "json", "path": str(self.landing / "dims"), "schema": "k STRING, label STRING"},
                "accounts": {
                    "format": "json",
                    "path": str(self.landing / "accounts"),
                    "schema": ACCOUNTS_SCHEMA,
                    "changes": {"operation": "op", "key": ["id"], "sequence": "seq"},
                },
            },
            "views": {
                name: {"cadence": "1s", "namespace": NAMESPACE, "format": "iceberg", **view}
                for name, view in VIEWS.items()
            },
        }
        self.generator.tick()  # a first file per source before the views start
        for attempt in range(1, 4):
            data["server"]["port"] = self.port
            self.project = project_on_disk(self.root, data)
            self.start_up()
            try:
                self.wait_views_committed({}, timeout=300)
                return self
            except UpExitedError as exc:
                # Another process bound the catalog's port between its choice and the bind: a new port.
                if attempt == 3 or "is in use" not in str(exc):
                    raise
                self.port = free_port("127.0.0.1")
                self.base = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _mount_landing(self) -> None:
        self.landing.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self.landing_mounted = "not root: cannot mount a file system for the landing directory"
            return
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.landing_mb}m", "lakeview-chaos", str(self.landing)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            self.landing_mounted = f"mount -t tmpfs failed: {result.stderr.strip()}"

    @property
    def landing_is_own_fs(self) -> bool:
        return self.landing_mounted is None

    def start_up(self) -> None:
        """Start ``lakeview up`` (its own process group: a kill takes its Spark JVM too)."""
        env = {**os.environ, **self.s3.env, "LAKEVIEW_FAULT_FILE": str(self.fault_file)}
        env.pop("LAKEVIEW_FAULT", None)
        log = open(self.up_log, "ab")  # noqa: SIM115 - the child holds it
        log.write(f"\n=== lakeview up #{self.up_starts} at {time.strftime('%H:%M:%S')}\n".encode())
        log.flush()
        self.up = subprocess.Popen(
            [sys.executable, "-m", "lakeview.cli", "up", "-p", str(self.root)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        log.close()
        self.up_starts += 1

    def kill_up(self) -> None:
        """SIGKILL ``lakeview up`` and its Spark JVM, as a crash or the OOM killer would."""
        assert self.up is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.up.pid, signal.SIGKILL)
        self.up.wait(timeout=30)

    def stop_up(self) -> int | None:
        """SIGTERM, as a supervisor stops it; its exit status (None: it had to be killed)."""
        if self.up is None or self.up.poll() is not None:
            return None if self.up is None else self.up.returncode
        self.up.send_signal(signal.SIGTERM)
        try:
            return self.up.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.kill_up()
            return None

    def stop(self) -> None:
        self.generator.stop()
        self.stop_up()
        with contextlib.suppress(Exception):
            self.s3.discard()  # the soak's own temporary data
        with contextlib.suppress(Exception):
            self.postgres.stop()
        if self.landing_is_own_fs:
            subprocess.run(["umount", "-l", str(self.landing)], capture_output=True)
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> ChaosLake:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a user sees -------------------------------------------------------------------
    def statuses(self) -> dict[str, dict] | None:
        """Every view's status from the running ``lakeview up`` (None: it does not answer)."""
        try:
            answer = httpx.get(f"{self.base}/lakeview/v1/views", timeout=10)
            if answer.status_code != 200:
                return None
            return {s["view"]: s for s in answer.json()["views"]}
        except (httpx.HTTPError, ValueError):
            return None

    def epochs(self) -> dict[str, int | None]:
        statuses = self.statuses() or {}
        return {view: (statuses.get(view) or {}).get("epoch") for view in VIEWS}

    def catalog_answers(self) -> bool:
        """A table load through the REST catalog succeeds (it reads the store and the warehouse)."""
        try:
            url = f"{self.base}/iceberg/v1/lakeview/namespaces/{NAMESPACE}/tables/events_log"
            return httpx.get(url, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_catalog(self, timeout: float) -> float:
        """Seconds until the catalog answers a table load (AssertionError past ``timeout``)."""
        return _wait(
            lambda: self._up_running() and self.catalog_answers(), timeout, "the catalog to answer a table load"
        )

    def _up_running(self) -> bool:
        """True while ``lakeview up`` runs; UpExitedError (with its last output) once it has exited,
        so a wait for it fails at once instead of at its timeout."""
        if self.up is not None and self.up.poll() is not None:
            tail = self.up_log.read_bytes()[-1500:].decode(errors="replace")
            raise UpExitedError(f"lakeview up exited with status {self.up.returncode}:\n{tail}")
        return True

    def wait_views_committed(
        self, before: dict[str, int | None], timeout: float, views: list[str] | None = None
    ) -> float:
        """Seconds until every view (of ``views``) has committed an epoch after ``before[view]``."""
        names = views or list(VIEWS)

        def done() -> bool:
            self._up_running()
            now = self.epochs()
            return all(now.get(v) is not None and (before.get(v) is None or now[v] > before[v]) for v in names)  # type: ignore[operator]

        return _wait(done, timeout, f"{', '.join(names)} to commit again")

    def failed_views(self) -> list[str]:
        return sorted(v for v, s in (self.statuses() or {}).items() if s.get("state") == "FAILED")

    def resume(self, view: str) -> int:
        return httpx.post(f"{self.base}/lakeview/v1/views/{view}/resume", timeout=10).status_code

    # -- checks -----------------------------------------------------------------------------
    def read(self, what: str, step: Callable[[], T]) -> T:
        """``step()`` (a read of the lake), tried again on a transient storage or catalog-store
        error for about half a minute, as a reader would: SeaweedFS answers INTERNAL_FAILURE for a
        moment after a restart, PostgreSQL cuts pooled connections when it restarts."""
        from deltalake.exceptions import DeltaError  # lazy: deltalake loads only where the checks run
        from sqlalchemy.exc import OperationalError  # lazy: as above

        return retry_transient(step, what=what, attempts=10, transient=(DeltaError, OperationalError))

    def check(self) -> list[ViewCheck]:
        """Every view against DuckDB's recompute at its committed frontier (``lakeview verify``),
        and its commits recorded in the epoch ledger."""
        return [self.read(f"the check of {view}", lambda view=view: self._check(view)) for view in VIEWS]

    def _check(self, view: str) -> ViewCheck:
        assert self.project is not None
        project = self.project
        record = tables.last_commit(project, view)  # its frontier and its snapshot: one commit's
        assert record is not None, f"{view} has no commit"
        self.ledger.record(project, view)
        files = oracle.frontier_files(project, view, record.frontier)
        comparison = oracle.compare(
            tables.read_rows(project, view, record.snapshot_id), oracle.recompute(project, view, files)
        )
        return ViewCheck(
            view, record.epoch, len(comparison.missing), len(comparison.unexpected), comparison.describe(3)
        )

    def committed_epochs(self) -> dict[str, int | None]:
        """Each view's last committed epoch, read from its table (not from the running process)."""
        assert self.project is not None

        def epoch(view: str) -> int | None:
            record = tables.last_commit(self.project, view)  # type: ignore[arg-type]
            return None if record is None else record.epoch

        return {view: self.read(f"the last commit of {view}", lambda view=view: epoch(view)) for view in VIEWS}

    def unexplained_gaps(self, view: str) -> list[int]:
        """Epochs missing from the view's commits whose change was not empty: skipped epochs.
        (An epoch whose input changes nothing in the view, e.g. only malformed lines, commits no
        snapshot.) The change of epoch g is the recompute over the files up to batch g minus the
        recompute up to batch g-1."""
        assert self.project is not None
        skipped = []
        for gap in self.ledger.gaps(view):
            sources = view_plan(self.project, view).sources
            upto = [
                oracle.frontier_files(
                    self.project, view, {s: {"log_offset": b, "index": i} for i, s in enumerate(sources)}
                )
                for b in (gap - 1, gap)
            ]
            before, after = (oracle.recompute(self.project, view, files) for files in upto)
            if not oracle.compare(after, before).equal:
                skipped.append(gap)
        return skipped

    def quiesce(self, timeout: float = 240) -> None:
        """Stop the generator and wait until every view's frontier reaches every landed file."""
        self.generator.pause()
        assert self.project is not None
        landed = {s: set(oracle.landed_files(self.project.source_path(s))) for s in ("events", "accounts", "dims")}

        def caught_up() -> bool:
            for view in VIEWS:
                try:
                    record = tables.last_commit(self.project, view)  # type: ignore[arg-type]
                except Exception:
                    return False
                if record is None:
                    return False
                reached = oracle.frontier_files(self.project, view, record.frontier)  # type: ignore[arg-type]
                if any(not landed[s] <= set(files) for s, files in reached.items() if s != "dims"):
                    return False
            return True

        _wait(caught_up, timeout, "every view to reach every landed file")

    def events_end_to_end(self) -> tuple[int, int]:
        """(lost, duplicated) event ids: every id the generator landed, against the append view."""
        assert self.project is not None
        ids = tables.read_rows(self.project, "events_log").column("id").to_pylist()
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        landed = set(self.generator.landed_ids)
        lost = len(landed - counts.keys())
        duplicated = sum(n - 1 for n in counts.values()) + len(counts.keys() - landed)
        return lost, duplicated

    def verify_cli(self) -> dict[str, tuple[int, str]]:
        """``lakeview verify VIEW`` per view (the command's code, run in this process): (exit status, its last line)."""
        from lakeview.cli.main import main  # lazy: the command line's modules only where verify runs

        outcome = {}
        for view in VIEWS:
            out = io.StringIO()
            code = 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    main(["verify", view, "-p", str(self.root)])
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
            lines = out.getvalue().strip().splitlines()
            outcome[view] = (code, lines[-1] if lines else "")
        return outcome


def _wait(predicate, timeout: float, what: str) -> float:
    """Seconds until ``predicate()`` is true (``tests.waiting.wait_for``: AssertionError past ``timeout``)."""
    started = time.monotonic()
    wait_for(predicate, timeout, what)
    return time.monotonic() - started
