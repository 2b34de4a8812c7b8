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
PRIOR, PART = "__lv_prior_", "__lv_part"  # _linear's one query: a partial's new value, which result a row is


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

    def _value(self, i: int, a: AggSpec, t: str) -> str:
        n = f"COALESCE({t}.{NUM}{i}, 0)"
        if a.func == "count":
            return f"CAST({n} AS BIGINT)"
        if a.func == "sum":
            return f"CASE WHEN {n} > 0 THEN {t}.{SUM}{i} END"
        return f"CASE WHEN {n} > 0 THEN CAST({t}.{SUM}{i} AS DOUBLE) / {n} END"

    def _linear(self, rt: Runtime, delta: pa.Table, first: bool) -> pa.Table:
        partial_cols = [COUNT] + [
            c
            for i, a in enumerate(self.aggs)
            for c in ([f"{SUM}{i}"] if a.func in ("sum", "avg") else []) + [f"{NUM}{i}"]
        ]
        lead = f"{cols_sql(self.group)}, " if self.group else ""
        dagg = rt.duck.query(f"SELECT {lead}{', '.join(self._partials())} FROM d{self._group_by()}", d=delta)
        rec_cols = self.group + partial_cols
        if first:
            rt.store.apply(self.records, rt.duck.query(f"SELECT *, 1 AS {WEIGHT} FROM g LIMIT 0", g=dagg))
        old = rt.store.lookup(self.records, dagg.select(self.group) if self.group else None)  # dagg: one row a group
        on = " AND ".join(f"o.{q(g)} IS NOT DISTINCT FROM g.{q(g)}" for g in self.group) or "TRUE"
        merged = ", ".join(
            [f"COALESCE(g.{q(c)}, o.{q(c)}) AS {q(c)}" for c in self.group]
            + [f"COALESCE(o.{c}, 0) + COALESCE(g.{c}, 0) AS {c}" for c in partial_cols]
        )
        values = ", ".join(f"{self._value(i, a, 't')} AS {q(a.out)}" for i, a in enumerate(self.aggs))
        gl = f"{cols_sql(self.group, 't.')}, " if self.group else ""
        live = f"t.{COUNT} <> 0" if self.group else "TRUE"
        outs = [f"SELECT {gl}{values}, 1 AS {WEIGHT} FROM new t WHERE {live}"]
        if not (first and not self.group):
            outs.append(f"SELECT {gl}{values}, -1 AS {WEIGHT} FROM o t WHERE {live}")
        # one query for both results (DuckDB's cost per query dwarfs these few rows): the view's change
        # (part 0: values, netted) and the records' change (part 1: partials), split below
        vals, nulls = cols_sql([a.out for a in self.aggs]), ", ".join("NULL" for _ in self.aggs)
        recs = ", ".join(f"t.{q(c)} AS {q(PRIOR + c)}" for c in partial_cols)
        no_recs = ", ".join(f"NULL AS {q(PRIOR + c)}" for c in partial_cols)
        sql = (
            f"WITH new AS (SELECT {merged} FROM o FULL JOIN g ON {on}) "
            f"SELECT 0 AS {PART}, {lead}{vals}, {no_recs}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} "
            f"FROM ({union_sql(outs)}) GROUP BY ALL HAVING SUM({WEIGHT}) <> 0 "
            f"UNION ALL SELECT 1, {gl}{nulls}, {recs}, 1 FROM new t WHERE {live} "
            f"UNION ALL SELECT 1, {gl}{nulls}, {recs}, -1 FROM o t"
        )
        both = rt.duck.query(sql, o=old, g=dagg)
        part = both.column(PART)
        out = both.filter(pc.equal(part, 0)).select(self.columns + [WEIGHT])
        change = both.filter(pc.equal(part, 1)).select(self.group + [PRIOR + c for c in partial_cols] + [WEIGHT])
        change = change.rename_columns(rec_cols + [WEIGHT])
        rt.store.apply(self.records, change)
        return out
