"""A view's SQL to its incremental plan: every view, a projection or aggregate over one source too, is a
:class:`~lakeview.sql.graph_plan.GraphPlan`, run by the operator graph (:mod:`lakeview.graph`).

:func:`view_plan` is the one place a project's view is planned: every caller (load checks, the DAG,
explain, verify, the pipelines, the console) asks it, and a view's SQL is planned once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from sqlglot import exp

from lakeview.config.schema import RESERVED_PREFIX
from lakeview.errors import UnsupportedSQLError
from lakeview.sql.graph_plan import GraphPlan, graph_plan
from lakeview.sql.plan import SUPPORTED, AppendPlan, KeyedAggregatePlan, parse_statement, plan_select

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig


def view_plan(project: ProjectConfig, view: str) -> GraphPlan:
    """The GraphPlan of ``project``'s view ``view`` (:func:`plan_for`). Planned once per view SQL: plans are
    frozen, so every caller, and every copy of the project (a pipeline's view of it), shares one. Raises
    :class:`UnsupportedSQLError` as :func:`plan_for` does."""
    config = project.views[view]
    return plan_for(view, config.sql, config.dialect)


@functools.lru_cache(maxsize=1024)
def plan_for(view: str, sql: str, dialect: str = "spark") -> GraphPlan:
    """The GraphPlan of a view's SQL (``dialect``: spark, duckdb or trino). Whether the graph can maintain it
    is decided when the project loads (the graph's compile names what it cannot), not here. Raises
    :class:`UnsupportedSQLError` for SQL that is not one query, or an output column named like Lakeview's
    internal columns."""
    # Keyed by what a plan depends on, not by the project object: a project's copies (with_upstream_source,
    # with_evolved_sources) and a reloaded project share it, and a project pickled to executors is unchanged.
    # A refusal (an exception) is not cached: the load that raised it fails.
    tree = parse_statement(sql, dialect)
    _check_output_names(tree)
    refusal = UnsupportedSQLError(f"expected a SELECT statement, got {sql.strip()[:80]!r}")
    return graph_plan(view, sql, dialect, refusal)


def plan_view(view: str, sql: str, dialect: str = "spark") -> AppendPlan | KeyedAggregatePlan:
    """The one-source stack's per-shape analysis of a view's SQL (no view is planned by it any more: only the
    stack's own tests still ask it, until the stack is deleted). Raises :class:`UnsupportedSQLError` naming
    the construct, its line and the nearest supported form; a query over several inputs is refused."""
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
