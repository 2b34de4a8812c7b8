"""SQL analysis: from a view's SQL to the plan that maintains it incrementally.

A view's *maintenance kind* is derived from its SQL (a discriminated union, as SQLMesh does
for model kinds), over one source:

- ``append``: projections, computed columns and filters. Over an append-only source each
  batch's rows are appended; over a change feed the view is keyed by the feed's key and each
  batch upserts/deletes by that key.
- ``keyed_aggregate``: ``GROUP BY`` (or ``SELECT DISTINCT``) with SUM, COUNT, COUNT(*), AVG,
  MIN, MAX, COUNT(DISTINCT) and HAVING, and expressions over those: the plan names the view's key,
  its aggregate slots and the arguments whose value multisets MIN, MAX and COUNT(DISTINCT) read.

Every view is maintained by the operator graph (:mod:`lakeview.graph`); this analysis says what
shape a one-source view has (for the load checks, the DAG's keys and ``explain``).

Everything else raises :class:`UnsupportedSQLError` naming the construct, the line and the
nearest supported form.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Literal

import sqlglot
from pydantic import BaseModel, ConfigDict, Field
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeview.errors import UnsupportedSQLError
from lakeview.sql import windows
from lakeview.sql.windows import EventWindow

if TYPE_CHECKING:
    pass

SUPPORTED = (
    "supported: SELECT ... FROM <one source> [WHERE ...] with plain columns/expressions, SELECT DISTINCT, "
    "or GROUP BY with SUM, COUNT, COUNT(*), AVG, MIN, MAX, COUNT(DISTINCT) [HAVING ...]"
)
WEIGHT = "__lv_w"  # the Z-set weight column (+1 insert, -1 delete)


class AggregateFunction(str, Enum):
    SUM = "sum"
    COUNT = "count"
    COUNT_STAR = "count_star"
    AVG = "avg"
    MIN = "min"
    MAX = "max"
    COUNT_DISTINCT = "count_distinct"

    @property
    def needs_multiset(self) -> bool:
        return self in (AggregateFunction.MIN, AggregateFunction.MAX, AggregateFunction.COUNT_DISTINCT)


_AGGREGATES: dict[type[exp.Expression], AggregateFunction] = {
    exp.Sum: AggregateFunction.SUM,
    exp.Count: AggregateFunction.COUNT,
    exp.Avg: AggregateFunction.AVG,
    exp.Min: AggregateFunction.MIN,
    exp.Max: AggregateFunction.MAX,
}
# Aggregates whose stored value merges with a batch's partial value by itself (append-only input).
_SELF_MERGEABLE = {
    AggregateFunction.SUM,
    AggregateFunction.COUNT,
    AggregateFunction.COUNT_STAR,
    AggregateFunction.MIN,
    AggregateFunction.MAX,
}


class Aggregate(BaseModel):
    """A plain aggregate output column (``SUM(x) AS total``)."""

    model_config = ConfigDict(frozen=True)
    column: str
    function: AggregateFunction


class Slot(BaseModel):
    """One distinct aggregate call of the view (in SELECT or HAVING), maintained from state."""

    model_config = ConfigDict(frozen=True)
    name: str
    function: AggregateFunction
    argument: str | None  # Spark SQL over the source; None for COUNT(*)
    multiset: int | None = None  # index into ``KeyedAggregatePlan.multisets``


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True)
    view: str
    sql: str  # Spark SQL (transpiled from the view's dialect)
    sources: tuple[str, ...]
    alias: str  # how the SQL names its source (alias or the source name)
    where: str | None = None  # Spark SQL
    window: EventWindow | None = None  # event-time window: the source is expanded to its windows first

    @property
    def is_append(self) -> bool:
        return False

    @property
    def is_keyed_aggregate(self) -> bool:
        return False

    def batch_sql(self, relations: dict[str, str], dialect: str = "spark") -> str:
        """The view's SQL over one batch: each source replaced by the named relation."""
        placed = {name: windows.placeholder(relation, self.window) for name, relation in relations.items()}
        sql = sql_over_sources(self.sql, placed, dialect)
        return windows.substitute(sql, relations.get(self.sources[0], ""), self.window, self.alias, dialect)


