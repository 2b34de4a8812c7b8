"""A graph view's table: its columns' types and its key, as the one-source stack gave them.

The graph computes in DuckDB, whose types differ from Spark's where an aggregate is involved (``SUM(INT)``
is a HUGEINT, ``decimal(38,0)``; ``SUM(decimal(p,s))`` is ``decimal(38,s)``; ``AVG(decimal)`` a DOUBLE). A
view's table takes Spark's types instead (:func:`aggregate_type`), which is what the one-source stack created
its tables with, so switching a view from that stack to the graph keeps its table's schema; each epoch's rows
are cast to the table's schema as stored (:func:`conform`), an existing table's too.

A view whose output has a unique key (the GROUP BY columns of a final aggregate, or a change feed's key kept
by a projection) has its table keyed by it (:func:`output_key`), as the stack did; any other view's rows are a
multiset keyed by the whole row.
"""

from __future__ import annotations

import pyarrow as pa

from lakeview.errors import AggregateOverflowError
from lakeview.graph.aggregate import Aggregate
from lakeview.graph.compile import compile_view
from lakeview.graph.driver import Graph
from lakeview.graph.join import Join
from lakeview.graph.operators import Distinct, Filter, Operator, Project, Source
from lakeview.graph.zset import WEIGHT, Duck, q

MAX_PRECISION = 38  # Spark's (and Iceberg's, Delta's) widest decimal


def aggregate_type(func: str, arg: pa.DataType | None) -> pa.DataType:
    """Spark's result type of aggregate ``func`` (sum, count, avg, min, max) over an argument of type ``arg``
    (None: ``COUNT(*)``): SUM of integers a bigint, of decimal(p,s) decimal(min(38,p+10),s), of floats a
    double; AVG a double, of decimal(p,s) decimal(min(38,p+4),min(38,s+4)); COUNT a bigint; MIN/MAX the
    argument's type."""
    if func == "count" or arg is None:
        return pa.int64()
    if func in ("min", "max"):
        return arg
    decimal = pa.types.is_decimal(arg)
    if func == "sum":
        if pa.types.is_integer(arg):
            return pa.int64()
        if decimal:
            return pa.decimal128(min(MAX_PRECISION, arg.precision + 10), arg.scale)
        return pa.float64() if pa.types.is_floating(arg) else arg
    if func == "avg" and decimal:
        return pa.decimal128(min(MAX_PRECISION, arg.precision + 4), min(MAX_PRECISION, arg.scale + 4))
    return pa.float64()


class _Types:
    """Each operator's output columns' Spark types, from the sources' types up (None: not derived, the
    graph's own type stands)."""

    def __init__(self, graph: Graph) -> None:
        self.graph, self.duck = graph, Duck()
        self.known: dict[int, list[pa.DataType | None]] = {}

    def of(self, op: Operator) -> list[pa.DataType | None]:
        if id(op) not in self.known:
            self.known[id(op)] = self._derive(op)
        return self.known[id(op)]

    def column(self, op: Operator, name: str) -> pa.DataType | None:
        return self.of(op)[op.columns.index(name)]

    def _derive(self, op: Operator) -> list[pa.DataType | None]:
        if isinstance(op, Source):
            return list(self.graph.schemas[op.name].types)
        if isinstance(op, Aggregate):
            (pre,) = op.inputs
            out: list[pa.DataType | None] = [self.column(pre, g) for g in op.group]
            for a in op.aggs:
                arg = None if a.arg is None else self.column(pre, a.arg)
                out.append(None if a.arg is not None and arg is None else aggregate_type(a.func, arg))
            return out
        if isinstance(op, Project):
            return self._project(op)
        if isinstance(op, (Filter, Distinct, Join)):  # columns passed through under their names
            return [self._passed(op, c) for c in op.columns]
        return [None] * len(op.columns)

    def _passed(self, op: Operator, name: str) -> pa.DataType | None:
        for i in op.inputs:
            if name in i.columns:
                return self.column(i, name)
        return None

    def _project(self, op: Project) -> list[pa.DataType | None]:
        (inp,) = op.inputs
        plain = {q(c): c for c in inp.columns}
        types = self.of(inp)
        out: list[pa.DataType | None] = []
        for expr in op.exprs:
            if expr in plain:
                out.append(self.column(inp, plain[expr]))
            elif all(t is not None for t in types):  # the expression's type over its inputs' Spark types
                empty = pa.schema([pa.field(c, t) for c, t in zip(inp.columns, types, strict=True)]).empty_table()
                out.append(self.duck.query(f"SELECT {expr} AS v FROM t LIMIT 0", t=empty).schema.field("v").type)
            else:
                out.append(None)
        return out


