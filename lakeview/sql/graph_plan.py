"""A view's plan: every view is kept by the operator graph (:mod:`lakeview.graph`).

A ``GraphPlan`` (:func:`lakeview.sql.planner.view_plan`) holds only what the config checks, the DAG, the
oracle and the pipelines need before compiling it (its sources, its SQL). Whether the graph can maintain it
is decided by compiling it against the sources' schemas when the project loads
(:func:`lakeview.project.view_graph`), never here.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from lakeview.errors import UnsupportedSQLError
from lakeview.sql import windows
from lakeview.sql.plan import line_of, parse_statement

KIND = "graph"


@dataclass(frozen=True)
class GraphPlan:
    """A view: its SQL (as written, in ``dialect``), the tables it reads in the order its SQL names them, and
    ``refusal``: the error for SQL that is not one query."""

    view: str
    sql: str
    dialect: str
    sources: tuple[str, ...]
    refusal: str
    kind: str = KIND

    def duckdb_sql(self) -> str:
        """The view's SQL in DuckDB's dialect (what the graph compiles and the oracle recomputes)."""
        return graph_sql(self.sql, self.dialect)


def graph_sql(sql: str, dialect: str) -> str:
    """``sql`` transpiled from ``dialect`` to DuckDB's, Spark's event-time windows computed in place
    (:func:`lakeview.sql.windows.inline`). Raises UnsupportedSQLError for a window Lakeview does not keep."""
    if dialect != "spark":
        if windows.mark_windows(sql) != sql:
            raise UnsupportedSQLError(
                f'event-time window() is Spark SQL, not {dialect}\'s: declare the view with dialect = "spark"'
            )
        return sql if dialect == "duckdb" else sqlglot.transpile(sql, read=dialect, write="duckdb")[0]
    tree = parse_statement(sql, dialect)

    def at(node: exp.Expression, problem: str, nearest: str) -> str:
        line = line_of(sql, node)
        return f"{problem}{f' (line {line})' if line else ''}; nearest supported form: {nearest}"

    return windows.inline(tree, at).sql("duckdb")


def graph_plan(view: str, sql: str, dialect: str, refusal: UnsupportedSQLError) -> GraphPlan:
    """The GraphPlan of a view's SQL. Raises ``refusal`` when the SQL is not one query at all."""
    tree = parse_statement(sql, dialect)
    if not isinstance(tree, exp.Query):
        raise refusal
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    sources: list[str] = []
    for table in tree.find_all(exp.Table, bfs=False):
        name = table.name
        if name and name.lower() not in ctes and name not in sources:
            sources.append(name)
    return GraphPlan(view, sql, dialect, tuple(sources), str(refusal))