class AppendPlan(_Plan):
    kind: Literal["append"] = "append"
    columns: tuple[str, ...] = ()  # output names; empty with SELECT *
    plain_columns: tuple[str, ...] = ()  # outputs that are a source column unchanged
    star: bool = False

    @property
    def is_append(self) -> bool:
        return True

    @property
    def key(self) -> tuple[str, ...] | None:
        return None


class KeyedAggregatePlan(_Plan):
    kind: Literal["keyed_aggregate"] = "keyed_aggregate"
    keys: tuple[str, ...]  # the view's key: output names of the GROUP BY expressions
    key_exprs: tuple[str, ...]  # the GROUP BY expressions (Spark SQL), aligned with ``keys``
    slots: tuple[Slot, ...] = ()
    multisets: tuple[str, ...] = ()  # argument expressions (Spark SQL) whose value multiset is kept
    outputs: tuple[tuple[str, str], ...] = ()  # (name, DuckDB SQL over key and slot columns)
    having: str | None = None  # DuckDB SQL over key and slot columns
    aggregates: tuple[Aggregate, ...] = ()  # plain aggregate outputs
    self_mergeable: bool = False  # every output is a key or a plain SUM/COUNT/MIN/MAX, no HAVING
    # The input never retracts a row (no change feed, images or keyed upstream; set by the pipeline): a
    # multiset only MIN/MAX read then keeps each group's extremes, not every value (:meth:`extremes_only`).
    append_only: bool = False

    @property
    def is_keyed_aggregate(self) -> bool:
        return True

    @property
    def key(self) -> tuple[str, ...]:
        return self.keys

    def view_is_state(self, append_only: bool) -> bool:
        """Whether the view's own rows are all the state needed (append-only input, plain
        SUM/COUNT/MIN/MAX): then a batch's partial aggregate merges straight into them."""
        return append_only and self.self_mergeable

    def extremes_only(self, index: int) -> bool:
        """Whether multiset ``index`` keeps only each group's lowest and highest value: over append-only input,
        when no COUNT(DISTINCT) reads it (MIN/MAX of values that are never retracted need nothing else, so its
        size follows the groups, not the history)."""
        readers = {s.function for s in self.slots if s.multiset == index}
        return self.append_only and readers <= {AggregateFunction.MIN, AggregateFunction.MAX}


ViewPlan = Annotated[AppendPlan | KeyedAggregatePlan, Field(discriminator="kind")]


DIALECTS = ("spark", "duckdb", "trino")


def sql_over_sources(sql: str, relations: dict[str, str], dialect: str = "spark") -> str:
    """``sql`` (Spark SQL) with each source table replaced by the named relation (aliases kept)."""
    tree = sqlglot.parse_one(sql, read="spark")
    for table in tree.find_all(exp.Table):
        if table.name in relations:
            table.replace(exp.to_table(relations[table.name]).as_(table.alias_or_name))
    return tree.sql(dialect=dialect)


