"""A view's SQL to its incremental plan: a projection or keyed aggregate over one source (the one-source
pipeline's shapes, planned by :mod:`lakeview.sql.plan`), or else a :class:`~lakeview.sql.graph_plan.GraphPlan`
for the operator graph (every join, UNION [ALL], CTE, subquery, top-k).

:func:`view_plan` is the one place a project's view is planned: every caller (load checks, the DAG,
explain, verify, the pipelines, the console) asks it, and a view's SQL is planned once.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from sqlglot import exp

from lakeview.config.schema import RESERVED_PREFIX
from lakeview.errors import UnsupportedSQLError
from lakeview.sql.graph_plan import GraphPlan, graph_plan
from lakeview.sql.plan import SUPPORTED, AppendPlan, KeyedAggregatePlan, parse_statement, plan_select

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig

Plan = AppendPlan | KeyedAggregatePlan | GraphPlan

# An internal switch, not a project option: ``LAKEVIEW_ENGINE=graph`` plans every one-source projection and
# aggregate (event-time windows too) as an operator graph, so bench/ and the tests can
# run the one-source views through the graph and compare it with the one-source stack it is to replace.
ENGINE = "LAKEVIEW_ENGINE"


def engine() -> str:
    """``graph`` when ``LAKEVIEW_ENGINE=graph`` routes one-source views through the operator graph, else ``shape``."""
    return "graph" if os.environ.get(ENGINE, "").lower() == "graph" else "shape"


def view_plan(project: ProjectConfig, view: str) -> Plan:
    """The plan of ``project``'s view ``view``: its per-shape plan, or a GraphPlan for a query the
    per-shape planner refuses (:func:`plan_for`). Planned once per view SQL: plans are frozen, so every
    caller, and every copy of the project (a pipeline's view of it), shares one. Raises
    :class:`UnsupportedSQLError` as :func:`plan_for` does."""
    return _view_plan(project, view, ())


def _view_plan(project: ProjectConfig, view: str, reading: tuple[str, ...]) -> Plan:
    config = project.views[view]
    plan = _planned(view, config.sql, config.dialect, engine())
    if plan.kind == "append" and _reads_graph_view(project, plan, (*reading, view)):
        return _projection_as_graph(view, config.sql, config.dialect)
    return plan


def _reads_graph_view(project: ProjectConfig, plan: Plan, reading: tuple[str, ...]) -> bool:
    """Whether a plan reads a (materialized) operator-graph view. Its input is a multiset keyed by the whole
    row, so a projection over it has no key to apply its retractions by: the graph keeps it too. (A project's
    copies declare upstream views as sources as well, so a view is known by its name among the views.)"""
    for source in plan.sources:
        upstream = project.views.get(source)
        if upstream is None or not upstream.materialize or source in reading:  # a cycle: refused by the DAG check
            continue
        if _view_plan(project, source, reading).kind == "graph":
            return True
    return False


@functools.lru_cache(maxsize=1024)
def _projection_as_graph(view: str, sql: str, dialect: str) -> GraphPlan:
    refusal = UnsupportedSQLError("a projection over an operator-graph view (its rows have no key but the whole row)")
    return graph_plan(view, sql, dialect, refusal)


@functools.lru_cache(maxsize=1024)
def _planned(view: str, sql: str, dialect: str, engine: str) -> Plan:
    # Keyed by what a plan depends on, not by the project object: a project's copies (with_upstream_source,
    # with_evolved_sources) and a reloaded project share it, and a project pickled to executors is unchanged.
    # A refusal (an exception) is not cached: the load that raised it fails.
    plan = plan_for(view, sql, dialect)
    if engine == "graph" and plan.kind != "graph":
        return graph_plan(view, sql, dialect, UnsupportedSQLError(f"{ENGINE}=graph: every view is an operator graph"))
    return plan


def plan_view(view: str, sql: str, dialect: str = "spark") -> AppendPlan | KeyedAggregatePlan:
    """Analyse a one-source view's SQL (``dialect``: spark, duckdb or trino; transpiled to Spark SQL).
    Raises :class:`UnsupportedSQLError` naming the construct, its line and the nearest supported form; a
    query over several inputs (a join, a set operation, a subquery in FROM) is refused here: the operator
    graph keeps it (:func:`plan_for`)."""
    tree = parse_statement(sql, dialect)
    _check_output_names(tree)
    if isinstance(tree, exp.SetOperation):
        raise UnsupportedSQLError(f"{tree.key.upper()} reads several inputs: kept as an operator graph")
    if not isinstance(tree, exp.Select):
        raise UnsupportedSQLError(f"expected a SELECT statement, got {sql.strip()[:80]!r}; {SUPPORTED}")
    if tree.args.get("joins"):
        raise UnsupportedSQLError("a JOIN reads several inputs: kept as an operator graph")
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is not None and isinstance(from_.this, exp.Subquery):
        raise UnsupportedSQLError("a subquery in FROM is a subgraph: kept as an operator graph")
    return plan_select(view, sql, tree, dialect)


def plan_for(view: str, sql: str, dialect: str = "spark") -> AppendPlan | KeyedAggregatePlan | GraphPlan:
    """``plan_view``'s plan, or a :class:`~lakeview.sql.graph_plan.GraphPlan` for a query it refuses
    (the operator graph's compile decides at load whether that one can be maintained)."""
    try:
        return plan_view(view, sql, dialect)
    except UnsupportedSQLError as exc:
        if RESERVED_PREFIX in str(exc):  # a reserved output name is refused by every planner, the graph's too
            raise
        return graph_plan(view, sql, dialect, exc)


def _check_output_names(tree: exp.Expression) -> None:
    """A view column named like Lakeview's internal columns (``__lv_...``) would be taken for one."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    for item in select.expressions if isinstance(select, exp.Select) else ():
        if item.alias_or_name.lower().startswith(RESERVED_PREFIX):
            raise UnsupportedSQLError(
                f"view column {item.alias_or_name!r}: names starting with {RESERVED_PREFIX!r} are reserved for "
                "Lakeview's internal columns; nearest supported form: ... AS another_name"
            )
