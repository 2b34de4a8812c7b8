"""One epoch of a view over several sources (a join or a UNION ALL), from each source's batch
to committed tables (no Spark here; tests drive it with DuckDB standing in for Spark).

Per epoch: each source's batch becomes a Z-set (change feeds against their mirror, as for one
source), the join or union turns them into the Z-set of the combined relation, and the top
operator maintains the view from it (a keyed aggregate through its state tables; a projection
by appends, or by multiset upserts when rows can be retracted). Commit order: the top's
tables, the join's side tables, then the mirrors. A table whose epoch is already committed
is skipped, and each step reads only tables committed after it, so replaying an epoch after
a crash between any two commits ends as one clean application.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeview.config.models import ChangeFeedConfig
from lakeview.config.schema import parse_ddl
from lakeview.ivm.changefeed import normalize
from lakeview.ivm.commits import Change, CommitRecord, Epoch
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.zsets import state_change
from lakeview.sql.dag import output_key
from lakeview.sql.duck import arrow_sql as _sql
from lakeview.sql.joins import JoinPlan, join_delta_sql, side_delta_sql, touched_keys_sql
from lakeview.sql.plan import COUNT, WEIGHT, KeyedAggregatePlan
from lakeview.sql.union import UnionPlan

if TYPE_CHECKING:
    from writers.base import SnapshotWriter


COPIES = "__lv_copies"  # a multiset view's copies of a row after the epoch (internal: the reserved prefix)


def side_table_names(view: str, plan: JoinPlan) -> list[str]:
    """The join's state tables, one per side: its rows (needed columns) with multiplicity."""
    return [f"__lv_state_{view}_join_{side.alias}" for side in plan.sides]


def source_mirror_name(view: str, source: str) -> str:
    """A change-feed source's mirror when the view reads several sources."""
    return f"__lv_state_{view}_src_{source}"


