"""Expand: a cross join with constant rows (SQL ``VALUES``), such as a hopping window's offsets.

Each delta row comes out once per constant row, with the constant row's values appended and its weight kept,
so the operator is linear (its own increment, no state): ``CROSS JOIN (VALUES (0), (1)) AS o(k)`` doubles
every change. It is what Spark's ``Expand`` does for ``window(ts, size, slide)``: a row in each of the
``ceil(size / slide)`` windows it may fall in, filtered after by the window that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.graph.operators import Operator, Runtime
from lakeview.graph.zset import WEIGHT, cols_sql


@dataclass(eq=False)
class Expand(Operator):
    """Each input row once per constant row (``rows``: DuckDB SQL literals), the constants' columns last."""

    rows: list[list[str]] = field(default_factory=list)

    @property
    def added(self) -> list[str]:
        """The columns the constant rows add."""
        return self.columns[len(self.inputs[0].columns) :]

    def values_sql(self) -> str:
        return "VALUES " + ", ".join("(" + ", ".join(row) + ")" for row in self.rows)

    def describe(self) -> str:
        return f"Expand each row x{len(self.rows)} ({', '.join(self.added)}: {self.values_sql()})"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        source = cols_sql(self.inputs[0].columns, "d.")
        return rt.duck.query(
            f"SELECT {source}, {cols_sql(self.added, 'c.')}, d.{WEIGHT} FROM d "
            f"CROSS JOIN ({self.values_sql()}) AS c({cols_sql(self.added)})",
            d=deltas[0],
        )
