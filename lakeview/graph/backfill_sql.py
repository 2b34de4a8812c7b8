"""A graph's first batch as SQL: every operator's output, every state table's rows and the view's rows
over the whole history, as one query per relation, generated from the graph (not per view shape).

On the first epoch every state is empty, so each operator's delta is its SQL applied to its inputs' whole
Z-sets, and each state table holds what the operator would apply to it: a join's or a semi-join's sides, a
top-k's and a DISTINCT's input (each distinct row with its net weight), an aggregate's one record per group
(its count, sums, non-NULL counts and extremes, the graph's own ``__lv_`` columns) and its value multisets
(each group's distinct values of an argument with their net count).
The view is the output operator's Z-set, each distinct row as many times as its positive net weight (what
:func:`writers.graph_view.multiset_change` stores over an empty view).

The operators' expressions are DuckDB SQL; for Spark they are transpiled by sqlglot, and the relational
skeleton (joins, grouping, the expansion of a row by its weight) is written per dialect. ``duckdb`` is the
same SQL run on DuckDB (the unit tests check it against :func:`lakeview.graph.step`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import sqlglot
from sqlglot import exp

from lakeview.errors import UnsupportedSQLError
from lakeview.graph.aggregate import COUNT, Aggregate
from lakeview.graph.driver import Graph
from lakeview.graph.expand import Expand
from lakeview.graph.extremes import EXT
from lakeview.graph.join import Join, SemiJoin
from lakeview.graph.multisets import NEW_OF, VALUE, ValueSet, aggregate_sql, finished_sql
from lakeview.graph.operators import Distinct, Filter, Operator, Project, Source, UnionAll
from lakeview.graph.output_types import SparkTypes
from lakeview.graph.overflow import exact_partial, overflow_flags
from lakeview.graph.topk import TopK
from lakeview.graph.zset import WEIGHT

DIALECTS = ("spark", "duckdb")


@dataclass
class FirstBatch:
    """The first batch's relations in dependency order (name, SQL), each state table's and the view's query."""

    relations: list[tuple[str, str]] = field(default_factory=list)
    state: dict[str, str] = field(default_factory=dict)  # state table name (StateTable.name) -> its rows
    view: str = ""
    checks: list[SumCheck] = field(default_factory=list)  # Spark: asked before any table is written


@dataclass(frozen=True)
class SumCheck:
    """One row of flags ``__lv_f{i}`` per SUM/AVG aggregate ``i`` of ``op`` in ``aggs``: 1 where a group's sum left the
    type SQL gives it (:func:`lakeview.graph.overflow.overflow_flags`)."""

    op: Aggregate
    sql: str
    aggs: list[int]


def first_batch_sql(graph: Graph, sources: dict[str, str], prefix: str, dialect: str = "spark") -> FirstBatch:
    """The first batch of ``graph`` over ``sources`` (input name -> a relation of the input's columns and the
    weight ``__lv_w``): a relation per operator named ``{prefix}{n}``, each state table's query and the view's.

    Raises UnsupportedSQLError for an operator this module has no rule for (the driver then runs the batch)."""
    if dialect not in DIALECTS:
        raise ValueError(f"dialect {dialect!r}: one of {DIALECTS}")
    sql = _Writer(dialect, graph)
    out = FirstBatch()
    names: dict[int, str] = {}

    def relation(query: str) -> str:
        name = f"{prefix}{len(out.relations)}"
        out.relations.append((name, query))
        return name

    for op in graph.operators:
        inputs = [names[id(i)] for i in op.inputs] if not isinstance(op, Source) else []
        rule = _RULES.get(type(op))
        if rule is None:
            raise UnsupportedSQLError(f"{op.id}: no first-batch rule for {type(op).__name__}")
        names[id(op)] = rule(sql, op, inputs, sources, relation, out.state)
    out.checks = sql.checks
    output = graph.output
    net = relation(sql.consolidated(names[id(output)], output.columns))
    items = ", ".join(f"{sql.q(c)} AS {sql.q(n)}" for c, n in zip(output.columns, graph.names, strict=True))
    out.view = f"SELECT {items} FROM {sql.expand(net, output.columns)}"
    return out