@dataclass
class CombinedMaintainer:
    """How a join or UNION ALL view is kept: its plan, its table, the top operator's state
    tables, the join's side tables and a mirror per change-feed source."""

    plan: JoinPlan | UnionPlan
    view: SnapshotWriter
    state: list[SnapshotWriter] = field(default_factory=list)  # the top aggregate's: group state, multisets
    sides: list[SnapshotWriter] = field(default_factory=list)  # joins: one per side
    feeds: dict[str, ChangeFeedConfig] = field(default_factory=dict)  # change feeds with an operation column
    mirrors: dict[str, SnapshotWriter] = field(default_factory=dict)
    source_columns: dict[str, list[str]] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)  # sources with deletes (operation or image feeds)
    state_schemas: list[pa.Schema] | None = None

    def __post_init__(self) -> None:
        self.deleting |= set(self.feeds)

    view_is_state = False  # the pipeline's replay shortcut is for single-table views only

    @property
    def view_key(self) -> tuple[str, ...] | None:
        return output_key(self.plan, self.deleting)

    def tables(self) -> list[SnapshotWriter]:
        return [self.view, *self.state, *self.sides, *self.mirrors.values()]

    def last_epoch(self) -> int | None:
        epochs = [r.epoch for w in self.tables() if (r := w.last_commit()) is not None]
        return max(epochs) if epochs else None

    def apply(self, epoch: Epoch, inputs: dict[str, pa.Table]) -> CommitRecord | None:
        """Maintain the view with one epoch. ``inputs`` per source: for a change feed, the
        batch's newest change per key (source columns + ``__lv_op``); otherwise its Z-set
        (source columns + ``__lv_w``). Every source of the plan must be present (maybe empty)."""
        mirrors_done = {s: _has(m, epoch) for s, m in self.mirrors.items()}
        if mirrors_done and all(mirrors_done.values()):
            return None
        zsets: dict[str, pa.Table] = {}
        mirror_changes: dict[str, Change] = {}
        for source in self.plan.sources:
            batch = inputs[source]
            if source in self.feeds:
                if mirrors_done[source]:
                    continue
                feed = self.feeds[source]
                old = self.mirrors[source].lookup(batch.select(list(feed.key))) if batch.num_rows else pa.table({})
                zsets[source], mirror_changes[source] = normalize(batch, old, feed, self.source_columns[source])
            else:
                zsets[source] = batch
        record = None
        if not any(mirrors_done.values()):  # a mirror has the epoch: everything before it does too
            if isinstance(self.plan, JoinPlan):
                deltas = [_sql(side_delta_sql(side, "z"), z=zsets[side.source]) for side in self.plan.sides]
                sides_done = [_has(w, epoch) for w in self.sides]
                if not any(sides_done):
                    record = self._apply_top(epoch, self._join_delta(deltas))
                for i, (writer, side) in enumerate(zip(self.sides, self.plan.sides)):
                    if not sides_done[i]:
                        writer.commit(epoch, _side_change(writer, list(side.columns), deltas[i]))
            else:
                record = self._apply_top(epoch, self._union_delta(zsets))
        for source, writer in self.mirrors.items():
            if not mirrors_done[source]:
                writer.commit(epoch, mirror_changes[source])
        return record

    # --- the combined relation's Z-set ---------------------------------------------------
    def _join_delta(self, deltas: list[pa.Table]) -> pa.Table:
        assert isinstance(self.plan, JoinPlan)
        a, b = self.plan.sides
        da, db = deltas
        keys_b_as_a = _sql(touched_keys_sql(b, "d", as_side=a), d=db)
        keys_b = _sql(f"{touched_keys_sql(a, 'da', as_side=b)} UNION {touched_keys_sql(b, 'db')}", da=da, db=db)
        ao = _stored(self.sides[0], keys_b_as_a, da)
        bo = _stored(self.sides[1], keys_b, db)
        return _sql(join_delta_sql(self.plan, "da", "db", "ao", "bo"), da=da, db=db, ao=ao, bo=bo)

    def _union_delta(self, zsets: dict[str, pa.Table]) -> pa.Table:
        assert isinstance(self.plan, UnionPlan)
        names = {s: f"z{i}" for i, s in enumerate(self.plan.sources)}
        result = _sql(self.plan.union_sql(names), **{names[s]: z for s, z in zsets.items()})
        return result.rename_columns([*self.plan.columns, WEIGHT])

    # --- the top operator ---------------------------------------------------------------
    def _apply_top(self, epoch: Epoch, zset: pa.Table) -> CommitRecord | None:
        top = self.plan.top
        if isinstance(top, KeyedAggregatePlan):
            maintainer = ViewMaintainer(plan=top, view=self.view, state=self.state, state_schemas=self.state_schemas)
            return maintainer.apply_zset(epoch, zset)
        weighted = zset if top is None else _sql(top.weighted_sql("z", "duckdb"), z=zset)
        key = self.view_key
        change = appended_rows(weighted) if key is None else multiset_change(self.view, weighted, key)
        return self.view.commit(epoch, change)


def appended_rows(weighted: pa.Table) -> Change:
    """An append-only output: each row repeated by its (positive) weight."""
    cols = ", ".join(f'"{c}"' for c in weighted.column_names if c != WEIGHT)
    return Change(
        rows=_sql(f"SELECT {cols} FROM w, range(CAST(w.{WEIGHT} AS BIGINT)) WHERE w.{WEIGHT} > 0", w=weighted)
    )


