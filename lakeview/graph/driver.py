"""One driver for every graph: ``step`` runs an epoch through the operators in order; ``explain`` prints them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.errors import UnsupportedSQLError
from lakeview.graph.operators import Operator, Runtime, Source
from lakeview.graph.state import MemoryStateStore, StateStore, StateTable
from lakeview.graph.zset import WEIGHT, Duck


@dataclass(eq=False)
class Graph:
    """A compiled view: operators in topological order, its inputs' schemas, its output op and column names."""

    sql: str
    operators: list[Operator]
    sources: dict[str, list[Source]]
    schemas: dict[str, pa.Schema]
    output: Operator
    names: list[str]
    runtime: Runtime = field(init=False)
    # the last epoch per operator id: (wall seconds of its step, rows it output), shown by explain
    last_epoch: dict[str, tuple[float, int]] = field(init=False, default_factory=dict)
    # what is derived from the graph alone once, not per epoch (Spark's types of its columns, a later batch's SQL)
    derived: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        duck = Duck()
        self.runtime = Runtime(duck, MemoryStateStore(duck))

    def state_tables(self) -> list[StateTable]:
        """Every state table of every operator (what a table-backed store must create and commit per epoch)."""
        return [t for op in self.operators for t in op.state_tables()]

    def use_store(self, store: StateStore) -> None:
        """Keep state in ``store`` instead of memory (before the first step)."""
        self.runtime.store = store


def step(
    graph: Graph,
    deltas: dict[str, pa.Table],
    given: dict[str, pa.Table] | None = None,
    partials: dict[str, pa.Table] | None = None,
) -> pa.Table:
    """Apply one epoch of input changes (each a Z-set with the weight column ``__lv_w``); return the view's delta.

    Inputs not named get an empty delta. ``given``: operators' outputs computed elsewhere (by Spark over a large
    batch: :mod:`lakeview.graph.later_sql`), by operator id; ``partials``: a linear aggregate's input summed per
    group, by its id (:meth:`~lakeview.graph.aggregate.Aggregate.step_partials`). Raises UnsupportedSQLError for
    an input the view does not read or a delta without the input's columns.
    """
    unknown = set(deltas) - set(graph.schemas)
    if unknown:
        raise UnsupportedSQLError(f"no input named {sorted(unknown)} in this view (inputs: {sorted(graph.schemas)})")
    rt = graph.runtime
    outputs: dict[int, pa.Table] = {}
    graph.last_epoch.clear()
    for name, sources in graph.sources.items():
        delta = _conform(graph, name, deltas.get(name))
        for source in sources:
            outputs[id(source)] = source.step(rt, [delta])
    given, partials = given or {}, partials or {}
    for op in graph.operators:
        if op.id in given:
            outputs[id(op)] = given[op.id]
        elif id(op) not in outputs:
            started = time.perf_counter()
            if op.id in partials:
                outputs[id(op)] = op.step_partials(rt, partials[op.id])  # type: ignore[attr-defined]
            else:
                outputs[id(op)] = op.step(rt, [outputs[id(i)] for i in op.inputs])
            graph.last_epoch[op.id] = (time.perf_counter() - started, outputs[id(op)].num_rows)
    rt.epoch += 1
    out = outputs[id(graph.output)]
    if out.num_rows > 1:  # a projection may map a -1 and a +1 onto one row: the view sees their net
        out = rt.duck.consolidate("SELECT * FROM o", graph.output.columns, o=out)
    return out.rename_columns(graph.names + [WEIGHT])


def _conform(graph: Graph, name: str, delta: pa.Table | None) -> pa.Table:
    schema = graph.schemas[name]
    weighted = schema.append(pa.field(WEIGHT, pa.int64()))
    if delta is None:
        return weighted.empty_table()
    missing = [f.name for f in weighted if f.name not in delta.column_names]
    if missing:
        raise UnsupportedSQLError(f"the delta for {name} lacks the columns {missing}")
    return delta.select(weighted.names).cast(weighted)


def explain(graph: Graph) -> str:
    """The operator tree from the output down, each operator with its state tables (key, rows held), cost, and
    what its step took in the last epoch (wall time, rows out): where an epoch's time goes."""
    lines: list[str] = [f"view: {', '.join(graph.names)}"]
    store = graph.runtime.store
    seen: set[int] = set()

    def walk(op: Operator, depth: int) -> None:
        pad = "  " * depth
        again = " (shared, shown above)" if id(op) in seen else ""
        lines.append(f"{pad}{op.id}: {op.describe()}{again}")
        if again:
            return
        seen.add(id(op))
        lines.append(f"{pad}    cost: {op.cost}")
        if op.id in graph.last_epoch:
            seconds, rows = graph.last_epoch[op.id]
            lines.append(f"{pad}    last epoch: {seconds * 1000:.1f} ms, {rows} rows out")
        for table in op.state_tables():
            held = f", {store.rows(table)} rows" if hasattr(store, "rows") else ""
            key = ", ".join(table.key) or "none"
            lines.append(f"{pad}    state {table.name} key ({key}){held}: {table.holds}")
        for child in op.inputs:
            walk(child, depth + 1)

    walk(graph.output, 0)
    return "\n".join(lines)
