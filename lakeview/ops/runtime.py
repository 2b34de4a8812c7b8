"""Runtime state of the process maintaining views, published for other processes to read.

``lakeview up`` (or a spark-submit job) writes one small JSON heartbeat per view to
``<warehouse>/_lakeview/runtime/<view>.json`` every second (write hidden, fsync-free rename:
a reader sees the old or the new file, never half of one). ``lakeview status`` in another
shell and the catalog's ``/lakeview/v1`` routes read it to tell STOPPED from FALLING_BEHIND.
A heartbeat older than a few intervals means the process is gone (killed, machine down).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lakeview.config.models import ProjectConfig
from lakeview.ops.freshness import RuntimeSignals
from lakeview.ops.source_log import logged_files

log = logging.getLogger("lakeview.runtime")
HEARTBEAT_S = 1.0
STALE_AFTER_MS = 5_000  # no heartbeat for this long: the process is gone
RECOUNT_MS = 30_000


def runtime_dir(project: ProjectConfig) -> Path:
    return project.warehouse_path / "_lakeview" / "runtime"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ViewRuntime:
    """One view's heartbeat (the JSON file's content)."""

    view: str
    pid: int
    host: str
    started_at_ms: int
    heartbeat_at_ms: int
    stopped: bool = False
    query_active: bool = False
    trigger_active: bool = False
    data_available: bool = False
    failed: str | None = None
    caught_up_at_ms: int | None = None
    pending_files: int = 0
    processed_files: int = 0
    commit_retry_at_ms: int | None = None
    last_batch_ms: int | None = None
    registrars_down: list[str] = field(default_factory=list)

    def signals(self, at_ms: int) -> RuntimeSignals:
        alive = not self.stopped and at_ms - self.heartbeat_at_ms <= STALE_AFTER_MS
        return RuntimeSignals(
            alive=alive,
            query_active=self.query_active,
            failed=self.failed,
            trigger_active=self.trigger_active,
            pending_files=self.pending_files,
            started_at_ms=self.started_at_ms,
            commit_retry_at_ms=self.commit_retry_at_ms,
            registrars_down=tuple(self.registrars_down),
        )


_CAUSE = re.compile(r"\b[\w.$]*(Exception|Error): \S")


def failure_text(error: object, limit: int = 1000) -> str:
    """A failed query's error with its root cause on the first line: Spark's message puts it
    last, under a Python traceback and a JVM stack that a 500-character cut never reaches."""
    text = str(error)
    causes = [
        line.strip()
        for line in text.splitlines()
        if _CAUSE.search(line) and "An error occurred while calling" not in line and not line.lstrip().startswith("at ")
    ]
    return (f"{causes[-1]}\n{text}" if causes else text)[:limit]


def read_runtime(project: ProjectConfig, view: str) -> ViewRuntime | None:
    """The view's last heartbeat, or None when no process ever published one."""
    path = runtime_dir(project) / f"{view}.json"
    try:
        data = json.loads(path.read_text())
        known = ViewRuntime.__dataclass_fields__
        return ViewRuntime(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None


def count_pending_files(
    project: ProjectConfig, view_source: str | tuple[str, ...], checkpoint: Path
) -> tuple[int, int]:
    """(landed files the view's query has not taken in yet, files it has), over every source
    it reads (a join or UNION ALL view reads several; source i's file log is ``sources/i``)."""

    landed = 0
    pending = 0
    for index, name in enumerate((view_source,) if isinstance(view_source, str) else view_source):
        landing = project.source_path(name)
        seen = {str(f.path) for f in logged_files(checkpoint, index)}
        if landing.exists():
            for entry in landing.rglob("*"):
                if entry.is_file() and not entry.name.startswith((".", "_")):
                    landed += 1
                    pending += str(entry) not in seen
    return pending, landed - pending


class _CommitRaceWatcher(logging.Handler):
    """Notes when a writer logs a lost commit race (the writer retries internally)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last_retry_ms: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if "lost a race" in str(record.msg) and record.args:
            self.last_retry_ms[str(record.args[0])] = now_ms()  # type: ignore[index]


class RuntimePublisher:
    """Writes every running view's heartbeat once a second until ``stop()``."""

    def __init__(
        self,
        project: ProjectConfig,
        queries: dict[str, Any],
        sources: dict[str, str | tuple[str, ...]],
        *,
        extra: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.project = project
        self.queries = queries  # view -> StreamingQuery (live dict of the stack)
        self.sources = sources  # view -> its source name (a tuple of names for a view over several)
        self.extra = extra
        self.started_at_ms = now_ms()
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._races = _CommitRaceWatcher()
        self._caught_up: dict[str, int] = {}
        self._counts: dict[
            str, tuple[int, tuple[int, ...], int, int]
        ] = {}  # view -> (at, dir mtimes, pending, processed)

    def start(self) -> RuntimePublisher:
        runtime_dir(self.project).mkdir(parents=True, exist_ok=True)
        logging.getLogger("lakeview.writers").addHandler(self._races)
        self.publish()
        self._thread = threading.Thread(target=self._run, name="lakeview-runtime", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.publish()
            except Exception:  # a heartbeat must never take the process down
                log.exception("could not publish runtime state")

    def publish(self, *, stopped: bool = False) -> None:
        for view, query in list(self.queries.items()):
            self._write(self.state_of(view, query, stopped=stopped))

    def state_of(self, view: str, query: Any, *, stopped: bool = False) -> ViewRuntime:
        at = now_ms()
        state = ViewRuntime(
            view=view,
            pid=os.getpid(),
            host=self.host,
            started_at_ms=self.started_at_ms,
            heartbeat_at_ms=at,
            stopped=stopped,
        )
        try:
            state.query_active = bool(query.isActive)
            status = query.status
            state.trigger_active = bool(status.get("isTriggerActive"))
            state.data_available = bool(status.get("isDataAvailable"))
            if not state.query_active and query.exception() is not None:
                state.failed = failure_text(query.exception())
            progress = query.lastProgress
            if progress:
                state.last_batch_ms = int((progress.get("durationMs") or {}).get("triggerExecution", 0)) or None
        except Exception as exc:  # the JVM may be shutting down
            state.failed = state.failed or None
            log.debug("%s: query state unavailable: %s", view, exc)
        state.pending_files, state.processed_files = self._file_counts(view, at)
        cadence = self.project.views[view].cadence.seconds or 0
        if state.query_active and not state.trigger_active and state.pending_files == 0:
            # Nothing left to read and no batch running: the view reflects
            # everything that arrived before the last trigger, at most one cadence ago.
            self._caught_up[view] = max(self._caught_up.get(view, 0), at - int(cadence * 1000))
        state.caught_up_at_ms = self._caught_up.get(view)
        state.commit_retry_at_ms = self._races.last_retry_ms.get(view)
        if self.extra is not None:
            for key, value in self.extra(view).items():
                setattr(state, key, value)
        return state

    def _file_counts(self, view: str, at: int) -> tuple[int, int]:
        """Pending/processed files, recounted only when the landing directory or Spark's
        file-source log changed (listing both and parsing the log is not free on long
        histories), and at least every ``RECOUNT_MS`` (files landing in subdirectories)."""
        names = self.sources[view]
        names = (names,) if isinstance(names, str) else names  # a join or UNION ALL view reads several
        checkpoint = self.project.checkpoint_path(view)
        watched = [self.project.source_path(n) for n in names] + [
            checkpoint / "sources" / str(i) for i in range(len(names))
        ]
        key = tuple(p.stat().st_mtime_ns if p.exists() else 0 for p in watched)
        cached = self._counts.get(view)
        # Files still pending are recounted every time: the directories' mtimes can miss a
        # change (a log file created and renamed within one timestamp tick).
        if cached is None or cached[1] != key or cached[2] > 0 or at - cached[0] >= RECOUNT_MS:
            pending, processed = count_pending_files(
                self.project, self.sources[view], self.project.checkpoint_path(view)
            )
            cached = self._counts[view] = (at, key, pending, processed)
        return cached[2], cached[3]

    def _write(self, state: ViewRuntime) -> None:
        directory = runtime_dir(self.project)
        hidden = directory / f".{state.view}.json.{os.getpid()}"
        hidden.write_text(json.dumps(asdict(state)))
        os.replace(hidden, directory / f"{state.view}.json")

    def stop(self) -> None:
        """Stop heartbeating and record the views as stopped (a clean shutdown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        logging.getLogger("lakeview.writers").removeHandler(self._races)
        try:
            self.publish(stopped=True)
        except Exception:
            log.exception("could not record the stop")