def output_schema(graph: Graph, computed: pa.Schema, inputs: dict[str, pa.Schema]) -> pa.Schema:
    """The view table's schema: ``computed`` (the graph's output as DuckDB types it, no weight column) with
    each column Spark's type where the graph's operators say it (an aggregate's result, through projections,
    filters and joins). Typed as the SQL is written: over the graph compiled without eager aggregation (whose
    partial aggregates below a join would widen a SUM's decimal twice and turn an AVG into a division), over
    ``inputs``, the schemas of every table the SQL names (an unused CTE's too)."""
    written = compile_view(graph.sql, inputs, eager=False)
    types = _Types(written).of(written.output)
    return pa.schema(
        [f if t is None else pa.field(f.name, t) for f, t in zip(computed, types, strict=True)], computed.metadata
    )


def table_schema(computed: pa.Schema, stored: pa.Schema | None) -> pa.Schema:
    """The schema the view's rows are cast to each epoch: ``computed`` (:func:`output_schema`), but where the
    table exists (``stored``) each column's stored type when it is another type, not merely another
    representation of one (string or large string, a timestamp's zone, nested types): an existing table keeps
    its schema."""
    if stored is None:
        return computed
    fields = []
    for f in computed:
        kept = stored.field(f.name).type if f.name in stored.names else f.type
        fields.append(f if _same_kind(f.type, kept) else pa.field(f.name, kept))
    return pa.schema(fields, computed.metadata)


def _same_kind(a: pa.DataType, b: pa.DataType) -> bool:
    t = pa.types
    kinds = (
        lambda x: t.is_string(x) or t.is_large_string(x) or t.is_string_view(x),
        lambda x: t.is_binary(x) or t.is_large_binary(x) or t.is_binary_view(x),
        lambda x: t.is_nested(x),
    )
    if a == b or any(k(a) and k(b) for k in kinds):
        return True
    return t.is_timestamp(a) and t.is_timestamp(b) and a.unit == b.unit


def output_key(graph: Graph, feed_keys: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The view's unique key as output column names: a final aggregate's GROUP BY columns (``()`` for a global
    aggregate: one row), or a change feed's key (``feed_keys``: each change-feed input's key) through the
    projections and filters that keep it; None when the output has no key but the whole row (a join, a union,
    top-k with ties, a projection dropping the key, a projection over an append stream)."""
    names = dict(zip(graph.output.columns, graph.names, strict=True))  # internal column -> output name
    op: Operator = graph.output
    while True:
        if isinstance(op, Project):
            (inp,) = op.inputs
            plain = {q(c): c for c in inp.columns}
            kept = {plain[e]: names[c] for c, e in zip(op.columns, op.exprs, strict=True) if e in plain and c in names}
            names, op = kept, inp
        elif isinstance(op, Filter):
            op = op.inputs[0]
        elif isinstance(op, Aggregate):
            key = op.group
            break
        elif isinstance(op, Source) and op.name in feed_keys:
            columns = dict(zip(graph.schemas[op.name].names, op.columns, strict=True))
            key = [columns[k] for k in feed_keys[op.name]]
            break
        else:
            return None
    if not all(k in names for k in key):
        return None
    return tuple(names[k] for k in key)


def conform(rows: pa.Table, schema: pa.Schema, view: str) -> pa.Table:
    """``rows`` (the view's columns and, if present, the weight column) cast to the view table's ``schema``
    (its columns by name; a column the table lacks is kept as is). Raises AggregateOverflowError naming the
    column when a value does not fit the table's type (a SUM past BIGINT)."""
    stored = set(schema.names) - {WEIGHT}
    target = pa.schema([schema.field(n) if n in stored else rows.schema.field(n) for n in rows.column_names])
    if target.types == rows.schema.types:
        return rows
    columns = []
    for name, column, field in zip(rows.column_names, rows.columns, target, strict=True):
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise AggregateOverflowError(view, name, f"{column.type} as {field.type}", str(exc)) from exc
    return pa.table(columns, names=rows.column_names)
