"""A graph view's first large batch (a backfill), computed by Spark and written by its executors.

:class:`~spark_jobs.graph_pipeline.GraphPipeline` steps every epoch through the view's operator graph in the
driver. Its first batch is the whole history; stepped in the driver, every source's history would be
collected and every state table read into memory. Past ``[spark] driver_rows_max`` input rows, with every
table the view keeps still empty (or holding this very epoch: a Delta replay), the batch is never
collected: each source's Z-set is a Spark relation (a change feed's newest non-delete image per key at +1,
its mirror's rows; an image feed's or an upstream view's weighted rows; an append stream's rows at +1), and
:func:`lakeview.graph.backfill_sql.first_batch_sql` gives, from the graph, every operator's output, each
state table's rows and the view's rows as Spark SQL over them. The executors write each table's data files
(:func:`spark_jobs.executors.writes.files_on_executors`); the driver holds their metadata only.

Commit. Iceberg: every table's files in ONE catalog transaction (the view's group writer), so a crash
leaves all of them at the epoch or none (a replay writes them again; the files of the lost attempt are
orphans ``lakeview maintain`` removes). Delta: the state tables and mirrors first, the view's table last,
as the driver's path commits them; a replay writes only the tables that lack the epoch.

Afterwards the tables past ``[spark] driver_keys_max`` live rows are never read whole into the driver:
their lookups go to the table by key (:class:`writers.graph_table_rows.TableRows`), on a restart too.
Left to the driver: a batch at or below the bound, a later batch (reduced by Spark first past the bound:
:mod:`spark_jobs.executors.graph_batches`), a batch a watermark already applies to (a
first batch carries the watermark's first advance: the newest event time of its source, computed by Spark).
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakeview.graph import WEIGHT as GRAPH_WEIGHT
from lakeview.graph.backfill_sql import FirstBatch, first_batch_sql
from lakeview.graph.overflow import aggregate_error
from lakeview.ivm.changefeed import DELETE, OP, operation_sql
from lakeview.ivm.commits import CommitRecord, Epoch
from lakeview.sql.plan import WEIGHT
from spark_jobs import faults
from spark_jobs.executors.writes import files_on_executors
from spark_jobs.source_frames import SourceFrames, _input_frame, file_frame, source_frames
from spark_jobs.sources.json_lines import json_line_count
from writers.graph_log import OP as LOG_OP
from writers.graph_log import StateLog
from writers.graph_state import CommittedRows
from writers.graph_table_rows import LogRows, TableRows, live_rows, mirror_rows
from writers.staged_files import ReplacingFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.graph_pipeline import GraphPipeline
    from writers.base import SnapshotWriter
    from writers.staged_files import WrittenFile

log = logging.getLogger("lakeview.pipeline")


@dataclass
class Bootstrap:
    """What a backfilled epoch wrote: the view's commit and each table's executor-written files."""

    record: CommitRecord | None
    files: dict[str, list[WrittenFile]] = field(default_factory=dict)  # table name -> files (none: it had the epoch)

    def report(self) -> dict[str, object]:
        """How the epoch's rows went (a pipeline's ``last_write``): by the executors, none collected."""
        files = [f for written in self.files.values() for f in written]
        return {
            "by": "executors", "bootstrap": True, "rows_collected": 0, "files": len(files), "rows": sum(f.rows for f in files),
            "writers": sorted({f.writer for f in files}), "tables": {name: sum(f.rows for f in fs) for name, fs in self.files.items()},
        }  # fmt: skip


def backfills(pipeline: GraphPipeline, batch: DataFrame | None, epoch_id: int) -> bool:
    """Whether ``epoch_id`` is a large first batch the executors write (see the module's doc)."""
    if pipeline.config.format.value not in ("iceberg", "delta"):
        return False
    if pipeline.watermark is not None and pipeline.watermark.applies(epoch_id):
        return False  # rows are judged against a watermark in the driver (GraphWatermark.apply)
    held = pipeline._last_epoch  # the newest epoch any table held at start: a later epoch is no first batch
    if pipeline._last_committed is not None or (held is not None and held < epoch_id):
        return False  # (no table is loaded for it: this runs before every epoch)
    if not all((last := w.last_commit()) is None or last.epoch == epoch_id for w in pipeline.tables()):
        return False
    return input_rows(pipeline, batch, epoch_id) > pipeline.project.spark.driver_rows_max  # type: ignore[operator]


def input_rows(pipeline: GraphPipeline, batch: DataFrame | None, epoch_id: int, spark_count: bool = True) -> int | None:
    """The epoch's input rows: from Parquet footers and JSON lines, else counted by Spark (``spark_count``: a job,
    worth it for a first batch only; without it None)."""
    _, _, paths = pipeline.epoch_frontier(epoch_id)
    rows = 0
    for source in pipeline.sources:
        files = paths.get(source, [])
        counted = pipeline.quarantines[source].footer_count(files)
        if counted is None and source in pipeline.direct:  # JSON lines the driver reads: its lines
            counted = json_line_count(files)
        if counted is None and not spark_count:
            return None
        if counted is None and batch is None:  # (compressed) counted by Spark
            counted = file_frame(pipeline.spark, pipeline.quarantines[source], files).count()
        if counted is None:  # else the batch's rows, counted by Spark
            return batch.count()
        rows += counted
    return rows


def backfill_on_executors(pipeline: GraphPipeline, batch: DataFrame | None, epoch_id: int) -> CommitRecord | None:
    """Compute the first batch with Spark and commit every table's executor-written files for ``epoch_id``;
    the view's commit record (None: the epoch was committed already)."""
    started = time.perf_counter()
    reached, newest_ms, _ = pipeline.epoch_frontier(epoch_id)
    split = _frames(pipeline, batch, epoch_id)
    epoch = pipeline._epoch_of(epoch_id, reached, newest_ms, split.rows_in, split.quarantined)
    if pipeline.watermark is not None:  # nothing is late yet (see backfills): the watermark's first advance
        epoch = pipeline.watermark.first_advance(epoch, split.frames[pipeline.watermark.source])
    spark = pipeline.spark if batch is None else batch.sparkSession  # a foreachBatch's temp views live in its session
    zsets, mirrors, held = _zsets(pipeline, split.frames)
    try:
        prefix = f"__lv_bf_{pipeline.view}_"
        first = first_batch_sql(pipeline.graph, zsets, prefix)
        uses = _uses(first)
        for name, sql in first.relations:
            relation = spark.sql(sql)
            if uses[name] > 1:  # read by several tables' jobs (a state table and the operator above): once
                relation = relation.persist()
                held.append(relation)
            relation.createOrReplaceTempView(name)
        _check_sums(pipeline, spark, first)
        assert pipeline.store is not None
        tables: list[tuple[SnapshotWriter, DataFrame]]
        if pipeline.store.log is not None:  # Iceberg: every state in the one log table
            tables = [(pipeline.store.log, _packed_log(spark, pipeline.store.packing, first.state))]
        else:
            # (a join side kept as a feed's mirror has no table of its own: the mirror is written below)
            tables = [
                (pipeline.state[name], spark.sql(sql)) for name, sql in first.state.items() if name in pipeline.state
            ]
        tables += [(pipeline.mirrors[source], rows) for source, rows in mirrors.items()]
        tables.append((pipeline.writer, spark.sql(first.view)))  # last: see the module's doc
        read_s = time.perf_counter() - started
        done = _write_and_commit(pipeline, epoch, tables)
    finally:
        for df in held:
            df.unpersist()
    pipeline.timings = {"spark_read_quarantine_s": read_s, "backfill_s": time.perf_counter() - started}
    pipeline.last_write = done.report()
    _after_backfill(pipeline, epoch_id, {name: sum(f.rows for f in files) for name, files in done.files.items()})
    return done.record


def _check_sums(pipeline: GraphPipeline, spark, first: FirstBatch) -> None:  # type: ignore[no-untyped-def]
    """Raise AggregateOverflowError, before any table is written, where a sum over the batch left the type SQL
    gives it (Spark's own SUM would have written a wrapped value, or a NULL)."""
    for check in first.checks:
        flagged = spark.sql(check.sql).first()
        for i in check.aggs:
            if flagged is not None and flagged[f"__lv_f{i}"]:
                raise aggregate_error(pipeline.view, pipeline.graph, check.op, i, "the first batch's rows")


def _packed_log(spark, packing: StateLog, states: dict[str, str]) -> DataFrame:  # type: ignore[no-untyped-def]
    """Every state's first-batch rows as rows of the view's one state log (:class:`writers.graph_log.StateLog`:
    the state's name in ``__lv_op``, its columns in the log's columns shared by type, the others NULL)."""
    from pyspark.sql.pandas.types import from_arrow_type  # lazy: Spark loads only where views run

    types = {f.name: from_arrow_type(f.type).simpleString() for f in packing.schema}
    parts = []
    for name, sql in states.items():
        if name not in packing.slots:  # a join side kept as a feed's mirror (written as the mirror)
            continue
        mine = {slot: column for column, slot in packing.slots[name].items()}
        literal = name.replace("\\", "\\\\").replace("'", "\\'")
        columns = [f"'{literal}' AS `{LOG_OP}`"]
        for f in packing.schema:
            if f.name not in (LOG_OP, GRAPH_WEIGHT):
                value = f"`{mine[f.name]}`" if f.name in mine else "NULL"
                columns.append(f"CAST({value} AS {types[f.name]}) AS `{f.name}`")
        columns.append(f"CAST(`{GRAPH_WEIGHT}` AS BIGINT) AS `{GRAPH_WEIGHT}`")
        parts.append(f"SELECT {', '.join(columns)} FROM ({sql})")
    return spark.sql(" UNION ALL ".join(parts))


def _uses(first: FirstBatch) -> Counter[str]:
    """How many queries (relations, state tables, the view) read each relation of the first batch."""
    return uses(first.relations, [*list(first.state.values()), first.view])


def uses(relations: list[tuple[str, str]], queries: list[str]) -> Counter[str]:
    """How many of the ``relations``' and ``queries``' texts read each relation (a relation read more than once is
    worth persisting: every read would compute it again)."""
    texts = [sql for _, sql in relations] + queries
    return Counter({name: sum(len(re.findall(rf"\b{re.escape(name)}\b", t)) for t in texts) for name, _ in relations})


def _frames(pipeline: GraphPipeline, batch: DataFrame | None, epoch_id: int) -> SourceFrames:
    """Each source's input frame: split from Spark's batch, or (the driver stream: sources the driver reads)
    read by Spark from the epoch's files."""
    paths = pipeline._batch_paths
    if batch is not None:
        args = (pipeline.view, pipeline.sources, pipeline.configs, pipeline.quarantines, epoch_id, paths)
        return source_frames(batch, *args, pipeline.upstreams)
    spark, out = pipeline.spark, SourceFrames()
    for source in pipeline.sources:
        config = pipeline.configs[source]
        part = file_frame(spark, pipeline.quarantines[source], paths.get(source, []))
        operation = None
        if config.changes is not None:
            part, operation = part.selectExpr("*", f"{operation_sql(config.changes)} AS {OP}"), OP
        split = pipeline.quarantines[source].split(part, epoch_id, operation=operation, files=paths.get(source))
        out.rows_in, out.quarantined = out.rows_in + split.rows_in, out.quarantined + split.quarantined
        out.frames[source] = _input_frame(split.good, pipeline.view, source, config, source in pipeline.upstreams)
    return out


def _zsets(pipeline: GraphPipeline, frames: dict[str, DataFrame]) -> tuple[dict[str, str], dict[str, DataFrame], list]:
    """Each graph input's Z-set as a temp view (its columns and the graph's weight), each change feed's mirror
    rows, and the DataFrames persisted for them (a feed's newest images feed its Z-set and its mirror)."""
    zsets: dict[str, str] = {}
    mirrors: dict[str, DataFrame] = {}
    held = []
    for source, frame in frames.items():
        columns = pipeline.schemas[source].names
        cols = ", ".join(f"`{c}`" for c in columns)
        name = f"__lv_bf_{pipeline.view}_src_{source}"
        if source in pipeline.feeds:  # no mirror yet: the newest non-delete image per key at +1
            images = frame.where(f"{OP} <> '{DELETE}'").selectExpr(*[f"`{c}`" for c in columns]).persist()
            held.append(images)
            mirror = images.selectExpr("*", f"CAST(1 AS BIGINT) AS {GRAPH_WEIGHT}")  # a Z-set, as state
            # sorted by the key (files of disjoint key ranges): looked up by its row groups past the bound
            mirrors[source] = mirror.orderBy(*[f"`{k}`" for k in pipeline.feeds[source].key])
            images.selectExpr("*", f"CAST(1 AS BIGINT) AS {GRAPH_WEIGHT}").createOrReplaceTempView(name)
        else:
            frame.createOrReplaceTempView(f"{name}_in")
            frame.sparkSession.sql(
                f"SELECT {cols}, CAST({WEIGHT} AS BIGINT) AS {GRAPH_WEIGHT} FROM {name}_in"
            ).createOrReplaceTempView(name)
        if source in pipeline.graph.schemas:
            zsets[source] = name
    return zsets, mirrors, held


def _write_and_commit(
    pipeline: GraphPipeline, epoch: Epoch, tables: list[tuple[SnapshotWriter, DataFrame]]
) -> Bootstrap:
    """Each table's files written by the executors, then committed: one transaction (Iceberg) or table by
    table with the view's last (Delta; a table holding the epoch already is skipped)."""
    log.info("%s: epoch %s (%s input rows) is a first batch: %s tables written by the executors",
             epoch.view, epoch.number, epoch.rows_in, len(tables))  # fmt: skip
    done = Bootstrap(record=None)
    written: dict[str, list[WrittenFile]] = {}
    for writer, rows in tables:
        last = writer.last_commit()
        if last is not None and last.epoch >= epoch.number:
            continue  # a replay after a crash between the commits: this table has the epoch
        files = files_on_executors(writer, rows, epoch, pipeline.project)
        # the view's first epoch replaces what its table holds (a rebuild's baseline rows: see ViewRows.replaces)
        replaces = writer is pipeline.writer and pipeline.view_rows is not None and pipeline.view_rows.replaces
        written[writer.table_name] = ReplacingFiles(files) if replaces else files
    done.files = written
    if pipeline.group is not None:
        faults.point("before_view_commit", epoch.number)  # Iceberg: before the one transaction of every table
        records = pipeline.group.commit(epoch, dict(written))  # type: ignore[arg-type]
        done.record = None if records is None else records.get(pipeline.writer.table_name)
        return done
    for writer, _ in tables:
        if writer.table_name in written:
            record = writer.commit_files(epoch, written[writer.table_name])  # type: ignore[attr-defined]
            if writer is pipeline.writer:
                done.record = record
    return done


def _after_backfill(pipeline: GraphPipeline, epoch_id: int, rows: dict[str, int]) -> None:
    """The graph's state now exists (no operator starts it again) and the driver holds none of it: the
    memory copies read their table on first use, or by key past the bound."""
    pipeline.graph.runtime.epoch = 1
    pipeline._last_committed = epoch_id
    assert pipeline.store is not None
    for rows_of in pipeline.store.memory.values():
        rows_of.forget()
    assert pipeline.mirror_store is not None
    for mirror in pipeline.mirror_store.store.memory.values():
        mirror.forget()
    assert pipeline.view_rows is not None
    pipeline.view_rows.replaces = False  # the view's table holds its epoch now
    if pipeline.view_rows.memory is not None:
        pipeline.view_rows.memory.forget()
    bound_memory(pipeline, rows)


def bound_memory(pipeline: GraphPipeline, rows: dict[str, int] | None = None) -> None:
    """Serve the lookups of every state table and mirror past ``[spark] driver_keys_max`` live rows from the
    table by key (:class:`~writers.graph_table_rows.TableRows`; a mirror on Iceberg by its row groups' key ranges,
    :func:`~writers.graph_table_rows.mirror_rows`), not a memory copy. ``rows``: each table's
    rows if known (else read from its metadata)."""
    store, bound = pipeline.store, pipeline.project.spark.driver_keys_max
    assert store is not None
    if store.log is not None:  # Iceberg: every state in the one log, each looked up in it by key past the bound
        count = _rows(store.log, rows)
        if count > bound:
            for name, memory in list(store.memory.items()):
                store.memory[name] = LogRows(store.log, store.packing, name, memory.key, memory.schema, memory.duck)
            store.logged[store.log.table_name] = store.folded[store.log.table_name] = count
    for name, writer in pipeline.state.items() if store.log is None else ():
        count = _rows(writer, rows)
        if count > bound:
            memory = store.memory[name]
            store.memory[name] = TableRows(writer, memory.key, memory.schema, memory.duck)
            store.logged[name] = store.folded[name] = count
    for source, writer in pipeline.mirrors.items():
        if _rows(writer, rows) > bound:
            mirrors = pipeline.mirror_store.store  # type: ignore[union-attr]  # (prepare made it)
            memory = mirrors.memory[source]
            mirrors.memory[source] = mirror_rows(writer, memory.key, memory.schema, memory.duck)
            mirrors.logged[source] = mirrors.folded[source] = _rows(writer, rows)


def bound_grown(pipeline: GraphPipeline) -> None:
    """After an epoch's commit: once a table the driver holds in memory has grown past ``[spark] driver_keys_max``
    rows, every table past the bound is looked up by key from then on (:func:`bound_memory`), as at a start, so a
    long-running view's memory stays bounded. A table not held (past the bound already, or not read yet) costs
    nothing here."""
    bound = pipeline.project.spark.driver_keys_max
    stores = [pipeline.store, pipeline.mirror_store.store]  # type: ignore[union-attr]  # (prepare made them)
    held = [m.held() for s in stores for m in s.memory.values() if type(m) is CommittedRows and m.runs is not None]
    if any(rows is not None and rows > bound for rows in held):
        bound_memory(pipeline)


def _rows(writer: SnapshotWriter, rows: dict[str, int] | None) -> int:
    if rows is not None and writer.table_name in rows:
        return rows[writer.table_name]
    return live_rows(writer)
