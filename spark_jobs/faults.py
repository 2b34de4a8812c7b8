"""Fault points for crash tests: ``LAKEVIEW_FAULT=<point>:<epoch>`` kills the process (SIGKILL)
when the pipeline reaches that point of that epoch. Unset (always, outside tests): no effect.

Points: ``reading`` (the batch is planned, nothing committed), ``before_view_commit`` (state
tables committed and the view's data files written, before the catalog commit of the view's
snapshot; Delta: state tables committed, before the view writer's commit; an Iceberg operator-graph
view: before the one catalog transaction of all its tables), ``files_written`` (a large append's data files written by the executors, before
their commit), ``before_publish`` (every table committed, before the epoch's change is published for
the views reading this one), ``after_commit`` (every table committed, before Spark records the batch as done),
``rebuild_dropped`` (epoch 0: a rebuilt view's older tables dropped and its rows kept as a baseline, before Spark's
checkpoint and the rebuild's marker are removed: :mod:`spark_jobs.migrate`).

Errors instead of kills (failure isolation tests): ``LAKEVIEW_FAULT=error:<view>:<epoch>`` makes that
view's epoch raise a terminal :class:`InjectedFaultError` every time it runs (until the variable is
changed); ``LAKEVIEW_FAULT=transient:<view>:<epoch>:<n>`` makes its first ``n`` runs raise a
transient one. Several faults: separated by commas. An epoch of ``*`` matches every epoch.

From outside a running process (the chaos soak, ``tests/chaos``): ``LAKEVIEW_FAULT_FILE=<path>``
adds the error faults written in that file (same syntax), read again at every epoch, so a fault is
switched on and off by writing and emptying the file while ``lakeview up`` runs.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.graph_pipeline import GraphPipeline

from lakeview.errors import TerminalError, TransientError

ENV = "LAKEVIEW_FAULT"
FILE_ENV = "LAKEVIEW_FAULT_FILE"
ERROR_KINDS = ("error", "transient")
current_epoch: int | None = None
transient_raised: dict[tuple[str, int], int] = {}  # (query, epoch) -> transient faults raised so far


class InjectedFaultError(TerminalError):
    """A terminal error injected by ``LAKEVIEW_FAULT=error:<view>:<epoch>``."""


class InjectedTransientFaultError(TransientError):
    """A transient error injected by ``LAKEVIEW_FAULT=transient:<view>:<epoch>:<n>``."""


def _configured() -> tuple[str, int] | None:
    value = os.environ.get(ENV)
    if not value or value.partition(":")[0] in ERROR_KINDS:
        return None
    point, _, epoch = value.partition(":")
    return point, int(epoch or 0)


def _error_faults() -> list[str]:
    """The faults of ``LAKEVIEW_FAULT`` and of the file ``LAKEVIEW_FAULT_FILE`` names (if it exists)."""
    faults = os.environ.get(ENV, "").split(",")
    path = os.environ.get(FILE_ENV)
    if path:
        try:
            with open(path) as file:
                faults += file.read().replace("\n", ",").split(",")
        except FileNotFoundError:
            pass
    return [f.strip() for f in faults if f.strip()]


def raise_point(query_name: str, epoch: int) -> None:
    """Raise the error ``LAKEVIEW_FAULT`` (or ``LAKEVIEW_FAULT_FILE``) injects into this query's
    (``lakeview_<view>`` or ``lakeview_group_<group>``) epoch, if any."""
    for fault in _error_faults():
        kind, _, rest = fault.partition(":")
        if kind not in ERROR_KINDS:
            continue
        view, _, rest = rest.partition(":")
        at, _, times = rest.partition(":")
        if query_name not in (f"lakeview_{view}", f"lakeview_group_{view}") or at not in ("*", str(epoch)):
            continue
        if kind == "error":
            raise InjectedFaultError(f"{view}: injected terminal error at epoch {epoch}")
        raised = transient_raised.get((query_name, epoch), 0)
        if raised < int(times or 1):
            transient_raised[(query_name, epoch)] = raised + 1
            raise InjectedTransientFaultError(f"{view}: injected transient error {raised + 1} at epoch {epoch}")


def point(name: str, epoch: int | None) -> None:
    """Kill this process if ``LAKEVIEW_FAULT`` names this point and epoch."""
    if _configured() == (name, epoch):
        os.kill(os.getpid(), signal.SIGKILL)


def install(pipeline: GraphPipeline) -> None:
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
