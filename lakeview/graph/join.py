"""Binary joins (INNER, LEFT, RIGHT, FULL OUTER) and semi/anti joins over Z-sets.

Inner part: Δ(A⋈B) = ΔA⋈B + A⋈ΔB + ΔA⋈ΔB, with A and B each side's state before the epoch, read only
for the keys the epoch touches. An inner join's side that is a GROUP BY's output (through projections, as
eager aggregation makes) keeps no rows of its own: it is read from the aggregate's records after their
epoch (:class:`DerivedSide`), so Δ(A⋈B) = ΔA⋈B + A'⋈ΔB with A' the side after the epoch (or, the right side
derived, ΔA⋈B' + A⋈ΔB). Outer part (the NULL-extended rows): for the touched keys, the rows of a
side with no match after the epoch minus those with no match before; a key's match depends only on the
rows under that key, so this is exact, residual predicate included. Semi/anti joins use the same
touched-key difference on the left side's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.operators import Operator, Project, Runtime, Source
from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT, cols_sql, q, union_sql

if TYPE_CHECKING:
    from lakeview.graph.derived import DerivedSide
    from lakeview.graph.driver import Graph

KINDS = ("inner", "left", "right", "full")


def touched_keys(rt: Runtime, parts: list[tuple[pa.Table, list[str]]], names: list[str]) -> pa.Table:
    """The distinct keys (columns ``names``) appearing in any of the deltas, each read by its own key columns."""
    columns = [delta[key[0]] for delta, key in parts]
    if len(names) == 1 and len({c.type for c in columns}) == 1:  # one key column of one type: arrow alone
        return pa.table(
            {names[0]: pc.unique(pa.chunked_array([c for col in columns for c in col.chunks], columns[0].type))}
        )
    selects, tables = [], {}
    for i, (delta, key) in enumerate(parts):
        select = ", ".join(f"{q(k)} AS {q(n)}" for k, n in zip(key, names, strict=True))
        selects.append(f"SELECT DISTINCT {select} FROM d{i}")
        tables[f"d{i}"] = delta
    return rt.duck.query(" UNION ".join(selects), **tables)


@dataclass(eq=False)
class TwoSided(Operator):
    """A join-like operator over two inputs: each side's rows kept by its key (``left_key`` /
    ``right_key``, empty: no equality), the full ON condition as ``condition``."""

    left_key: list[str] = field(default_factory=list)
    right_key: list[str] = field(default_factory=list)
    condition: str = "TRUE"

    def declare_sides(self) -> None:
        self.left_state = self.state("left", self.left_key, f"rows of {self.inputs[0].id} by key")
        self.right_state = self.state("right", self.right_key, f"rows of {self.inputs[1].id} by key")
        self.derived: tuple[int, DerivedSide] | None = None  # a side read from an aggregate (Join.read_from)

    def stored_sides(
        self, rt: Runtime, da: pa.Table, db: pa.Table, crossed: bool = False
    ) -> tuple[pa.Table, pa.Table] | None:
        """Both sides' stored rows for the keys the epoch touches (every row without an equality
        key); None when nothing changed and the operator's empty output is known. Epoch 0 creates
        the sides' state. ``crossed``: each side only under the keys the *other* side's delta
        touches — all an inner join's ΔA⋈B + A⋈ΔB needs, so new facts never read the facts held."""
        if rt.epoch == 0:
            for state, delta in ((self.left_state, da), (self.right_state, db)):
                if state in self.state_tables():
                    rt.store.apply(state, delta.schema.empty_table())
        if da.num_rows == 0 and db.num_rows == 0 and hasattr(self, "_empty"):
            return None
        if not self.left_key:
            return rt.store.lookup(self.left_state, None), rt.store.lookup(self.right_state, None)
        if crossed:
            left_keys = touched_keys(rt, [(db, self.right_key)], self.left_key)
            right_keys = touched_keys(rt, [(da, self.left_key)], self.right_key)
            return self._side(rt, 0, left_keys, da), self._side(rt, 1, right_keys, db)
        keys = touched_keys(rt, [(da, self.left_key), (db, self.right_key)], self.left_key)
        right_keys = keys.rename_columns(self.right_key)
        return rt.store.lookup(self.left_state, keys), rt.store.lookup(self.right_state, right_keys)

    def _side(self, rt: Runtime, side: int, keys: pa.Table, delta: pa.Table) -> pa.Table:
        if keys.num_rows == 0:  # nothing to read: the side's shape is its delta's
            return delta.schema.empty_table()
        if self.derived is not None and self.derived[0] == side:
            return self.derived[1].rows(rt, keys).select(delta.column_names).cast(delta.schema)
        return rt.store.lookup((self.left_state, self.right_state)[side], keys)