class _Writer:
    """The dialect's quoting, expansion and semi-join, and DuckDB expressions transpiled to it."""

    def __init__(self, dialect: str, graph: Graph) -> None:
        self.dialect, self.graph = dialect, graph
        self.checks: list[SumCheck] = []

    def types(self, op: Operator) -> dict[str, pa.DataType | None]:
        """``op``'s output columns' Spark types (None: not derived)."""
        if SparkTypes not in self.graph.derived:
            self.graph.derived[SparkTypes] = SparkTypes(self.graph)
        return dict(zip(op.columns, self.graph.derived[SparkTypes].of(op), strict=True))

    def q(self, name: str) -> str:
        if self.dialect == "spark":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    def cols(self, columns: list[str], prefix: str = "") -> str:
        return ", ".join(f"{prefix}{self.q(c)}" for c in columns)

    def expr(self, duck: str) -> str:
        """A DuckDB expression (or ``expr AS alias``) in this dialect."""
        if self.dialect == "duckdb":
            return duck
        tree = sqlglot.parse_one(duck, read="duckdb")
        return tree.transform(_spark_micros).transform(_spark_time).sql(dialect="spark")

    def order(self, items: list[str]) -> str:
        """DuckDB ORDER BY items in this dialect."""
        if self.dialect == "duckdb":
            return ", ".join(items)
        select = sqlglot.parse_one(f"SELECT 1 ORDER BY {', '.join(items)}", read="duckdb")
        return ", ".join(o.sql(dialect="spark") for o in select.args["order"].expressions)

    def consolidated(self, rel: str, columns: list[str]) -> str:
        """Each distinct row of a Z-set once, with its net weight (rows netting to 0 left out)."""
        total = f"CAST(SUM({WEIGHT}) AS BIGINT)"
        if not columns:
            return f"SELECT {total} AS {WEIGHT} FROM {rel} HAVING SUM({WEIGHT}) <> 0"
        cols = self.cols(columns)
        return f"SELECT {cols}, {total} AS {WEIGHT} FROM {rel} GROUP BY {cols} HAVING SUM({WEIGHT}) <> 0"

    def expand(self, rel: str, columns: list[str]) -> str:
        """A subquery repeating each row of a Z-set by its positive weight (so SQL aggregates see a bag)."""
        cols = self.cols(columns, "t.")
        if self.dialect == "spark":
            return (
                f"(SELECT {cols} FROM (SELECT * FROM {rel} WHERE {WEIGHT} > 0) t "
                f"LATERAL VIEW explode(sequence(1, CAST(t.{WEIGHT} AS INT))) e AS __lv_i)"
            )
        return f"(SELECT {cols} FROM (SELECT * FROM {rel} WHERE {WEIGHT} > 0) t, range(t.{WEIGHT}) e(__lv_i))"

    def semi(self, left: str, right: str, condition: str, anti: bool) -> str:
        """Rows of ``left`` (alias l) with (without, ``anti``) a row of ``right`` (alias r) meeting ``condition``."""
        if self.dialect == "spark":
            return f"SELECT l.* FROM {left} l LEFT {'ANTI' if anti else 'SEMI'} JOIN {right} r ON {condition}"
        return (
            f"SELECT l.* FROM {left} l WHERE {'NOT ' if anti else ''}EXISTS (SELECT 1 FROM {right} r WHERE {condition})"
        )


