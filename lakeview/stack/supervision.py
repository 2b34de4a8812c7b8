"""Failure isolation in the process running the views: a view whose query stopped on an error is
parked as FAILED (``lakeview.ops.parking``) on its own, while every other view and the catalog keep
running; a parked view comes back when ``lakeview resume VIEW`` asks for it.

A thread checks once a second: a query that is no longer active is a failed view (the epoch guard,
``spark_jobs.epoch_guard``, noted its epoch and error after retrying what was transient); a resume
request of a parked view restarts it from its last committed epoch (Spark replays the failed epoch,
every table skips what it holds: exactly once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakeview.ops.parking import ParkedView, resume_requested
from spark_jobs.epoch_guard import failure_of

if TYPE_CHECKING:
    from lakeview.stack.embedded import EmbeddedStack

log = logging.getLogger("lakeview.supervision")
CHECK_S = 1.0


class ViewSupervisor:
    """Parks failed views of ``stack`` and restarts the ones asked to resume, until ``stop()``."""

    def __init__(self, stack: EmbeddedStack, on_park: Callable[[ParkedView], None] | None = None) -> None:
        self.stack = stack
        self.on_park = on_park
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ViewSupervisor:
        self._thread = threading.Thread(target=self._run, name="lakeview-supervision", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(CHECK_S):
            try:
                self.check()
            except Exception:  # supervision must outlive any one view's trouble
                log.exception("supervision pass failed")

    def check(self) -> None:
        """One pass: park the views whose query stopped, restart those asked to resume."""

        for view, query in list(self.stack.queries.items()):
            if self._stop.is_set():
                return
            if view not in self.stack.queries:  # parked with its group a moment ago
                continue
            try:
                if query.isActive:
                    continue
                failure = failure_of(query.name)
                error: BaseException | str = (
                    failure.error if failure is not None else (query.exception() or "its query stopped")
                )
            except Exception as exc:  # the JVM going away: not a view's failure
                log.debug("%s: query state unavailable: %s", view, exc)
                continue
            epoch = failure.epoch if failure is not None else None
            for parked in self.stack.park(view, error, epoch, transient=bool(failure and failure.transient)):
                log.error(
                    "%s: FAILED at epoch %s: %s (parked; `lakeview resume %s` restarts it)",
                    parked.view,
                    parked.failed_epoch,
                    parked.error,
                    parked.view,
                )
                if self.on_park is not None:
                    self.on_park(parked)
        for view in list(self.stack.parked):
            if not self._stop.is_set() and view in self.stack.parked and resume_requested(self.stack.project, view):
                log.warning("%s: resuming from its last committed epoch", view)
                self.stack.resume(view)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