def parse_statement(sql: str, dialect: str = "spark") -> exp.Expression:
    """The one statement of a view's SQL (``dialect``: spark, duckdb or trino).
    Raises :class:`UnsupportedSQLError` when it does not parse or is not exactly one statement."""
    if dialect not in DIALECTS:
        raise UnsupportedSQLError(f"unknown SQL dialect {dialect!r}; use one of {', '.join(DIALECTS)}")
    try:
        statements = sqlglot.parse(windows.mark_windows(sql) if dialect == "spark" else sql, read=dialect)
    except ParseError as exc:
        raise UnsupportedSQLError(f"cannot parse SQL: {str(exc).splitlines()[0]}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise UnsupportedSQLError(f"expected exactly one SELECT statement, got {len(statements)}")
    return statements[0]


def plan_select(view: str, sql: str, tree: exp.Select, dialect: str = "spark") -> AppendPlan | KeyedAggregatePlan:
    """The plan of ``tree``, a SELECT over one source (the view's ``sql`` as written, for errors)."""
    source, alias = _single_source(sql, tree)
    _reject(sql, tree)
    spark_sql = tree.sql("spark") if dialect != "spark" else sql
    windowed = windows.rewrite(tree, lambda node, problem, nearest: _at(sql, node, problem, nearest))
    window = None
    if windowed is not None:
        tree, window = windowed
        spark_sql = tree.sql("spark")
    where = tree.args.get("where")
    common = dict(
        view=view,
        sql=spark_sql,
        sources=(source,),
        alias=alias,
        where=where.this.sql("spark") if where else None,
        window=window,
    )
    aggregates = [e for e in tree.expressions if e.find(exp.AggFunc)]
    if not tree.args.get("group") and not aggregates and not tree.args.get("distinct"):
        if tree.args.get("having"):
            raise UnsupportedSQLError(_at(sql, tree.args["having"], "HAVING without GROUP BY", "WHERE"))
        star = any(
            isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
            for e in tree.expressions
        )
        names = tuple(e.alias_or_name for e in tree.expressions if not isinstance(e, exp.Star))
        plain = tuple(
            e.alias_or_name for e in tree.expressions if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star)
        )
        return AppendPlan(**common, columns=() if star else names, plain_columns=plain, star=star)
    return _keyed_aggregate(sql, tree, common)


def line_of(sql: str, node: exp.Expression | None) -> int | None:
    """The 1-based line of ``node`` in ``sql`` (from sqlglot's token positions)."""
    if node is None:
        return None
    for n in node.walk():
        meta = getattr(n, "meta", None) or {}
        if "line" in meta:
            return int(meta["line"])
    text = node.sql("spark").split(" ")[0].lower()
    for number, line in enumerate(sql.splitlines(), start=1):
        if text and text in line.lower():
            return number
    return None


def _at(sql: str, node: exp.Expression | None, problem: str, nearest: str | None = None) -> str:
    """An error message naming the construct, the line it is on and the nearest supported form."""
    line = line_of(sql, node)
    where = f" (line {line})" if line is not None else ""
    hint = f"; nearest supported form: {nearest}" if nearest else f"; {SUPPORTED}"
    return f"{problem}{where}{hint}"


def _keyword_line(sql: str, keyword: str) -> int | None:
    for number, line in enumerate(sql.splitlines(), start=1):
        if keyword.lower() in line.lower():
            return number
    return None


def _single_source(sql: str, tree: exp.Select) -> tuple[str, str]:
    if tree.args.get("with_") or tree.args.get("with"):
        raise UnsupportedSQLError(
            f"WITH (common table expressions) is not supported yet (line {_keyword_line(sql, 'with')}); "
            "nearest supported form: declare the inner query as its own view"
        )
    joins = tree.args.get("joins")
    if joins:
        raise UnsupportedSQLError(
            f"JOIN is not supported yet (line {_keyword_line(sql, 'join') or line_of(sql, joins[0])}); "
            "nearest supported form: one view per source (or denormalise the source upstream)"
        )
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None:
        raise UnsupportedSQLError("a view must read FROM a source")
    table = from_.this
    if not isinstance(table, exp.Table) or not table.name:
        raise UnsupportedSQLError(
            _at(sql, table, f"FROM must name a source, not {table.sql('spark')!r}", "FROM <source> [alias]")
        )
    if table.args.get("db"):
        raise UnsupportedSQLError(f"name the source without a qualifier: {table.name!r}, not {table.sql('spark')!r}")
    return table.name, table.alias_or_name


