"""Publishing views through registrars, in the background, never in a commit's way.

After each commit the pipeline calls :meth:`RegistrationService.notify` (it only sets a flag);
a background thread then publishes the view's current table to each registrar its config names,
at most once per registrar interval. A failure is retried with exponential backoff and recorded
in ``<warehouse>/_lakeview/registration.json``, which ``lakeview status`` reads to show the view
as degraded (``REGISTRAR_DOWN``); the next success clears it, so a registrar that comes back is
caught up with the newest pointer. The same file remembers where each view was registered, so
``lakeview prune`` can find entries of views since dropped from the config.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from catalog_api.registrars.base import DELTA, ICEBERG, PublishedTable
from catalog_api.registrars.filesystem import FilesystemRegistrar
from catalog_api.registrars.glue import GlueRegistrar
from catalog_api.registrars.hive import HiveRegistrar
from catalog_api.store.catalog import open_store
from lakeview.config.models import GlueConfig, ProjectConfig, TableFormat, delta_storage_options
from lakeview.errors import ConfigError, NoSuchTableError, RegistrarConflictError
from lakeview.sql.dialects import sql_properties

if TYPE_CHECKING:
    from collections.abc import Callable

    from catalog_api.registrars.base import PublishedTable, Registrar

log = logging.getLogger("catalog_api.registrars.service")
STATE_FILE = "registration.json"
REGISTRAR_DOWN = "REGISTRAR_DOWN"
REGISTRAR_CONFLICT = "REGISTRAR_CONFLICT"
FILESYSTEM_INTERVAL = 0.0  # path-based readers should never lag the catalog


# -- what to publish ---------------------------------------------------------------------------
def delta_location(project: ProjectConfig, view: str) -> str:
    """Where the Delta writer keeps a view's table (``<warehouse>/<namespace>/<view>``)."""
    return project.table_location(view)


def published_table(project: ProjectConfig, view: str, store: Any = None) -> PublishedTable:
    """The view's table as it is now (Iceberg: from the catalog store, ``store`` or the project's;
    Delta: from its log). Raises NoSuchTableError when the view has no table yet."""

    config = project.views[view]
    properties = sql_properties(config.sql, config.dialect)
    if config.format is TableFormat.DELTA:
        from deltalake import DeltaTable  # lazy: deltalake loads only for Delta tables
        from deltalake.exceptions import TableNotFoundError  # lazy: deltalake loads only for Delta tables

        path = delta_location(project, view)
        try:
            table = DeltaTable(path, storage_options=delta_storage_options(project))
        except TableNotFoundError as exc:
            raise NoSuchTableError(f"{config.namespace}.{view}: no Delta table at {path}") from exc
        schema = pa.schema(table.schema().to_arrow())
        return PublishedTable(config.namespace, view, DELTA, path, schema, properties=properties)
    if store is None:
        store = open_store(project)
    table = store.load_table((config.namespace, view))
    return PublishedTable(
        config.namespace,
        view,
        ICEBERG,
        location=table.metadata.location,
        schema=table.schema().as_arrow(),
        metadata_location=table.metadata_location,
        properties=properties,
    )


def table_location(project: ProjectConfig, namespace: str, view: str) -> str | None:
    """Where a view's table lives (for registrars that are asked about a view by name)."""
    state = RegistrationState(project).load()
    for entry in state.get(view, {}).values():
        if entry.get("location"):
            return entry["location"]
    config = project.views.get(view)
    if config is not None and config.format is TableFormat.DELTA:
        return delta_location(project, view)
    try:
        return published_table(project, view).location if config is not None else None
    except NoSuchTableError:
        return None


