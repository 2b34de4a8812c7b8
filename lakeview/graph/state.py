"""Operator state behind a small interface: rows looked up by key, a Z-set delta applied per epoch.

A stateful operator names its state tables (``StateTable``: name, key columns). The in-memory
``MemoryStateStore`` serves tests and the fuzz bench; a store backed by Lakeview's tables (looked up
by key per epoch, all of a view's tables committed in one transaction) implements the same three calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from lakeview.graph.runs import KeyedRuns
from lakeview.graph.zset import Duck


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
    """State tables in memory, each kept as sorted runs by key (``lakeview.graph.runs``): an apply costs its
    delta (plus amortized merges), a lookup by key costs the keys it asks for, not the rows held."""

    def __init__(self, duck: Duck | None = None) -> None:
        self.duck = duck or Duck()
        self.tables: dict[str, KeyedRuns] = {}

    def lookup(self, table: StateTable, keys: pa.Table | None) -> pa.Table | None:
        if table.name not in self.tables:
            return None
        held = self.tables[table.name]
        if keys is None or not table.key:
            return held.all()
        return held.lookup(keys)

    def apply(self, table: StateTable, delta: pa.Table) -> None:
        if table.name not in self.tables:
            self.tables[table.name] = KeyedRuns(table.key, delta.schema, self.duck)
        self.tables[table.name].apply(delta)

    def _merge(self, name: str) -> pa.Table:
        return self.tables[name].all()

    def schema(self, table: StateTable) -> pa.Schema:
        """The arrow schema (weight column included) ``table`` holds once an epoch has applied to it."""
        return self.tables[table.name].schema

    def rows(self, table: StateTable) -> int:
        """How many distinct rows ``table`` holds (for explain and benches)."""
        if table.name not in self.tables:
            return 0
        return self._merge(table.name).num_rows


def state_table_name(view: str, table: StateTable) -> str:
    """The Lakeview-owned table holding one state table of ``view``'s graph."""
    return f"__lv_state_{view}_g_{table.name.replace('.', '_')}"


def log_table_name(view: str) -> str:
    """The one table holding every operator's state of ``view`` where its commits are one transaction
    (Iceberg; :mod:`writers.graph_log`). Its per-operator tables before (still Delta's) share the prefix."""
    return f"__lv_state_{view}_g_log"