@dataclass(eq=False)
class Join(TwoSided):
    """Equi-join (keys may be empty: a cross/theta join) with the full ON condition as ``condition``."""

    kind: str = "inner"

    def __post_init__(self) -> None:
        self.declare_sides()
        self.cost = (
            "per changed row × matching rows of the other side"
            if self.left_key
            else ("whole other side per changed row (no equality in ON)")
        )
        if self.kind != "inner":
            self.cost += "; NULL-extension: both sides' rows under each changed key"

    def read_from(self, side: int, derived: DerivedSide) -> None:
        """Read side ``side`` (0: left, 1: right) of this inner join from an aggregate's records instead of
        keeping its rows (one side at most: the other is read as before the epoch, see the module's rule)."""
        assert self.kind == "inner" and self.derived is None
        self.derived = (side, derived)
        self.cost += f"; {('left', 'right')[side]} side read from {derived.aggregate.id}'s records"

    @property
    def left_columns(self) -> list[str]:
        return self.inputs[0].columns

    @property
    def right_columns(self) -> list[str]:
        return self.inputs[1].columns

    def state_tables(self) -> list[StateTable]:
        if self.derived is not None:
            return [(self.right_state, self.left_state)[self.derived[0]]]
        return [self.left_state, self.right_state]

    def describe(self) -> str:
        keys = ", ".join(f"{a}={b}" for a, b in zip(self.left_key, self.right_key, strict=True)) or "none"
        return f"Join {self.kind.upper()} key ({keys}) ON {self.condition}"

    def _inner(self, x: str, y: str) -> str:
        return (
            f"SELECT {cols_sql(self.left_columns, 'l.')}, {cols_sql(self.right_columns, 'r.')}, "
            f"l.{WEIGHT} * r.{WEIGHT} AS {WEIGHT} FROM {x} l JOIN {y} r ON {self.condition}"
        )

    def _left_only(self, x: str, y: str, sign: str) -> str:
        return (
            f"SELECT {cols_sql(self.left_columns, 'l.')}, {cols_sql(self.right_columns, 'r.')}, "
            f"{sign}l.{WEIGHT} AS {WEIGHT} FROM {x} l LEFT JOIN {y} r ON {self.condition} "
            f"WHERE r.{WEIGHT} IS NULL"
        )

    def _right_only(self, x: str, y: str, sign: str) -> str:
        return (
            f"SELECT {cols_sql(self.left_columns, 'l.')}, {cols_sql(self.right_columns, 'r.')}, "
            f"{sign}r.{WEIGHT} AS {WEIGHT} FROM {y} r LEFT JOIN {x} l ON {self.condition} "
            f"WHERE l.{WEIGHT} IS NULL"
        )

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        da, db = deltas
        sides = self.stored_sides(rt, da, db, crossed=self.kind == "inner")
        if sides is None:
            return self._empty
        a, b = sides
        tables = {"da": da, "db": db, "a": a, "b": b}
        parts = [self._inner("da", "b"), self._inner("a", "db"), self._inner("da", "db")]
        pairs = [(da, b), (a, db), (da, db)]
        if self.derived is not None:  # one side as after the epoch: it holds ΔA⋈ΔB already
            parts, pairs = parts[:2], pairs[:2]
        if self.kind == "inner" and hasattr(self, "_empty"):  # a side without changes adds no rows
            parts = [p for p, (x, y) in zip(parts, pairs, strict=True) if x.num_rows and y.num_rows]
        if self.kind in ("left", "full", "right"):
            tables["an"] = self._merged(rt, a, da, self.left_columns)
            tables["bn"] = self._merged(rt, b, db, self.right_columns)
        if self.kind in ("left", "full"):
            parts += [self._left_only("an", "bn", ""), self._left_only("a", "b", "-")]
        if self.kind in ("right", "full"):
            parts += [self._right_only("an", "bn", ""), self._right_only("a", "b", "-")]
        if not parts:
            out = self._empty
        elif self.kind == "inner":  # a Z-set need not be netted: what reads it sums weights (saves a GROUP BY)
            sql = union_sql(parts)
            out = rt.duck.query(sql, **{name: t for name, t in tables.items() if f" {name} " in sql})
        else:
            out = rt.duck.consolidate(union_sql(parts), self.columns, **tables)
        kept = self.state_tables()
        for state, delta in ((self.left_state, da), (self.right_state, db)):
            if state in kept:
                rt.store.apply(state, delta)
        if not hasattr(self, "_empty"):
            self._empty = out.schema.empty_table()
        return out

    @staticmethod
    def _merged(rt: Runtime, old: pa.Table, delta: pa.Table, columns: list[str]) -> pa.Table:
        cols = cols_sql(columns)
        return rt.duck.consolidate(
            union_sql([f"SELECT {cols}, {WEIGHT} FROM o", f"SELECT {cols}, {WEIGHT} FROM d"]), columns, o=old, d=delta
        )


