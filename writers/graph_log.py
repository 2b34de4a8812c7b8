"""Every operator's state of one graph view in ONE append-log table (Iceberg).

A view's operators keep about ten state tables (each join side, each aggregate's records); committed as ten
tables, every epoch stages ten snapshots (a data file, a manifest and a manifest list each) and the catalog
writes ten metadata files, where the rows themselves are a few thousand. The log packs them: one row per
state row, the state it belongs to in ``__lv_op`` (the state table's name, e.g. ``join9.left``), its columns
under ``<state>__<column>`` (NULL in every other state's columns) and its weight in ``__lv_w``. Each epoch
appends every state's netted delta as one data file; the rows of one state sum to its Z-set (the memory
copies net them, :class:`writers.graph_state.CommittedRows`), and the whole log is folded back to one row per
distinct row once it outgrows the state (:class:`writers.graph_state.TableStateStore`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.state import log_table_name as log_table_name  # where the pipeline asks for it
from lakeview.graph.zset import WEIGHT

OP = "__lv_op"  # which state table a row belongs to


def log_column(state: str, column: str) -> str:
    """The log's column holding ``column`` of the state table ``state``."""
    return f"{state.replace('.', '_')}__{column}"


@dataclass
class StateLog:
    """The packing of a view's state tables (``schemas``: each state's arrow schema, weight included) into
    one log table's rows, and back."""

    schemas: dict[str, pa.Schema]
    schema: pa.Schema = field(init=False)

    def __post_init__(self) -> None:
        fields = [pa.field(OP, pa.string())]
        for name, schema in self.schemas.items():
            fields += [f.with_name(log_column(name, f.name)) for f in schema if f.name != WEIGHT]
        self.schema = pa.schema([*fields, pa.field(WEIGHT, pa.int64())])

    def pack(self, parts: dict[str, pa.Table]) -> pa.Table:
        """The log rows of each state's Z-set in ``parts`` (by state name), in one table."""
        tables = []
        for name, rows in parts.items():
            if not rows.num_rows:
                continue
            n = rows.num_rows
            mine = {log_column(name, c): c for c in self.schemas[name].names if c != WEIGHT}
            columns = [pa.repeat(pa.scalar(name, pa.string()), n)]
            for f in self.schema:
                if f.name in mine:
                    columns.append(rows.column(mine[f.name]).cast(f.type))
                elif f.name not in (OP, WEIGHT):
                    columns.append(pa.nulls(n, f.type))
            columns.append(rows.column(WEIGHT).cast(pa.int64()))
            tables.append(pa.Table.from_arrays(columns, schema=self.schema))
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def unpack(self, rows: pa.Table) -> dict[str, pa.Table]:
        """Each state's rows (its own columns and weight) among the log's ``rows``."""
        parts = {}
        which = rows.column(OP)
        for name, schema in self.schemas.items():
            mine = rows.filter(pc.equal(which, name))
            columns = [mine.column(log_column(name, f.name)) for f in schema if f.name != WEIGHT]
            parts[name] = pa.Table.from_arrays([*columns, mine.column(WEIGHT)], names=schema.names).cast(schema)
        return parts
