"""A graph view's watermark in its pipeline (:mod:`lakeview.sql.graph_watermark`): per epoch, the late rows
of the event-time source are left out of the graph's inputs, quarantined and counted, and the epoch's
commits are stamped with the watermark applied and the max event time after it, as the one-source
pipeline does (``lakeview.watermark-us``, ``lakeview.max-event-time-us``, ``lakeview.rows-late``); the state only
windows closed at the watermark reach is dropped in the same commit (:mod:`lakeview.graph.expire`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeview.graph.expire import Bound, bounds, expire
from lakeview.ivm.commits import Epoch
from lakeview.sql.duck import arrow_sql
from lakeview.sql.graph_watermark import event_time
from lakeview.sql.plan import WEIGHT
from lakeview.sql.watermark import LATE, Watermark, delay_us, split_late

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeview.config.models import ProjectConfig
    from lakeview.graph import Graph
    from spark_jobs.sources.quarantine import Quarantine
    from writers.base import SnapshotWriter


class GraphWatermark:
    """The rule for one graph view: which source it judges and how far its watermark has moved."""

    def __init__(self, project: ProjectConfig, view: str, sources: tuple[str, ...], quarantines: dict) -> None:
        found = event_time(project, view, sources)
        self.source = found.source
        self.rule = Watermark(delay_us(project.views[view].watermark or ""), found.column)
        self.quarantine: Quarantine = quarantines[found.source]
        self.feed = project.sources[found.source].changes  # a change feed is judged on its Z-set (judge_zset)
        self.images = project.sources[found.source].images is not None  # judged on its consolidated Z-set (apply)
        self.bounded: dict[str, list[Bound]] | None = None  # the graph's state the watermark bounds (by operator)
        self.expired: tuple[int | None, int] | None = None  # (epoch, watermark) of this process's last drop

    @classmethod
    def of(
        cls, project: ProjectConfig, view: str, sources: tuple[str, ...], quarantines: dict
    ) -> GraphWatermark | None:
        """The view's rule; None without a watermark."""
        return cls(project, view, sources, quarantines) if project.views[view].watermark else None

    def recover(self, tables: list[SnapshotWriter]) -> None:
        """Resume where the last commit of the view's tables left the rule (a restart)."""
        self.rule = Watermark.recover(self.rule.delay_us, self.rule.column, [w.last_commit() for w in tables])

    def applies(self, epoch: int) -> bool:
        """Whether a watermark judges ``epoch``'s rows (none before the first epoch with an event time)."""
        return self.rule.for_epoch(epoch) is not None

    def first_advance(self, epoch: Epoch, rows: DataFrame) -> Epoch:
        """A first batch written by the executors (no watermark applies yet, :meth:`applies`: nothing is late):
        the epoch stamped with the rule's advance by the newest event time of the source's ``rows``, computed
        by Spark, as :meth:`apply` stamps an epoch the driver steps."""
        if self.feed is not None:  # the newest change per key (no mirror yet): its new image unless a delete
            from pyspark.sql import Window
            from pyspark.sql import functions as F

            newest_first = Window.partitionBy(*self.feed.key).orderBy(F.col(self.feed.sequence).desc())
            rows = rows.withColumn("__lv_n", F.row_number().over(newest_first)).where("__lv_n = 1")
            rows = rows.where(~F.col(self.feed.operation).isin(list(self.feed.delete)))
        if self.images:  # the batch's Z-set consolidated: the images it keeps at a positive weight
            from pyspark.sql import functions as F

            columns = [c for c in rows.columns if c != WEIGHT]
            rows = rows.groupBy(*columns).agg(F.sum(WEIGHT).alias(WEIGHT)).where(f"{WEIGHT} > 0")
        newest = rows.selectExpr(f"max(unix_micros(`{self.rule.column}`)) AS t").first()["t"]  # type: ignore[index]
        return replace(epoch, stamps={**epoch.stamps, **self.rule.advance(epoch.number, None, newest), LATE: "0"})

    def apply(self, epoch: Epoch, inputs: dict[str, pa.Table]) -> tuple[Epoch, dict[str, pa.Table]]:
        """The epoch's inputs without the event source's late rows (quarantined, a replay rewriting the same
        file), and the epoch with them counted as set aside and the rule's stamps."""
        if self.feed is not None:  # judged on its Z-set, after the mirror (judge_zset)
            return epoch, inputs
        if self.images and self.source in inputs:  # an image a later one of the batch cancels is never judged
            inputs = {**inputs, self.source: consolidated(inputs[self.source])}
        return self._judge(epoch, inputs)

    def judge_zset(self, epoch: Epoch, deltas: dict[str, pa.Table]) -> tuple[Epoch, dict[str, pa.Table]]:
        """A change feed's epoch: its Z-set (the graph's weight column ``__lv_w``) without its late images, old
        or new (the mirror took every change already); only new on-time images move the watermark."""
        if self.feed is None:
            return epoch, deltas
        return self._judge(epoch, deltas)

    def _judge(self, epoch: Epoch, inputs: dict[str, pa.Table]) -> tuple[Epoch, dict[str, pa.Table]]:
        applied = self.rule.for_epoch(epoch.number)
        rows = inputs.get(self.source)
        if rows is None:
            on_time, late = None, None
        else:
            on_time, late = split_late(rows, self.rule.column, applied)
        if late is not None and late.num_rows:
            reason = self.rule.reason(applied)  # type: ignore[arg-type]
            zset = self.feed is not None or self.images
            extra = [c for c in late.column_names if c.startswith("__lv_") and (c != WEIGHT or not zset)]
            payload = late.drop_columns(extra)
            if zset:  # each image's reason says whether it was a new or a retracted old one
                self.quarantine.set_aside_late(epoch.number, payload, reason)
            else:
                records = [
                    {"file": None, "reason": reason, "record": json.dumps(r, default=str)} for r in payload.to_pylist()
                ]
                self.quarantine.record(epoch.number, records, suffix="-late")
        newest = None
        if on_time is not None and on_time.num_rows:  # a change or image feed: its new images only (weight > 0)
            new = f"WHERE {WEIGHT} > 0" if self.feed is not None or self.images else ""
            newest = arrow_sql(f'SELECT max(epoch_us("{self.rule.column}")) AS t FROM z {new}', z=on_time).column("t")[
                0
            ]
            newest = newest.as_py()
        count = 0 if late is None else late.num_rows
        stamps = {**self.rule.advance(epoch.number, applied, newest), LATE: str(count)}
        epoch = replace(
            epoch,
            rows_in=epoch.rows_in - count,
            rows_quarantined=epoch.rows_quarantined + count,
            stamps={**epoch.stamps, **stamps},
        )
        return epoch, inputs if on_time is None else {**inputs, self.source: on_time}

    def expire(self, graph: Graph) -> None:
        """After the graph's step of an epoch :meth:`apply` judged: drop the state only windows closed at its
        watermark reach (staged in the store, so the epoch's one commit carries it). Once per watermark: a later
        epoch at the same watermark skips it (the epoch that dropped it committed), a retried epoch does not."""
        applied, epoch = self.rule.applied_us, self.rule.last_epoch
        if applied is None or (self.expired is not None and self.expired[1] == applied and self.expired[0] != epoch):
            return
        if self.bounded is None:
            self.bounded = bounds(graph, self.source, self.rule.column)
        expire(graph, self.bounded, applied)
        self.expired = (epoch, applied)


def consolidated(zset: pa.Table) -> pa.Table:
    """A Z-set's distinct rows with their summed weights, those summing to 0 left out (the weight's type kept)."""
    columns = [c for c in zset.column_names if c != WEIGHT]
    cols = ", ".join(f'"{c}"' for c in columns)
    summed = arrow_sql(
        f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM z GROUP BY ALL HAVING SUM({WEIGHT}) <> 0", z=zset
    )
    return summed.select(zset.column_names).cast(zset.schema)
