"""Per-view status read from the catalog store and the tables' snapshot summaries.

Reads the store directly (SQLite/PostgreSQL), so it works whether or not ``up`` is running.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from datetime import datetime as _dt
from typing import Any

from rich.markup import escape
from rich.table import Table

from catalog_api.ops.view_tables import status_inputs
from catalog_api.registrars.service import with_registrar_reasons
from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig
from lakeview.errors import NoSuchTableError
from lakeview.ops import freshness
from lakeview.ops.freshness import RuntimeSignals
from lakeview.ops.parking import FAILED, parked
from lakeview.ops.runtime import read_runtime


@dataclass(frozen=True)
class ViewStatus:
    view: str
    table: str
    format: str
    cadence: str
    state: str
    snapshot_id: int | None = None
    epoch: int | None = None
    committed_at: str | None = None
    lag_ms: int | None = None
    rows_inserted: int | None = None
    rows_deleted: int | None = None
    # Freshness (lakeview/freshness.py): lag now, the SLO and how well it was met.
    freshness_lag_ms: int | None = None
    target_lag_ms: int | None = None
    slo_compliance: float | None = None
    degraded_reason: str | None = None
    cadence_asked_ms: int | None = None
    cadence_achieved_ms: int | None = None
    running: bool = False
    pending_files: int | None = None
    commits: int = 0
    rows_in_total: int = 0
    rows_out_total: int = 0
    rows_quarantined: int = 0
    rows_late: int = 0  # of rows_quarantined: older than the watermark (lakeview.watermark)
    registrar_errors: str | None = None  # e.g. "REGISTRAR_DOWN: glue: <error>" (lakeview/registration.py)
    # state "FAILED" (lakeview/parking.py): the view stopped alone; why, and at which epoch (None: before one)
    error: str | None = None
    failed_epoch: int | None = None
    failed_at: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def view_statuses(project: ProjectConfig, store: Any = None, *, at_ms: int | None = None) -> list[ViewStatus]:
    """Every view's status; ``store`` defaults to the project's catalog store."""

    store = open_store(project) if store is None else store
    at_ms = int(time.time() * 1000) if at_ms is None else at_ms

    return with_registrar_reasons(project, [_never_raising(project, store, name, at_ms) for name in project.views])


def _never_raising(project: ProjectConfig, store: Any, name: str, at_ms: int) -> ViewStatus:
    """One view's status; a view whose status cannot be read is reported FAILED with the reason."""
    try:
        return view_status(project, store, name, at_ms=at_ms)
    except Exception as exc:  # one unreadable view must not hide the others
        view = project.views[name]
        return ViewStatus(
            view=name,
            table=f"{view.namespace}.{name}",
            format=view.format.value,
            cadence=str(view.cadence),
            state=FAILED,
            error=f"status unreadable: {exc.__class__.__name__}: {exc}"[:2000],
        )


