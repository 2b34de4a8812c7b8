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

from sqlglot import exp

from lakeview.config.models import ProjectConfig
from lakeview.config.schema import Column, is_nested, parse_ddl
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.plan import parse_statement

NESTED_ROLE = "a nested column (ARRAY, MAP, STRUCT) can only be passed through"


_ARGUMENTS = {  # an aggregate whose argument's values are keys (a multiset) or summed
    exp.Min: "a MIN argument",
    exp.Max: "a MAX argument",
    exp.Sum: "a SUM argument",
    exp.Avg: "an AVG argument",
}
KEY = "a GROUP BY (or DISTINCT) key"


def check_column_roles(plan: GraphPlan, project: ProjectConfig) -> str | None:
    """What is wrong with the roles ``plan`` gives its sources' columns, or None (columns of other views
    are left to the graph's compile). Every change feed's key is a scalar; so is every source column the
    query groups by, selects DISTINCT, aggregates by MIN / MAX / COUNT(DISTINCT) / SUM / AVG, or any column
    a JOIN's query reads (each side's rows are kept keyed by all their columns; the ON columns are the keys
    its sides are looked up by)."""
    for source in plan.sources:
        if source in project.sources and (problem := _check_feed_key(project, source)):
            return problem
    tree = parse_statement(plan.sql, plan.dialect)
    aliases = {t.alias_or_name.lower(): t.name for t in tree.find_all(exp.Table) if t.name in project.sources}
    schemas = {s: {c.name.lower(): c for c in parse_ddl(project.sources[s].schema_)} for s in set(aliases.values())}

    def nested(node: exp.Expression) -> tuple[str, Column] | None:
        """The nested source column ``node`` is, when it is a bare column of a nested type."""
        while isinstance(node, (exp.Paren, exp.Alias)):
            node = node.this
        if not isinstance(node, exp.Column):
            return None
        named = aliases.get(node.table.lower()) if node.table else None
        for source in [named] if named else sorted(schemas):
            column = schemas.get(source, {}).get(node.name.lower())
            if column is not None and is_nested(column.type):
                return source, column
        return None

    for role, node in _roles(tree):
        if found := nested(node):
            return _refused(*found, role)
    if not any(True for _ in tree.find_all(exp.Join)):
        return None
    keys = {
        id(c) for join in tree.find_all(exp.Join) if join.args.get("on") for c in join.args["on"].find_all(exp.Column)
    }
    for node in tree.find_all(exp.Column):
        if found := nested(node):
            role = (
                "a join key"
                if id(node) in keys
                else "read through a JOIN (each side's rows are kept keyed by all their columns)"
            )
            return _refused(*found, role)
    return None


def _roles(tree: exp.Expression) -> list[tuple[str, exp.Expression]]:
    """Each expression of ``tree`` whose values are a key or are summed, with its role."""
    roles: list[tuple[str, exp.Expression]] = []
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        roles += [(KEY, e) for e in (group.expressions if group else ())]
        roles += [(KEY, e) for e in (select.expressions if select.args.get("distinct") else ())]
    for function in tree.find_all(exp.AggFunc):
        if isinstance(function, exp.Count) and isinstance(function.this, exp.Distinct):
            roles += [("a COUNT(DISTINCT) argument", e) for e in function.this.expressions]
        elif type(function) in _ARGUMENTS:
            roles.append((_ARGUMENTS[type(function)], function.this))
    return roles


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


def _refused(source: str, column: Column, role: str) -> str:
    return (
        f"column {column.name!r} of source {source!r} has type {column.type.sql('spark')}, which cannot be {role}: "
        f"{NESTED_ROLE} (copied into the view's rows); nearest supported form: a scalar taken from it, "
        f"e.g. {column.name}[0], {column.name}.field or size({column.name})"
    )
