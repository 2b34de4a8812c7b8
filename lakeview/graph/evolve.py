"""Whether a graph view's ``*`` can follow a source's new columns (``new_columns = "evolve"``).

The graph is compiled over its inputs' schemas, so a ``*`` is expanded to the columns an input has when the
graph is compiled: re-compiled over an evolved source, the graph's output gains the source's new columns. That
is all it takes through filters, projections and UNION ALL: the view's table gains the column (and a change
feed's mirror, which the pipeline keeps, not the graph), and rows committed before read NULL for it. A join (or
semi-join) side keeps the starred rows in state with the new column last: its stored rows read NULL for it too,
as the rows they joined into the view. Any other operator keeping the starred rows in state (top-k, DISTINCT,
UNION, an aggregate's groups: rows keyed or ranked as a whole) is refused, as is a ``*`` whose columns must line
up with another branch's.

Found by compiling the graph once with a probe column added to each evolving input and looking where it goes.
"""

from __future__ import annotations

import pyarrow as pa

from lakeview.errors import UnsupportedSQLError
from lakeview.graph.compile import compile_view
from lakeview.graph.driver import Graph, step
from lakeview.graph.join import TwoSided
from lakeview.graph.state import MemoryStateStore
from lakeview.graph.zset import WEIGHT

PROBE = "__lv_probe_"  # a probe column's prefix: one per evolving input, never a real column (reserved prefix)


def star_evolution(sql: str, schemas: dict[str, pa.Schema], evolving: list[str]) -> str | None:
    """Why the view cannot follow the new columns of ``evolving`` (inputs of ``schemas`` its ``*`` selects,
    which may gain columns); None: it can (its output then gains them, where its ``*`` reaches the output)."""
    try:
        graph = _probed(sql, schemas, evolving)
    except UnsupportedSQLError as exc:
        return f"its * would select a new column where the columns must line up ({exc})"
    memory = graph.runtime.store
    assert isinstance(memory, MemoryStateStore), "a graph just compiled keeps its state in memory"
    for op in graph.operators:
        for table in op.state_tables():
            names = [n for n in memory.schema(table).names if n != WEIGHT]
            probes = [i for i, n in enumerate(names) if PROBE in n]
            if not probes:
                continue
            # a join side's stored rows gain the column last: a row stored before reads NULL for it
            appended = probes == list(range(len(names) - len(probes), len(names)))
            if not (isinstance(op, TwoSided) and appended):
                return f"its operator {op.describe()} keeps the rows * selects in state ({table.name})"
    return None


def output_gains(sql: str, schemas: dict[str, pa.Schema], evolving: list[str]) -> bool:
    """Whether the view's output gains the new columns of ``evolving`` (its ``*`` reaches the output), for a view
    that :func:`star_evolution` lets follow them."""
    return any(n.startswith(PROBE) for n in _probed(sql, schemas, evolving).names)


def _probed(sql: str, schemas: dict[str, pa.Schema], evolving: list[str]) -> Graph:
    """The view's graph compiled with a probe column added to each of ``evolving``, after an epoch of empty inputs
    (which gives every state table its schema)."""
    probed = {
        name: schema.append(pa.field(f"{PROBE}{i}", pa.int64())) if name in evolving else schema
        for i, (name, schema) in enumerate(schemas.items())
    }
    graph = compile_view(sql, probed, eager=True)
    step(graph, {})
    return graph
