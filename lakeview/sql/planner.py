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
from lakeview.sql.plan import line_of, parse_statement

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
    _check_table_names(tree, sql, dialect)
    _check_distinct_arguments(tree, sql, dialect)
    refusal = UnsupportedSQLError(f"expected a SELECT statement, got {sql.strip()[:80]!r}")
    return graph_plan(view, sql, dialect, refusal)


def _check_output_names(tree: exp.Expression) -> None:
    """Every view column has a name of its own: a computed one (``SUM(x)``, ``a + 1``) is named with ``AS`` (else
    its table column would get a name the user never wrote, and that differs between engines); a column named
    like Lakeview's internal columns (``__lv_...``) would be taken for one."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    for number, item in enumerate(select.expressions if isinstance(select, exp.Select) else (), start=1):
        if not isinstance(item, (exp.Alias, exp.Column, exp.Dot, exp.Star)):
            raise UnsupportedSQLError(
                f"view column {number} ({item.sql(dialect='spark')}) has no name; "
                f"nearest supported form: {item.sql(dialect='spark')} AS a_name"
            )
        if item.alias_or_name.lower().startswith(RESERVED_PREFIX):
            raise UnsupportedSQLError(
                f"view column {item.alias_or_name!r}: names starting with {RESERVED_PREFIX!r} are reserved for "
                "Lakeview's internal columns; nearest supported form: ... AS another_name"
            )


def _check_table_names(tree: exp.Expression, sql: str, dialect: str) -> None:
    """Every table a view reads is named as the project declares it: a source or a view, whose names are one flat
    namespace of the project. A qualified name (``db.s``, ``catalog.db.s``) would otherwise read ``s`` whatever its
    qualifier says (a table of another catalog, a typo), so it is refused, naming the fix."""
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier) or not (table.args.get("db") or table.args.get("catalog")):
            continue
        line = line_of(sql, table)
        written = table.copy()
        written.set("alias", None)
        raise UnsupportedSQLError(
            f"table {written.sql(dialect=dialect)}{f' (line {line})' if line else ''}: a view reads its sources and "
            "other views by the name the project declares them under, without a catalog or database "
            f"(a view's namespace only places its table in the catalog); nearest supported form: FROM {table.name}"
        )


def _check_distinct_arguments(tree: exp.Expression, sql: str, dialect: str) -> None:
    """An aggregate's DISTINCT takes one value: ``COUNT(DISTINCT a, b)`` (or of a row ``(a, b)``) would keep each
    pair as a struct in the graph's state tables, which hold scalars only, so it is refused, naming the exact form
    the graph keeps (distinct pairs without NULLs, as Spark and DuckDB count them)."""
    for distinct in tree.find_all(exp.Distinct):
        if not isinstance(distinct.parent, exp.AggFunc):
            continue
        values = distinct.expressions
        if len(values) == 1 and not isinstance(values[0], (exp.Tuple, exp.Struct)):
            continue
        agg = distinct.parent
        line = line_of(sql, agg)
        columns = values[0].expressions if len(values) == 1 else values
        names = ", ".join(c.sql(dialect=dialect) for c in columns)
        present = " AND ".join(f"{c.sql(dialect=dialect)} IS NOT NULL" for c in columns)
        raise UnsupportedSQLError(
            f"{agg.sql(dialect=dialect)}{f' (line {line})' if line else ''}: an aggregate's DISTINCT over several "
            "columns is not maintained (the graph's state keeps one scalar value per distinct argument); nearest "
            f"supported form: COUNT(*) over SELECT DISTINCT {names}, and the GROUP BY columns, FROM ... "
            f"WHERE {present}, in a subquery (a group without such a pair then has no row)"
        )
