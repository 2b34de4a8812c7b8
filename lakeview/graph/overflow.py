"""Exact sums where Spark computes a graph's aggregates, and the error when one leaves its type.

Spark without ANSI mode sums a BIGINT in a BIGINT that wraps past its range without a word, makes a decimal
sum past 38 digits NULL, and narrows the scale of a decimal times the row's weight. Where Spark computes an
aggregate's partials (a first batch on the executors, a later batch's partial sums), each SUM argument is
therefore summed exactly (:func:`exact_partial`): an integer as DECIMAL(38, 0), a decimal at 38 digits with
its own scale (a weight of ±1 only negates it). What the view's SQL gives a sum is then checked before anything
is written (:func:`overflow_flags`): an integer sum outside BIGINT (Spark's SUM of an integer), or a NULL sum over
values (a decimal past 38 digits), is :class:`~lakeview.errors.AggregateOverflowError` naming the view and the
column, as the driver's cast to the view's table raises (:func:`lakeview.graph.output_types.conform`).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from lakeview.errors import AggregateOverflowError
from lakeview.graph.aggregate import NUM, SUM, Aggregate
from lakeview.graph.driver import Graph, step
from lakeview.graph.operators import Filter, Operator, Project, Source
from lakeview.graph.zset import WEIGHT, q

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def exact_partial(partial: str, types: dict[str, pa.DataType | None]) -> str:
    """A partial of :meth:`Aggregate.partials` (DuckDB SQL) with each summed argument made exact for Spark
    (``types``: the aggregate input's columns' types; an unknown or other type is summed as it is)."""
    tree = sqlglot.parse_one(partial, read="duckdb")
    for total in tree.find_all(exp.Sum):
        for column in list(total.find_all(exp.Column)):
            kind = types.get(column.name)  # (the weight's too, if given: a later batch's weights may be summed)
            if kind is None:
                continue
            if pa.types.is_integer(kind):
                column.replace(exp.cast(column.copy(), exp.DataType.build("DECIMAL(38, 0)")))
            elif pa.types.is_decimal(kind):
                product = column.parent
                if isinstance(product, exp.Mul) and WEIGHT in {c.name for c in product.find_all(exp.Column)}:
                    product.replace(sqlglot.parse_one(_weighted(q(column.name), kind.scale), read="duckdb"))
    return tree.sql(dialect="duckdb")


def _weighted(arg: str, scale: int) -> str:
    # Spark narrows the scale of a decimal(38, s) product, so a weight of ±1 (nearly every row) only negates
    wide = f"CAST({arg} AS DECIMAL(38, {scale}))"
    return f"CASE WHEN {WEIGHT} = 1 THEN {wide} WHEN {WEIGHT} = -1 THEN -{wide} ELSE {wide} * {WEIGHT} END"


def overflow_flags(op: Aggregate, types: dict[str, pa.DataType | None], quote) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    """Per SUM/AVG aggregate of ``op`` read from its record: (its index, a predicate over the group's summed
    partials, before any NULL becomes 0, that is true where the sum left the type SQL gives it)."""
    flags = []
    for i, a in enumerate(op.aggs):
        if op.kinds[i] != "linear" or a.func not in ("sum", "avg"):
            continue
        total, count = quote(f"{SUM}{i}"), quote(f"{NUM}{i}")
        bad = f"({total} IS NULL AND COALESCE({count}, 0) <> 0)"
        kind = types.get(a.arg) if a.arg is not None else None
        if a.func == "sum" and kind is not None and pa.types.is_integer(kind):
            bad += f" OR {total} NOT BETWEEN {LONG_MIN} AND {LONG_MAX}"
        flags.append((i, bad))
    return flags


def view_columns(graph: Graph, op: Aggregate) -> dict[str, str]:
    """``op``'s output columns that reach the view unchanged (through projections and filters), by the view's
    names (an aggregate below a join, or computed on: none)."""
    names = dict(zip(graph.output.columns, graph.names, strict=True))
    node: Operator = graph.output
    while node is not op:
        if isinstance(node, Project):
            plain = {q(c): c for c in node.inputs[0].columns}
            names = {
                plain[e]: names[c] for c, e in zip(node.columns, node.exprs, strict=True) if e in plain and c in names
            }
        elif not isinstance(node, Filter):
            return {}
        node = node.inputs[0]
    return names


def aggregate_error(view: str, graph: Graph, op: Aggregate, i: int, where: str) -> AggregateOverflowError:
    """The error for aggregate ``i`` of ``op`` whose sum over ``where`` (e.g. "the first batch's rows") left its type."""
    return _error(view, graph, op, [i], ValueError(f"its sum over {where} is out of range"))


def _error(view: str, graph: Graph, op: Aggregate, aggs: list[int], exc: Exception) -> AggregateOverflowError:
    """The error naming the view's columns and the aggregates ``aggs`` of ``op`` (one of which ``exc`` says left
    its type)."""
    names = view_columns(graph, op)
    columns = [names.get(op.aggs[i].out, op.aggs[i].out) for i in aggs]
    aggregates = ", ".join(
        f"{op.aggs[i].func.upper()}({_argument(graph, op.inputs[0], op.aggs[i].arg or '*')})" for i in aggs
    )
    return AggregateOverflowError.of(view, columns, aggregates, exc)


def checked_step(
    view: str,
    graph: Graph,
    deltas: dict[str, pa.Table],
    given: dict[str, pa.Table] | None = None,
    partials: dict[str, pa.Table] | None = None,
) -> pa.Table:
    """:func:`lakeview.graph.step` of the driver's epoch, raising AggregateOverflowError naming ``view``, the
    column and the argument, before the epoch's state or view changes are committed, where a sum left its type:
    a partial sum Spark reduced that came back NULL over values (a decimal past 38 digits, with ANSI off), or a
    sum DuckDB found out of range while stepping an aggregate."""
    for op_id, table in (partials or {}).items():
        (op,) = [o for o in graph.operators if o.id == op_id]
        assert isinstance(op, Aggregate)
        flags = overflow_flags(op, {}, q)
        if not flags or table.num_rows == 0:
            continue
        found = graph.runtime.duck.query(
            "SELECT " + ", ".join(f"bool_or({bad}) AS f{i}" for i, bad in flags) + " FROM p", p=table
        )
        for i, _ in flags:
            if found.column(f"f{i}")[0].as_py():
                raise aggregate_error(view, graph, op, i, "a later batch's rows (partial sums by Spark)")
    try:
        return step(graph, deltas, given, partials)
    except duckdb.OutOfRangeException as exc:
        op = _stepping(graph, given or {})
        if op is None:
            raise
        sums = [i for i, a in enumerate(op.aggs) if op.kinds[i] == "linear" and a.func in ("sum", "avg")]
        if not sums:
            raise
        raise _error(view, graph, op, sums, exc) from exc


def _stepping(graph: Graph, given: dict[str, pa.Table]) -> Aggregate | None:
    """The aggregate whose step raised (operators step in order, each recorded in ``last_epoch`` once done), or
    None when the operator that raised is not an aggregate."""
    for op in graph.operators:
        if isinstance(op, Source) or op.id in given or op.id in graph.last_epoch:
            continue
        return op if isinstance(op, Aggregate) else None
    return None


def _argument(graph: Graph, op: Operator, column: str) -> str:
    """``column`` of ``op`` as the view's inputs name it: an input's column through plain projections (else the
    expression that computes it, in internal names)."""
    while isinstance(op, (Project, Filter, Source)):
        if isinstance(op, Source):
            return dict(zip(op.columns, graph.schemas[op.name].names, strict=True)).get(column, column)
        if isinstance(op, Project):
            expr = dict(zip(op.columns, op.exprs, strict=True))[column]
            plain = {q(c): c for c in op.inputs[0].columns}
            if expr not in plain:
                return expr
            column = plain[expr]
        op = op.inputs[0]
    return column
