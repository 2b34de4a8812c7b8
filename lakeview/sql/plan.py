"""SQL analysis: from a view's SQL to the plan that maintains it incrementally.

A view's *maintenance kind* is derived from its SQL (a discriminated union, as SQLMesh does
for model kinds), over one source:

- ``append``: projections, computed columns and filters. Over an append-only source each
  batch's rows are appended; over a change feed the view is keyed by the feed's key and each
  batch upserts/deletes by that key.
- ``keyed_aggregate``: ``GROUP BY`` (or ``SELECT DISTINCT``) with SUM, COUNT, COUNT(*), AVG,
  MIN, MAX, COUNT(DISTINCT) and HAVING, and expressions over those. Changes are Z-sets (each
  row carries a weight +1/−1); the plan gives the *weighted* SQL that turns a batch into
  per-group state deltas (hidden row count, sums and non-null counts) and per-group value
  multisets (for MIN, MAX, COUNT(DISTINCT)), and the SQL that finalizes a group's state into
  its view row.

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
ROWS = "__lv_rows"  # hidden per-group row count: a group at 0 leaves the view
VALUE = "__lv_v"  # multiset value column
COUNT = "__lv_n"  # multiset value multiplicity
LOWEST, HIGHEST, DISTINCT = "__lv_lo", "__lv_hi", "__lv_distinct"  # a group's multiset summarised


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
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")  # Spark's simpleString of the integer types
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

    def _from(self, relation: str) -> str:
        where = f" WHERE {self.where}" if self.where else ""
        return f"FROM {relation} AS {self.alias}{where}"


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

    def weighted_sql(self, relation: str, dialect: str = "spark") -> str:
        """The projection over a weighted relation, carrying each row's weight along."""
        tree = sqlglot.parse_one(self.batch_sql({self.sources[0]: relation}), read="spark")
        if not self.star:
            tree = tree.select(exp.column(WEIGHT), copy=False)
        return tree.sql(dialect=dialect)


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
    # (slot name, its argument's Spark type) of SUM/AVG slots, once the source's schema is known
    # (:meth:`with_sum_types`): weighted sums are then exact and overflow is an error, not a wrap.
    sum_types: tuple[tuple[str, str], ...] = ()
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

    # --- state layout -------------------------------------------------------------------
    def state_columns(self) -> list[str]:
        """Columns of the group state table after the key: the row count, then per slot."""
        cols = [ROWS]
        for slot in self.slots:
            if slot.function in (AggregateFunction.SUM, AggregateFunction.AVG):
                cols += [f"{slot.name}_s", f"{slot.name}_c"]
            elif slot.function is AggregateFunction.COUNT:
                cols.append(f"{slot.name}_c")
        return cols

    def sum_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.function in (AggregateFunction.SUM, AggregateFunction.AVG)]

    def sum_arguments_sql(self, relation: str) -> str | None:
        """Spark SQL selecting each SUM/AVG argument over ``relation`` (named by its slot), whose
        analysed schema gives :meth:`with_sum_types` its types; None without SUM or AVG."""
        items = [f"({s.argument}) AS `{s.name}`" for s in self.sum_slots()]
        return f"SELECT {', '.join(items)} FROM {relation} AS {self.alias}" if items else None

    def with_sum_types(self, types: dict[str, str]) -> KeyedAggregatePlan:
        """This plan with its SUM/AVG arguments' Spark types (slot name -> ``int``, ``decimal(38,10)``...)."""
        return self.model_copy(update={"sum_types": tuple(sorted(types.items()))})

    def _sum_kind(self, slot: Slot) -> tuple[str, int | None]:
        """('integral', None), ('decimal', scale) or ('other', None) for a SUM/AVG slot's argument."""
        spark_type = dict(self.sum_types).get(slot.name, "")
        if spark_type in _INTEGRAL:
            return "integral", None
        if spark_type.startswith("decimal("):
            return "decimal", int(spark_type.rstrip(")").split(",")[1])
        return "other", None

    def _weighted(self, slot: Slot, arg: str) -> str:
        """``arg`` times the row's weight, in a type that cannot wrap: integers as DECIMAL(38,0)
        (the sum then fits whatever the recompute's BIGINT holds), decimals at 38 digits with their
        scale (Spark narrows the scale of a decimal product, so ±1 weights only negate)."""
        kind, scale = self._sum_kind(slot)
        if kind == "integral":
            return f"CAST({arg} AS DECIMAL(20,0)) * {WEIGHT}"
        if kind == "decimal":
            wide = f"CAST({arg} AS DECIMAL(38,{scale}))"
            return f"CASE WHEN {WEIGHT} = 1 THEN {wide} WHEN {WEIGHT} = -1 THEN -{wide} ELSE {wide} * {WEIGHT} END"
        return f"{WEIGHT} * {arg}"

    def _finished_sum(self, slot: Slot, value: str) -> str:
        """A SUM slot's value in the type a full recompute gives (SUM of an integer: BIGINT)."""
        kind, _ = self._sum_kind(slot)
        return f"CAST({value} AS BIGINT)" if kind == "integral" else value

    def overflow_sql(self, groups: str) -> str | None:
        """Spark SQL over ``groups`` (:meth:`group_delta_sql`'s rows): one row with, per SUM/AVG
        slot, a flag (named by the slot) set when a group's sum leaves the type a recompute gives
        it: a SUM of integers outside BIGINT, or a sum Spark made NULL over values (a decimal past
        38 digits). A
        backfill written by Spark's executors asks this first, as Spark's own SUM would wrap.
        None without SUM or AVG."""
        flags = []
        for slot in self.sum_slots():
            bad = f"({slot.name}_s IS NULL AND {slot.name}_c <> 0)"
            if slot.function is AggregateFunction.SUM and self._sum_kind(slot)[0] == "integral":
                bad += f" OR {slot.name}_s NOT BETWEEN {-(2**63)} AND {2**63 - 1}"
            flags.append(f"MAX(CASE WHEN {bad} THEN 1 ELSE 0 END) AS `{slot.name}`")
        return f"SELECT {', '.join(flags)} FROM {groups}" if flags else None

    def sum_columns(self) -> list[str]:
        return [f"{s.name}_s" for s in self.slots if s.function in (AggregateFunction.SUM, AggregateFunction.AVG)]

    # --- weighted delta SQL (Spark over a batch, or DuckDB over a change feed's Z-set) -----
    def group_delta_sql(self, relation: str, dialect: str = "spark") -> str:
        """Per touched group: the sum of weights and, per slot, the weighted sum and non-null count."""
        items = [f"{e} AS `{k}`" for k, e in zip(self.keys, self.key_exprs)] + [f"SUM({WEIGHT}) AS {ROWS}"]
        for slot in self.slots:
            arg = f"({slot.argument})"
            counted = f"SUM(CASE WHEN {arg} IS NOT NULL THEN {WEIGHT} ELSE 0 END)"
            if slot.function in (AggregateFunction.SUM, AggregateFunction.AVG):
                items += [
                    f"SUM(CASE WHEN {arg} IS NOT NULL THEN {self._weighted(slot, arg)} END) AS {slot.name}_s",
                    f"{counted} AS {slot.name}_c",
                ]
            elif slot.function is AggregateFunction.COUNT:
                items.append(f"{counted} AS {slot.name}_c")
        # A global aggregate (no GROUP BY) yields its one row even for an empty batch: the
        # view row exists over no rows (COUNT 0, SUM NULL).
        sql = f"SELECT {', '.join(items)} {self._from(windows.placeholder(relation, self.window))}{self._group_by()}"
        return windows.substitute(
            sqlglot.transpile(sql, read="spark", write=dialect)[0], relation, self.window, self.alias, dialect
        )

    def extremes_only(self, index: int) -> bool:
        """Whether multiset ``index`` keeps only each group's lowest and highest value: over append-only input,
        when no COUNT(DISTINCT) reads it (MIN/MAX of values that are never retracted need nothing else, so its
        size follows the groups, not the history)."""
        readers = {s.function for s in self.slots if s.multiset == index}
        return self.append_only and readers <= {AggregateFunction.MIN, AggregateFunction.MAX}

    def multiset_delta_sql(self, index: int, relation: str, dialect: str = "spark") -> str:
        """Per touched (group, value): the sum of weights of the non-null values of one argument (only each
        group's lowest and highest value when :meth:`extremes_only`)."""
        sql = self._multiset_values_sql(index, relation, dialect)
        if not self.extremes_only(index):
            return sql
        keys = ", ".join(f"`{k}`" for k in self.keys)
        part = f"PARTITION BY {keys}" if keys else ""
        extremes = (
            f"SELECT {keys + ', ' if keys else ''}{VALUE}, {COUNT} FROM (SELECT *, MIN({VALUE}) OVER ({part}) AS "
            f"{LOWEST}, MAX({VALUE}) OVER ({part}) AS {HIGHEST} FROM __lv_values) AS __lv_m "
            f"WHERE {VALUE} = {LOWEST} OR {VALUE} = {HIGHEST}"
        )
        return sqlglot.transpile(extremes, read="spark", write=dialect)[0].replace("__lv_values", f"({sql}) AS __lv_d")

    def _multiset_values_sql(self, index: int, relation: str, dialect: str) -> str:
        arg = f"({self.multisets[index]})"
        items = [f"{e} AS `{k}`" for k, e in zip(self.keys, self.key_exprs)] + [
            f"{arg} AS {VALUE}",
            f"SUM({WEIGHT}) AS {COUNT}",
        ]
        where = f"({self.where}) AND {arg} IS NOT NULL" if self.where else f"{arg} IS NOT NULL"
        groups = ", ".join([*self.key_exprs, arg])
        source = windows.placeholder(relation, self.window)
        sql = f"SELECT {', '.join(items)} FROM {source} AS {self.alias} WHERE {where} GROUP BY {groups}"
        return windows.substitute(
            sqlglot.transpile(sql, read="spark", write=dialect)[0], relation, self.window, self.alias, dialect
        )

    def _group_by(self) -> str:
        return f" GROUP BY {', '.join(self.key_exprs)}" if self.key_exprs else ""

    # --- DuckDB: merge state, finalize view rows ------------------------------------------
    def key_match(self, left: str, right: str, key: tuple[str, ...] | None = None) -> str:
        names = self.keys if key is None else key
        return " AND ".join(f'{left}."{k}" IS NOT DISTINCT FROM {right}."{k}"' for k in names) or "TRUE"

    def finalize_sql(self, groups: str = "g", multisets: tuple[str, ...] = ()) -> str:
        """DuckDB SQL: each live group's view row (groups whose row count is 0 or that fail
        HAVING yield none) from its group state and its value multisets."""
        keys = [f'g."{k}"' for k in self.keys]
        joins = []
        for i, rel in enumerate(multisets):
            agg = f"SELECT {', '.join(chr(34) + k + chr(34) for k in self.keys) + ', ' if self.keys else ''}"
            agg += f"MIN({VALUE}) AS {LOWEST}, MAX({VALUE}) AS {HIGHEST}, COUNT(*) AS {DISTINCT} FROM {rel} WHERE {COUNT} > 0"
            agg += f" GROUP BY {', '.join(chr(34) + k + chr(34) for k in self.keys)}" if self.keys else ""
            joins.append(f" LEFT JOIN ({agg}) AS m{i} ON {self.key_match('g', f'm{i}')}")
        slots = []
        for slot in self.slots:
            n = slot.name
            value = {
                AggregateFunction.SUM: self._finished_sum(slot, f"CASE WHEN g.{n}_c > 0 THEN g.{n}_s END"),
                AggregateFunction.AVG: f"CASE WHEN g.{n}_c > 0 THEN CAST(g.{n}_s AS DOUBLE) / g.{n}_c END"
                if self._sum_kind(slot)[0] == "integral"
                else f"CASE WHEN g.{n}_c > 0 THEN g.{n}_s / g.{n}_c END",
                AggregateFunction.COUNT: f"COALESCE(g.{n}_c, 0)",  # 0 for a global aggregate with no state row
                AggregateFunction.COUNT_STAR: f"COALESCE(g.{ROWS}, 0)",
                AggregateFunction.MIN: f"m{slot.multiset}.{LOWEST}",
                AggregateFunction.MAX: f"m{slot.multiset}.{HIGHEST}",
                AggregateFunction.COUNT_DISTINCT: f"COALESCE(m{slot.multiset}.{DISTINCT}, 0)",
            }[slot.function]
            slots.append(f'{value} AS "{n}"')
        if self.keys:
            inner = f"SELECT {', '.join(keys + slots) or 'TRUE'} FROM {groups} AS g{''.join(joins)} WHERE g.{ROWS} > 0"
        else:  # a global aggregate: always one row, also with no state (no rows: COUNT 0, SUM NULL)
            inner = f"SELECT {', '.join(slots) or 'TRUE'} FROM (SELECT 1) AS __lv_one LEFT JOIN {groups} AS g ON TRUE{''.join(joins)}"
        outputs = ", ".join(f'{sql} AS "{name}"' for name, sql in self.outputs)
        having = f" WHERE {self.having}" if self.having else ""
        return f"SELECT {outputs} FROM ({inner}) AS f{having}"

    def merge_sql(self, delta: str = "delta", current: str = "current") -> str:
        """DuckDB SQL giving each delta group's new row: its stored row merged with the delta
        (only for :meth:`view_is_state` plans: append-only input, self-mergeable aggregates)."""
        d, o = "d", "o"

        def col(rel: str, name: str) -> str:
            return f'{rel}."{name}"'

        merged = []
        for agg in self.aggregates:
            new, old = col(d, agg.column), col(o, agg.column)
            expr = {
                AggregateFunction.SUM: f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {old} + {new} END",
                AggregateFunction.COUNT: f"COALESCE({old}, 0) + {new}",
                AggregateFunction.COUNT_STAR: f"COALESCE({old}, 0) + {new}",
                AggregateFunction.MIN: f"LEAST({old}, {new})",
                AggregateFunction.MAX: f"GREATEST({old}, {new})",
            }[agg.function]
            merged.append(f'{expr} AS "{agg.column}"')
        keys = [f'{col(d, k)} AS "{k}"' for k in self.keys]
        return f"SELECT {', '.join(keys + merged)} FROM {delta} AS {d} LEFT JOIN {current} AS {o} ON {self.key_match(d, o)}"


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
