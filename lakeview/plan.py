"""SQL analysis: from a view's SQL to the plan that maintains it incrementally.

A view's *maintenance kind* is derived from its SQL (a discriminated union, as SQLMesh does
for model kinds). Supported so far, over one append-only source:

- ``append``: projections and filters (``SELECT a, b*2 AS c FROM s WHERE ...``); each batch's
  rows are appended.
- ``keyed_aggregate``: ``GROUP BY`` with SUM, COUNT, MIN and MAX; each batch's partial
  aggregate is merged into the stored row of its group (the group key is the table key).

Everything else raises :class:`UnsupportedSQLError` naming the construct.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

import sqlglot
from pydantic import BaseModel, ConfigDict, Field
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeview.errors import UnsupportedSQLError

SUPPORTED = (
    "supported: SELECT ... FROM <one source> [WHERE ...] with either plain columns/expressions "
    "or GROUP BY with SUM, COUNT, MIN, MAX"
)


class AggregateFunction(str, Enum):
    SUM = "sum"
    COUNT = "count"
    MIN = "min"
    MAX = "max"


_AGGREGATES: dict[type[exp.Expression], AggregateFunction] = {
    exp.Sum: AggregateFunction.SUM,
    exp.Count: AggregateFunction.COUNT,
    exp.Min: AggregateFunction.MIN,
    exp.Max: AggregateFunction.MAX,
}


class Aggregate(BaseModel):
    model_config = ConfigDict(frozen=True)
    column: str
    function: AggregateFunction


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True)
    view: str
    sql: str
    sources: tuple[str, ...]

    @property
    def is_append(self) -> bool:
        return False

    @property
    def is_keyed_aggregate(self) -> bool:
        return False

    def batch_sql(self, relations: dict[str, str], dialect: str = "spark") -> str:
        """The view's SQL over one batch: each source replaced by the named relation.

        For both kinds this is the batch's delta: appended rows, or the batch's partial
        aggregate per group (SUM, COUNT, MIN, MAX are mergeable).
        """
        tree = sqlglot.parse_one(self.sql, read="spark")
        for table in tree.find_all(exp.Table):
            if table.name in relations:
                alias = table.alias_or_name
                table.replace(exp.to_table(relations[table.name]).as_(alias))
        return tree.sql(dialect=dialect)


class AppendPlan(_Plan):
    kind: Literal["append"] = "append"

    @property
    def is_append(self) -> bool:
        return True

    @property
    def key(self) -> tuple[str, ...] | None:
        return None


class KeyedAggregatePlan(_Plan):
    kind: Literal["keyed_aggregate"] = "keyed_aggregate"
    keys: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]

    @property
    def is_keyed_aggregate(self) -> bool:
        return True

    @property
    def key(self) -> tuple[str, ...]:
        return self.keys

    def merge_sql(self, delta: str = "delta", current: str = "current") -> str:
        """DuckDB SQL giving each delta group's new row: its stored row merged with the delta."""
        d, o = "d", "o"

        def col(rel: str, name: str) -> str:
            return f'{rel}."{name}"'

        join = " AND ".join(f"{col(d, k)} IS NOT DISTINCT FROM {col(o, k)}" for k in self.keys) or "TRUE"
        merged = []
        for agg in self.aggregates:
            new, old = col(d, agg.column), col(o, agg.column)
            expr = {
                AggregateFunction.SUM: f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} "
                f"ELSE {old} + {new} END",
                AggregateFunction.COUNT: f"COALESCE({old}, 0) + {new}",
                AggregateFunction.MIN: f"LEAST({old}, {new})",
                AggregateFunction.MAX: f"GREATEST({old}, {new})",
            }[agg.function]
            merged.append(f'{expr} AS "{agg.column}"')
        keys = [f'{col(d, k)} AS "{k}"' for k in self.keys]
        return f"SELECT {', '.join(keys + merged)} FROM {delta} AS {d} LEFT JOIN {current} AS {o} ON {join}"


ViewPlan = Annotated[AppendPlan | KeyedAggregatePlan, Field(discriminator="kind")]


