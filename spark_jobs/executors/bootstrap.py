"""A keyed view's first large batch (a backfill), computed by Spark and written by its executors.

A keyed view merges each batch's delta in the driver: the delta is at most one row per
touched group or changed key, so it grows with the change. The first batch a view sees is the
exception: over history already landed, its delta is the whole source (a keyed projection
over a change feed) or the whole view (an aggregate with many groups). Such a batch, past
``[spark] driver_rows_max`` input rows and with every table the view keeps still empty, is
never collected. With nothing stored, each table's rows after the epoch are a plain Spark
query over the batch, and the executors write them
(:func:`spark_jobs.executors.writes.append_on_executors`):

- the batch's **Z-set**: a change feed's newest change per key that is not a delete (weight
  +1: an empty mirror has nothing to retract), an image feed's or an upstream view's weighted
  rows, an append stream's rows at +1;
- the **state tables**: the plan's group and multiset deltas over the Z-set, without the
  groups and values whose count is 0 (as :func:`lakeview.ivm.zsets.state_change` leaves them out),
  a sum over no values NULL (as :func:`lakeview.ivm.zsets.merge_group_state` makes it);
- the **view**: its own SQL over the batch's net rows (each row as many times as its net
  weight), which is the recompute the view must equal;
- the **mirror** (a change feed's current rows): the newest non-delete images, committed
  last as on the driver's path, so a replay finds the epoch unfinished until the very end.

Each table's snapshot is stamped with the epoch; a table that has it already skips it, so a
crash between two tables' commits is repaired by the replay. A watermark over a change or
image feed has no value yet on a first batch (nothing is late); the epoch is stamped with its
advance. Not taken (the driver merges): a batch at or below the bound, a later batch (stored
rows must be merged with), a first batch a watermark already applies to, an aggregate whose
first batch retracts a row it never held (:func:`retracts_unheld`), and append views over
append-only input (already written by the executors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lakeview.config.schema import parse_ddl
from lakeview.ivm.changefeed import DELETE, OP, images_sql, latest_sql
from lakeview.ivm.commits import CommitRecord, Epoch
from lakeview.ivm.zsets import overflow_error
from lakeview.sql.plan import COUNT, ROWS, WEIGHT, KeyedAggregatePlan
from lakeview.sql.watermark import LATE
from spark_jobs.analysis import with_sum_types
from spark_jobs.executors.writes import append_on_executors
from writers.base import SnapshotWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ProjectConfig
    from spark_jobs.pipeline import ViewPipeline
    from writers.staged_files import WrittenFile

log = logging.getLogger("lakeview.pipeline")


@dataclass
class Bootstrap:
    """What a bootstrapped epoch wrote: the view's commit and each table's executor-written files."""

    record: CommitRecord | None
    files: dict[str, list[WrittenFile]] = field(default_factory=dict)  # table name -> files (none: it had the epoch)

    def report(self) -> dict[str, object]:
        """How the epoch's rows went (a pipeline's ``last_write``): by the executors, none collected."""
        files = [f for written in self.files.values() for f in written]
        return {
            "by": "executors", "bootstrap": True, "rows_collected": 0, "files": len(files), "rows": sum(f.rows for f in files),
            "writers": sorted({f.writer for f in files}), "tables": {name: sum(f.rows for f in fs) for name, fs in self.files.items()},
        }  # fmt: skip


def bootstraps(pipeline: ViewPipeline, epoch: Epoch) -> bool:
    """Whether ``epoch`` is a large first batch the executors write (see the module's doc)."""
    m = pipeline.maintainer
    if epoch.rows_in <= pipeline.project.spark.driver_rows_max or (pipeline.plan.is_append and m.view_is_state):
        return False
    if (
        pipeline.watermark is not None
        and (pipeline.feed is not None or pipeline.images is not None)
        and m.closed_before_us is not None
    ):
        return False  # a watermark applies: each image is judged against it in the driver
    # Empty, or holding this very epoch (a replay after a crash between two tables' commits).
    return all((last := w.last_commit()) is None or last.epoch == epoch.number for w in m.tables())


def bootstrap_on_executors(pipeline: ViewPipeline, good: DataFrame, epoch: Epoch) -> Bootstrap | None:
    """Write the first batch's state, view and mirror rows from the executors, one snapshot per
    table stamped with ``epoch``; the driver holds the files' metadata only. None: left to the
    driver, nothing written (an aggregate over a batch that retracts a row it never held)."""
    zset, net, images, held = _relations(pipeline, good)
    try:
        weighted = pipeline.images is not None or WEIGHT in good.columns  # an image feed's or an upstream view's batch
        if isinstance(pipeline.plan, KeyedAggregatePlan) and weighted:
            spark = good.sparkSession
            if retracts_unheld(spark, [c for c in spark.table(zset).columns if c != WEIGHT], zset):
                log.info("%s: epoch %s retracts a row it never held; the driver merges it", pipeline.view, epoch.number)
                return None
        if isinstance(pipeline.plan, KeyedAggregatePlan):
            check_sums(pipeline.plan, good.sparkSession, zset)
        epoch = _stamped(pipeline, epoch, good.sparkSession, net)
        return _write_tables(pipeline, epoch, good.sparkSession, zset, net, images)
    finally:
        for df in held:
            df.unpersist()


def check_sums(plan: KeyedAggregatePlan, spark: SparkSession, zset: str) -> None:
    """Raise AggregateOverflowError, before any table is written, when a group's sum over the
    batch leaves its type: Spark's SUM (no ANSI mode) would write a wrapped value instead."""
    # A view that is its own state (append-only input) has an untyped plan: its sums' types here.
    plan = plan if plan.sum_types else with_sum_types(spark, plan, zset)
    sql = plan.overflow_sql(f"({plan.group_delta_sql(zset)})")
    flags = spark.sql(sql).first() if sql is not None else None
    for slot in plan.sum_slots() if flags is not None else []:
        if flags[slot.name]:
            raise overflow_error(plan, slot, ValueError("its sum over the first batch's rows is out of range"))


def _write_tables(
    pipeline: ViewPipeline, epoch: Epoch, spark: SparkSession, zset: str, net: str, images: str | None
) -> Bootstrap:
    """Each table's rows as Spark SQL over the batch's relations, written by the executors (the mirror last)."""
    m, plan = pipeline.maintainer, pipeline.plan
    tables: list[tuple[SnapshotWriter, DataFrame]] = []
    if isinstance(plan, KeyedAggregatePlan) and not m.view_is_state:
        tables.append((m.state[0], spark.sql(group_state_sql(plan, zset))))
        tables += [(w, spark.sql(multiset_state_sql(plan, i, zset))) for i, w in enumerate(m.state[1:])]
    tables.append((pipeline.writer, spark.sql(plan.batch_sql({pipeline.source: net}))))
    if m.mirror is not None and images is not None:
        tables.append((m.mirror, spark.table(images)))  # last: see the module's doc
    return write_in_order(tables, pipeline.writer, epoch, pipeline.project)


def write_in_order(
    tables: list[tuple[SnapshotWriter, DataFrame]], view: SnapshotWriter, epoch: Epoch, project: ProjectConfig
) -> Bootstrap:
    """Write each table's rows from the executors, one snapshot each stamped with ``epoch``, in
    the given (commit) order; a table that has the epoch already writes nothing."""

    log.info("%s: epoch %s (%s input rows) is a first batch: %s tables written by the executors",
             epoch.view, epoch.number, epoch.rows_in, len(tables))  # fmt: skip
    done = Bootstrap(record=None)
    for writer, rows in tables:
        record, files = append_on_executors(writer, rows, epoch, project)
        done.files[table_name(writer)] = files
        if writer is view:
            done.record = record
    return done


def _stamped(pipeline: ViewPipeline, epoch: Epoch, spark: SparkSession, net: str) -> Epoch:
    """A watermark over a change or image feed: no watermark applies yet (see :func:`bootstraps`),
    so nothing is late; the epoch carries the watermark's advance by the newest event time of
    the images it consumes, its net rows (as :func:`lakeview.sql.watermark.apply_to_changes` stamps it
    from the summed Z-set's positive rows)."""
    wm, plan = pipeline.watermark, pipeline.plan
    if wm is None or (pipeline.feed is None and pipeline.images is None):
        return epoch  # an append stream's watermark is stamped by the pipeline

    where = f" WHERE {plan.where}" if plan.where else ""
    newest = spark.sql(f"SELECT max(unix_micros(`{wm.column}`)) AS t FROM {net} AS {plan.alias}{where}").first()["t"]
    return replace(epoch, stamps={**epoch.stamps, **wm.advance(epoch.number, None, newest), LATE: "0"})


def table_name(writer: SnapshotWriter) -> str:
    """An Iceberg table's name, or a Delta table's (its writer's ``view``)."""
    return writer.table_name


def _relations(pipeline: ViewPipeline, good: DataFrame) -> tuple[str, str, str | None, list[DataFrame]]:
    """Temp views of the batch: its Z-set (with weights), its net rows (no weights), a change
    feed's newest non-delete images (the mirror's rows; None for other sources), and the
    DataFrames persisted for them (each feeds several tables' jobs; the batch itself is
    persisted by the pipeline)."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    spark = good.sparkSession
    name = pipeline._temp_name
    if pipeline.feed is not None:
        good.createOrReplaceTempView(name("_changes"))
        columns = ", ".join(f"`{c}`" for c in pipeline.maintainer.source_columns)
        latest = latest_sql(pipeline.feed, name("_changes"))
        images = spark.sql(
            f"SELECT {columns} FROM ({latest}) WHERE {OP} <> '{DELETE}'"
        ).persist()  # one shuffle, not one per table
        images.createOrReplaceTempView(name("_images"))
        spark.sql(f"SELECT *, CAST(1 AS INT) AS {WEIGHT} FROM {name('_images')}").createOrReplaceTempView(name("_zset"))
        return name("_zset"), name("_images"), name("_images"), [images]
    if pipeline.images is not None:
        good.createOrReplaceTempView(name("_images"))
        columns = [c.name for c in parse_ddl(pipeline.source_config.schema_)]
        weighted = spark.sql(images_sql(pipeline.images, columns, name("_images")))
    elif WEIGHT in good.columns:
        weighted = good  # a view over a view: its upstream's change files carry their weights
    else:
        good.createOrReplaceTempView(name("_rows"))
        good.withColumn(WEIGHT, F.lit(1).cast("int")).createOrReplaceTempView(name("_zset"))
        return name("_zset"), name("_rows"), None, []
    weighted.createOrReplaceTempView(name("_zset"))
    net = spark.sql(net_rows_sql([c for c in weighted.columns if c != WEIGHT], name("_zset")))
    net.createOrReplaceTempView(name("_net"))
    return name("_zset"), name("_net"), None, []


def retracts_unheld(spark: SparkSession, columns: list[str], zset: str) -> bool:
    """Whether a first batch's Z-set retracts a row it never held (a negative net weight: an image
    feed's before image, or an upstream view's retraction, of a row not in the batch). The
    driver's merge keeps such a row's count in the aggregate's state and finalizes the view from
    it; the view's SQL over net rows could not match that, so the driver merges such a batch."""
    cols = ", ".join(f"`{c}`" for c in columns)
    return not spark.sql(f"SELECT 1 FROM {zset} GROUP BY {cols} HAVING SUM({WEIGHT}) < 0").isEmpty()


