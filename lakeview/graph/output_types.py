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
from lakeview.graph.expand import Expand
from lakeview.graph.join import Join
from lakeview.graph.operators import Distinct, Filter, Operator, Project, Source, UnionAll
from lakeview.graph.topk import TopK
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


_INTEGERS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_INTEGER_DIGITS = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 20}  # Spark's integer as a decimal


def wider(a: pa.DataType | None, b: pa.DataType | None) -> pa.DataType | None:
    """Spark's wider type of two (a set operation's column, a VALUES column; None: unknown, or a pair this does
    not derive): integers the wider integer, decimals the wider decimal (an integer as decimal(digits, 0)), a
    float or double with any number a double (a float with an integer: a float), a date with a timestamp the
    timestamp, a string with any other atomic type a string."""
    if a is None or b is None or a == b:
        return a if a == b else None
    t = pa.types
    if t.is_null(a) or t.is_null(b):  # NULL takes the other's type
        return b if t.is_null(a) else a
    if t.is_integer(a) and t.is_integer(b) and a in _INTEGERS and b in _INTEGERS:
        return max(a, b, key=_INTEGERS.index)
    if (t.is_decimal(a) or t.is_integer(a)) and (t.is_decimal(b) or t.is_integer(b)):
        (p1, s1), (p2, s2) = _digits(a), _digits(b)
        scale = max(s1, s2)
        return pa.decimal128(min(MAX_PRECISION, max(p1 - s1, p2 - s2) + scale), min(MAX_PRECISION, scale))
    numbers = (t.is_integer, t.is_decimal, t.is_floating)
    if any(k(a) for k in numbers) and any(k(b) for k in numbers):
        floats = {x for x in (a, b) if t.is_floating(x)}
        return pa.float32() if floats == {pa.float32()} and not (t.is_decimal(a) or t.is_decimal(b)) else pa.float64()
    if (t.is_date(a) and t.is_timestamp(b)) or (t.is_timestamp(a) and t.is_date(b)):
        return a if t.is_timestamp(a) else b
    strings = (t.is_string, t.is_large_string, t.is_string_view)
    if any(k(a) for k in strings) != any(k(b) for k in strings):
        other = b if any(k(a) for k in strings) else a
        if not (t.is_binary(other) or t.is_boolean(other) or t.is_nested(other)):
            return a if any(k(a) for k in strings) else b
    return None


def wider_of(types: list[pa.DataType | None]) -> pa.DataType | None:
    """The wider type of all ``types`` (:func:`wider`); None where only NULLs give none."""
    found = types[0] if types else None
    for other in types[1:]:
        found = wider(found, other)
    return None if found is None or pa.types.is_null(found) else found


def _digits(kind: pa.DataType) -> tuple[int, int]:
    return (kind.precision, kind.scale) if pa.types.is_decimal(kind) else (_INTEGER_DIGITS[kind], 0)


def literal_type(literal: str) -> pa.DataType | None:
    """Spark's type of a SQL literal (a VALUES cell, DuckDB SQL): an integer INT (past its range BIGINT, then a
    decimal), a decimal number its decimal(digits, scale), an exponent a double, a string a string, a boolean a
    boolean, NULL null."""
    text = literal.strip().removeprefix("-").strip()
    if text.upper() == "NULL":
        return pa.null()
    if text.upper() in ("TRUE", "FALSE"):
        return pa.bool_()
    if text.startswith("'"):
        return pa.string()
    if text.isdigit():
        value = int(text)
        if value < 2**31:
            return pa.int32()
        return pa.int64() if value < 2**63 else pa.decimal128(min(MAX_PRECISION, len(text.lstrip("0") or "0")), 0)
    whole, dot, fraction = text.partition(".")
    if dot and (whole + fraction).isdigit():
        digits = len((whole + fraction).lstrip("0") or "0")
        return pa.decimal128(min(MAX_PRECISION, max(digits, len(fraction))), len(fraction))
    return pa.float64() if "E" in text.upper() else None


class SparkTypes:
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
        if isinstance(op, UnionAll):  # by position: the branches' wider type, as Spark widens a set operation's
            branches = [self.of(i) for i in op.inputs]
            return [wider_of(list(types)) for types in zip(*branches, strict=True)]
        if isinstance(op, TopK):  # the input's columns, then the rank: Spark's ROW_NUMBER() and RANK() are INT
            return [*self.of(op.inputs[0]), pa.int32()]
        if isinstance(op, Expand):  # the input's columns, then each constant column: its literals' wider type
            added = [wider_of([literal_type(v) for v in column]) for column in zip(*op.rows, strict=True)]
            return [*self.of(op.inputs[0]), *added]
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
    types = SparkTypes(written).of(written.output)
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
