"""GROUP BY aggregates over Z-sets.

Every aggregate keeps one state record per group (``groups``): the group's row count and, per aggregate,
what it integrates. Linear aggregates (SUM, COUNT, COUNT(*), AVG, each with an optional FILTER) keep their
running sums and non-NULL counts; MIN/MAX over an input that never retracts (an append stream, see
:mod:`lakeview.graph.extremes`) keep the extreme so far. A delta updates a record without reading the group's
rows. MIN/MAX over an input that retracts, and any DISTINCT aggregate, read per-argument value multisets
(:mod:`lakeview.graph.multisets`): the touched groups' distinct values with their counts, never their whole
input rows. A global aggregate (no GROUP BY) has its one row from the first epoch on, as SQL gives over no rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.graph.extremes import EXT, check_inserts, merged_sql, never_retracts
from lakeview.graph.multisets import NEW_OF, OLD_OF, ValueSet, finished_sql
from lakeview.graph.operators import Operator, Project, Runtime
from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT, cols_sql, q

LINEAR = ("sum", "count", "avg")
EXTREMES = ("min", "max")
SUPPORTED = ("sum", "count", "avg", "min", "max")
# a record's partials per group (its state's columns), under Lakeview's reserved prefix so that a user column or
# output may take any other name (``__cnt`` too)
COUNT, SUM, NUM = "__lv_cnt", "__lv_sum", "__lv_num"  # rows; per aggregate i: the sum, the non-NULL rows
PART = "__lv_part"  # the step's one query: which result a row is
# the step's one query: a group's partials before the epoch, its aggregates' values after and before
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
        appends = bool(self.inputs) and never_retracts(self.inputs[0])
        # per aggregate: "linear" (sums in the record), "extreme" (MIN/MAX so far in the record) or "multiset"
        self.kinds = [
            "linear"
            if a.func in LINEAR and not a.distinct
            else "extreme"
            if a.func in EXTREMES and appends
            else "multiset"
            for a in self.aggs
        ]
        self.linear = all(kind == "linear" for kind in self.kinds)  # its record is the sum of its input's partials
        self.value_sets = self._value_sets()
        held = "one record per group: row count, sums and non-NULL counts"
        if "extreme" in self.kinds:
            held += ", MIN/MAX so far (the input never retracts)"
        self.records = self.state("groups", self.group, held)
        self.cost = "per changed group (one record)"
        if self.value_sets:
            self.cost = "per changed group: one record and its distinct values of each MIN/MAX/DISTINCT argument"

    def _value_sets(self) -> list[ValueSet]:
        """One multiset table per distinct (argument, FILTER) expression of the multiset aggregates."""
        exprs = dict(zip(self.inputs[0].columns, self.inputs[0].exprs, strict=True)) if self._projected() else {}
        found: dict[tuple[str, str | None], list[tuple[int, AggSpec]]] = {}
        for i, (a, kind) in enumerate(zip(self.aggs, self.kinds, strict=True)):
            if kind == "multiset":
                assert a.arg is not None, "COUNT(*) is linear"
                what = (exprs.get(a.arg, a.arg), exprs.get(a.filter, a.filter) if a.filter else None)
                found.setdefault(what, []).append((i, a))
        sets = []
        for j, ((arg_sql, filter_sql), served) in enumerate(found.items()):
            first = served[0][1]
            where = f" FILTER (WHERE {filter_sql})" if filter_sql else ""
            outs = ", ".join(a.sql() for _, a in served)
            holds = f"each group's distinct values of {arg_sql}{where} with their counts (for {outs})"
            table = self.state(f"values{j}", self.group, holds)
            sets.append(ValueSet(table, first.arg, first.filter, tuple((i, a.func) for i, a in served)))  # type: ignore[arg-type]
        return sets

    def _projected(self) -> bool:
        return bool(self.inputs) and isinstance(self.inputs[0], Project)

    def state_tables(self) -> list[StateTable]:
        return [self.records] + [s.table for s in self.value_sets]

    def describe(self) -> str:
        aggs = ", ".join(f"{a.sql()} AS {a.out}" for a in self.aggs)
        tags = "".join(f" [{k}]" for k in ("linear", "extremes", "multiset") if k.rstrip("s") in self.kinds)
        return f"Aggregate GROUP BY ({', '.join(self.group)}) {aggs}{tags or ' [linear]'}"

    def step(self, rt: Runtime, deltas: list[pa.Table]) -> pa.Table:
        delta = deltas[0]
        first = rt.epoch == 0
        if delta.num_rows == 0 and not first:
            return self._empty
        if "extreme" in self.kinds:
            check_inserts(self.id, delta)
        out = self._step(rt, delta, first)
        self._empty = out.schema.empty_table()
        return out

    def step_partials(self, rt: Runtime, partials: pa.Table) -> pa.Table:
        """A linear aggregate's step from its input delta already summed per group (the columns of
        :meth:`partials`, e.g. by Spark over a large batch) instead of the delta itself."""
        assert self.linear, "only a linear aggregate's record is the sum of its input's partials"
        out = self._step(rt, None, rt.epoch == 0, partials)
        self._empty = out.schema.empty_table()
        return out

    def _group_by(self) -> str:
        return f" GROUP BY {cols_sql(self.group)}" if self.group else ""

    @staticmethod
    def condition(a: AggSpec) -> str:
        """The rows aggregate ``a`` reads: a non-NULL argument, its FILTER true."""
        parts = [f"{q(a.arg)} IS NOT NULL" if a.arg else "", q(a.filter) if a.filter else ""]
        return " AND ".join(c for c in parts if c) or "TRUE"

    def partials(self) -> list[tuple[str, str]]:
        """The record's columns after the group's: (name, the aggregate over a Z-set giving the delta's part)."""
        out = [(COUNT, f"SUM({WEIGHT})")]
        for i, (a, kind) in enumerate(zip(self.aggs, self.kinds, strict=True)):
            cond = self.condition(a)
            if kind == "linear":
                if a.func in ("sum", "avg"):
                    out.append((f"{SUM}{i}", f"SUM({q(a.arg)} * {WEIGHT}) FILTER (WHERE {cond})"))
                out.append((f"{NUM}{i}", f"SUM({WEIGHT}) FILTER (WHERE {cond})"))
            elif kind == "extreme":
                out.append((f"{EXT}{i}", f"{a.func.upper()}({q(a.arg)}) FILTER (WHERE {cond})"))
        return out

    def record_value(self, i: int, a: AggSpec, t: str = "", prefix: str = "") -> str:
        """A linear or extreme aggregate ``i``'s value from its record: columns ``{t}.{prefix}{partial}`` (no
        alias ``t``: unqualified)."""
        t = f"{t}.{prefix}" if t else prefix
        if self.kinds[i] == "extreme":
            return f"{t}{EXT}{i}"
        n = f"COALESCE({t}{NUM}{i}, 0)"
        if a.func == "count":
            return f"CAST({n} AS BIGINT)"
        if a.func == "sum":
            return f"CASE WHEN {n} > 0 THEN {t}{SUM}{i} END"
        return f"CASE WHEN {n} > 0 THEN CAST({t}{SUM}{i} AS DOUBLE) / {n} END"

    @staticmethod
    def _merged(column: str, extremes: dict[str, str]) -> str:
        """A record column after the epoch from the old record ``o`` and the delta's part ``g``."""
        if column in extremes:
            return merged_sql(extremes[column], f"o.{column}", f"g.{column}")
        return f"COALESCE(o.{column}, 0) + COALESCE(g.{column}, 0)"

    def _values(self, rt: Runtime, delta: pa.Table, keys: pa.Table | None, first: bool) -> dict[str, pa.Table]:
        """Each value set's touched groups' aggregates before and after (``m{j}``); its state takes the delta."""
        out = {}
        for j, vs in enumerate(self.value_sets):
            counts = rt.duck.query(vs.delta_sql(self.group), d=delta)
            if first:
                rt.store.apply(vs.table, counts.schema.empty_table())
            old = rt.store.lookup(vs.table, keys)
            out[f"m{j}"] = rt.duck.query(vs.values_sql(self.group, "old", "dm"), old=old, dm=counts)
            rt.store.apply(vs.table, counts)
        return out

    def _step(self, rt: Runtime, delta: pa.Table | None, first: bool, dagg: pa.Table | None = None) -> pa.Table:
        """``dagg``: the delta already summed per group (:meth:`step_partials`; a linear aggregate only)."""
        partials = self.partials()
        partial_cols = [c for c, _ in partials]
        lead = f"{cols_sql(self.group)}, " if self.group else ""
        if dagg is None:
            parts = ", ".join(f"{e} AS {c}" for c, e in partials)
            dagg = rt.duck.query(f"SELECT {lead}{parts} FROM d{self._group_by()}", d=delta)
        rec_cols = self.group + partial_cols
        if first:
            rt.store.apply(self.records, rt.duck.query(f"SELECT *, 1 AS {WEIGHT} FROM g LIMIT 0", g=dagg))
        keys = dagg.select(self.group) if self.group else None  # dagg: one row a group
        old = rt.store.lookup(self.records, keys)
        multisets = self._values(rt, delta, keys, first)
        # one query for both results (DuckDB's cost per query dwarfs these few rows): the view's change (part 0:
        # a group's old values -1 and new values +1 where they differ) and the records' change (part 1: the old
        # partials -1, the new +1), split below. The FULL JOIN pairs each group's old record (at most one: the
        # records hold one per group) with its delta, so old and new values are compared in place, not netted by
        # a GROUP BY over every column.
        on = " AND ".join(f"o.{q(g)} IS NOT DISTINCT FROM g.{q(g)}" for g in self.group) or "TRUE"
        extremes = {f"{EXT}{i}": a.func for i, a in enumerate(self.aggs) if self.kinds[i] == "extreme"}
        paired = ", ".join(
            [f"COALESCE(g.{q(c)}, o.{q(c)}) AS {q(c)}" for c in self.group]
            + [f"{self._merged(c, extremes)} AS {c}" for c in partial_cols]
            + [f"o.{c} AS {OLD}{c}" for c in partial_cols]
        )
        joins = "".join(
            f" LEFT JOIN {m} ON "
            + (" AND ".join(f"p.{q(g)} IS NOT DISTINCT FROM {m}.{q(g)}" for g in self.group) or "TRUE")
            for m in multisets
        )
        served = {i: f"m{j}" for j, vs in enumerate(self.value_sets) for i, _ in vs.aggs}
        valued = ", ".join(
            f"{finished_sql(a.func, f'{served[i]}.{NEW_OF}{i}')} AS {NEW_VALUE}{i}, "
            f"{finished_sql(a.func, f'{served[i]}.{OLD_OF}{i}')} AS {OLD_VALUE}{i}"
            if i in served
            else f"{self.record_value(i, a)} AS {NEW_VALUE}{i}, {self.record_value(i, a, prefix=OLD)} AS {OLD_VALUE}{i}"
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
            f"WITH p AS (SELECT {paired} FROM o FULL JOIN g ON {on}), v AS (SELECT p.*, {valued} FROM p{joins}) "
            f"SELECT 0 AS {PART}, {gl}{news}, {no_recs}, CAST(1 AS BIGINT) AS {WEIGHT} FROM v "
            f"WHERE {is_live} AND (NOT ({was_live}) OR {differ}) "
            f"UNION ALL SELECT 0, {gl}{olds}, {no_recs}, -1 FROM v WHERE {was_live} AND (NOT ({is_live}) OR {differ}) "
            f"UNION ALL SELECT 1, {gl}{nulls}, {cols_sql(partial_cols)}, 1 FROM v WHERE {is_live} "
            f"UNION ALL SELECT 1, {gl}{nulls}, {', '.join(f'{OLD}{c}' for c in partial_cols)}, -1 FROM v WHERE {was}"
        )
        both = rt.duck.query(sql, o=old, g=dagg, **multisets)
        part = both.column(PART)
        values = [f"{NEW_VALUE}{i}" for i in range(len(self.aggs))]
        out = both.filter(pc.equal(part, 0)).select(self.group + values + [WEIGHT])
        out = out.rename_columns(self.columns + [WEIGHT])
        change = both.filter(pc.equal(part, 1)).select(self.group + partial_cols + [WEIGHT])
        change = change.rename_columns(rec_cols + [WEIGHT])
        rt.store.apply(self.records, change)
        return out
