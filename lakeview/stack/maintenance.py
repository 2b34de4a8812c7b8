"""Keeping view tables healthy: one pass per view on demand (``lakeview maintain VIEW``) or a
background thread in the embedded stack that runs each view's pass at its maintenance interval.

A pass commits like any writer (optimistic, retried on conflict), so it never blocks a view's
commits; a failed pass is logged and retried at the next interval.
"""

from __future__ import annotations

import logging
import threading
import time

from lakeview.config.models import ProjectConfig, TableFormat, file_io_properties
from spark_jobs.sources.view_changes import ChangePublisher
from writers.iceberg.maintenance import maintain_iceberg, self_compacting
from writers.maintenance import MaintenanceReport, Progress
from writers.registry import make_writer, policy_for

log = logging.getLogger("lakeview.maintenance")


def maintain_view(
    project: ProjectConfig, view: str, catalog_uri: str, progress: Progress | None = None, writer_running: bool = False
) -> MaintenanceReport:
    """One maintenance pass over ``view``'s table (Iceberg tables through the catalog at ``catalog_uri``).
    ``writer_running``: the view's pipeline is committing (``up``): a keyed Iceberg view's
    compaction is left to its writer."""

    writer = make_writer(project, view, catalog_uri)
    policy = policy_for(project, view)
    _prune_changes(project, view, writer, progress)
    if project.views[view].format is TableFormat.DELTA:
        from writers.delta.maintenance import maintain_delta  # lazy: deltalake loads only for Delta tables

        return maintain_delta(writer, policy, progress)  # type: ignore[arg-type]

    compact = not (writer_running and self_compacting(writer.table()))  # type: ignore[attr-defined]
    return maintain_iceberg(writer, policy, file_io_properties(project), progress, compact=compact)  # type: ignore[arg-type]


def _prune_changes(project: ProjectConfig, view: str, writer, progress: Progress | None) -> None:
    """Delete the change files (views over views) that the readers of ``view`` have consumed."""

    publisher = ChangePublisher.for_view(project, view, writer)
    if publisher is not None and (gone := publisher.prune()) and progress is not None:
        progress(f"removed {len(gone)} change file(s) their readers ({', '.join(publisher.downstreams)}) have consumed")


class MaintenanceThread:
    """Runs every enabled view's pass at its ``maintenance.interval`` until stopped. Compaction
    of a keyed Iceberg (merge-on-read) view is left to its writer, which compacts within its
    commits (a concurrent compaction would lose the race to every commit)."""

    def __init__(self, project: ProjectConfig, views: list[str], catalog_uri: str, tick_s: float = 1.0) -> None:
        self.project = project
        self.catalog_uri = catalog_uri
        self.views = [v for v in views if project.views[v].maintenance.enabled]
        self.tick_s = tick_s
        self.reports: dict[str, MaintenanceReport] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakeview-maintenance", daemon=True)

    def start(self) -> MaintenanceThread:
        if self.views:
            self._thread.start()
        return self

    def _run(self) -> None:
        due = {
            view: time.monotonic() + (self.project.views[view].maintenance.interval.seconds or 0) for view in self.views
        }
        while not self._stop.wait(self.tick_s):
            for view in self.views:
                if self._stop.is_set() or time.monotonic() < due[view]:
                    continue
                try:
                    self.reports[view] = maintain_view(self.project, view, self.catalog_uri, writer_running=True)
                    log.info("%s: maintenance: %s", view, self.reports[view].describe())
                except Exception:  # a failed pass must not stop the others; it runs again next interval
                    log.exception("%s: maintenance pass failed; retrying at the next interval", view)
                due[view] = time.monotonic() + (self.project.views[view].maintenance.interval.seconds or 0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