def plan_view(view: str, sql: str) -> AppendPlan | KeyedAggregatePlan:
    """Analyse a view's SQL (Spark dialect). Raises :class:`UnsupportedSQLError`."""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except ParseError as exc:
        raise UnsupportedSQLError(f"cannot parse SQL: {str(exc).splitlines()[0]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise UnsupportedSQLError(f"expected exactly one SELECT statement, got {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, exp.Select):
        raise UnsupportedSQLError(f"expected a SELECT statement, got {sql.strip()[:80]!r}; {SUPPORTED}")
    source = _single_source(tree)
    _reject(tree)
    aggregates = [e for e in tree.expressions if e.find(exp.AggFunc)]
    group = tree.args.get("group")
    if not group and not aggregates:
        return AppendPlan(view=view, sql=sql, sources=(source,))
    return _keyed_aggregate(view, sql, source, tree)


def _single_source(tree: exp.Select) -> str:
    if tree.args.get("with_") or tree.args.get("with"):
        raise UnsupportedSQLError(f"WITH (common table expressions) is not supported yet; {SUPPORTED}")
    if tree.args.get("joins"):
        raise UnsupportedSQLError(f"JOIN is not supported yet; {SUPPORTED}")
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None:
        raise UnsupportedSQLError("a view must read FROM a source")
    table = from_.this
    if not isinstance(table, exp.Table) or not table.name:
        raise UnsupportedSQLError(f"FROM must name a source, not {table.sql('spark')!r}; {SUPPORTED}")
    if table.args.get("db"):
        raise UnsupportedSQLError(f"name the source without a qualifier: {table.name!r}, not {table.sql('spark')!r}")
    return table.name


def _reject(tree: exp.Select) -> None:
    checks = [
        ("distinct", "DISTINCT"),
        ("having", "HAVING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("qualify", "QUALIFY"),
    ]
    for arg, name in checks:
        if tree.args.get(arg):
            raise UnsupportedSQLError(f"{name} is not supported yet; {SUPPORTED}")
    if tree.find(exp.Window):
        raise UnsupportedSQLError(f"window functions (OVER ...) are not supported yet; {SUPPORTED}")
    for sub in tree.find_all(exp.Subquery, exp.Exists):
        raise UnsupportedSQLError(f"subqueries are not supported yet: {sub.sql('spark')!r}")
    if any(isinstance(node, exp.Rand) for node in tree.walk()) or tree.find(exp.CurrentTimestamp, exp.CurrentDate):
        raise UnsupportedSQLError("non-deterministic functions (rand, current_timestamp, ...) cannot be maintained")


def _keyed_aggregate(view: str, sql: str, source: str, tree: exp.Select) -> KeyedAggregatePlan:
    group = tree.args.get("group")
    group_exprs = [g for g in (group.expressions if group else [])]
    group_sql = {g.sql("spark").lower() for g in group_exprs}
    keys: list[str] = []
    aggregates: list[Aggregate] = []
    for item in tree.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Star):
            raise UnsupportedSQLError("SELECT * cannot be combined with GROUP BY")
        agg = inner.find(exp.AggFunc)
        if agg is not None:
            function = _AGGREGATES.get(type(inner))
            if function is None:
                raise UnsupportedSQLError(
                    f"{inner.sql('spark')!r}: only plain SUM, COUNT, MIN, MAX aggregates are supported so far"
                )
            if inner.find(exp.Distinct):
                raise UnsupportedSQLError(f"{inner.sql('spark')!r}: DISTINCT aggregates are not supported yet")
            if not isinstance(item, exp.Alias):
                raise UnsupportedSQLError(f"give {inner.sql('spark')!r} a column name: {inner.sql('spark')} AS name")
            aggregates.append(Aggregate(column=item.alias, function=function))
            continue
        if inner.sql("spark").lower() not in group_sql:
            raise UnsupportedSQLError(f"{inner.sql('spark')!r} is neither aggregated nor in GROUP BY")
        if not isinstance(item, (exp.Alias, exp.Column)):
            raise UnsupportedSQLError(f"give the group key {inner.sql('spark')!r} a name: ... AS name")
        keys.append(item.alias_or_name)
    selected = {e.this.sql("spark").lower() if isinstance(e, exp.Alias) else e.sql("spark").lower() for e in tree.expressions}
    for g in group_exprs:
        if g.sql("spark").lower() not in selected:
            raise UnsupportedSQLError(
                f"GROUP BY {g.sql('spark')!r} must also be selected: it is the key of the view's rows"
            )
    if not aggregates:
        raise UnsupportedSQLError(f"GROUP BY without aggregates is not supported yet; {SUPPORTED}")
    return KeyedAggregatePlan(view=view, sql=sql, sources=(source,), keys=tuple(keys), aggregates=tuple(aggregates))
