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
    """State tables in memory as appended arrow chunks: an apply costs its delta; a lookup scans the chunks for
    its keys and nets the weights of what it found; the chunks are merged once they pile up."""

    merge_after = 16

    def __init__(self, duck: Duck | None = None) -> None:
        self.duck = duck or Duck()
        self.tables: dict[str, list[pa.Table]] = {}

    def _held(self, name: str) -> pa.Table:
        chunks = self.tables[name]
        return chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks)

    def lookup(self, table: StateTable, keys: pa.Table | None) -> pa.Table | None:
        if table.name not in self.tables:
            return None
        held = self._held(table.name)
        columns = data_columns(held)
        if keys is not None and table.key:
            if keys.num_rows == 0 or held.num_rows == 0:
                return held.schema.empty_table()
            on = " AND ".join(f"s.{q(k)} IS NOT DISTINCT FROM k.{q(k)}" for k in table.key)
            return self.duck.consolidate(
                f"SELECT s.* FROM held s SEMI JOIN keys k ON {on}", columns, held=held, keys=keys
            ).cast(held.schema)
        if len(self.tables[table.name]) == 1:
            return held
        return self._merge(table.name)

    def apply(self, table: StateTable, delta: pa.Table) -> None:
        chunks = self.tables.setdefault(table.name, [])
        if not chunks:
            chunks.append(delta.schema.empty_table())
        if delta.num_rows == 0:
            return
        schema = chunks[0].schema
        try:
            chunks.append(delta.select(schema.names).cast(schema))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            chunks.append(delta)
            self._merge(table.name)
            return
        if len(chunks) > self.merge_after:
            self._merge(table.name)

    def _merge(self, name: str) -> pa.Table:
        chunks = self.tables[name]
        columns = data_columns(chunks[0])
        select = f"SELECT {cols_sql(columns)}, {WEIGHT}"
        tables = {f"c{i}": c for i, c in enumerate(chunks)}
        merged = self.duck.consolidate(
            union_sql([f"{select} FROM c{i}" for i in range(len(chunks))]), columns, **tables
        )
        self.tables[name] = [merged]
        return merged

    def rows(self, table: StateTable) -> int:
        """How many distinct rows ``table`` holds (for explain and benches)."""
        if table.name not in self.tables:
            return 0
        return self._merge(table.name).num_rows
