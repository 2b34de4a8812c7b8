"""Operator state behind a small interface: rows looked up by key, a Z-set delta applied per epoch.

A stateful operator names its state tables (``StateTable``: name, key columns). The in-memory
``MemoryStateStore`` serves tests and the fuzz bench; a store backed by Lakeview's tables (looked up
by key per epoch, all of a view's tables committed in one transaction) implements the same three calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from lakeview.graph.zset import WEIGHT, Duck, cols_sql, data_columns, q, union_sql


@dataclass(frozen=True)
class StateTable:
    """One state table of an operator: its name, its key columns (empty: one unkeyed table) and what it holds."""

    name: str
    key: tuple[str, ...]
    holds: str


class StateStore(Protocol):
    """Where operators keep their state between epochs."""

    def lookup(self, table: StateTable, keys: pa.Table | None) -> pa.Table | None:
        """The Z-set rows of ``table`` whose key equals a row of ``keys`` (NULL matches NULL).

        ``keys`` has the key columns by name; ``None`` means every row. Returns None before the first apply.
        """

    def apply(self, table: StateTable, delta: pa.Table) -> None:
        """Add the Z-set ``delta`` to ``table`` (rows whose weights net to zero disappear)."""


class MemoryStateStore:
    """State tables as consolidated arrow Z-sets in memory; lookups and merges run in DuckDB."""

    def __init__(self, duck: Duck | None = None) -> None:
        self.duck = duck or Duck()
        self.tables: dict[str, pa.Table] = {}

    def lookup(self, table: StateTable, keys: pa.Table | None) -> pa.Table | None:
        held = self.tables.get(table.name)
        if held is None or keys is None or not table.key:
            return held
        if keys.num_rows == 0 or held.num_rows == 0:
            return held.schema.empty_table()
        on = " AND ".join(f"s.{q(k)} IS NOT DISTINCT FROM k.{q(k)}" for k in table.key)
        return self.duck.query(f"SELECT s.* FROM held s SEMI JOIN keys k ON {on}", held=held, keys=keys)

    def apply(self, table: StateTable, delta: pa.Table) -> None:
        held = self.tables.get(table.name)
        if held is None:
            held = delta.schema.empty_table()
        if delta.num_rows == 0:
            self.tables[table.name] = held
            return
        columns = data_columns(delta)
        select = f"SELECT {cols_sql(columns)}, {WEIGHT}"
        self.tables[table.name] = self.duck.consolidate(
            union_sql([f"{select} FROM held", f"{select} FROM delta"]), columns, held=held, delta=delta
        )

    def rows(self, table: StateTable) -> int:
        """How many distinct rows ``table`` holds (for explain and benches)."""
        held = self.tables.get(table.name)
        return 0 if held is None else held.num_rows
