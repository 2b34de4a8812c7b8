"""MIN/MAX over an input that never retracts a row: the extreme so far is the whole state a group needs.

An input that only ever inserts (an append stream, through filters, projections, expansions, unions and
inner joins of such inputs) can lower a group's MIN or raise its MAX but never take the extreme away, so the
group's record holds the extreme and an epoch merges the delta's extreme into it. Whether an input retracts
is decided when the graph is built (``Source.insert_only``); an aggregate over anything else keeps each
group's values (:mod:`lakeview.graph.multisets`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.errors import UnsupportedSQLError
from lakeview.graph.expand import Expand
from lakeview.graph.join import Join
from lakeview.graph.operators import Filter, Operator, Project, Source, UnionAll
from lakeview.graph.zset import WEIGHT

EXT = "__lv_ext"  # a record's column per extreme aggregate i: the group's MIN/MAX so far


def never_retracts(op: Operator) -> bool:
    """Whether ``op``'s output Z-set never carries a negative weight, whatever its inputs' insertions."""
    if isinstance(op, Source):
        return op.insert_only
    if isinstance(op, (Filter, Project, Expand, UnionAll)):
        return all(never_retracts(i) for i in op.inputs)
    if isinstance(op, Join) and op.kind == "inner":  # ΔA⋈B + A⋈ΔB + ΔA⋈ΔB: products of positive weights
        return all(never_retracts(i) for i in op.inputs)
    return False


def merged_sql(func: str, old: str, new: str) -> str:
    """A group's extreme after the epoch from its extreme before (``old``) and the delta's (``new``), either
    NULL when it has no value, as the aggregate over the union of both bags gives it."""
    cmp = "<" if func == "min" else ">"
    return f"CASE WHEN {old} IS NULL OR {new} {cmp} {old} THEN {new} ELSE {old} END"


def check_inserts(op_id: str, delta: pa.Table) -> None:
    """Raise UnsupportedSQLError if ``delta`` retracts a row (an extreme cannot be taken back without the
    group's other values; the input was declared append-only when the graph was built)."""
    if delta.num_rows and pc.min(delta.column(WEIGHT)).as_py() < 0:
        raise UnsupportedSQLError(
            f"{op_id}: MIN/MAX are kept as one value per group because the view's inputs are append-only, "
            "but a change retracted a row; a source that updates or deletes rows must be declared with "
            "[changes] or [images]"
        )
