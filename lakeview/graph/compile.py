"""SQL → operator graph: the passes of ``lakeview.graph.passes`` in order, then ``lakeview.graph.build``."""

from __future__ import annotations

import pyarrow as pa

from lakeview.graph.build import Builder
from lakeview.graph.driver import Graph
from lakeview.graph.eager import eager_aggregation
from lakeview.graph.operators import Project
from lakeview.graph.passes import parse, qualify, refuse, subqueries_as_ctes
from lakeview.graph.zset import WEIGHT, q

PASSES = (parse, refuse, qualify, subqueries_as_ctes, eager_aggregation)


def compile_view(
    sql: str,
    schemas: dict[str, pa.Schema],
    sizes: dict[str, int] | None = None,
    eager: bool | None = None,
    insert_only: frozenset[str] | set[str] = frozenset(),
) -> Graph:
    """Compile a view's SQL over inputs with these arrow schemas into an operator graph.

    ``sizes`` (optional rows per input) orders inner joins so that small inputs join first. ``eager``: push
    aggregates below inner joins (True: wherever valid; None: onto the largest input by ``sizes``; False: never).
    ``insert_only``: inputs whose changes never retract a row (append streams): an aggregate reading only them
    keeps MIN/MAX as one value per group instead of each group's values.
    Raises UnsupportedSQLError naming the construct and the reason for SQL that cannot be maintained.
    """
    for name, schema in schemas.items():
        if WEIGHT in schema.names:
            raise ValueError(f"input {name} has a column named {WEIGHT}, the weight column of a Z-set")
    tree = refuse(parse(sql))
    tree = eager_aggregation(subqueries_as_ctes(qualify(tree, schemas)), dict(sizes or {}), eager)
    builder = Builder(schemas, dict(sizes or {}), frozenset(insert_only))
    op, names = builder.query(tree)
    # The output is always its own operator so that a shared subgraph is never the view's output table.
    out = builder.add(Project, [op], [builder.fresh("out_" + n) for n in names], exprs=[q(c) for c in op.columns])
    sources = {name: srcs for name, srcs in builder.sources.items()}
    used = {name: schemas[name] for name in sources}
    return Graph(sql, builder.ops, sources, used, out, names)
