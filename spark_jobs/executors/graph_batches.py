"""A graph view's later large batch: reduced by Spark before anything reaches the driver.

A first batch past ``[spark] driver_rows_max`` input rows is a backfill (:mod:`spark_jobs.executors.graph_backfill`).
A later one meets state the driver keeps, so the driver steps the graph, but the raw batch is never collected
(:mod:`lakeview.graph.later_sql` says what Spark computes):

- a graph without state over append-only inputs (filter / project / expand / UNION ALL): Spark computes the
  view's new rows and the executors write them (:func:`spark_jobs.executors.writes.files_on_executors`),
  appended in the epoch's one commit with its frontier, as a projection's large batch always was;
- otherwise Spark computes the stateless operators below the first stateful ones and hands the driver their
  output reduced: a linear aggregate's partial sums per group, any other operator's input consolidated
  (each distinct row once, its weights summed); change feeds are collected as their newest change per key
  (their Z-set needs the mirror). The driver steps the graph from there and commits as for any epoch.

What still reaches the driver past the bound is said in the log, naming the view, the rows and the setting.
A batch whose size is unknown without a Spark job (a source without footer or line counts), or which a
watermark judges row by row (:class:`spark_jobs.graph_watermark.GraphWatermark`), stays on the driver's path.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from lakeview.graph.later_sql import later_batch_sql, partials_sql
from spark_jobs.executors.graph_backfill import _frames, _zsets, input_rows, uses
from spark_jobs.executors.writes import files_on_executors
from spark_jobs.streams import collect_arrow
from writers.graph_view import small

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeview.ivm.commits import CommitRecord, Epoch
    from spark_jobs.graph_pipeline import GraphPipeline

log = logging.getLogger("lakeview.pipeline")


def later_large(pipeline: GraphPipeline, epoch_id: int) -> bool:
    """Whether ``epoch_id`` (not a first batch: :func:`~spark_jobs.executors.graph_backfill.backfills` said no) has
    more input rows than ``[spark] driver_rows_max``, counted without Spark, and Spark may reduce it."""
    if pipeline.config.format.value not in ("iceberg", "delta") or pipeline.watermark is not None:
        return False
    rows = input_rows(pipeline, None, epoch_id, spark_count=False)
    return rows is not None and rows > pipeline.project.spark.driver_rows_max


def retracting(pipeline: GraphPipeline) -> set[str]:
    """The inputs whose Z-sets may carry deletes: image feeds, upstream views, change feeds."""
    images = {s for s, c in pipeline.configs.items() if c.images is not None}
    return images | set(pipeline.upstreams) | set(pipeline.feeds)


def later_on_executors(pipeline: GraphPipeline, batch: DataFrame | None, epoch_id: int) -> CommitRecord | None:
    """Reduce the later batch ``epoch_id`` with Spark, then append its rows from the executors or step the
    graph over the reduced input in the driver; the view's commit record (None: committed already)."""
    started = time.perf_counter()
    reached, newest_ms, _ = pipeline.epoch_frontier(epoch_id)
    split = _frames(pipeline, batch, epoch_id)
    epoch = pipeline._epoch_of(epoch_id, reached, newest_ms, split.rows_in, split.quarantined)
    spark = pipeline.spark if batch is None else batch.sparkSession
    drivers = set(pipeline.feeds)  # the inputs the driver turns into Z-sets: change feeds, each against its mirror
    spark_frames = {s: f for s, f in split.frames.items() if s not in drivers}
    zsets, _, held = _zsets(pipeline, spark_frames)
    try:
        later = later_batch_sql(pipeline.graph, zsets, f"__lv_lb_{pipeline.view}_", retracting(pipeline), drivers)
        read = uses(later.relations, [*later.given.values(), *[f"FROM {rel}" for rel in later.partials.values()]])
        for name, sql in later.relations:
            relation = spark.sql(sql)
            if later.appended is None and read[name] > 1:  # read by several collects: computed once
                relation = relation.persist()
                held.append(relation)
            relation.createOrReplaceTempView(name)
        if later.appended is not None and not pipeline.staged:
            return _append(pipeline, epoch, spark.sql(later.appended), started)
        inputs = {s: collect_arrow(split.frames[s]) for s in drivers if s in split.frames}
        given = {op: collect_arrow(spark.sql(sql)) for op, sql in later.given.items()}
        partials = {
            op: collect_arrow(spark.sql(partials_sql(pipeline.graph, op, rel, _integral(spark.table(rel)))))
            for op, rel in later.partials.items()
        }
    finally:
        for df in held:
            df.unpersist()
    collected = sum(t.num_rows for t in [*inputs.values(), *given.values(), *partials.values()])
    pipeline.timings = {"spark_read_quarantine_s": time.perf_counter() - started}
    pipeline.last_write = {
        "by": "driver", "reduced_by": "spark", "rows_in": epoch.rows_in, "rows_collected": collected,
        "partials": sorted(partials), "consolidated": sorted(given), "collected_raw": sorted(inputs),
    }  # fmt: skip
    warn_collected(pipeline, epoch, collected, "reduced by Spark first")
    return pipeline.step_and_commit(epoch, inputs, given, partials)


