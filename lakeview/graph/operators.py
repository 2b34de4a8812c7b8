"""The stateless operators (source, filter, project, union all) and DISTINCT.

Each operator's ``step`` takes its inputs' deltas for one epoch and returns its own delta. A linear
operator is its own increment (DBSP): filter, project and union all apply their SQL to the delta alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from lakeview.graph.state import StateStore, StateTable
from lakeview.graph.zset import WEIGHT, Duck, cols_sql, q, union_sql


@dataclass
class Runtime:
    """What operators need to run an epoch: a DuckDB connection and the state store."""

    duck: Duck
    store: StateStore
    epoch: int = 0


@dataclass(eq=False)
class Operator:
    """A node of the graph: its inputs, its output columns (internal names) and its incremental rule."""

    id: str
    inputs: list[Operator]
    columns: list[str]
    cost: str = field(default="linear: per changed row, no state", init=False)

    def state_tables(self) -> list[StateTable]:
        """The state tables this operator keeps (none for a linear operator)."""
        return []

    def describe(self) -> str:
        """One line for explain."""
        return type(self).__name__

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        """This epoch's output delta from the inputs' deltas (and the operator's state)."""
        raise NotImplementedError

    def state(self, name: str, key: list[str], holds: str) -> StateTable:
        return StateTable(f"{self.id}.{name}", tuple(key), holds)

    def expire(self, rt: Runtime, closed: dict[str, str]) -> None:
        """Drop the rows of this operator's state that only closed windows reach: ``closed`` gives, by state
        table name, a DuckDB predicate selecting them (:mod:`lakeview.graph.expire` decides which state no
        future row can touch). The output is unchanged: a closed window's row stays in the view."""
        for table in self.state_tables():
            if table.name not in closed:
                continue
            held = rt.store.lookup(table, None)
            if held is None or held.num_rows == 0:
                continue
            cols = cols_sql([c for c in held.column_names if c != WEIGHT])
            gone = rt.duck.query(f"SELECT {cols}, -{WEIGHT} AS {WEIGHT} FROM s WHERE {closed[table.name]}", s=held)
            if gone.num_rows:
                rt.store.apply(table, gone.select(held.column_names).cast(held.schema))


@dataclass(eq=False)
class Source(Operator):
    """An input of the view (append stream, change feed, image feed or upstream view) as a Z-set of changes."""

    name: str = ""
    insert_only: bool = False  # an append stream: its changes never retract a row (aggregates keep less state)

    def describe(self) -> str:
        kind = ", append-only" if self.insert_only else ""
        return f"Source {self.name} ({', '.join(self.columns)}){kind}"

    def __post_init__(self) -> None:
        self.cost = "the input's changes"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        return deltas[0].rename_columns(self.columns + [WEIGHT])


@dataclass(eq=False)
class Filter(Operator):
    """Rows of the delta for which a deterministic predicate is TRUE (linear)."""

    predicate: str = ""

    def describe(self) -> str:
        return f"Filter {self.predicate}"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        if deltas[0].num_rows == 0:
            return deltas[0]
        return rt.duck.query(f"SELECT * FROM d WHERE {self.predicate}", d=deltas[0])


@dataclass(eq=False)
class Project(Operator):
    """Deterministic scalar expressions of each delta row, weight kept (linear)."""

    exprs: list[str] = field(default_factory=list)

    def describe(self) -> str:
        shown = [e if e == q(c) else f"{e} AS {c}" for c, e in zip(self.columns, self.exprs, strict=True)]
        return f"Project {', '.join(shown)}"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        delta = deltas[0]
        plain = {q(c): c for c in self.inputs[0].columns}
        if all(e in plain for e in self.exprs):  # a rename: no SQL needed
            return delta.select([plain[e] for e in self.exprs] + [WEIGHT]).rename_columns(self.columns + [WEIGHT])
        if delta.num_rows == 0 and hasattr(self, "_empty"):
            return self._empty
        select = ", ".join(f"{e} AS {q(c)}" for c, e in zip(self.columns, self.exprs, strict=True))
        out = rt.duck.query(f"SELECT {select}, {WEIGHT} FROM d", d=delta)
        self._empty = out.schema.empty_table()
        return out


@dataclass(eq=False)
class UnionAll(Operator):
    """The inputs' deltas concatenated by position (linear)."""

    def describe(self) -> str:
        return f"UnionAll of {len(self.inputs)}"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        parts = []
        for i, (op, _) in enumerate(zip(self.inputs, deltas, strict=True)):
            select = ", ".join(f"{q(src)} AS {q(dst)}" for src, dst in zip(op.columns, self.columns, strict=True))
            parts.append(f"SELECT {select}, {WEIGHT} FROM d{i}")
        return rt.duck.query(union_sql(parts), **{f"d{i}": d for i, d in enumerate(deltas)})


@dataclass(eq=False)
class Distinct(Operator):
    """Each row once while its count is positive; state: the count of every distinct input row."""

    def __post_init__(self) -> None:
        self.counts = self.state("counts", self.columns, "count of each distinct input row")
        self.cost = "per changed row (lookup of its count)"

    def state_tables(self) -> list[StateTable]:
        return [self.counts]

    def describe(self) -> str:
        return "Distinct"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        delta = deltas[0]
        if rt.epoch == 0:
            rt.store.apply(self.counts, delta.schema.empty_table())
        if delta.num_rows == 0:
            return delta
        keys = rt.duck.query(f"SELECT DISTINCT {cols_sql(self.columns)} FROM d", d=delta)
        old = rt.store.lookup(self.counts, keys)
        cols = cols_sql(self.columns)
        new = rt.duck.consolidate(
            union_sql([f"SELECT {cols}, {WEIGHT} FROM old", f"SELECT {cols}, {WEIGHT} FROM d"]),
            self.columns,
            old=old,
            d=delta,
        )
        out = rt.duck.consolidate(
            union_sql(
                [
                    f"SELECT {cols}, 1 AS {WEIGHT} FROM new WHERE {WEIGHT} > 0",
                    f"SELECT {cols}, -1 AS {WEIGHT} FROM old WHERE {WEIGHT} > 0",
                ]
            ),
            self.columns,
            old=old,
            new=new,
        )
        rt.store.apply(self.counts, delta)
        return out
