"""Views over views: the project's views as a DAG, kept in topological order.

A view may read FROM another (materialized) view. The upstream publishes each epoch's change
as a Z-set file (:mod:`spark_jobs.sources.view_changes`); the downstream is an ordinary streaming query
over those files, with its own cadence and checkpoint. This module is the config side (no
Spark): who reads whom, the order views start in, and the checks made when the project loads
(cycles, inline upstreams, keys) so a bad DAG is refused with the cycle or the key named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeview.errors import ConfigError
from lakeview.sql.plan import AppendPlan, KeyedAggregatePlan, parse_statement
from lakeview.sql.planner import view_plan

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig, SourceConfig
    from lakeview.sql.graph_plan import GraphPlan


def _plan(project: ProjectConfig, view: str) -> AppendPlan | KeyedAggregatePlan | GraphPlan:
    return view_plan(project, view)


def upstream_of(project: ProjectConfig, view: str) -> str | None:
    """The view ``view`` reads from, or None when it reads a declared source."""
    read = _views_read(project, view)  # an inline view is published, never maintained: none
    return read[0] if read else None


def upstreams_of(project: ProjectConfig, view: str) -> list[str]:
    """Every view ``view`` reads (a graph view may read several), in the order its SQL names them."""
    return _views_read(project, view)


def reads_zsets(project: ProjectConfig, view: str) -> bool:
    """Whether ``view`` reads its upstream views' changes as weighted inputs of any key and columns (an
    operator graph: every join and union), rather than keyed by its one upstream's key."""
    return _plan(project, view).kind == "graph"


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


def view_key(project: ProjectConfig, view: str) -> tuple[str, ...] | None:
    """The key of a view's rows (None: append-only): a keyed aggregate's GROUP BY names; a
    projection over a change feed, the feed's key; a projection over a keyed view, that key; a
    graph view (every join and union), every column: its rows may repeat and be retracted."""
    plan = _plan(project, view)
    if plan.kind == "graph":  # a multiset keyed by the whole row (its rows may repeat and be retracted)
        return tuple(parse_statement(plan.sql, plan.dialect).named_selects)  # type: ignore[union-attr]
    if plan.is_keyed_aggregate:
        return plan.key  # type: ignore[return-value]
    source = plan.sources[0]
    if source in project.sources:
        return feed_key(project.sources[source])
    return view_key(project, source)


def check_dag(project: ProjectConfig) -> None:
    """Refuse cycles, views over inline views, ``SELECT *`` over a view, and projections over a
    keyed view that drop its key (a graph view may read views: a view's published changes are a
    weighted input like a before/after-image feed).
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
        upstreams = upstreams_of(project, name)
        for upstream in upstreams:
            if not project.views[upstream].materialize:
                raise ConfigError(
                    project.file,
                    f"views.{name}.sql",
                    f"reads the inline view {upstream!r} (materialize = false), which keeps no changes to read; "
                    f"set materialize = true on {upstream!r} or read its sources",
                )
            if _plan(project, name).is_append and _is_multiset(project, upstream):
                raise ConfigError(
                    project.file,
                    f"views.{name}.sql",
                    f"a projection over the view {upstream!r}, whose rows may repeat and be "
                    "retracted (it has no key but the whole row), is not supported yet; nearest supported form: "
                    f"aggregate it with GROUP BY, or put the projection into {upstream!r}'s SQL",
                )
        if not upstreams or reads_zsets(project, name):
            continue  # a graph view reads its upstreams' Z-sets as weighted inputs: any key, any columns
        upstream = upstreams[0]
        plan = _plan(project, name)
        if plan.is_append and getattr(plan, "star", False):
            raise ConfigError(
                project.file,
                f"views.{name}.sql",
                f"SELECT * over the view {upstream!r} is not supported; name the columns",
            )
        key = view_key(project, upstream)
        if key == ():
            raise ConfigError(
                project.file,
                f"views.{name}.sql",
                f"reading the one-row global aggregate view {upstream!r} is not supported yet; nearest "
                f"supported form: GROUP BY a column in {upstream!r}, or read its source directly",
            )
        if plan.is_append and key is not None:
            selected = {c.lower() for c in plan.plain_columns}  # type: ignore[union-attr]
            lacking = [k for k in key if k.lower() not in selected]
            if lacking:
                raise ConfigError(
                    project.file,
                    f"views.{name}.sql",
                    f"a projection over the view {upstream!r} must select its key column(s) {', '.join(lacking)} "
                    "unchanged, so its updates and deletes apply by key; nearest supported form: add them to the "
                    "SELECT list (or aggregate with GROUP BY)",
                )


def _is_multiset(project: ProjectConfig, view: str) -> bool:
    """A graph view (every join and union) is kept as a multiset keyed by the whole row (rows may repeat)."""
    return _plan(project, view).kind == "graph"


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
    return [s for s in _plan(project, view).sources if s in project.views and s not in project.sources]


def feed_key(source: SourceConfig) -> tuple[str, ...] | None:
    """The key of a change-feed source (operation column or before/after images), else None."""
    if source.changes is not None:
        return tuple(source.changes.key)
    if source.images is not None:
        return tuple(source.images.key)
    return None
