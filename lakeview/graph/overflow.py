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

import pyarrow as pa
import sqlglot
from sqlglot import exp

from lakeview.errors import AggregateOverflowError
from lakeview.graph.aggregate import NUM, SUM, Aggregate
from lakeview.graph.driver import Graph
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
    a = op.aggs[i]
    column = view_columns(graph, op).get(a.out, a.out)
    aggregate = f"{a.func.upper()}({_argument(graph, op.inputs[0], a.arg or '*')})"
    return AggregateOverflowError.of(view, [column], aggregate, ValueError(f"its sum over {where} is out of range"))


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