def _integral(frame: DataFrame) -> set[str]:
    """The integer columns of a Spark relation (summed exactly: :func:`lakeview.graph.later_sql.partials_sql`)."""
    from pyspark.sql.types import IntegralType  # lazy: Spark loads only where views run

    return {f.name for f in frame.schema.fields if isinstance(f.dataType, IntegralType)}


def _append(pipeline: GraphPipeline, epoch: Epoch, rows: DataFrame, started: float) -> CommitRecord | None:
    """The view's new rows written by the executors, appended as the epoch's one commit."""
    log.info("%s: epoch %s (%s input rows): its view rows are appended by the executors", epoch.view, epoch.number,
             epoch.rows_in)  # fmt: skip
    writer = pipeline.writer
    last = writer.last_commit()
    if last is not None and last.epoch >= epoch.number:
        return None  # a replay of a committed epoch
    files = files_on_executors(writer, rows, epoch, pipeline.project)
    if pipeline.group is not None:
        records = pipeline.group.commit(epoch, {writer.table_name: files})  # type: ignore[dict-item]
        record = None if records is None else records.get(writer.table_name)
    else:
        record = writer.commit_files(epoch, files)  # type: ignore[attr-defined]
    view_rows = pipeline.view_rows
    assert view_rows is not None
    if view_rows.memory is not None:  # committed past the memory copy: read again on next use, while small
        if small(writer, view_rows.rows_max):
            view_rows.memory.forget()
        else:  # grown past memory's share: changed by key from now on, never read whole
            view_rows.memory = None
    pipeline._last_committed = epoch.number
    pipeline.timings = {"spark_read_quarantine_s": 0.0, "append_s": time.perf_counter() - started}
    pipeline.last_write = {
        "by": "executors", "rows_collected": 0, "files": len(files), "rows": sum(f.rows for f in files),
        "writers": sorted({f.writer for f in files}), "tables": {writer.table_name: sum(f.rows for f in files)},
    }  # fmt: skip
    return record


def warn_collected(pipeline: GraphPipeline, epoch: Epoch, rows: int, how: str) -> None:
    """Say (once per view and process) that an epoch brought more than ``[spark] driver_rows_max`` rows into
    the driver."""
    limit = pipeline.project.spark.driver_rows_max
    if rows <= limit or getattr(pipeline, "_warned_collected", False):
        return
    pipeline._warned_collected = True  # type: ignore[attr-defined]
    log.warning(
        "%s: epoch %s collected %s rows into the driver (%s input rows, %s; more than [spark] driver_rows_max = %s); "
        "set [spark] max_files_per_trigger to bound each batch",
        pipeline.view, epoch.number, rows, epoch.rows_in, how, limit,
    )  # fmt: skip
