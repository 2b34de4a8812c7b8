"""Top-k per partition: ROW_NUMBER() / RANK() / DENSE_RANK() OVER (PARTITION BY … ORDER BY …) ≤ k.

State: each partition's input rows. For the partitions an epoch touches, the top k (with the rank as a
column) is computed before and after the epoch and the difference emitted. RANK keeps every row tied at
the k-th place, exactly as SQL does; ROW_NUMBER breaks ties by every column so that the rows kept before
and after an epoch are chosen by the same rule (SQL leaves them unspecified). ``ORDER BY … LIMIT k`` over a
whole view is the same operator with no partition and an offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.graph.operators import Operator, Runtime
from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT, cols_sql, expand_sql, q, union_sql

RANKERS = ("row_number", "rank", "dense_rank")


@dataclass(eq=False)
class TopK(Operator):
    """Output columns: the input columns, then the rank column ``rank`` (internal name)."""

    partition: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    func: str = "row_number"
    limit: int = 1
    offset: int = 0

    def __post_init__(self) -> None:
        self.rows = self.state("rows", self.partition, "each partition's input rows")
        self.cost = "per changed partition × its rows" if self.partition else "whole input per changed epoch"

    def state_tables(self) -> list[StateTable]:
        return [self.rows]

    def describe(self) -> str:
        part = ", ".join(self.partition) or "whole view"
        return (
            f"TopK {self.func.upper()}() OVER (PARTITION BY {part} ORDER BY {', '.join(self.order)}) "
            f"in ({self.offset}, {self.offset + self.limit}]"
        )

    def _ranked(self, table: str, sign: int) -> str:
        inputs = self.inputs[0].columns
        order = list(self.order)
        if self.func == "row_number":
            order += [f"{q(c)} ASC NULLS LAST" for c in inputs]
        part = f"PARTITION BY {cols_sql(self.partition)} " if self.partition else ""
        rank = self.columns[-1]
        return (
            f"SELECT {cols_sql(inputs)}, {self.func.upper()}() OVER ({part}ORDER BY {', '.join(order)}) "
            f"AS {q(rank)}, {sign} AS {WEIGHT} FROM {expand_sql(table)} "
            f"QUALIFY {q(rank)} > {self.offset} AND {q(rank)} <= {self.offset + self.limit}"
        )

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        delta = deltas[0]
        if rt.epoch == 0:
            rt.store.apply(self.rows, delta.schema.empty_table())
        if delta.num_rows == 0 and hasattr(self, "_empty"):
            return self._empty
        keys = None
        if self.partition:
            keys = rt.duck.query(f"SELECT DISTINCT {cols_sql(self.partition)} FROM d", d=delta)
        old = rt.store.lookup(self.rows, keys)
        cols = cols_sql(self.inputs[0].columns)
        new = rt.duck.consolidate(
            union_sql([f"SELECT {cols}, {WEIGHT} FROM o", f"SELECT {cols}, {WEIGHT} FROM d"]),
            self.inputs[0].columns,
            o=old,
            d=delta,
        )
        out = rt.duck.consolidate(
            union_sql([self._ranked("new", 1), self._ranked("old", -1)]), self.columns, old=old, new=new
        )
        rt.store.apply(self.rows, delta)
        self._empty = out.schema.empty_table()
        return out
