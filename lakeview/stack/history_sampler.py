"""Samples every view's freshness and every source's backlog into the console's history
(:mod:`lakeview.history`) from a background thread of the process serving the catalog
(``lakeview up`` and ``lakeview serve``), every ``[console] sample_interval``.

What a sample holds comes from the same places ``lakeview status`` reads: the statuses
(:mod:`catalog_api.ops.status`), the snapshots' commit summaries (:func:`lakeview.ops.freshness.commit_history`),
Spark's file-source logs (:mod:`lakeview.ops.source_log`) and the quarantine files
(:mod:`spark_jobs.sources.quarantine`); this module only records them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from catalog_api.ops.status import view_statuses
from catalog_api.ops.view_tables import status_inputs
from lakeview.config.models import ProjectConfig
from lakeview.errors import LakeviewError
from lakeview.ops.freshness import commit_history
from lakeview.ops.history import ConsoleHistory, SourceSample, ViewSample, console_state, history_path
from lakeview.ops.source_log import logged_files
from lakeview.sql.planner import view_plan
from spark_jobs.sources.quarantine import quarantined_rows

log = logging.getLogger("lakeview.history")
SAMPLE_ROWS = 5  # quarantined rows kept as a sample per source


def project_history(project: ProjectConfig) -> ConsoleHistory:
    """The project's history store (``<warehouse>/_lakeview/history.db``)."""
    return ConsoleHistory(history_path(project.warehouse_path), project.console.retention_ms)


def readers_of(project: ProjectConfig) -> dict[str, list[tuple[str, int]]]:
    """Per declared source, the views reading it and the source's index in each view's query."""

    readers: dict[str, list[tuple[str, int]]] = {}
    for name, view in project.views.items():
        if not view.materialize:
            continue
        try:
            sources = view_plan(project, name).sources
        except Exception:  # a view the planner refuses has no reader position; the config check names it
            continue
        for index, source in enumerate(sources):
            if source in project.sources:
                readers.setdefault(source, []).append((name, index))
    return readers


def source_backlog(project: ProjectConfig, source: str, readers: list[tuple[str, int]]) -> tuple[int, int]:
    """(files, bytes) landed for ``source`` that its slowest reader has not taken in yet."""

    landing = project.source_path(source)
    if not landing.exists():
        return 0, 0
    landed = {str(f): f.stat().st_size for f in landing.rglob("*") if f.is_file() and not f.name.startswith((".", "_"))}
    worst = (0, 0)
    for view, index in readers or [("", 0)]:
        seen = {str(f.path) for f in logged_files(project.checkpoint_path(view), index)} if view else set()
        pending = [size for path, size in landed.items() if path not in seen]
        worst = max(worst, (len(pending), sum(pending)))
    return worst


def quarantine_summary(project: ProjectConfig, source: str) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Quarantined rows of a source: the count per reason and the newest few rows."""

    # Each view reading the source sets the same bad row aside: count a row once per source.
    distinct = {(r.get("file"), r.get("record"), r.get("reason")): r for r in quarantined_rows(project, source)}
    rows = list(distinct.values())
    reasons = Counter(str(r.get("reason")) for r in rows)
    sample = sorted(rows, key=lambda r: r.get("epoch", 0))[-SAMPLE_ROWS:]
    return dict(reasons), [{k: r.get(k) for k in ("epoch", "reason", "file", "record")} for r in sample]


class HistorySampler:
    """Records one round of samples every interval until ``stop()``."""

    def __init__(self, project: ProjectConfig, store: Any, history: ConsoleHistory | None = None) -> None:
        self.project = project
        self.store = store
        self.history = history or project_history(project)
        self.interval = project.console.sample_interval.seconds or 5.0
        self._readers = readers_of(project)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HistorySampler:
        self._thread = threading.Thread(target=self._run, name="lakeview-history", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a missed sample is a gap in a chart, never a reason to stop serving
                log.exception("could not sample the console history")
            self._stop.wait(self.interval)

    def sample(self, now_ms: int | None = None) -> None:
        """Record every view's lag and state, their new commits, and every source's backlog."""

        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        views, commits = [], []
        for status in view_statuses(self.project, self.store, at_ms=now_ms):
            data = status.as_dict()
            views.append(
                ViewSample(
                    status.view,
                    now_ms,
                    status.freshness_lag_ms,
                    status.target_lag_ms,
                    console_state(data),
                    status.degraded_reason,
                )
            )
            if status.commits:
                try:
                    _, snapshots = status_inputs(self.project, self.store, status.view)
                except LakeviewError:
                    continue
                commits += [
                    (status.view, p.epoch, p.committed_at_ms, p.rows_in, p.rows_inserted)
                    for p in commit_history(snapshots)
                    if p.epoch is not None
                ]
        sources, quarantine = [], {}
        for source in self.project.sources:
            files, size = source_backlog(self.project, source, self._readers.get(source, []))
            reasons, rows = quarantine_summary(self.project, source)
            sources.append(SourceSample(source, now_ms, files, size, sum(reasons.values())))
            quarantine[source] = (reasons, rows)
        self.history.record(now_ms, views, commits, sources, quarantine)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
