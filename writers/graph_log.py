"""Every operator's state of one graph view in ONE append-log table (Iceberg).

A view's operators keep about ten state tables (each join side, each aggregate's records); committed as ten
tables, every epoch stages ten snapshots (a data file, a manifest and a manifest list each) and the catalog
writes ten metadata files, where the rows themselves are a few thousand. The log packs them: one row per
state row, the state it belongs to in ``__lv_op`` (the state table's name, e.g. ``join9.left``), its columns in
columns shared by type with the other states (:class:`StateLog`) and its weight in ``__lv_w``. Each epoch
appends every state's delta as one data file; the rows of one state sum to its Z-set (the memory
copies net them, :class:`writers.graph_state.CommittedRows`), and the whole log is folded back to one row per
distinct row once it outgrows the state (:class:`writers.graph_state.TableStateStore`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.state import log_table_name as log_table_name  # where the pipeline asks for it
from lakeview.graph.zset import WEIGHT

OP = "__lv_op"  # which state table a row belongs to
LAYOUT = "lakeview.state-layout"  # the log table's property: StateLog.layout


def _type_key(data_type: pa.DataType) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(data_type).lower()).strip("_")


@dataclass
class StateLog:
    """The packing of a view's state tables (``schemas``: each state's arrow schema, weight included) into
    one log table's rows, and back. The log's columns are shared between states by type (a state's k-th
    column of type T is the log's ``__lv_<T>_<k>``), so the log is as wide as its widest state, not as all of
    them together (each column costs a data file's statistics every epoch); ``layout`` records which state
    column is where (a table property, compared on start: another graph reads it as another layout)."""

    schemas: dict[str, pa.Schema]
    schema: pa.Schema = field(init=False)
    slots: dict[str, dict[str, str]] = field(init=False)  # state -> its column -> the log's column
    layout: str = field(init=False)

    def __post_init__(self) -> None:
        self.slots, types = {}, {}
        for name, schema in self.schemas.items():
            seen: Counter[str] = Counter()
            mine = {}
            for f in schema:
                if f.name == WEIGHT:
                    continue
                key = _type_key(f.type)
                mine[f.name] = f"__lv_{key}_{seen[key]}"
                types.setdefault(mine[f.name], f.type)
                seen[key] += 1
            self.slots[name] = mine
        columns = [pa.field(c, t) for c, t in types.items()]
        self.schema = pa.schema([pa.field(OP, pa.string()), *columns, pa.field(WEIGHT, pa.int64())])
        self.layout = json.dumps({name: list(mine.items()) for name, mine in self.slots.items()}, sort_keys=True)

    def pack(self, parts: dict[str, pa.Table]) -> pa.Table:
        """The log rows of each state's Z-set in ``parts`` (by state name), in one table."""
        tables = []
        for name, rows in parts.items():
            if not rows.num_rows:
                continue
            n = rows.num_rows
            mine = {slot: column for column, slot in self.slots[name].items()}
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
            columns = [mine.column(self.slots[name][f.name]) for f in schema if f.name != WEIGHT]
            parts[name] = pa.Table.from_arrays([*columns, mine.column(WEIGHT)], names=schema.names).cast(schema)
        return parts