def multiset_change(view: SnapshotWriter, weighted: pa.Table, key: tuple[str, ...]) -> Change:
    """A projection whose rows can be retracted, kept as a multiset keyed by the whole row:
    per distinct row touched, its stored copies are replaced by (stored + net weight) copies."""
    cols = ", ".join(f'"{c}"' for c in key)
    net = _sql(f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM w GROUP BY ALL HAVING SUM({WEIGHT}) <> 0", w=weighted)
    if net.num_rows == 0:
        return Change(rows=weighted.select(list(key)).slice(0, 0), key=key)
    stored = view.lookup(net.select(list(key)))
    stored = stored.select(list(key)) if stored.num_rows else net.select(list(key)).slice(0, 0)
    match = " AND ".join(f'n."{k}" IS NOT DISTINCT FROM s."{k}"' for k in key)
    keys = ", ".join(f'n."{k}"' for k in key)
    counted = f"SELECT {keys}, n.{WEIGHT} + (SELECT COUNT(*) FROM s WHERE {match}) AS {COPIES} FROM n"
    rows = _sql(
        f"SELECT {cols} FROM ({counted}) AS t, range(CAST(t.{COPIES} AS BIGINT)) WHERE t.{COPIES} > 0", n=net, s=stored
    )
    gone = _sql(f"SELECT {cols} FROM ({counted}) AS t WHERE t.{COPIES} <= 0", n=net, s=stored)
    return Change(rows=rows, key=key, deletes=gone if gone.num_rows else None)


def _side_change(writer: SnapshotWriter, columns: list[str], delta: pa.Table) -> Change:
    """The side table's change: stored multiplicity of each changed row plus its net weight."""
    if delta.num_rows == 0:
        return Change(rows=delta.rename_columns([*columns, COUNT]).slice(0, 0), key=tuple(columns))
    stored = writer.lookup(delta.select(columns))
    stored = (
        stored.select([*columns, COUNT]) if stored.num_rows else delta.rename_columns([*columns, COUNT]).slice(0, 0)
    )
    match = " AND ".join(f'd."{c}" IS NOT DISTINCT FROM o."{c}"' for c in columns)
    items = ", ".join(f'd."{c}"' for c in columns)
    merged = _sql(
        f"SELECT {items}, CAST(COALESCE(o.{COUNT}, 0) + d.{WEIGHT} AS BIGINT) AS {COUNT} FROM d LEFT JOIN o ON {match}",
        d=delta,
        o=stored,
    )
    return state_change(merged, tuple(columns), COUNT)


def _stored(writer: SnapshotWriter, keys: pa.Table, like: pa.Table) -> pa.Table:
    """A side's stored rows for some join keys, as (side columns, ``__lv_w`` = multiplicity)."""
    columns = [c for c in like.column_names if c != WEIGHT]
    if keys.num_rows == 0:
        return like.slice(0, 0)
    stored = writer.lookup(keys)
    if stored.num_rows == 0:
        return like.slice(0, 0)
    return stored.select([*columns, COUNT]).rename_columns([*columns, WEIGHT]).cast(like.schema)


def _has(writer: SnapshotWriter, epoch: Epoch) -> bool:
    last = writer.last_commit()
    return last is not None and last.epoch >= epoch.number


def check_combined_view(plan, project) -> str | None:  # type: ignore[no-untyped-def]
    """What is wrong with a join or UNION ALL view over its declared sources, or None. An
    upstream view among the sources is fine: its published changes are a weighted input
    (spark_jobs.multi_source); what a view may read of another is checked by lakeview.dag."""

    if plan.kind not in ("join", "union"):
        return None
    for source in plan.sources:
        if source in project.views and source not in project.sources:
            continue  # an upstream view: its columns and reads are checked by lakeview.dag and Spark's analysis
        config = project.sources.get(source)
        if config is None:
            return None  # reported by the check that names the declared sources
        if config.changes is not None and config.images is not None:
            return f"source {source!r}: declare either [changes] (an operation column) or [images] (before/after), not both"
    if isinstance(plan, JoinPlan):
        for side in plan.sides:
            if side.source not in project.sources:
                continue
            columns = {c.name.lower() for c in parse_ddl(project.sources[side.source].schema_)}
            missing = [c for c in side.columns if c.lower() not in columns]
            if missing:
                return f"{', '.join(f'{side.alias}.{c}' for c in missing)}: not in the schema of source {side.source!r}"
    return None
