"""Views over views: the project's views as a DAG, kept in topological order.

A view may read FROM another (materialized) view. The upstream publishes each epoch's change
as a Z-set file (:mod:`spark_jobs.sources.view_changes`); the downstream is an ordinary streaming query
over those files, with its own cadence and checkpoint. This module is the config side (no
Spark): who reads whom, the order views start in, and the checks made when the project loads
(cycles, inline upstreams) so a bad DAG is refused with the cycle or the view named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeview.errors import ConfigError
from lakeview.sql.plan import parse_statement
from lakeview.sql.planner import view_plan

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig, SourceConfig


def upstream_of(project: ProjectConfig, view: str) -> str | None:
    """The view ``view`` reads from, or None when it reads a declared source."""
    read = _views_read(project, view)  # an inline view is published, never maintained: none
    return read[0] if read else None


def upstreams_of(project: ProjectConfig, view: str) -> list[str]:
    """Every view ``view`` reads (a graph view may read several), in the order its SQL names them."""
    return _views_read(project, view)


def downstreams_of(project: ProjectConfig, view: str) -> list[str]:
    """The views reading ``view`` directly."""
    return [name for name in project.views if view in _views_read(project, name)]


def chain_of(project: ProjectConfig, view: str) -> list[str]:
    """``view`` and its upstreams, base view last (``[top, middle, base]``)."""
    chain = [view]
    while (up := upstream_of(project, chain[-1])) is not None:
        chain.append(up)
    return chain


def topological_order(project: ProjectConfig, names: list[str]) -> list[str]:
    """``names`` with every upstream (of every input of a graph view) before the views
    reading it (otherwise in the given order)."""
    ordered: list[str] = []

    def visit(view: str) -> None:
        for upstream in _views_read(project, view):
            visit(upstream)
        if view in names and view not in ordered:
            ordered.append(view)

    for name in names:
        visit(name)
    return ordered


def view_key(project: ProjectConfig, view: str) -> tuple[str, ...]:
    """The key of a view's rows: every column (an operator graph's output is a multiset keyed by the whole
    row: its rows may repeat and be retracted)."""
    plan = view_plan(project, view)
    return tuple(parse_statement(plan.sql, plan.dialect).named_selects)  # type: ignore[union-attr]


def check_dag(project: ProjectConfig) -> None:
    """Refuse cycles and views over inline views (a view's published changes are a weighted input of its
    readers, like a before/after-image feed: any key, any columns).
    Raises :class:`ConfigError` naming the view and the problem."""
    for name in project.views:
        cycle = _cycle_from(project, name)
        if cycle:
            raise ConfigError(
                project.file,
                f"views.{name}.sql",
                f"views read each other in a cycle: {' -> '.join(cycle)}; a view may read only views that do not "
                "read it back (directly or through other views)",
            )
    for name in project.views:
        for upstream in upstreams_of(project, name):
            if not project.views[upstream].materialize:
                raise ConfigError(
                    project.file,
                    f"views.{name}.sql",
                    f"reads the inline view {upstream!r} (materialize = false), which keeps no changes to read; "
                    f"set materialize = true on {upstream!r} or read its sources",
                )


def _cycle_from(project: ProjectConfig, view: str, path: tuple[str, ...] = ()) -> list[str] | None:
    """A cycle reached by following the views ``view`` reads, as ``[a, b, a]``; None if none."""
    if view in path:
        return [*path[path.index(view) :], view]
    for upstream in _views_read(project, view):
        cycle = _cycle_from(project, upstream, (*path, view))
        if cycle:
            return cycle
    return None


def _views_read(project: ProjectConfig, view: str) -> list[str]:
    """The (declared) views a materialized view reads, in the order its SQL names them."""
    if not project.views[view].materialize:
        return []
    return [s for s in view_plan(project, view).sources if s in project.views and s not in project.sources]


def feed_key(source: SourceConfig) -> tuple[str, ...] | None:
    """The key of a change-feed source (operation column or before/after images), else None."""
    if source.changes is not None:
        return tuple(source.changes.key)
    if source.images is not None:
        return tuple(source.images.key)
    return None
