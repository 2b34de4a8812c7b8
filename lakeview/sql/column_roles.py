"""What a view does with each source column it reads, checked against the column's type at load.

A nested column (ARRAY, MAP, STRUCT) is passed through: copied into the view's rows as it is.
It cannot be a key, because every key of Lakeview's state is looked up by value in the table
formats (an Iceberg filter, a Delta predicate), which compare scalars only: a GROUP BY or
DISTINCT key, a join key, a change feed's key, a MIN / MAX / COUNT(DISTINCT) argument (its
values are the keys of a multiset), any column a JOIN reads (each side's rows are kept keyed by
all their columns); nor summed. Refusing it here names the column and the role before anything
runs, where Spark or a writer would otherwise fail at some later epoch. Types no role can hold
are refused with the source's schema (:func:`lakeview.config.schema.parse_ddl`).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeview.config.models import ProjectConfig
from lakeview.config.schema import Column, is_nested, parse_ddl
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.plan import AggregateFunction, AppendPlan, KeyedAggregatePlan, parse_statement

NESTED_ROLE = "a nested column (ARRAY, MAP, STRUCT) can only be passed through"


_LABELS = {
    AggregateFunction.MIN: "a MIN argument",
    AggregateFunction.MAX: "a MAX argument",
    AggregateFunction.COUNT_DISTINCT: "a COUNT(DISTINCT) argument",
    AggregateFunction.SUM: "a SUM argument",
    AggregateFunction.AVG: "an AVG argument",
}


def check_column_roles(plan: AppendPlan | KeyedAggregatePlan | GraphPlan, project: ProjectConfig) -> str | None:
    """What is wrong with the roles ``plan`` gives its sources' columns, or None (columns of
    other views, and of a graph view without joins, are left to the graph's compile)."""
    if isinstance(plan, GraphPlan):
        return _check_graph(plan, project)
    if plan.sources[0] not in project.sources:
        return None
    source = plan.sources[0]
    if problem := _check_feed_key(project, source):
        return problem
    if not isinstance(plan, KeyedAggregatePlan):
        return None
    columns = {c.name.lower(): c for c in parse_ddl(project.sources[source].schema_)}
    for expression in plan.key_exprs:
        if column := _nested_column(expression, columns):
            return _refused(source, column, "a GROUP BY (or DISTINCT) key")
    for slot in plan.slots:
        if (
            slot.argument is not None
            and slot.function in _LABELS
            and (column := _nested_column(slot.argument, columns))
        ):
            return _refused(source, column, _LABELS[slot.function])
    return None


def _check_feed_key(project: ProjectConfig, source: str) -> str | None:
    config = project.sources[source]
    feed = config.changes or config.images
    if feed is None:
        return None
    types = {c.name.lower(): c for c in parse_ddl(config.schema_)}
    for name in feed.key:
        column = types.get(name.lower())
        if column is not None and is_nested(column.type):
            return _refused(source, column, "the change-feed key")
    return None


def _check_graph(plan: GraphPlan, project: ProjectConfig) -> str | None:
    """Every change feed's key is a scalar; every source column a JOIN's query reads is one too (each side's
    rows are kept keyed by all their columns; the ON columns are the keys its sides are looked up by)."""
    for source in plan.sources:
        if source in project.sources and (problem := _check_feed_key(project, source)):
            return problem
    tree = parse_statement(plan.sql, plan.dialect)
    if not any(True for _ in tree.find_all(exp.Join)):
        return None
    aliases = {t.alias_or_name.lower(): t.name for t in tree.find_all(exp.Table) if t.name in project.sources}
    schemas = {s: {c.name.lower(): c for c in parse_ddl(project.sources[s].schema_)} for s in set(aliases.values())}
    keys = {
        id(c) for join in tree.find_all(exp.Join) if join.args.get("on") for c in join.args["on"].find_all(exp.Column)
    }
    for node in tree.find_all(exp.Column):
        named = aliases.get(node.table.lower()) if node.table else None
        candidates = [named] if named else sorted(schemas)
        for source in candidates:
            column = schemas.get(source, {}).get(node.name.lower())
            if column is not None and is_nested(column.type):
                role = (
                    "a join key"
                    if id(node) in keys
                    else "read through a JOIN (each side's rows are kept keyed by all their columns)"
                )
                return _refused(source, column, role)
    return None


def _nested_column(expression: str, columns: dict[str, Column]) -> Column | None:
    """The source column ``expression`` is, when it is a bare column of a nested type."""
    try:
        node = sqlglot.parse_one(expression, read="spark")
    except ParseError:
        return None
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column):
        return None
    column = columns.get(node.name.lower())
    return column if column is not None and is_nested(column.type) else None


def _refused(source: str, column: Column, role: str) -> str:
    return (
        f"column {column.name!r} of source {source!r} has type {column.type.sql('spark')}, which cannot be {role}: "
        f"{NESTED_ROLE} (copied into the view's rows); nearest supported form: a scalar taken from it, "
        f"e.g. {column.name}[0], {column.name}.field or size({column.name})"
    )
