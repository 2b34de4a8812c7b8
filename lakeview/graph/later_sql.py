"""A graph's later large batch as SQL: how much of it Spark computes, and what the driver collects.

A later batch meets state that lives in the driver (its lookups, its merge), so the driver steps the graph;
what Spark can do first is everything stateless below the first stateful operators. The graph's *Spark
side* is every source whose Z-set needs no state (an append stream, an image feed, an upstream view: not a
change feed, whose Z-set is its newest change per key against its mirror) and every filter, projection,
expansion and UNION ALL over the Spark side only. What crosses to the driver is the reduced output of each
Spark-side operator a driver-side operator reads:

- a linear aggregate (SUM, COUNT, AVG, each ± FILTER; eager pre-aggregation below a join too) gets its
  partial sums per group (the Z-set summed by its key: :meth:`lakeview.graph.aggregate.Aggregate.step_partials`);
- any other operator (a join side, DISTINCT, a multiset aggregate, top-k, the view itself) gets the Z-set
  consolidated: each distinct row once with its summed weight.

A graph whose every operator is on the Spark side over append-only inputs (no state table at all) needs no
driver: its view rows are appended, written by the executors (:attr:`LaterBatch.appended`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.graph.aggregate import Aggregate
from lakeview.graph.backfill_sql import _RULES, _Writer, first_batch_sql
from lakeview.graph.driver import Graph
from lakeview.graph.expand import Expand
from lakeview.graph.operators import Filter, Operator, Project, Source, UnionAll
from lakeview.graph.overflow import exact_partial

STATELESS = (Source, Filter, Project, UnionAll, Expand)
VIEW = "the view"  # LaterBatch.collected's consumer of the graph's output


@dataclass
class LaterBatch:
    """The Spark side's relations in dependency order (name, SQL) and what the driver collects of them."""

    relations: list[tuple[str, str]] = field(default_factory=list)
    given: dict[str, str] = field(default_factory=dict)  # op id -> its output, consolidated (a Z-set)
    partials: dict[str, str] = field(default_factory=dict)  # a linear aggregate's id -> its input's relation
    appended: str | None = None  # no state at all, append-only inputs: the view's rows to append


def spark_side(graph: Graph, driver_inputs: set[str]) -> set[int]:
    """The ids of the operators Spark computes for a later batch: the stateless ones over inputs not in
    ``driver_inputs`` (change feeds: their Z-set needs their mirror)."""
    side: set[int] = set()
    for op in graph.operators:
        if isinstance(op, Source):
            if op.name not in driver_inputs:
                side.add(id(op))
        elif isinstance(op, STATELESS) and all(id(i) in side for i in op.inputs):
            side.add(id(op))
    return side


def appends(graph: Graph, retracting: set[str], driver_inputs: set[str]) -> bool:
    """Whether a later batch only appends view rows: every operator stateless, every input insert-only."""
    side = spark_side(graph, driver_inputs)
    return len(side) == len(graph.operators) and not (set(graph.schemas) & (retracting | driver_inputs))


def later_batch_sql(
    graph: Graph,
    sources: dict[str, str],
    prefix: str,
    retracting: set[str],
    driver_inputs: set[str],
    dialect: str = "spark",
) -> LaterBatch:
    """The Spark SQL of a later batch (``sources``: each Spark-side input's Z-set relation; ``retracting``: inputs
    whose Z-sets carry deletes; ``driver_inputs``: inputs the driver turns into Z-sets, see :func:`spark_side`).
    ``dialect="duckdb"``: the same SQL for DuckDB (the unit tests check it against :func:`lakeview.graph.step`)."""
    if appends(graph, retracting, driver_inputs):
        first = first_batch_sql(graph, sources, prefix, dialect)  # stateless: the first batch's rule is the delta's
        net = first.relations[-1][0]  # the output consolidated (the driver's path: a view group's member)
        return LaterBatch(
            relations=first.relations, given={graph.output.id: f"SELECT * FROM {net}"}, appended=first.view
        )
    side = spark_side(graph, driver_inputs)
    sql, out, names = _Writer(dialect, graph), LaterBatch(), {}

    def relation(query: str) -> str:
        name = f"{prefix}{len(out.relations)}"
        out.relations.append((name, query))
        return name

    for op in graph.operators:
        if id(op) in side:
            inputs = [names[id(i)] for i in op.inputs] if not isinstance(op, Source) else []
            names[id(op)] = _RULES[type(op)](sql, op, inputs, sources, relation, {})
    for op, consumer in _crossings(graph, side):
        if isinstance(consumer, Aggregate) and consumer.linear:
            out.partials[consumer.id] = names[id(op)]  # summed by partials_sql (it needs the input's types)
        else:
            out.given[op.id] = sql.consolidated(names[id(op)], op.columns)
    return out


def _crossings(graph: Graph, side: set[int]) -> list[tuple[Operator, Operator | None]]:
    """Each (Spark-side operator, the driver-side operator reading it; None: the view) pair."""
    pairs: list[tuple[Operator, Operator | None]] = []
    for op in graph.operators:
        if id(op) not in side:
            pairs += [(i, op) for i in dict.fromkeys(op.inputs) if id(i) in side]
    if id(graph.output) in side:
        pairs.append((graph.output, None))
    return pairs


def partials_sql(graph: Graph, op_id: str, rel: str, integral: set[str] | None = None, dialect: str = "spark") -> str:
    """The linear aggregate ``op_id``'s input ``rel`` summed per group: its count, sums and non-NULL counts (its
    state's columns). ``integral``: the input's integer columns, summed as DECIMAL(38, 0) (exact, as DuckDB's
    HUGEINT sum the driver keeps; Spark's BIGINT sum would wrap past its range without a word); a decimal
    argument is summed at 38 digits with its scale (:func:`lakeview.graph.overflow.exact_partial`)."""
    key = (partials_sql, op_id, rel, frozenset(integral or ()), dialect)
    if key not in graph.derived:  # the same every epoch: written once
        graph.derived[key] = _partials_sql(graph, op_id, rel, integral, dialect)
    return graph.derived[key]


def _partials_sql(graph: Graph, op_id: str, rel: str, integral: set[str] | None, dialect: str) -> str:
    (op,) = [o for o in graph.operators if o.id == op_id]
    assert isinstance(op, Aggregate)
    sql = _Writer(dialect, graph)
    group = sql.cols(op.group)
    types = {**sql.types(op.inputs[0]), **dict.fromkeys(integral or (), pa.int64())}
    partials = ", ".join(sql.expr(f"{exact_partial(e, types)} AS {c}") for c, e in op.partials())
    if not op.group:
        return f"SELECT {partials} FROM {rel}"
    return f"SELECT {group}, {partials} FROM {rel} GROUP BY {group}"


def later_cost(graph: Graph, retracting: set[str], driver_inputs: set[str]) -> str:
    """What a later batch past the bound costs, in a line (explain): who writes, what the driver collects."""
    if appends(graph, retracting, driver_inputs):
        return "its view rows are computed by Spark and appended by the executors, nothing collected"
    side = spark_side(graph, driver_inputs)
    parts = []
    for op, consumer in _crossings(graph, side):
        if isinstance(consumer, Aggregate) and consumer.linear:
            parts.append(f"{consumer.id}: one row per group (partial sums by Spark)")
        else:
            parts.append(f"{op.id}: its distinct rows with summed weights")
    drivers = sorted(driver_inputs & set(graph.schemas))
    if drivers:
        parts.append(f"{', '.join(drivers)}: each change feed's newest change per key")
    return "the driver collects " + "; ".join(dict.fromkeys(parts)) + ", then steps the graph"