def net_rows_sql(columns: list[str], zset: str) -> str:
    """Spark SQL: each row of a Z-set as many times as its net weight (rows netting to 0 or less: none)."""
    cols = ", ".join(f"`{c}`" for c in columns)
    net = f"SELECT {cols}, SUM({WEIGHT}) AS __lv_n FROM {zset} GROUP BY {cols} HAVING SUM({WEIGHT}) > 0"
    return f"SELECT {cols} FROM ({net}) LATERAL VIEW explode(sequence(1, CAST(__lv_n AS INT))) AS __lv_i"


def group_state_sql(plan: KeyedAggregatePlan, zset: str) -> str:
    """Spark SQL: the group state table's rows after a first epoch. A global aggregate keeps its
    one row, its counts 0 over no rows (not NULL), as :func:`lakeview.ivm.zsets.merge_group_state` stores it."""
    sums = set(plan.sum_columns())
    items = [f"`{k}`" for k in plan.keys] + [
        f"CASE WHEN {c[:-2]}_c = 0 THEN NULL ELSE {c} END AS {c}" if c in sums else f"COALESCE({c}, 0) AS {c}"
        for c in plan.state_columns()
    ]
    live = f" WHERE {ROWS} <> 0" if plan.keys else ""
    return f"SELECT {', '.join(items)} FROM ({plan.group_delta_sql(zset)}){live}"


def multiset_state_sql(plan: KeyedAggregatePlan, index: int, zset: str) -> str:
    """Spark SQL: a value multiset's rows after a first epoch (values at multiplicity 0 left out)."""
    return f"SELECT * FROM ({plan.multiset_delta_sql(index, zset)}) WHERE {COUNT} <> 0"
