"""Whether a graph view's ``*`` can follow a source's new columns (``new_columns = "evolve"``).

The graph is compiled over its inputs' schemas, so a ``*`` is expanded to the columns an input has when the
graph is compiled: re-compiled over an evolved source, the graph's output gains the source's new columns. That
is all it takes when no operator keeps the starred rows in state (filters, projections, UNION ALL): the view's
table gains the column (and a change feed's mirror, which the pipeline keeps, not the graph), and rows committed
before read NULL for it. An operator that keeps the starred rows in a state table (a join side, top-k, DISTINCT,
UNION, an aggregate's groups) would need every state row it holds rewritten with the new column: refused.

Found by compiling the graph once with a probe column added to each evolving input and looking where it goes.
"""

from __future__ import annotations

import pyarrow as pa

from lakeview.errors import UnsupportedSQLError
from lakeview.graph.compile import compile_view
from lakeview.graph.driver import step
from lakeview.graph.state import MemoryStateStore

PROBE = "__lv_probe_"  # a probe column's prefix: one per evolving input, never a real column (reserved prefix)


def star_evolution(sql: str, schemas: dict[str, pa.Schema], evolving: list[str]) -> tuple[bool, str | None]:
    """Whether the view's output gains an evolving input's new columns (``evolving``: inputs of ``schemas``
    that may gain columns), and why that cannot be maintained (None: it can; the output then follows them)."""
    probed = {
        name: schema.append(pa.field(f"{PROBE}{i}", pa.int64())) if name in evolving else schema
        for i, (name, schema) in enumerate(schemas.items())
    }
    try:
        graph = compile_view(sql, probed, eager=True)
    except UnsupportedSQLError as exc:
        return True, f"its * would select a new column where the columns must line up ({exc})"
    names = step(graph, {}).column_names
    gains = any(n.startswith(PROBE) for n in names)
    memory = graph.runtime.store
    assert isinstance(memory, MemoryStateStore), "a graph just compiled keeps its state in memory"
    for op in graph.operators:
        for table in op.state_tables():
            if any(PROBE in n for n in memory.schema(table).names):
                return gains, f"its operator {op.describe()} keeps the rows * selects in state ({table.name})"
    return gains, None
