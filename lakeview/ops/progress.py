"""Terminal progress for long work: done of total, rate, ETA (rich.progress).

Use :func:`work_progress` around any loop with a known total::

    with work_progress("verify sales", total=len(files), unit="files") as progress:
        for f in files:
            ...
            progress.advance()

Off a terminal (CI, pipes, ``--json``) nothing is drawn, so output stays parseable.
:class:`BackfillProgress` watches a view's first batch over existing history in ``up``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from lakeview.ops.runtime import count_pending_files


class RateColumn(ProgressColumn):
    """Items per second in the task's own unit (files/s, rows/s, tasks/s)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = task.fields.get("unit", "items")
        return Text("-" if speed is None else f"{speed:,.1f} {unit}/s", style="progress.data.speed")


class WorkHandle:
    """What a caller moves forward; a no-op when progress is not shown."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def update(
        self, *, completed: float | None = None, total: float | None = None, description: str | None = None
    ) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, total=total, description=description)


def make_progress(console: Console | None = None, *, transient: bool = False) -> Progress:
    """A rich Progress with Lakeview's columns: what, bar, M/N unit, rate, elapsed, ETA."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
    )


def shown(console: Console | None = None) -> bool:
    return (console or Console(file=sys.stderr)).is_terminal


@contextmanager
def work_progress(
    description: str, total: float | None, unit: str = "items", console: Console | None = None
) -> Iterator[WorkHandle]:
    """A progress bar for one piece of work (drawn on stderr, only on a terminal)."""
    console = console or Console(file=sys.stderr)
    if not console.is_terminal:
        yield WorkHandle(None, None)
        return
    with make_progress(console) as progress:
        task = progress.add_task(description, total=total, unit=unit)
        yield WorkHandle(progress, task)


class BackfillProgress:
    """Shows the first batch of views that start over existing history, until each commits.

    Files: landed files the view's query has taken in (Spark's file-source log) of those
    landed. Inside the running batch, Spark's status tracker gives tasks done of total for
    the active stages, which is what moves while one big first batch runs.
    """

    def __init__(self, stack: Any, views: list[str], console: Console | None = None, interval: float = 0.5) -> None:
        self.stack = stack
        self.views = views
        self.console = console or Console(file=sys.stderr)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._committed: set[str] = set()

    def mark_committed(self, view: str) -> None:
        """Called from the commit callback: the view's first batch is in its table."""
        self._committed.add(view)

    def start(self) -> BackfillProgress:
        if self.views and self.console.is_terminal:
            self._thread = threading.Thread(target=self._run, name="lakeview-backfill-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        project = self.stack.project
        with make_progress(self.console, transient=False) as progress:
            files = {v: progress.add_task(f"backfill {v}: files", total=None, unit="files") for v in self.views}
            tasks = progress.add_task("  spark tasks of the running batch", total=None, unit="tasks")
            remaining = set(self.views)
            while remaining and not self._stop.wait(self.interval):
                for view in list(remaining):
                    pipeline = self.stack.pipelines.get(view)
                    if pipeline is None:
                        continue
                    pending, processed = count_pending_files(project, pipeline.source, project.checkpoint_path(view))
                    committed = view in self._committed
                    done = pending + processed if committed else processed
                    progress.update(files[view], completed=done, total=pending + processed)
                    if committed:
                        remaining.discard(view)
                done_tasks, total_tasks = self._stage_tasks()
                progress.update(tasks, completed=done_tasks, total=total_tasks or None, visible=bool(remaining))

    def _stage_tasks(self) -> tuple[int, int]:
        spark = getattr(self.stack, "spark", None)
        if spark is None:
            return 0, 0
        try:
            tracker = spark.sparkContext.statusTracker()
            infos = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        except Exception:  # the JVM is shutting down
            return 0, 0
        infos = [i for i in infos if i is not None]
        return sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
