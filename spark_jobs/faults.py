"""Fault points for crash tests: ``LAKEVIEW_FAULT=<point>:<epoch>`` kills the process (SIGKILL)
when the pipeline reaches that point of that epoch. Unset (always, outside tests): no effect.

Points: ``reading`` (the batch is planned, nothing committed), ``before_view_commit`` (state
tables committed and the view's data files written, before the catalog commit of the view's
snapshot; Delta: state tables committed, before the view writer's commit), ``files_written`` (a large append's data files written by the executors, before
their commit), ``before_publish`` (every table committed, before the epoch's change is published for
the views reading this one), ``after_commit`` (every table committed, before Spark records the batch as done).
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.pipeline import ViewPipeline

ENV = "LAKEVIEW_FAULT"
current_epoch: int | None = None


def _configured() -> tuple[str, int] | None:
    value = os.environ.get(ENV)
    if not value:
        return None
    point, _, epoch = value.partition(":")
    return point, int(epoch or 0)


def point(name: str, epoch: int | None) -> None:
    """Kill this process if ``LAKEVIEW_FAULT`` names this point and epoch."""
    if _configured() == (name, epoch):
        os.kill(os.getpid(), signal.SIGKILL)


def install(pipeline: ViewPipeline) -> None:
    """Hook ``before_view_commit`` into the commit of the view's table: the catalog's commit for
    Iceberg; for a writer without a catalog (Delta), the writer's own ``commit``/``commit_files``."""
    configured = _configured()
    if configured is None or configured[0] != "before_view_commit":
        return
    writer = pipeline.writer
    catalog = writer.catalog if writer.capabilities.catalog_commits else None  # type: ignore[attr-defined]
    if catalog is None:
        for name in ("commit", "commit_files"):
            _before(writer, name)
        return
    original = catalog.commit_table

    def commit_table(table: Any, *args: Any, **kwargs: Any) -> Any:
        if tuple(table.name())[-1] == pipeline.view:
            point("before_view_commit", current_epoch)
        return original(table, *args, **kwargs)

    catalog.commit_table = commit_table


def _before(writer: Any, name: str) -> None:
    """Run the ``before_view_commit`` point before ``writer.<name>`` (this instance only: the view's, not its state tables')."""
    original = getattr(writer, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        point("before_view_commit", current_epoch)
        return original(*args, **kwargs)

    setattr(writer, name, hooked)
