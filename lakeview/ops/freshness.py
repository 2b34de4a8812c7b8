"""Freshness of a view: lag, SLO compliance over a recent window, and why it is degraded.

Lag at time ``t`` is ``t`` minus the arrival time of the newest input the view's latest
snapshot reflects. Each commit records its own lag (``lakeview.lag-ms``) and time
(``lakeview.committed-at-ms``), so newest arrival = committed_at − lag. Snapshots are
cumulative, so the arrival reflected is the running maximum over the commits. Between commits
lag grows linearly (one second per second) from the last commit's lag; that gives the lag
curve over any window from the snapshot history alone, with no process needing to have
watched it. SLO compliance is the fraction of the window in which that curve is at or below
the view's ``target_lag``.

Pure functions over plain data: no Spark, no pyiceberg, no clock unless given one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import median
from typing import Any

DEFAULT_WINDOW_MS = 3_600_000  # compliance is reported over the last hour
QUARANTINED = "lakeview.rows-quarantined"  # summary key, when the pipeline quarantines rows


class DegradedReason(str, Enum):
    """Why a view is not meeting its freshness SLO (a fixed list: dashboards and alerts key on it)."""

    BACKFILLING = "BACKFILLING"  # the first batch over existing history is running
    RECOVERING = "RECOVERING"  # restarted after a stop; catching up on what landed meanwhile
    FALLING_BEHIND = "FALLING_BEHIND"  # running, but batches do not keep up with the target lag
    SOURCE_ERROR = "SOURCE_ERROR"  # the view's query failed reading or processing its source
    COMMIT_RETRYING = "COMMIT_RETRYING"  # commits keep losing races in the catalog
    REGISTRAR_DOWN = "REGISTRAR_DOWN"  # committed, but a registrar (Glue, HMS) could not publish
    STOPPED = "STOPPED"  # no process is maintaining the view
    FAILED = "FAILED"  # parked after a terminal error (lakeview.ops.parking) until resumed; SLO or not


@dataclass(frozen=True)
class CommitPoint:
    """One Lakeview commit as the snapshot summary records it."""

    committed_at_ms: int
    lag_ms: int | None = None
    epoch: int | None = None
    rows_in: int = 0
    rows_inserted: int = 0
    rows_deleted: int = 0
    rows_quarantined: int = 0
    rows_late: int = 0  # of the quarantined: older than the view's watermark

    @property
    def newest_input_ms(self) -> int:
        """Arrival time of the newest input this commit reflects (commit time when unknown)."""
        return self.committed_at_ms - (self.lag_ms or 0)


def commit_history(snapshots: Iterable[Any]) -> list[CommitPoint]:
    """Lakeview commits from Iceberg snapshots (anything with ``summary`` and ``timestamp_ms``),
    oldest first. Snapshots not made by Lakeview (e.g. maintenance) are skipped."""
    points = []
    for snapshot in snapshots:
        props = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        if "lakeview.epoch" not in props:
            continue
        points.append(
            CommitPoint(
                committed_at_ms=int(props.get("lakeview.committed-at-ms") or snapshot.timestamp_ms),
                lag_ms=int(props["lakeview.lag-ms"]) if "lakeview.lag-ms" in props else None,
                epoch=int(props["lakeview.epoch"]),
                rows_in=int(props.get("lakeview.rows-in", 0)),
                rows_inserted=int(props.get("lakeview.rows-inserted", 0)),
                rows_deleted=int(props.get("lakeview.rows-deleted", 0)),
                rows_quarantined=int(props.get(QUARANTINED, 0)),
                rows_late=int(props.get("lakeview.rows-late") or 0),
            )
        )
    return sorted(points, key=lambda p: p.committed_at_ms)


def _reflected_arrivals(history: Sequence[CommitPoint], caught_up_at_ms: int | None) -> list[tuple[int, int]]:
    """(from time, newest arrival reflected from then on): running max over the commits, plus a
    point where a running query reported it had nothing left to read."""
    steps: list[tuple[int, int]] = []
    newest = None
    for point in history:
        newest = point.newest_input_ms if newest is None else max(newest, point.newest_input_ms)
        steps.append((point.committed_at_ms, newest))
    if caught_up_at_ms is not None and steps and caught_up_at_ms > steps[-1][0]:
        steps.append((caught_up_at_ms, max(caught_up_at_ms, steps[-1][1])))
    return steps


def lag_at(history: Sequence[CommitPoint], t_ms: int, caught_up_at_ms: int | None = None) -> int | None:
    """Freshness lag (ms) at time ``t_ms``; None before the first commit."""
    arrival = None
    for start, newest in _reflected_arrivals(history, caught_up_at_ms):
        if start > t_ms:
            break
        arrival = newest
    return None if arrival is None else max(0, t_ms - arrival)


def compliance(
    history: Sequence[CommitPoint],
    *,
    now_ms: int,
    target_lag_ms: int,
    window_ms: int = DEFAULT_WINDOW_MS,
    caught_up_at_ms: int | None = None,
) -> float | None:
    """Fraction of ``[now − window, now]`` in which lag ≤ ``target_lag_ms``.

    Time before the view's first commit is not counted (there is no view to be stale yet);
    None when no commit precedes ``now``.
    """
    steps = [s for s in _reflected_arrivals(history, caught_up_at_ms) if s[0] <= now_ms]
    if not steps:
        return None
    window_start = now_ms - window_ms
    counted = ok = 0
    for i, (start, newest) in enumerate(steps):
        end = steps[i + 1][0] if i + 1 < len(steps) else now_ms
        start = max(start, window_start)
        if end <= start:
            continue
        counted += end - start
        # lag(t) = t − newest grows linearly: compliant while t ≤ newest + target.
        ok += min(max(newest + target_lag_ms - start, 0), end - start)
    return 1.0 if counted == 0 else ok / counted


def achieved_cadence_ms(
    history: Sequence[CommitPoint], *, now_ms: int, window_ms: int = DEFAULT_WINDOW_MS
) -> int | None:
    """Median time between consecutive commits in the window (None with fewer than two).

    Views only commit when input arrived, so quiet sources make this longer than the cadence
    asked; compare it with the cadence while input is flowing."""
    times = [p.committed_at_ms for p in history if now_ms - window_ms <= p.committed_at_ms <= now_ms]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return int(median(gaps)) if gaps else None


@dataclass(frozen=True)
class RuntimeSignals:
    """What the process maintaining a view knows that the snapshots do not (see runtime.py)."""

    alive: bool
    query_active: bool = False
    failed: str | None = None  # the query's exception, when it terminated with one
    trigger_active: bool = False
    pending_files: int = 0
    started_at_ms: int | None = None
    commit_retry_at_ms: int | None = None
    registrars_down: tuple[str, ...] = ()


def degraded_reason(
    *,
    compliance_value: float | None,
    lag_ms: int | None,
    target_lag_ms: int | None,
    history: Sequence[CommitPoint],
    runtime: RuntimeSignals | None,
    now_ms: int,
    parked: bool = False,
) -> DegradedReason | None:
    """The one reason shown when the view is below its SLO (or has never committed).

    Most specific first: parked as FAILED (whatever its lag: nothing maintains it until it is
    resumed), nothing running, a failed query, commits losing races, a registrar down, the first
    batch, catching up after a restart, and otherwise falling behind."""
    if parked:
        return DegradedReason.FAILED
    below = (
        compliance_value is None
        or compliance_value < 1.0
        or (lag_ms is not None and target_lag_ms is not None and lag_ms > target_lag_ms)
    )
    if not below:
        return None
    if runtime is not None and runtime.failed:
        return DegradedReason.SOURCE_ERROR  # stays the reason until a process runs it again
    if runtime is None or not runtime.alive:
        return DegradedReason.STOPPED
    if not runtime.query_active:
        return DegradedReason.STOPPED
    last_commit = history[-1].committed_at_ms if history else None
    if runtime.commit_retry_at_ms and (last_commit is None or runtime.commit_retry_at_ms > last_commit):
        return DegradedReason.COMMIT_RETRYING
    if runtime.registrars_down:
        return DegradedReason.REGISTRAR_DOWN
    if not history:
        return DegradedReason.BACKFILLING
    if (
        runtime.started_at_ms
        and (runtime.pending_files or runtime.trigger_active)
        and last_commit < runtime.started_at_ms
    ):
        return DegradedReason.RECOVERING
    healthy_now = lag_ms is None or target_lag_ms is None or lag_ms <= target_lag_ms
    if healthy_now and runtime.started_at_ms and history[0].committed_at_ms >= runtime.started_at_ms:
        return DegradedReason.BACKFILLING  # healthy now: the dip in the window was the first batch
    if healthy_now and runtime.started_at_ms and runtime.started_at_ms > now_ms - DEFAULT_WINDOW_MS:
        return DegradedReason.RECOVERING  # healthy now: the dip in the window was the restart
    return DegradedReason.FALLING_BEHIND
