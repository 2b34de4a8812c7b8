"""One view's epoch, from a batch's delta to committed tables (no Spark here).

The Spark pipeline computes what is proportional to the batch (the view's SQL over the batch,
or a change feed's newest change per key) and hands it to a :class:`ViewMaintainer`, which
looks up state by touched key, merges in DuckDB and commits. Tests drive the same class with
DuckDB standing in for Spark's part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from lakeview.config.models import ChangeFeedConfig
from lakeview.ivm.changefeed import normalize
from lakeview.ivm.commits import CommitAll, CommitRecord, Epoch, Pending, commit_each
from lakeview.ivm.zsets import ViewStores, apply_epoch, change_for, keyed_append_change, summed
from lakeview.sql.plan import WEIGHT, AppendPlan, KeyedAggregatePlan
from lakeview.sql.watermark import apply_to_changes, closed_windows

if TYPE_CHECKING:
    from lakeview.sql.watermark import Watermark
    from writers.base import SnapshotWriter


@dataclass
class ViewMaintainer:
    """How one view is kept: its plan, its table, its state tables and (change feeds) its mirror."""

    plan: AppendPlan | KeyedAggregatePlan
    view: SnapshotWriter
    state: list[SnapshotWriter] = field(default_factory=list)  # group state, then multisets
    feed: ChangeFeedConfig | None = None
    mirror: SnapshotWriter | None = None
    source_columns: list[str] = field(default_factory=list)
    state_schemas: list[pa.Schema] | None = None  # to cast DuckDB-computed deltas to (Spark's types)
    feed_key: tuple[str, ...] | None = None  # the input has deletes (a change feed) keyed by these
    closed_before_us: int | None = None  # the watermark applied to the current epoch (lakeview.watermark)
    watermark: Watermark | None = None  # over a change feed: late images are left out here (lakeview.watermark)
    set_aside: Callable[[int, pa.Table, str], None] | None = None  # where late images go: (epoch, images, reason)
    # How an epoch's changes of the view's tables are committed: each on its own (state first, the view,
    # the mirror last: a replay repairs a crash between them), or all in ONE catalog transaction.
    commit_all: CommitAll = commit_each
    tables_through: int | None = None  # one transaction: no table holds an epoch after this one (None: unknown)

    def __post_init__(self) -> None:
        if self.feed is not None and self.feed_key is None:
            self.feed_key = tuple(self.feed.key)

    @property
    def view_is_state(self) -> bool:
        """The view's own rows are its whole state (append-only input, self-mergeable SQL)."""
        if self.plan.is_append:
            return self.feed_key is None
        assert isinstance(self.plan, KeyedAggregatePlan)
        return self.plan.view_is_state(append_only=self.feed_key is None)

    @property
    def view_key(self) -> tuple[str, ...] | None:
        if self.plan.is_append and self.feed_key is not None:
            return self.feed_key
        return self.plan.key

    def apply_weighted_rows(self, epoch: Epoch, weighted: pa.Table, also: Pending = ()) -> CommitRecord | None:
        """A projection over a change feed: its weighted rows upsert/delete by the feed key."""
        assert isinstance(self.plan, AppendPlan) and self.feed_key is not None
        return self.commit_all(epoch, [(self.view, keyed_append_change(self.plan, self.feed_key, weighted)), *also])[0]

    def fresh(self, epoch: Epoch) -> bool:
        """Whether no table can hold ``epoch`` yet: they moved together through an earlier one (so
        none is asked)."""
        return self.tables_through is not None and epoch.number > self.tables_through

    def tables(self) -> list[SnapshotWriter]:
        return [self.view, *self.state, *([self.mirror] if self.mirror else [])]

    def last_epoch(self) -> int | None:
        """The newest epoch any of the view's tables has (None: nothing committed yet)."""
        epochs = [r.epoch for w in self.tables() if (r := w.last_commit()) is not None]
        return max(epochs) if epochs else None

    # --- append-only sources: deltas computed by Spark ---------------------------------
    def apply_view_delta(self, epoch: Epoch, delta: pa.Table) -> CommitRecord | None:
        """Self-mergeable views: the batch's result merges into the stored view rows."""
        return self.view.commit(epoch, change_for(self.plan, delta, self.view))

    def apply_state_deltas(
        self,
        epoch: Epoch,
        group_delta: pa.Table,
        multiset_deltas: list[pa.Table],
        closed_before_us: int | None = None,
        also: Pending = (),
    ) -> CommitRecord | None:
        """``closed_before_us`` (default: this epoch's, set by the pipeline): the watermark applied to
        this epoch; state of windows ended by it is dropped. ``also``: the mirror's change, committed last."""
        assert isinstance(self.plan, KeyedAggregatePlan)

        closed_before_us = self.closed_before_us if closed_before_us is None else closed_before_us

        stores = ViewStores(
            view=self.view,
            groups=self.state[0],
            multisets=self.state[1:],
            commit=self.commit_all,
            fresh=self.fresh(epoch),
        )
        deltas = [self._cast(i + 1, d) for i, d in enumerate(multiset_deltas)]
        closed = closed_windows(self.plan, closed_before_us)
        return apply_epoch(self.plan, epoch, self._cast(0, group_delta), deltas, stores, closed, also)

    # --- change feeds: the newest change per key, weights applied here ------------------
    def apply_changes(self, epoch: Epoch, latest: pa.Table) -> CommitRecord | None:
        """Turn the batch's newest change per key into a Z-set against the mirror, maintain
        the view with it, then commit the mirror (last, so a replay still finds old images)."""
        assert self.feed is not None and self.mirror is not None
        if latest.num_rows == 0:
            if self.watermark is None or self.closed_before_us is None:
                return None
            # no change, yet the watermark may have closed windows: drop their state, as an append batch does
            empty = latest.select(self.source_columns).append_column(WEIGHT, pa.array([], pa.int32()))
            zset, epoch = self._leave_out_late(epoch, empty)
            return self.apply_zset(epoch, zset)
        keys = latest.select(list(self.feed.key))
        if not self.fresh(epoch) and (last := self.mirror.last_commit()) is not None and last.epoch >= epoch.number:
            return None  # the mirror is committed last (or with the others): the epoch is complete
        zset, mirror_change = normalize(latest, self.mirror.lookup(keys), self.feed, self.source_columns)
        if self.watermark is not None:
            zset, epoch = self._leave_out_late(epoch, zset)
        return self.apply_zset(epoch, zset, also=[(self.mirror, mirror_change)])

    def apply_images(self, epoch: Epoch, zset: pa.Table) -> CommitRecord | None:
        """A before/after-image feed's batch under the watermark: its Z-set (before image -1, after
        +1) consolidated, so an image a later change of the batch retracts again cancels (as only
        the newest change per key counts over an operation column), its late images left out,
        the rest applied. An empty batch still drops closed windows' state."""
        assert self.watermark is not None
        zset, epoch = self._leave_out_late(epoch, summed(zset))
        return self.apply_zset(epoch, zset)

    def _leave_out_late(self, epoch: Epoch, zset: pa.Table) -> tuple[pa.Table, Epoch]:
        """The Z-set without its late images (set aside, counted as quarantined and late) and the
        epoch stamped with the watermark; the mirror still takes every change."""

        assert self.watermark is not None
        applied = self.closed_before_us
        on_time, late, stamps = apply_to_changes(self.watermark, epoch.number, applied, zset, self.plan)
        if late.num_rows and self.set_aside is not None and applied is not None:
            self.set_aside(epoch.number, late, self.watermark.reason(applied))
        return on_time, replace(
            epoch, rows_quarantined=epoch.rows_quarantined + late.num_rows, stamps={**epoch.stamps, **stamps}
        )

    def apply_zset(
        self, epoch: Epoch, zset: pa.Table, closed_before_us: int | None = None, also: Pending = ()
    ) -> CommitRecord | None:
        con = duckdb.connect()
        try:
            con.register("z", zset)
            if isinstance(self.plan, AppendPlan):
                return self.apply_weighted_rows(
                    epoch, con.execute(self.plan.weighted_sql("z", "duckdb")).to_arrow_table(), also
                )
            group = con.execute(self.plan.group_delta_sql("z", "duckdb")).to_arrow_table()
            multisets = [
                con.execute(self.plan.multiset_delta_sql(i, "z", "duckdb")).to_arrow_table()
                for i in range(len(self.plan.multisets))
            ]
        finally:
            con.close()
        return self.apply_state_deltas(epoch, group, multisets, closed_before_us, also)

    def _cast(self, index: int, table: pa.Table) -> pa.Table:
        if not self.state_schemas:
            return table
        schema = self.state_schemas[index]
        return table.select(schema.names).cast(schema)