def _reject(sql: str, tree: exp.Select) -> None:
    checks = [
        ("order", "ORDER BY", "no ORDER BY (a view is a set; order when you query it)"),
        ("limit", "LIMIT", "no LIMIT (filter with WHERE or HAVING instead)"),
        ("offset", "OFFSET", "no OFFSET"),
        ("qualify", "QUALIFY", "WHERE or HAVING"),
    ]
    for arg, name, nearest in checks:
        node = tree.args.get(arg)
        if node:
            raise UnsupportedSQLError(
                f"{name} is not supported yet (line {_keyword_line(sql, name.split()[0]) or line_of(sql, node)}); "
                f"nearest supported form: {nearest}"
            )
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise UnsupportedSQLError(_at(sql, distinct, "DISTINCT ON is not supported", "SELECT DISTINCT or GROUP BY"))
    window = tree.find(exp.Window)
    if window is not None:
        raise UnsupportedSQLError(
            _at(
                sql,
                window,
                f"window functions (OVER ...) are not supported yet: {window.sql('spark')!r}",
                "GROUP BY with SUM/COUNT/MIN/MAX",
            )
        )
    for sub in tree.find_all(exp.Subquery, exp.Exists, exp.Select):
        if sub is tree:
            continue
        raise UnsupportedSQLError(
            _at(
                sql,
                sub,
                f"subqueries are not supported yet: {sub.sql('spark')!r}",
                "declare the subquery as its own view",
            )
        )
    for node in tree.walk():
        if isinstance(node, (exp.Rand, exp.CurrentTimestamp, exp.CurrentDate)) or (
            isinstance(node, exp.Anonymous)
            and str(node.this).lower() in {"uuid", "now", "random", "monotonically_increasing_id"}
        ):
            raise UnsupportedSQLError(
                _at(
                    sql,
                    node,
                    f"non-deterministic functions (rand, current_timestamp, ...) cannot be "
                    f"maintained: {node.sql('spark')!r}",
                    "a column of the source",
                )
            )
    if tree.find(exp.Anonymous) is not None:
        node = tree.find(exp.Anonymous)
        if str(node.this).lower() == "window":
            raise UnsupportedSQLError(
                _at(
                    sql,
                    node,
                    'event-time window() is Spark SQL: declare the view with dialect = "spark"',
                    "GROUP BY date_trunc('hour', ts) AS hour (a tumbling window, kept without a watermark)",
                )
            )


