"""GROUP BY aggregates over Z-sets.

Linear aggregates (SUM, COUNT, COUNT(*), AVG, each with an optional FILTER) integrate: one state record
per group holds the running count, sums and non-NULL counts, and a delta updates it without reading the
group's rows. Any other aggregate (MIN, MAX, COUNT(DISTINCT …)) keeps the group's rows as a multiset and
recomputes the touched groups before and after the epoch, emitting new − old. A global aggregate (no
GROUP BY) has its one row from the first epoch on, as SQL gives over no rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.operators import Operator, Runtime
from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT, cols_sql, expand_sql, q, union_sql

LINEAR = ("sum", "count", "avg")
SUPPORTED = ("sum", "count", "avg", "min", "max")
# a linear aggregate's partials per group (its state's columns), under Lakeview's reserved prefix so that a
# user column or output may take any other name (``__cnt`` too)
COUNT, SUM, NUM = "__lv_cnt", "__lv_sum", "__lv_num"  # rows; per aggregate i: the sum, the non-NULL rows
PART = "__lv_part"  # _linear's one query: which result a row is
# _linear's one query: a group's partials before the epoch, its aggregates' values after and before
OLD, NEW_VALUE, OLD_VALUE = "__lv_old_", "__lv_new_v", "__lv_old_v"


@dataclass(frozen=True)
class AggSpec:
    """One aggregate: function, argument column (None for COUNT(*)), DISTINCT, FILTER column, output column."""

    func: str
    arg: str | None
    distinct: bool
    filter: str | None
    out: str

    def sql(self) -> str:
        """The aggregate over the group's rows (a bag), as DuckDB evaluates it."""
        arg = "*" if self.arg is None else ("DISTINCT " if self.distinct else "") + q(self.arg)
        where = f" FILTER (WHERE {q(self.filter)})" if self.filter else ""
        return f"{self.func.upper()}({arg}){where}"