def _spark_micros(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``epoch_us(t)`` (an event-time window's bounds), which sqlglot reads as a call it does not
    know, is Spark's ``unix_micros(t)``."""
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "epoch_us" and len(node.expressions) == 1:
        return exp.UnixMicros(this=node.expressions[0])
    return node


def _spark_time(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``t + INTERVAL (n) MICROSECOND`` with a computed ``n`` (an event-time window's bounds) is Spark's
    ``timestampadd`` (Spark's interval literals take constants only), which keeps the timestamp's type. Whole
    seconds, then the rest: Spark's ``timestampadd`` takes an INT quantity, so ``n`` past 2^31 microseconds (a
    window of 36 minutes or more) would wrap silently; DIV and % both truncate, so they add up to ``n``."""
    interval = node.expression if isinstance(node, exp.Add) else None
    if (
        isinstance(interval, exp.Interval)
        and str(interval.unit.this if interval.unit else "").upper() == "MICROSECOND"
        and not isinstance(interval.this, exp.Literal)
    ):
        micros, second = exp.paren(interval.this), exp.Literal.number(1_000_000)
        seconds = exp.TimestampAdd(
            this=node.this, expression=exp.IntDiv(this=micros.copy(), expression=second), unit=exp.var("SECOND")
        )
        rest = exp.Mod(this=micros.copy(), expression=second.copy())
        return exp.TimestampAdd(this=seconds, expression=rest, unit=exp.var("MICROSECOND"))
    return node


Relation = Callable[[str], str]


def _source(sql: _Writer, op: Source, inputs: list[str], sources: dict[str, str], relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    # the input's columns in its schema's order, renamed by position as Source.step does
    names = sql.graph.schemas[op.name].names
    items = ", ".join(f"{sql.q(s)} AS {sql.q(c)}" for s, c in zip(names, op.columns, strict=True))
    return relation(f"SELECT {items}, CAST({WEIGHT} AS BIGINT) AS {WEIGHT} FROM {sources[op.name]}")


def _filter(sql: _Writer, op: Filter, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    return relation(f"SELECT * FROM {inputs[0]} WHERE {sql.expr(op.predicate)}")


def _project(sql: _Writer, op: Project, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    items = ", ".join(f"{sql.expr(e)} AS {sql.q(c)}" for c, e in zip(op.columns, op.exprs, strict=True))
    return relation(f"SELECT {items}, {WEIGHT} FROM {inputs[0]}")


def _union_all(sql: _Writer, op: UnionAll, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    parts = []
    for child, rel in zip(op.inputs, inputs, strict=True):
        items = ", ".join(f"{sql.q(s)} AS {sql.q(d)}" for s, d in zip(child.columns, op.columns, strict=True))
        parts.append(f"SELECT {items}, {WEIGHT} FROM {rel}")
    return relation(" UNION ALL ".join(parts))


def _expand(sql: _Writer, op: Expand, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    values = ", ".join("(" + ", ".join(sql.expr(v) for v in row) + ")" for row in op.rows)
    return relation(
        f"SELECT {sql.cols(op.inputs[0].columns, 'd.')}, {sql.cols(op.added, 'c.')}, d.{WEIGHT} FROM {inputs[0]} d "
        f"CROSS JOIN (VALUES {values}) AS c({sql.cols(op.added)})"
    )


def _distinct(sql: _Writer, op: Distinct, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    counts = relation(sql.consolidated(inputs[0], op.columns))
    state[op.counts.name] = f"SELECT * FROM {counts}"
    return relation(f"SELECT {sql.cols(op.columns)}, CAST(1 AS BIGINT) AS {WEIGHT} FROM {counts} WHERE {WEIGHT} > 0")


def _join(sql: _Writer, op: Join, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    left, right = (relation(sql.consolidated(rel, child.columns)) for rel, child in zip(inputs, op.inputs, strict=True))
    for table, rel in ((op.left_state, left), (op.right_state, right)):
        if table in op.state_tables():  # not a side read from an aggregate's records (join.DerivedSide)
            state[table.name] = f"SELECT * FROM {rel}"
    both = f"{sql.cols(op.left_columns, 'l.')}, {sql.cols(op.right_columns, 'r.')}"
    condition = sql.expr(op.condition)
    parts = [f"SELECT {both}, l.{WEIGHT} * r.{WEIGHT} AS {WEIGHT} FROM {left} l JOIN {right} r ON {condition}"]
    if op.kind in ("left", "full"):
        parts.append(
            f"SELECT {both}, l.{WEIGHT} AS {WEIGHT} FROM {left} l LEFT JOIN {right} r ON {condition} "
            f"WHERE r.{WEIGHT} IS NULL"
        )
    if op.kind in ("right", "full"):
        parts.append(
            f"SELECT {both}, r.{WEIGHT} AS {WEIGHT} FROM {right} r LEFT JOIN {left} l ON {condition} "
            f"WHERE l.{WEIGHT} IS NULL"
        )
    return relation(" UNION ALL ".join(parts))


def _semi_join(sql: _Writer, op: SemiJoin, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    left, right = (relation(sql.consolidated(rel, child.columns)) for rel, child in zip(inputs, op.inputs, strict=True))
    state[op.left_state.name], state[op.right_state.name] = f"SELECT * FROM {left}", f"SELECT * FROM {right}"
    return relation(sql.semi(left, right, sql.expr(op.condition), op.anti))


def _aggregate(sql: _Writer, op: Aggregate, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    group = sql.cols(op.group)
    lead, by = (f"{group}, ", f" GROUP BY {group}") if op.group else ("", "")
    partials, flags = op.partials(), []
    if sql.dialect == "spark":  # Spark's sums wrap, go NULL or lose scale: summed exactly, then checked
        types = sql.types(op.inputs[0])
        partials = [(c, exact_partial(e, types)) for c, e in partials]
        flags = overflow_flags(op, types, sql.q)
    items = ", ".join(sql.expr(f"{e} AS {c}") for c, e in partials)
    # a sum or count over no rows (or only NULLs) is 0 in the records, as the driver's merge with no record makes it;
    # an extreme stays NULL
    zeroed = ", ".join(c if c.startswith(EXT) else f"COALESCE({c}, 0) AS {c}" for c, _ in partials)
    live = f" WHERE {COUNT} <> 0" if op.group else ""  # a global aggregate has its one row over no rows too
    summed = f"(SELECT {lead}{items} FROM {inputs[0]}{by})"
    if flags:
        summed = relation(summed[1:-1])  # read by the check and by the records
        checked = ", ".join(f"MAX(CASE WHEN {bad} THEN 1 ELSE 0 END) AS __lv_f{i}" for i, bad in flags)
        sql.checks.append(SumCheck(op, f"SELECT {checked} FROM {summed}", [i for i, _ in flags]))
    records = relation(f"SELECT {lead}{zeroed}, CAST(1 AS BIGINT) AS {WEIGHT} FROM {summed} g{live}")
    state[op.records.name] = f"SELECT * FROM {records}"
    served, joins = {}, ""
    for j, vs in enumerate(op.value_sets):
        counts = relation(_value_counts(sql, op, vs, inputs[0]))
        state[vs.table.name] = f"SELECT * FROM {counts}"
        values = ", ".join(sql.expr(f"{aggregate_sql(func, WEIGHT)} AS {NEW_OF}{i}") for i, func in vs.aggs)
        per_group = relation(f"SELECT {lead}{values} FROM {counts}{by}")
        on = " AND ".join(f"t.{sql.q(g)} <=> m{j}.{sql.q(g)}" for g in op.group) if sql.dialect == "spark" else ""
        on = on or " AND ".join(f"t.{sql.q(g)} IS NOT DISTINCT FROM m{j}.{sql.q(g)}" for g in op.group) or "TRUE"
        joins += f" LEFT JOIN {per_group} m{j} ON {on}"
        served.update({i: f"m{j}.{NEW_OF}{i}" for i, _ in vs.aggs})
    values = ", ".join(
        f"{sql.expr(finished_sql(a.func, served[i]) if i in served else op.record_value(i, a, 't'))} AS {sql.q(a.out)}"
        for i, a in enumerate(op.aggs)
    )
    return relation(
        f"SELECT {sql.cols(op.group, 't.') + ', ' if op.group else ''}{values}, t.{WEIGHT} FROM {records} t{joins}"
    )


def _value_counts(sql: _Writer, op: Aggregate, vs: ValueSet, rel: str) -> str:
    """A value set's state over the whole input: each group's distinct values with their net count."""
    keys = ", ".join([sql.q(g) for g in op.group] + [sql.q(vs.arg)])
    lead = f"{sql.cols(op.group)}, " if op.group else ""
    return (
        f"SELECT {lead}{sql.q(vs.arg)} AS {VALUE}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM {rel} "
        f"WHERE {vs.condition(sql.q)} GROUP BY {keys} HAVING SUM({WEIGHT}) <> 0"
    )


def _topk(sql: _Writer, op: TopK, inputs: list[str], sources, relation: Relation, state) -> str:  # type: ignore[no-untyped-def]
    columns = op.inputs[0].columns
    rows = relation(sql.consolidated(inputs[0], columns))
    state[op.rows.name] = f"SELECT * FROM {rows}"
    order = list(op.order)
    if op.func == "row_number":  # ties broken by every column, as TopK.step does
        order += [f'"{c}" ASC NULLS LAST' for c in columns]
    part = f"PARTITION BY {sql.cols(op.partition)} " if op.partition else ""
    rank = sql.q(op.columns[-1])
    ranked = (
        f"SELECT {sql.cols(columns)}, {op.func.upper()}() OVER ({part}ORDER BY {sql.order(order)}) AS {rank} "
        f"FROM {sql.expand(rows, columns)} t"
    )
    bounds = f"{rank} > {op.offset} AND {rank} <= {op.offset + op.limit}"
    return relation(f"SELECT *, CAST(1 AS BIGINT) AS {WEIGHT} FROM ({ranked}) k WHERE {bounds}")


_RULES: dict[type, Callable[..., str]] = {
    Source: _source,
    Filter: _filter,
    Project: _project,
    UnionAll: _union_all,
    Distinct: _distinct,
    Expand: _expand,
    Join: _join,
    SemiJoin: _semi_join,
    Aggregate: _aggregate,
    TopK: _topk,
}