# -- persisted state ---------------------------------------------------------------------------
class RegistrationState:
    """``{view: {registrar: {...}}}`` in the warehouse, rewritten atomically."""

    _lock = threading.Lock()

    def __init__(self, project: ProjectConfig) -> None:
        self.path = project.warehouse_path / "_lakeview" / STATE_FILE

    def load(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def update(self, view: str, registrar: str, entry: dict[str, Any] | None) -> None:
        """Replace (or with None remove) one view's entry for one registrar."""
        with self._lock:
            state = self.load()
            views = state.setdefault(view, {})
            if entry is None:
                views.pop(registrar, None)
                if not views:
                    state.pop(view, None)
            else:
                views[registrar] = {**views.get(registrar, {}), **entry}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{STATE_FILE}.{uuid.uuid4().hex}")
            temporary.write_text(json.dumps(state, indent=2, sort_keys=True))
            os.replace(temporary, self.path)


def degraded_reasons(project: ProjectConfig) -> dict[str, str]:
    """Per view, why it is degraded (a registrar failing), e.g. ``REGISTRAR_DOWN: glue: ...``."""
    reasons: dict[str, str] = {}
    for view, registrars in RegistrationState(project).load().items():
        failing = [
            f"{e['reason']}: {name}: {e.get('error', '')}" for name, e in sorted(registrars.items()) if e.get("reason")
        ]
        if failing:
            reasons[view] = "; ".join(failing)
    return reasons


def registered_elsewhere(project: ProjectConfig) -> list[tuple[str, str, str]]:
    """``(view, registrar, namespace)`` entries recorded as registered but no longer configured."""
    stale = []
    for view, registrars in RegistrationState(project).load().items():
        config = project.views.get(view)
        wanted = {r.value for r in config.registrars} if config is not None else set()
        for name, entry in sorted(registrars.items()):
            if name not in wanted and entry.get("registered"):
                stale.append((view, name, entry.get("namespace", "default")))
    return stale


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def register_now(project: ProjectConfig, view: str, registrar: Registrar) -> PublishedTable:
    """Publish ``view`` to ``registrar`` synchronously and record it (``lakeview register``)."""
    table = published_table(project, view)
    registrar.register(table)
    RegistrationState(project).update(view, registrar.name, _ok_entry(table))
    return table


def unregister_now(project: ProjectConfig, view: str, namespace: str, registrar: Registrar) -> bool:
    """Remove ``view`` from ``registrar`` and forget it (``lakeview unregister`` / ``prune``)."""
    removed = registrar.unregister(namespace, view)
    RegistrationState(project).update(view, registrar.name, None)
    return removed


def _ok_entry(table: PublishedTable) -> dict[str, Any]:
    return {
        "registered": True,
        "namespace": table.namespace,
        "format": table.format,
        "location": table.location,
        "metadata_location": table.metadata_location,
        "registered_at": now_iso(),
        "reason": None,
        "error": None,
        "failures": 0,
    }


# -- the background loop -----------------------------------------------------------------------
@dataclass
class _Job:
    view: str
    registrar: str
    interval: float
    pending: bool = True  # caught up on start: the registrar may have missed commits
    last_push: float = float("-inf")
    failures: int = 0
    next_attempt: float = 0.0
    last_error: str | None = field(default=None)

    def due(self) -> float:
        return max(self.next_attempt, self.last_push + self.interval)


class RegistrationService:
    """Publishes committed views to their registrars from one background thread."""

    def __init__(
        self,
        project: ProjectConfig,
        registrars: dict[str, Registrar] | None = None,
        *,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
    ) -> None:
        self.project = project
        self.state = RegistrationState(project)
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.registrars: dict[str, Registrar] = dict(registrars or {})
        self.jobs: list[_Job] = []
        for view, config in project.views.items():
            for name in (r.value for r in config.registrars):
                if name not in self.registrars:
                    self.registrars[name] = make_registrar(name, project)
                self.jobs.append(_Job(view, name, self._interval(name)))
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._store: Any = None  # the catalog store, opened once by the background thread

    def _interval(self, registrar: str) -> float:
        config = {"glue": self.project.glue, "hive": self.project.hive}.get(registrar)
        return float(config.interval.seconds or 0.0) if config is not None else FILESYSTEM_INTERVAL

    @property
    def has_work(self) -> bool:
        return bool(self.jobs)

    def start(self) -> RegistrationService:
        if self._thread is None and self.jobs:
            self._thread = threading.Thread(target=self._run, name="lakeview-registration", daemon=True)
            self._thread.start()
        return self

    def notify(self, view: str) -> None:
        """A commit happened: publish ``view`` again soon. Never blocks."""
        for job in self.jobs:
            if job.view == view:
                job.pending = True
        self._wake.set()

    def wait_idle(self, timeout: float) -> bool:
        """Until nothing is pending or failing (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while any(j.pending for j in self.jobs):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.2))
        return True

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        for registrar in self.registrars.values():
            try:
                registrar.close()
            except Exception:  # closing must go on for the others
                log.exception("registration: closing %s failed", registrar.name)

    def _run(self) -> None:
        while not self._stopped.is_set():
            now = time.monotonic()
            wake_at = now + 1.0
            for job in self.jobs:
                if self._stopped.is_set():
                    break
                if not job.pending:
                    continue
                if job.due() <= now:
                    self._push(job)
                if job.pending:
                    wake_at = min(wake_at, job.due())
            with self._idle:
                self._idle.notify_all()
            self._wake.wait(max(0.0, wake_at - time.monotonic()))
            self._wake.clear()

    def _push(self, job: _Job) -> None:
        registrar = self.registrars[job.registrar]
        job.pending = False  # a commit arriving during the push sets it again
        try:
            if self._store is None and self.project.views[job.view].format is not TableFormat.DELTA:
                from catalog_api.store.catalog import open_store

                self._store = open_store(self.project)
            table = published_table(self.project, job.view, self._store)
        except NoSuchTableError:
            return  # nothing committed yet; the first commit notifies again
        except Exception as exc:  # the catalog store itself failing: retry like a registrar failure
            self._failed(job, exc, REGISTRAR_DOWN)
            return
        try:
            registrar.register(table)
        except RegistrarConflictError as exc:  # terminal: retried only when the next commit notifies
            self._failed(job, exc, REGISTRAR_CONFLICT, retry=False)
            return
        except Exception as exc:  # transient (RegistrarError) or unexpected: back off and retry
            self._failed(job, exc, REGISTRAR_DOWN)
            return
        if job.failures:
            log.warning("registration: %s is back for %s after %s failure(s)", job.registrar, job.view, job.failures)
        job.failures, job.last_error, job.last_push = 0, None, time.monotonic()
        self.state.update(job.view, job.registrar, _ok_entry(table))

    def _failed(self, job: _Job, exc: Exception, reason: str, retry: bool = True) -> None:
        job.failures += 1
        job.last_error = str(exc)
        delay = min(self.max_delay, self.base_delay * 2 ** (job.failures - 1))
        if retry:
            job.pending = True
            job.next_attempt = time.monotonic() + delay
        log.warning(
            "registration: %s for %s failed (%s, attempt %s): %s", job.registrar, job.view, reason, job.failures, exc
        )
        self.state.update(
            job.view,
            job.registrar,
            {"reason": reason, "error": str(exc)[:500], "failures": job.failures, "failing_since": now_iso()}
            if job.failures == 1
            else {"reason": reason, "error": str(exc)[:500], "failures": job.failures},
        )


# Reasons a failing registrar outranks (the same precedence as freshness.degraded_reason).
_OUTRANKED = (None, "BACKFILLING", "RECOVERING", "FALLING_BEHIND")


def with_registrar_reasons(project: ProjectConfig, statuses: list[Any]) -> list[Any]:
    """``lakeview status`` rows with REGISTRAR_DOWN where a registrar keeps failing for the view
    (even when the view itself is fresh: readers going through that registrar are not)."""

    reasons = degraded_reasons(project)
    out = []
    for status in statuses:
        detail = reasons.get(status.view)
        if detail is not None:
            reason = REGISTRAR_DOWN if status.degraded_reason in _OUTRANKED else status.degraded_reason
            status = dataclasses.replace(status, degraded_reason=reason, registrar_errors=detail)
        out.append(status)
    return out


# -- the registrars, by name ---------------------------------------------------------------------
def _glue(project: ProjectConfig) -> Registrar:
    config = project.glue or GlueConfig()
    return GlueRegistrar(endpoint=config.endpoint, region=config.region, catalog_id=config.catalog_id)


def _hive(project: ProjectConfig) -> Registrar:
    if project.hive is None:
        raise ConfigError(project.file, "hive", 'no [hive] table; add one with uri = "thrift://HOST:PORT"')
    return HiveRegistrar(project.hive.uri)


def _filesystem(project: ProjectConfig) -> Registrar:
    def locate(namespace: str, name: str) -> str | None:
        return table_location(project, namespace, name)

    return FilesystemRegistrar(locate)


REGISTRARS: dict[str, Callable[[ProjectConfig], Registrar]] = {
    "glue": _glue,
    "hive": _hive,
    "filesystem": _filesystem,
}


def make_registrar(name: str, project: ProjectConfig) -> Registrar:
    """The registrar called ``name`` configured from ``project``."""
    try:
        loader = REGISTRARS[name]
    except KeyError:
        raise ValueError(f"unknown registrar {name!r}; use one of {', '.join(REGISTRARS)}") from None
    return loader(project)