def _keyed_aggregate(sql: str, tree: exp.Select, common: dict) -> KeyedAggregatePlan:
    group = tree.args.get("group")
    distinct = tree.args.get("distinct") is not None
    if distinct and group:
        raise UnsupportedSQLError(_at(sql, group, "SELECT DISTINCT with GROUP BY", "GROUP BY alone"))
    items = list(tree.expressions)
    group_exprs = (
        list(group.expressions)
        if group
        else ([i.this if isinstance(i, exp.Alias) else i for i in items] if distinct else [])
    )
    if not group_exprs and tree.args.get("having"):
        raise UnsupportedSQLError(
            _at(
                sql,
                tree.args["having"],
                "HAVING on a global aggregate (no GROUP BY) is not supported",
                "WHERE, or GROUP BY a column with HAVING",
            )
        )
    group_sql = [g.sql("spark").lower() for g in group_exprs]
    keys: dict[str, str] = {}  # group expr (lower Spark SQL) -> key column name
    slots: dict[tuple[str, str | None], Slot] = {}
    multisets: list[str] = []

    def slot_for(agg: exp.AggFunc) -> Slot:
        function = _AGGREGATES.get(type(agg))
        if function is None:
            raise UnsupportedSQLError(
                _at(
                    sql,
                    agg,
                    f"{agg.sql('spark')!r}: aggregate {agg.key.upper()} is not supported",
                    "SUM, COUNT, COUNT(*), AVG, MIN, MAX or COUNT(DISTINCT x)",
                )
            )
        argument_node = agg.this
        if isinstance(argument_node, exp.Distinct):
            if function is not AggregateFunction.COUNT or len(argument_node.expressions) != 1:
                raise UnsupportedSQLError(
                    _at(
                        sql,
                        agg,
                        f"{agg.sql('spark')!r}: only COUNT(DISTINCT one_expression) is supported",
                        "COUNT(DISTINCT x)",
                    )
                )
            function, argument_node = AggregateFunction.COUNT_DISTINCT, argument_node.expressions[0]
        if isinstance(argument_node, exp.Star):
            function, argument_node = AggregateFunction.COUNT_STAR, None
        if argument_node is not None and argument_node.find(exp.AggFunc):
            raise UnsupportedSQLError(
                _at(sql, agg, f"nested aggregate {agg.sql('spark')!r}", "one level of aggregation")
            )
        argument = argument_node.sql("spark") if argument_node is not None else None
        found = slots.get((function.value, argument))
        if found:
            return found
        multiset = None
        if function.needs_multiset:
            if argument not in multisets:
                multisets.append(argument)  # type: ignore[arg-type]
            multiset = multisets.index(argument)  # type: ignore[arg-type]
        slot = Slot(name=f"__lv_a{len(slots)}", function=function, argument=argument, multiset=multiset)
        slots[(function.value, argument)] = slot
        return slot

    def to_state(node: exp.Expression) -> exp.Expression:
        """``node`` over the group state: aggregates become slot columns, group expressions key columns."""
        if isinstance(node, exp.AggFunc):
            return exp.column(slot_for(node).name, quoted=True)
        if not isinstance(node, (exp.Identifier, exp.DataType)) and node.sql("spark").lower() in keys:
            return exp.column(keys[node.sql("spark").lower()], quoted=True)
        if isinstance(node, exp.Column):
            raise UnsupportedSQLError(
                _at(
                    sql,
                    node,
                    f"{node.sql('spark')!r} is neither aggregated nor in GROUP BY",
                    f"GROUP BY {node.sql('spark')} or an aggregate of it",
                )
            )
        for name, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(name, to_state(value))
            elif isinstance(value, list):
                node.set(name, [to_state(v) if isinstance(v, exp.Expression) else v for v in value])
        return node

    key_names: list[str] = []
    key_exprs: list[str] = []
    for item in items:
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Star):
            raise UnsupportedSQLError(
                _at(
                    sql,
                    item,
                    f"SELECT * cannot be combined with {'DISTINCT' if distinct else 'GROUP BY'}",
                    "name the columns",
                )
            )
        if not inner.find(exp.AggFunc) and inner.sql("spark").lower() in group_sql:
            if not isinstance(item, (exp.Alias, exp.Column)):
                raise UnsupportedSQLError(
                    _at(sql, item, f"give the group key {inner.sql('spark')!r} a name", "... AS name")
                )
            keys[inner.sql("spark").lower()] = item.alias_or_name
            key_names.append(item.alias_or_name)
            key_exprs.append(inner.sql("spark"))
    for g in group_exprs:
        if g.sql("spark").lower() not in keys:
            raise UnsupportedSQLError(
                _at(
                    sql,
                    g,
                    f"GROUP BY {g.sql('spark')!r} must also be selected: it is the key of the view's rows",
                    f"SELECT {g.sql('spark')} AS name, ...",
                )
            )
    outputs: list[tuple[str, str]] = []
    plain: list[Aggregate] = []
    mergeable = True
    for item in items:
        inner = item.this if isinstance(item, exp.Alias) else item
        if inner.find(exp.AggFunc) and not isinstance(item, exp.Alias):
            raise UnsupportedSQLError(
                _at(sql, inner, f"give {inner.sql('spark')!r} a column name", f"{inner.sql('spark')} AS name")
            )
        state = to_state(inner.copy())
        outputs.append((item.alias_or_name, state.sql("duckdb")))
        if isinstance(inner, exp.AggFunc):
            slot = slot_for(inner)
            plain.append(Aggregate(column=item.alias_or_name, function=slot.function))
            mergeable &= slot.function in _SELF_MERGEABLE
        elif inner.sql("spark").lower() not in keys:
            mergeable = False  # an expression over aggregates: needs the state
    having = tree.args.get("having")
    having_sql = to_state(having.this.copy()).sql("duckdb") if having else None
    return KeyedAggregatePlan(
        **common,
        keys=tuple(key_names),
        key_exprs=tuple(key_exprs),
        slots=tuple(slots.values()),
        multisets=tuple(multisets),
        outputs=tuple(outputs),
        having=having_sql,
        aggregates=tuple(plain),
        self_mergeable=mergeable and having is None and bool(key_names),  # a global row is kept from state
    )