def view_status(project: ProjectConfig, store: Any, name: str, *, at_ms: int | None = None) -> ViewStatus:
    """One view's status, freshness included. Raises KeyError for an unknown view."""

    at_ms = int(time.time() * 1000) if at_ms is None else at_ms
    view = project.views[name]
    base = dict(view=name, table=f"{view.namespace}.{name}", format=view.format.value, cadence=str(view.cadence))
    target = view.target_lag_seconds
    base["target_lag_ms"] = None if target is None else int(target * 1000)
    base["cadence_asked_ms"] = None if view.cadence.seconds is None else int(view.cadence.seconds * 1000)
    runtime = read_runtime(project, name)
    signals = runtime.signals(at_ms) if runtime is not None else None
    base["running"] = bool(signals and signals.alive and signals.query_active)
    base["pending_files"] = runtime.pending_files if runtime is not None else None
    failure = parked(project, name)
    if failure is not None:
        base["running"] = False
        base.update(
            error=failure.error,
            failed_epoch=failure.failed_epoch,
            failed_at=datetime.fromtimestamp(failure.failed_at_ms / 1000, tz=UTC).isoformat(timespec="seconds"),
        )
    try:
        # Iceberg snapshots from the store, or Delta log entries shaped like them (lakeview/tables.py).
        record, snapshots = status_inputs(project, store, name)
    except NoSuchTableError:
        state = FAILED if failure is not None else "not created (run `lakeview up`)"
        return ViewStatus(**base, state=state, **_reason_only(signals, [], at_ms, failure is not None))
    except Exception as exc:  # e.g. the table's files are gone or corrupt: its next epoch would fail too
        if failure is None:
            base["error"] = f"table unreadable: {exc.__class__.__name__}: {exc}"[:2000]
        return ViewStatus(**base, state=FAILED, **_reason_only(signals, [], at_ms, failure is not None))
    if record is None:
        state = FAILED if failure is not None else "created, no commit yet"
        return ViewStatus(**base, state=state, **_reason_only(signals, [], at_ms, failure is not None))
    history = freshness.commit_history(snapshots)
    caught_up = runtime.caught_up_at_ms if runtime is not None and signals is not None and signals.alive else None
    lag = freshness.lag_at(history, at_ms, caught_up)
    slo = (
        None
        if base["target_lag_ms"] is None
        else freshness.compliance(history, now_ms=at_ms, target_lag_ms=base["target_lag_ms"], caught_up_at_ms=caught_up)
    )
    reason = freshness.DegradedReason.FAILED if failure is not None else None  # with or without an SLO
    if base["target_lag_ms"] is not None and reason is None:
        reason = freshness.degraded_reason(
            compliance_value=slo,
            lag_ms=lag,
            target_lag_ms=base["target_lag_ms"],
            history=history,
            runtime=signals,
            now_ms=at_ms,
        )
    committed = datetime.fromtimestamp(record.committed_at_ms / 1000, tz=UTC)
    return ViewStatus(
        **base,
        freshness_lag_ms=lag,
        slo_compliance=None if slo is None else round(slo, 6),
        degraded_reason=None if reason is None else reason.value,
        cadence_achieved_ms=freshness.achieved_cadence_ms(history, now_ms=at_ms),
        commits=len(history),
        rows_in_total=sum(p.rows_in for p in history),
        rows_out_total=sum(p.rows_inserted for p in history),
        rows_quarantined=sum(p.rows_quarantined for p in history),
        rows_late=sum(p.rows_late for p in history),
        state=FAILED if failure is not None else "committed",
        snapshot_id=record.snapshot_id,
        epoch=record.epoch,
        committed_at=committed.isoformat(timespec="seconds"),
        lag_ms=record.lag_ms,
        rows_inserted=record.rows_inserted,
        rows_deleted=record.rows_deleted,
    )


def _reason_only(signals: RuntimeSignals | None, history: list, at_ms: int, parked: bool = False) -> dict:
    """A view without a commit yet: no lag, no compliance, but a reason (backfilling, stopped, failed...)."""
    reason = freshness.degraded_reason(
        compliance_value=None,
        lag_ms=None,
        target_lag_ms=None,
        history=history,
        runtime=signals,
        now_ms=at_ms,
        parked=parked,
    )
    return {"degraded_reason": None if reason is None else reason.value}


def status_table(statuses: list[ViewStatus]):
    """The ``lakeview status`` table."""

    table = Table(title=f"Lakeview views at {_dt.now(UTC).isoformat(timespec='seconds')}")
    failures = any(s.state == FAILED for s in statuses)
    columns = (
        "view",
        "state",
        "lag",
        "target",
        "SLO 1h",
        "reason",
        "cadence",
        "achieved",
        "snapshot",
        "epoch",
        "last commit (UTC)",
        "pending",
    )
    for column in columns + (("failed epoch", "error") if failures else ()):
        table.add_column(column)
    for s in statuses:
        slo = "-" if s.slo_compliance is None else f"{s.slo_compliance:.1%}"
        style = (
            "green"
            if s.degraded_reason is None and s.slo_compliance is not None
            else "red"
            if s.degraded_reason
            else ""
        )
        table.add_row(
            s.view,
            s.state + (" (running)" if s.running else ""),
            _duration(s.freshness_lag_ms),
            _duration(s.target_lag_ms),
            f"[{style}]{slo}[/]" if style else slo,
            s.degraded_reason or "-",
            s.cadence,
            _duration(s.cadence_achieved_ms),
            *(str(v) if v is not None else "-" for v in (s.snapshot_id, s.epoch, s.committed_at, s.pending_files)),
            *(
                (("-" if s.failed_epoch is None else str(s.failed_epoch)), f"[red]{escape(s.error or '-')}[/]")
                if failures
                else ()
            ),
        )
    return table


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
