"""The compile passes that only read or rewrite the sqlglot tree, applied in this order by ``compile_view``:

1. ``parse``: one SELECT / UNION statement in DuckDB's dialect.
2. ``refuse``: constructs that cannot be maintained incrementally, named with the reason.
3. ``qualify``: sqlglot's qualify against the inputs' schemas (every column gets its table, stars expand).
4. ``subqueries_as_ctes``: sqlglot's eliminate_subqueries (a subquery in FROM becomes a CTE, i.e. a subgraph).
The operators are built from the result by ``lakeview.graph.build``.
"""

from __future__ import annotations

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
from sqlglot.optimizer.qualify import qualify as sqlglot_qualify

from lakeview.errors import UnsupportedSQLError

NONDETERMINISTIC_CLASSES = tuple(
    getattr(exp, n)
    for n in (
        "Rand",
        "CurrentTimestamp",
        "CurrentDate",
        "CurrentTime",
        "CurrentDatetime",
        "Uuid",
        "CurrentTimestampLTZ",
        "Localtime",
        "Localtimestamp",
    )
    if hasattr(exp, n)
)
NONDETERMINISTIC_NAMES = {
    "now",
    "random",
    "uuid",
    "gen_random_uuid",
    "setseed",
    "nextval",
    "currval",
    "current_timestamp",
    "get_current_time",
    "get_current_timestamp",
    "today",
    "transaction_timestamp",
    "random_uuid",
}


def refused(construct: str, reason: str) -> UnsupportedSQLError:
    """The one error for SQL the graph cannot maintain: the construct and why."""
    return UnsupportedSQLError(f"{construct}: {reason}")


def parse(sql: str) -> exp.Expr:
    """Parse one query. Raises UnsupportedSQLError for a parse error, several statements or a non-query."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as e:
        raise UnsupportedSQLError(f"the view's SQL does not parse: {e}") from e
    if len(statements) != 1:
        raise refused(f"{len(statements)} statements", "a view is exactly one query")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise refused(tree.key.upper(), "a view is a SELECT query")
    return tree


def refuse(tree: exp.Expr) -> exp.Expr:
    """Raise UnsupportedSQLError for the first construct that cannot be maintained; return the tree unchanged."""
    for node in tree.walk():
        if isinstance(node, NONDETERMINISTIC_CLASSES) or (
            isinstance(node, exp.Anonymous) and str(node.this).lower() in NONDETERMINISTIC_NAMES
        ):
            raise refused(
                node.sql(dialect="duckdb"),
                "a non-deterministic function gives a different value "
                "on every evaluation, so no change of the inputs can maintain it",
            )
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise refused("WITH RECURSIVE", "a recursive CTE is a fixed point, not maintained by this graph")
        if isinstance(node, (exp.Except, exp.Intersect)):
            raise refused(node.key.upper(), "set difference and intersection are not operators of the graph")
        if isinstance(node, exp.Select):
            _refuse_select(node)
        if isinstance(node, (exp.Lateral, exp.Unnest)):
            raise refused(node.sql(dialect="duckdb")[:60], "LATERAL and UNNEST are not operators of the graph")
    return tree


def _refuse_select(select: exp.Select) -> None:
    if select.args.get("limit") is not None and not select.args.get("order"):
        raise refused("LIMIT without ORDER BY", "which rows it keeps is unspecified, so no change can maintain it")
    if isinstance(select.args.get("distinct"), exp.Distinct) and select.args["distinct"].args.get("on"):
        raise refused("DISTINCT ON", "not an operator of the graph (use ROW_NUMBER() ... = 1)")
    group = select.args.get("group")
    if group is not None and (
        any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup"))
        or any(isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) for g in group.expressions)
    ):
        raise refused("GROUPING SETS / ROLLUP / CUBE", "not an operator of the graph")


def sql_type(dtype: pa.DataType) -> str:
    """A SQL type name for an arrow type (qualify needs only the column names; types help star expansion)."""
    if pa.types.is_integer(dtype):
        return "BIGINT"
    if pa.types.is_floating(dtype):
        return "DOUBLE"
    if pa.types.is_decimal(dtype):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    if pa.types.is_boolean(dtype):
        return "BOOLEAN"
    if pa.types.is_date(dtype):
        return "DATE"
    if pa.types.is_timestamp(dtype):
        return "TIMESTAMP"
    return "VARCHAR"


def qualify(tree: exp.Expr, schemas: dict[str, pa.Schema]) -> exp.Expr:
    """sqlglot's qualify: tables aliased, columns qualified, stars expanded. Raises UnsupportedSQLError."""
    schema = {name: {f.name: sql_type(f.type) for f in s} for name, s in schemas.items()}
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and table.name not in ctes and table.name not in schema:
            raise refused(f"table {table.name}", f"not an input of this view (inputs: {', '.join(sorted(schema))})")
    try:
        return sqlglot_qualify(
            tree, schema=schema, dialect="duckdb", quote_identifiers=False, validate_qualify_columns=True
        )
    except SqlglotError as e:
        raise UnsupportedSQLError(f"the view's SQL does not resolve against its inputs: {e}") from e


def subqueries_as_ctes(tree: exp.Expr) -> exp.Expr:
    """sqlglot's eliminate_subqueries: every subquery in FROM becomes a CTE (one subgraph per name)."""
    return eliminate_subqueries(tree)


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    """The AND-ed parts of a predicate (none for None)."""
    if node is None:
        return []
    if isinstance(node, (exp.Where, exp.Qualify, exp.Having)):
        node = node.this
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def int_literal(node: exp.Expr | None, what: str) -> int:
    if isinstance(node, (exp.Limit, exp.Offset)):
        node = node.expression
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        return int(node.this)
    raise refused(f"{what} {node.sql(dialect='duckdb') if node is not None else ''}", "must be an integer literal")
