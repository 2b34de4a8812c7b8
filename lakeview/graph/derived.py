"""A join side read from an aggregate's records: the rows a GROUP BY outputs, not kept a second time.

Eager aggregation (:mod:`lakeview.graph.eager`) puts a GROUP BY under a join; the join's side then holds
exactly the aggregate's live groups, one row each, which the aggregate's records already hold. The join reads
them from there, under the keys its other side's delta touches, after the aggregate's step of the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lakeview.graph.aggregate import COUNT, Aggregate
from lakeview.graph.operators import Operator, Project, Runtime
from lakeview.graph.zset import WEIGHT, q


@dataclass(frozen=True)
class DerivedSide:
    """A join side whose rows are exactly a GROUP BY's output (its live groups, one row each), renamed or
    computed by projections: read from the aggregate's records instead of kept twice. ``key``: the side's key
    columns' names in the aggregate's group; ``sql``: the side's rows from the records (table ``r``)."""

    aggregate: Aggregate
    key: dict[str, str]
    sql: str

    def rows(self, rt: Runtime, keys: pa.Table) -> pa.Table:
        """The side's rows under ``keys`` (the side's key columns) after the aggregate's step of the epoch."""
        probe = keys.rename_columns([self.key[c] for c in keys.column_names])
        return rt.duck.query(self.sql, r=rt.store.lookup(self.aggregate.records, probe))


def derived_side(op: Operator, key: list[str]) -> DerivedSide | None:
    """``op``'s rows as a :class:`DerivedSide` when they are an aggregate's output through projections only and
    ``key`` is exactly the aggregate's group (by plain renames); else None. An aggregate whose value reads a
    multiset table (MIN/MAX over retractions, DISTINCT) is not derived: its record alone does not hold it."""
    chain: list[Project] = []
    while isinstance(op, Project):
        chain.append(op)
        op = op.inputs[0]
    if not isinstance(op, Aggregate) or not op.group or op.value_sets or not key:
        return None
    names = {c: c for c in key}
    for project in chain:  # from the join side down to the aggregate: each key column a plain column reference
        plain = {q(c): c for c in project.inputs[0].columns}
        exprs = dict(zip(project.columns, project.exprs, strict=True))
        if any(exprs[names[k]] not in plain for k in key):
            return None
        names = {k: plain[exprs[names[k]]] for k in key}
    group = dict(zip(op.columns[: len(op.group)], op.group, strict=True))
    mapped = {k: group.get(names[k]) for k in key}
    if set(mapped.values()) != set(op.group) or len(key) != len(op.group):
        return None
    outputs = [f"{q(g)} AS {q(c)}" for g, c in zip(op.group, op.columns, strict=False)]
    outputs += [
        f"{op.record_value(i, a)} AS {q(c)}"
        for i, (a, c) in enumerate(zip(op.aggs, op.columns[len(op.group) :], strict=True))
    ]
    sql = f"SELECT {', '.join(outputs)}, CAST(1 AS BIGINT) AS {WEIGHT} FROM r WHERE {COUNT} <> 0"
    for project in reversed(chain):
        select = ", ".join(f"{e} AS {q(c)}" for c, e in zip(project.columns, project.exprs, strict=True))
        sql = f"SELECT {select}, {WEIGHT} FROM ({sql})"
    return DerivedSide(op, mapped, sql)  # type: ignore[arg-type]