@dataclass(eq=False)
class SemiJoin(TwoSided):
    """Left rows with (semi) or without (anti) a right row satisfying ``condition``: IN, EXISTS and their NOTs."""

    anti: bool = False

    def __post_init__(self) -> None:
        self.declare_sides()
        self.cost = (
            "per changed key (both sides' rows under it)"
            if self.left_key
            else ("whole state per epoch (no equality correlation, or NOT IN's NULL rule)")
        )

    def state_tables(self) -> list[StateTable]:
        return [self.left_state, self.right_state]

    def describe(self) -> str:
        keys = ", ".join(f"{a}={b}" for a, b in zip(self.left_key, self.right_key, strict=True)) or "none"
        return f"{'AntiJoin' if self.anti else 'SemiJoin'} key ({keys}) ON {self.condition}"

    def _kept(self, x: str, y: str, sign: str) -> str:
        cols = cols_sql(self.columns, "l.")
        neg = "NOT " if self.anti else ""
        return (
            f"SELECT {cols}, {sign}l.{WEIGHT} AS {WEIGHT} FROM {x} l "
            f"WHERE {neg}EXISTS (SELECT 1 FROM {y} r WHERE {self.condition})"
        )

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        da, db = deltas
        sides = self.stored_sides(rt, da, db)
        if sides is None:
            return self._empty
        a, b = sides
        an = Join._merged(rt, a, da, self.inputs[0].columns)
        bn = Join._merged(rt, b, db, self.inputs[1].columns)
        out = rt.duck.consolidate(
            union_sql([self._kept("an", "bn", ""), self._kept("a", "b", "-")]), self.columns, a=a, b=b, an=an, bn=bn
        )
        rt.store.apply(self.left_state, da)
        rt.store.apply(self.right_state, db)
        if not hasattr(self, "_empty"):
            self._empty = out.schema.empty_table()
        return out


def shared_sides(graph: Graph, keys: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, dict[str, str]]]:
    """The join sides (a join's, semi- or anti-join's) that hold exactly a change feed's mirror: the side's
    input is the feed's source (its columns renamed at most, no filter) and the side is keyed by the feed's
    key (``keys``, by source). Such a side's state is the mirror's Z-set, so it is not kept twice: its
    lookups read the mirror as committed before the epoch (a table-backed store's ``borrowed``,
    :class:`writers.graph_state.TableStateStore`). Returns each such state's name with its source and its
    columns' names in the mirror."""
    shared: dict[str, tuple[str, dict[str, str]]] = {}
    for op in graph.operators:
        if not isinstance(op, TwoSided):
            continue
        for side, key, state in ((0, op.left_key, op.left_state), (1, op.right_key, op.right_state)):
            found = _source_columns(graph, op.inputs[side])
            if found is None or found[0] not in keys or not key:
                continue
            source, columns = found
            if {columns[k] for k in key} == set(keys[source]) and len(key) == len(keys[source]):
                shared[state.name] = (source, columns)
    return shared


def _source_columns(graph: Graph, op: Operator) -> tuple[str, dict[str, str]] | None:
    """``op``'s source and each of its columns' name in the source, when ``op`` is a source or a projection that
    only renames every column of one; else None."""
    renames = None
    if isinstance(op, Project):
        plain = {q(c): c for c in op.inputs[0].columns}
        if not all(e in plain for e in op.exprs) or len(set(op.exprs)) != len(op.inputs[0].columns):
            return None
        renames = {c: plain[e] for c, e in zip(op.columns, op.exprs, strict=True)}
        op = op.inputs[0]
    if not isinstance(op, Source) or op.name not in graph.schemas:
        return None
    named = dict(zip(op.columns, graph.schemas[op.name].names, strict=True))
    if renames is None:
        return op.name, named
    return op.name, {c: named[source] for c, source in renames.items()}