@dataclass(eq=False)
class Aggregate(Operator):
    """Output columns: the group columns, then one column per aggregate."""

    group: list[str] = field(default_factory=list)
    aggs: list[AggSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.linear = all(a.func in LINEAR and not a.distinct for a in self.aggs)
        if self.linear:
            self.records = self.state("groups", self.group, "one record per group: count, sums, non-NULL counts")
            self.cost = "per changed group (one record)"
        else:
            self.records = self.state("rows", self.group, "each group's input rows (multiset)")
            self.cost = "per changed group × its rows (MIN/MAX/DISTINCT recompute the group)"

    def state_tables(self) -> list[StateTable]:
        return [self.records]

    def describe(self) -> str:
        aggs = ", ".join(f"{a.sql()} AS {a.out}" for a in self.aggs)
        return f"Aggregate GROUP BY ({', '.join(self.group)}) {aggs} [{'linear' if self.linear else 'multiset'}]"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        delta = deltas[0]
        first = rt.epoch == 0
        if delta.num_rows == 0 and not first:
            return self._empty
        out = self._linear(rt, delta, first) if self.linear else self._multiset(rt, delta, first)
        self._empty = out.schema.empty_table()
        return out

    def step_partials(self, rt: Runtime, partials: pa.Table) -> pa.Table:
        """A linear aggregate's step from its input delta already summed per group (the columns of
        :meth:`_partials`, e.g. by Spark over a large batch) instead of the delta itself."""
        out = self._linear(rt, None, rt.epoch == 0, partials)
        self._empty = out.schema.empty_table()
        return out

    def _group_by(self) -> str:
        return f" GROUP BY {cols_sql(self.group)}" if self.group else ""

    def _keys(self, rt: Runtime, delta: pa.Table) -> pa.Table | None:
        if not self.group:
            return None
        return rt.duck.query(f"SELECT DISTINCT {cols_sql(self.group)} FROM d", d=delta)

    def _multiset(self, rt: Runtime, delta: pa.Table, first: bool) -> pa.Table:
        cols = [c for c in self.inputs[0].columns]
        if first:
            rt.store.apply(self.records, delta.schema.empty_table())
        old = rt.store.lookup(self.records, self._keys(rt, delta))
        sel = cols_sql(cols)
        new = rt.duck.consolidate(
            union_sql([f"SELECT {sel}, {WEIGHT} FROM o", f"SELECT {sel}, {WEIGHT} FROM d"]), cols, o=old, d=delta
        )
        aggs = ", ".join(f"{a.sql()} AS {q(a.out)}" for a in self.aggs)
        lead = f"{cols_sql(self.group)}, " if self.group else ""

        def values(table: str, sign: int) -> str:
            return f"SELECT {lead}{aggs}, {sign} AS {WEIGHT} FROM {expand_sql(table)}{self._group_by()}"

        parts = [values("new", 1)]
        if not (first and not self.group):
            parts.append(values("old", -1))
        out = rt.duck.consolidate(union_sql(parts), self.columns, old=old, new=new)
        rt.store.apply(self.records, delta)
        return out

    def _partials(self) -> list[str]:
        exprs = [f"SUM({WEIGHT}) AS {COUNT}"]
        for i, a in enumerate(self.aggs):
            cond = (
                " AND ".join(
                    c for c in [f"{q(a.arg)} IS NOT NULL" if a.arg else "", q(a.filter) if a.filter else ""] if c
                )
                or "TRUE"
            )
            if a.func in ("sum", "avg"):
                exprs.append(f"SUM({q(a.arg)} * {WEIGHT}) FILTER (WHERE {cond}) AS {SUM}{i}")
            exprs.append(f"SUM({WEIGHT}) FILTER (WHERE {cond}) AS {NUM}{i}")
        return exprs

    def _value(self, i: int, a: AggSpec, t: str = "", prefix: str = "") -> str:
        """Aggregate ``i``'s value from its partials: columns ``{t}.{prefix}{partial}`` (no alias ``t``: unqualified)."""
        t = f"{t}.{prefix}" if t else prefix
        n = f"COALESCE({t}{NUM}{i}, 0)"
        if a.func == "count":
            return f"CAST({n} AS BIGINT)"
        if a.func == "sum":
            return f"CASE WHEN {n} > 0 THEN {t}{SUM}{i} END"
        return f"CASE WHEN {n} > 0 THEN CAST({t}{SUM}{i} AS DOUBLE) / {n} END"

    def _linear(self, rt: Runtime, delta: pa.Table | None, first: bool, dagg: pa.Table | None = None) -> pa.Table:
        partial_cols = [COUNT] + [
            c
            for i, a in enumerate(self.aggs)
            for c in ([f"{SUM}{i}"] if a.func in ("sum", "avg") else []) + [f"{NUM}{i}"]
        ]
        lead = f"{cols_sql(self.group)}, " if self.group else ""
        if dagg is None:
            dagg = rt.duck.query(f"SELECT {lead}{', '.join(self._partials())} FROM d{self._group_by()}", d=delta)
        rec_cols = self.group + partial_cols
        if first:
            rt.store.apply(self.records, rt.duck.query(f"SELECT *, 1 AS {WEIGHT} FROM g LIMIT 0", g=dagg))
        old = rt.store.lookup(self.records, dagg.select(self.group) if self.group else None)  # dagg: one row a group
        # one query for both results (DuckDB's cost per query dwarfs these few rows): the view's change (part 0:
        # a group's old values -1 and new values +1 where they differ) and the records' change (part 1: the old
        # partials -1, the new +1), split below. The FULL JOIN pairs each group's old record (at most one: the
        # records hold one per group) with its delta, so old and new values are compared in place, not netted by
        # a GROUP BY over every column.
        on = " AND ".join(f"o.{q(g)} IS NOT DISTINCT FROM g.{q(g)}" for g in self.group) or "TRUE"
        paired = ", ".join(
            [f"COALESCE(g.{q(c)}, o.{q(c)}) AS {q(c)}" for c in self.group]
            + [f"COALESCE(o.{c}, 0) + COALESCE(g.{c}, 0) AS {c}" for c in partial_cols]
            + [f"o.{c} AS {OLD}{c}" for c in partial_cols]
        )
        valued = ", ".join(
            f"{self._value(i, a)} AS {NEW_VALUE}{i}, {self._value(i, a, prefix=OLD)} AS {OLD_VALUE}{i}"
            for i, a in enumerate(self.aggs)
        )
        differ = " OR ".join(f"{NEW_VALUE}{i} IS DISTINCT FROM {OLD_VALUE}{i}" for i in range(len(self.aggs)))
        differ = f"({differ})" if self.aggs else "FALSE"
        was = "FALSE" if first and not self.group else f"{OLD}{COUNT} IS NOT NULL"  # the group had a record
        was_live, is_live = (f"{was} AND {OLD}{COUNT} <> 0", f"{COUNT} <> 0") if self.group else (was, "TRUE")
        gl = f"{cols_sql(self.group)}, " if self.group else ""
        nulls = ", ".join("NULL" for _ in self.aggs)
        news = ", ".join(f"{NEW_VALUE}{i}" for i in range(len(self.aggs)))
        olds = ", ".join(f"{OLD_VALUE}{i}" for i in range(len(self.aggs)))
        no_recs = ", ".join(f"NULL AS {c}" for c in partial_cols)
        sql = (
            f"WITH p AS (SELECT {paired} FROM o FULL JOIN g ON {on}), v AS (SELECT *, {valued} FROM p) "
            f"SELECT 0 AS {PART}, {gl}{news}, {no_recs}, CAST(1 AS BIGINT) AS {WEIGHT} FROM v "
            f"WHERE {is_live} AND (NOT ({was_live}) OR {differ}) "
            f"UNION ALL SELECT 0, {gl}{olds}, {no_recs}, -1 FROM v WHERE {was_live} AND (NOT ({is_live}) OR {differ}) "
            f"UNION ALL SELECT 1, {gl}{nulls}, {cols_sql(partial_cols)}, 1 FROM v WHERE {is_live} "
            f"UNION ALL SELECT 1, {gl}{nulls}, {', '.join(f'{OLD}{c}' for c in partial_cols)}, -1 FROM v WHERE {was}"
        )
        both = rt.duck.query(sql, o=old, g=dagg)
        part = both.column(PART)
        values = [f"{NEW_VALUE}{i}" for i in range(len(self.aggs))]
        out = both.filter(pc.equal(part, 0)).select(self.group + values + [WEIGHT])
        out = out.rename_columns(self.columns + [WEIGHT])
        change = both.filter(pc.equal(part, 1)).select(self.group + partial_cols + [WEIGHT])
        change = change.rename_columns(rec_cols + [WEIGHT])
        rt.store.apply(self.records, change)
        return out
