"""One Spark Structured Streaming query per view.

Each trigger (the view's cadence) reads only the files that arrived since the last trigger.
Malformed rows are set aside (:mod:`spark_jobs.sources.quarantine`); Spark then computes what is
proportional to the batch: the view's SQL over it (self-mergeable views), the weighted state
deltas (keyed aggregates), or a change feed's newest change per key. A
:class:`~lakeview.ivm.maintain.ViewMaintainer` looks up state by touched key, merges in DuckDB
and commits. Exactly once: every commit records the Spark batch id (the epoch); each table
applies an epoch at most once, and Spark's checkpoint replays any batch it did not record
as done.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from lakeview.config.evolution import record_added, with_evolved_sources
from lakeview.config.models import NewColumns, ProjectConfig
from lakeview.config.schema import parse_ddl
from lakeview.ivm.changefeed import OP, images_sql, latest_sql, mirror_table_name, operation_sql
from lakeview.ivm.commits import CommitRecord, Epoch, Pending
from lakeview.ivm.maintain import ViewMaintainer
from lakeview.ivm.zsets import state_table_names
from lakeview.ops.source_log import batch_files
from lakeview.sql.dag import feed_key
from lakeview.sql.dialects import sql_properties
from lakeview.sql.plan import WEIGHT, AppendPlan, KeyedAggregatePlan
from lakeview.sql.planner import view_plan
from lakeview.sql.watermark import LATE, Watermark, delay_us, event_column
from spark_jobs import faults
from spark_jobs.analysis import with_sum_types
from spark_jobs.driver_delta import maintain_small_batch  # a small batch: DuckDB, no Spark aggregate
from spark_jobs.epoch_loop import EpochLoop
from spark_jobs.executors.bootstrap import bootstrap_on_executors, bootstraps
from spark_jobs.executors.reads import on_executors
from spark_jobs.executors.writes import append_on_executors
from spark_jobs.graph_pipeline import graph_pipeline
from spark_jobs.sources.quarantine import CORRUPT, FILE, Quarantine
from spark_jobs.sources.upstream import upstream_key, with_upstream_source
from spark_jobs.sources.view_changes import ChangePublisher, upstream_position
from spark_jobs.streams import (
    collect_arrow,
    file_stream,
    reconcile_checkpoint,
    source_reader,
    state_table_writer,
)
from writers.base import SnapshotWriter

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.executors.bootstrap import Bootstrap
    from writers.iceberg.group import IcebergGroupWriter

log = logging.getLogger("lakeview.pipeline")
T = TypeVar("T")


class ViewPipeline(EpochLoop):
    """Keeps one view fresh: ``prepare()`` once, then ``start()``."""

    def __new__(cls, spark: SparkSession, project: ProjectConfig, view: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Every view but a projection or keyed aggregate over one source (every join and union) is an operator graph.
        if cls is ViewPipeline:
            graph = graph_pipeline(spark, project, view, *args, **kwargs)
            if graph is not None:
                return graph
        return super().__new__(cls)

    def __init__(
        self,
        spark: SparkSession,
        project: ProjectConfig,
        view: str,
        writer: SnapshotWriter,
        on_commit: Callable[[CommitRecord], None] | None = None,
        state_writer: Callable[[str], SnapshotWriter] | None = None,
    ) -> None:
        self.spark = spark

        project = with_evolved_sources(project)  # sources with new_columns = "evolve": as evolved so far

        self.publisher = ChangePublisher.for_view(project, view, writer)  # None unless other views read this one
        self.upstream_key = upstream_key(project, view)  # a view over a keyed view is keyed like it
        project = with_upstream_source(spark, project, view)  # a view over a view reads its change files
        self.project = project
        self.view = view
        self.config = project.views[view]
        self.plan = view_plan(project, view)
        self.writer = on_executors(writer, spark, project)
        self.on_commit = on_commit
        self.checkpoint = project.checkpoint_path(view)
        self.source_config = project.sources[self.plan.sources[0]]
        self.feed = self.source_config.changes
        made = state_writer or self._iceberg_state_writer
        self.group: IcebergGroupWriter | None = None  # the view's tables committed in one transaction (Iceberg)
        self._state_beside = state_writer is None  # state tables in the view's catalog (not a group's, not Delta)
        # every table the view keeps: past [spark] driver_keys_max rows, read only by the executors
        self._state_writer = lambda name: on_executors(made(name), spark, project)
        self.images = self.source_config.images
        self.maintainer = ViewMaintainer(
            plan=self.plan, view=writer, feed=self.feed, feed_key=self.upstream_key or feed_key(self.source_config)
        )

        column = event_column(self.plan, self.config.event_time)
        self.watermark = (
            Watermark(delay_us(self.config.watermark), column) if self.config.watermark and column else None
        )
        self.quarantine = Quarantine(project, self.source, view)
        self._last_epoch: int | None = None
        self._reread: DataFrame | None = None  # the batch read again with an evolved schema
        self._warned_unbounded = False  # _warn_unbounded_delta says it once
        self._batch_paths: list[Path] | None = (
            None  # this epoch's files from Spark's file-source log (_frontier); None: unknown
        )
        self.timings: dict[str, float] = {}  # the last epoch's phases (seconds), for logs and bench/
        self.last_write: dict[str, object] = {}  # how the last append epoch's rows went: by the driver or executors

    @property
    def source(self) -> str:
        return self.plan.sources[0]

    def _temp_name(self, suffix: str = "") -> str:
        return f"__lv_{self.view}_{self.source}{suffix}"

    def _iceberg_state_writer(self, name: str) -> SnapshotWriter:
        """A state table next to the view's, through the same catalog."""
        return state_table_writer(self.writer, self.view, self.config.namespace, name)

    def _schema_of(self, sql_for: Callable[[str], str], weighted: bool = False) -> pa.Schema:
        """Spark's result schema of some SQL over an empty batch of the source."""
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run
        from pyspark.sql.pandas.types import to_arrow_schema  # lazy: Spark loads only where views run

        empty = self.spark.createDataFrame([], schema=self.source_config.schema_)
        if weighted:
            empty = empty.withColumn(WEIGHT, F.lit(1).cast("int"))
        empty.createOrReplaceTempView(self._temp_name("_schema"))
        return to_arrow_schema(self.spark.sql(sql_for(self._temp_name("_schema"))).schema)

    def _typed(self, plan: KeyedAggregatePlan) -> KeyedAggregatePlan:
        """``plan`` with its SUM/AVG arguments' types (exact weighted sums, overflow an error)."""
        self._schema_of(lambda rel: f"SELECT * FROM {rel}", weighted=True)  # registers the empty relation
        return with_sum_types(self.spark, plan, self._temp_name("_schema"))

    def output_schema(self) -> pa.Schema:
        """The view's columns, from Spark's analysis of its SQL over the source schema."""
        return self._schema_of(lambda rel: self.plan.batch_sql({self.source: rel}))

    def prepare(self) -> None:
        """Create the view's (and its state) tables and reconcile Spark's checkpoint with them."""
        self.prepare_tables()
        self.reconcile_checkpoint()
        self.publish_changes()  # epochs committed before a crash, not yet published

    def publish_changes(self) -> None:
        """Publish the committed epochs' changes for the views reading this one (lakeview.view_changes)."""
        if self.publisher is not None:
            self.publisher.publish()

    def prepare_tables(self) -> None:
        """Create the view's (and its state) tables (a group reconciles its one checkpoint itself)."""
        self.project.source_path(self.source).mkdir(parents=True, exist_ok=True)
        properties = {"lakeview.sql": self.config.sql, "lakeview.cadence": str(self.config.cadence)}

        properties.update(sql_properties(self.config.sql, self.config.dialect))
        m = self.maintainer
        self.writer.ensure_table(self.output_schema(), m.view_key, properties)
        owned = {"lakeview.state-of": self.view}
        if isinstance(self.plan, KeyedAggregatePlan) and not m.view_is_state:
            # no change feed, images or keyed upstream: a multiset only MIN/MAX read keeps each group's extremes
            typed = self._typed(self.plan)
            self.plan = m.plan = typed.model_copy(update={"append_only": m.feed_key is None})
            plan = self.plan
            schemas = [self._schema_of(lambda rel: plan.group_delta_sql(rel), weighted=True)]
            schemas += [
                self._schema_of(lambda rel, i=i: plan.multiset_delta_sql(i, rel), weighted=True)
                for i in range(len(plan.multisets))
            ]
            m.state = [self._state_writer(name) for name in state_table_names(self.view, plan)]
            m.state_schemas = schemas
            for i, (writer, schema) in enumerate(zip(m.state, schemas)):
                key = plan.keys if i == 0 else (*plan.keys, "__lv_v")
                writer.ensure_table(schema, key, owned)
        if self.feed is not None:
            source_schema = self._schema_of(lambda rel: f"SELECT * FROM {rel}")
            m.mirror = self._state_writer(mirror_table_name(self.view))
            m.mirror.ensure_table(source_schema, tuple(self.feed.key), owned)
            m.source_columns = source_schema.names
        self._add_source_columns()  # a restart after the source evolved
        self._commit_together()
        if self.watermark is not None:  # resume the rule where the last commit left it
            wm = self.watermark
            self.watermark = Watermark.recover(wm.delay_us, wm.column, [w.last_commit() for w in m.tables()])

    def _commit_together(self) -> None:
        """An Iceberg view with state tables or a mirror: commit an epoch's change of every one of its tables in
        ONE catalog transaction (:class:`~writers.iceberg.group.IcebergGroupWriter`), so a crash never leaves
        them at different epochs, and a replay is skipped whole (``_done``)."""
        m = self.maintainer
        if not (self._state_beside and len(m.tables()) > 1 and self.writer.capabilities.multi_table_transactions):
            return
        from writers.iceberg.group import IcebergGroupWriter  # lazy: Iceberg's group loads only where used

        members = {w.table_name: w for w in m.tables()}
        group = IcebergGroupWriter(self.writer.catalog, self.view, members, dict.fromkeys(members, self.view))  # type: ignore[attr-defined, arg-type]

        def commit_all(epoch: Epoch, pending: Pending) -> list[CommitRecord | None]:
            records = group.commit(epoch, {writer.table_name: change for writer, change in pending})
            m.tables_through = epoch.number  # committed now or before: no table can hold a later epoch
            return [None if records is None else records.get(writer.table_name) for writer, _ in pending]

        post = group._post

        def post_after_fault_point(staged: list) -> int:  # crash tests: every table staged, nothing committed
            faults.point("before_view_commit", faults.current_epoch)
            return post(staged)

        group._post = post_after_fault_point  # type: ignore[method-assign]
        self.group, m.commit_all = group, commit_all
        # The epoch's lookups read each table as the group's last transaction left it (no catalog round trip):
        # only this view changes its tables' rows (maintenance moves none), a transaction staged on a table that
        # moved anyway is refused (409) and staged again on the tables loaded afresh, and a failed attempt
        # forgets them, so the next epoch loads them.
        for name, writer in members.items():
            writer.committed_table = lambda name=name: group._after_commit.get(name)  # type: ignore[attr-defined]

    def reconcile_checkpoint(self) -> None:
        self._last_epoch = reconcile_checkpoint(self.view, self.checkpoint, self.maintainer, self.writer)
        if self.group is not None:  # every table has the epochs up to the oldest any of them has
            self._last_epoch = self.group.last_epoch()

    def source_stream(self) -> DataFrame:
        """The source as a stream, each row with its file (a view group's one query reads it for all members)."""
        return file_stream(self.spark, self.project, self.source, self.quarantine)

    # --- the epoch (EpochLoop's skeleton; its hooks) ------------------------------------
    committed_in = "table"

    def _done(self, epoch_id: int) -> bool:
        # Views kept in one table, or whose tables commit in one transaction, skip a replayed epoch
        # here; views with state tables committed one by one let each table skip it (a crash may
        # have left some of them committed).
        return self._last_epoch is not None and epoch_id <= self._last_epoch

    def _release(self) -> None:
        self.release_reread()

    def _after_batch(self, epoch_id: int) -> None:
        if (cpu := getattr(self, "_thread_cpu", None)) is not None:  # the epoch's CPU in this (the driver's) thread
            self.timings["thread_cpu_s"] = time.thread_time() - cpu
        log.info("%s: epoch %s timings %s", self.view, epoch_id, {k: round(v, 3) for k, v in self.timings.items()})
        faults.point("before_publish", epoch_id)
        self.publish_changes()

    def _committed(self, epoch_id: int) -> None:
        if self.maintainer.view_is_state or self.group is not None:
            self._last_epoch = epoch_id

    def release_reread(self) -> None:
        """Unpersist the batch read again with an evolved schema (``_evolve``), if any."""
        if self._reread is not None:
            self._reread.unpersist()
            self._reread = None

    def _add_source_columns(self) -> None:
        """An evolving source's new columns reach the tables holding its rows: a ``SELECT *``
        view's table and a change feed's mirror (whose old images then read NULL for them)."""
        if self.source_config.new_columns is not NewColumns.EVOLVE:
            return
        if isinstance(self.plan, AppendPlan) and self.plan.star:
            added = self.writer.add_columns(self.output_schema())
            if added:
                log.warning("%s: columns %s added to the view (its SQL selects *)", self.view, ", ".join(added))
        m = self.maintainer
        if m.mirror is not None:
            source_schema = self._schema_of(lambda rel: f"SELECT * FROM {rel}")
            m.mirror.add_columns(source_schema)
            m.source_columns = source_schema.names
        if self.group is not None:  # its tables as its last transaction left them lack the new columns: load them
            self.group._after_commit = {}

    def _stream_lacks_columns(self, batch: DataFrame) -> bool:
        """Whether the stream's schema (fixed when the query started) lacks source columns: the
        batch's top-level columns, or for a before/after-image feed the fields of its images."""
        if self.images is not None:
            from pyspark.sql.types import StructType  # lazy: Spark loads only where views run

            image = batch.schema[self.images.after].dataType
            have = {n.lower() for n in image.fieldNames()} if isinstance(image, StructType) else set()
        else:
            have = {c.lower() for c in batch.columns}
        return any(c.name.lower() not in have for c in parse_ddl(self.source_config.schema_))

    def _evolve(self, batch: DataFrame, epoch_id: int) -> DataFrame:
        """``new_columns = "evolve"``: add the batch's new input columns to the source schema
        (and to ``SELECT *`` views' tables), and read the batch again when the stream's schema
        (fixed when the query started) lacks columns the source has now."""
        from spark_jobs.sources.evolution import SourceEvolution, batch_files  # lazy: Spark loads only where views run

        # The batch's files as Spark's file-source log names them (_frontier); a Spark job only when unknown.
        files = sorted(str(p) for p in self._batch_paths) if self._batch_paths is not None else batch_files(batch, FILE)
        new = SourceEvolution(batch.sparkSession, self.project, self.source).new_columns(files)
        if new:
            record_added(self.project, self.source, new, epoch=epoch_id, view=self.view)
        project = with_evolved_sources(self.project)
        if project is not self.project:
            self.project, self.source_config = project, project.sources[self.source]
            self.quarantine = Quarantine(project, self.source, self.view)
            self._add_source_columns()
        if not files or not self._stream_lacks_columns(batch):
            return batch
        # Persisted (Spark refuses queries over raw JSON/CSV that only use the corrupt-record
        # column) and released with the batch in _process.
        self._reread = (
            source_reader(batch.sparkSession.read, self.quarantine)
            .load(files)
            .selectExpr("*", f"_metadata.file_path AS {FILE}")
            .persist()
        )
        return self._reread

    def _process_batch(self, batch: DataFrame, epoch_id: int) -> CommitRecord | None:
        spark = batch.sparkSession
        started, self._thread_cpu = time.perf_counter(), time.thread_time()
        self.last_write = {}  # set by the paths that say how the rows went
        frontier, newest_ms = self._frontier(epoch_id)  # first: it names the batch's files
        if self.source_config.new_columns is NewColumns.EVOLVE:
            batch = self._evolve(batch, epoch_id)
        if self.feed is not None:
            batch = batch.selectExpr("*", f"{operation_sql(self.feed)} AS {OP}")
        applied = self._set_watermark(epoch_id)
        split = self.quarantine.split(
            batch, epoch_id, operation=OP if self.feed is not None else None, files=self._batch_paths
        )
        good = split.good.drop(CORRUPT, FILE)
        epoch = Epoch(
            view=self.view,
            number=epoch_id,
            frontier=frontier,
            rows_in=split.rows_in,
            newest_input_ms=newest_ms,
            rows_quarantined=split.quarantined,
            stamps=self._advance_watermark(epoch_id, applied, good, split.late),
        )
        self.timings = {"spark_read_quarantine_s": time.perf_counter() - started}
        faults.current_epoch = epoch_id
        m = self.maintainer

        if bootstraps(self, epoch) and (done := self._bootstrap(epoch, good)) is not None:
            return done.record
        self._warn_unbounded_delta(epoch)

        if (small := maintain_small_batch(self, good, epoch, self._batch_paths)) is not None:
            return small.record
        if self.feed is not None:
            good.createOrReplaceTempView(self._temp_name("_changes"))
            latest = self._spark_part(
                lambda: collect_arrow(spark.sql(latest_sql(self.feed, self._temp_name("_changes"))).drop("__lv_rn"))
            )
            return self._maintain_part(lambda: m.apply_changes(epoch, latest))
        if m.view_is_state:
            good.createOrReplaceTempView(self._temp_name())
            if self.plan.is_append and epoch.rows_in > self.project.spark.driver_rows_max:
                return self._append_on_executors(
                    epoch, spark.sql(self.plan.batch_sql({self.source: self._temp_name()}))
                )
            delta = self._spark_part(
                lambda: collect_arrow(spark.sql(self.plan.batch_sql({self.source: self._temp_name()})))
            )
            self.last_write = {"by": "driver", "rows_collected": delta.num_rows}
            return self._maintain_part(lambda: m.apply_view_delta(epoch, delta))
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run

        if self.images is not None:
            good.createOrReplaceTempView(self._temp_name("_images"))
            columns = [c.name for c in parse_ddl(self.source_config.schema_)]
            weighted = spark.sql(images_sql(self.images, columns, self._temp_name("_images")))
        elif WEIGHT in good.columns:
            weighted = good  # a view over a view: the upstream's change files carry their weights
        else:
            weighted = good.withColumn(WEIGHT, F.lit(1).cast("int"))
        weighted.createOrReplaceTempView(self._temp_name())
        if (
            self.images is not None and m.watermark is not None
        ):  # each image judged in the driver (ViewMaintainer.apply_images)
            zset = self._spark_part(lambda: collect_arrow(weighted))
            return self._maintain_part(lambda: m.apply_images(epoch, zset))
        if isinstance(self.plan, AppendPlan):  # a projection over before/after images
            rows = self._spark_part(lambda: collect_arrow(spark.sql(self.plan.weighted_sql(self._temp_name()))))
            return self._maintain_part(lambda: m.apply_weighted_rows(epoch, rows))
        plan = self.plan
        group = self._spark_part(lambda: collect_arrow(spark.sql(plan.group_delta_sql(self._temp_name()))))
        values = self._spark_part(
            lambda: [
                collect_arrow(spark.sql(plan.multiset_delta_sql(i, self._temp_name())))
                for i in range(len(plan.multisets))
            ]
        )
        return self._maintain_part(lambda: m.apply_state_deltas(epoch, group, values))

    def _set_watermark(self, epoch_id: int) -> int | None:
        """The watermark this epoch applies: late rows go to the quarantine; windows it closed
        lose their state (lakeview.watermark)."""
        if self.watermark is None:
            return None
        applied = self.watermark.for_epoch(epoch_id)
        self.maintainer.closed_before_us = applied
        if (
            self.feed is not None or self.images is not None
        ):  # each image is judged (ViewMaintainer.apply_changes/apply_images)
            self.maintainer.watermark, self.maintainer.set_aside = self.watermark, self.quarantine.set_aside_late
            return applied
        late = self.watermark.late_sql(applied)
        self.quarantine.late = (
            (late, self.watermark.reason(applied)) if late is not None and applied is not None else None
        )
        return applied

    def _advance_watermark(self, epoch_id: int, applied: int | None, good: DataFrame, late: int) -> dict[str, str]:
        """The summary keys of this epoch's commits: the watermark applied, the max event time
        of the rows the view consumes (on time, passing WHERE), the late row count (a change
        feed's: stamped by the maintainer)."""
        if self.watermark is None or self.feed is not None or self.images is not None:
            return {}

        name = self._temp_name("_events")
        good.createOrReplaceTempView(name)
        where = f" WHERE {self.plan.where}" if self.plan.where else ""
        sql = f"SELECT max(unix_micros(`{self.watermark.column}`)) AS t FROM {name} AS {self.plan.alias}{where}"
        batch_max = self._spark_part(lambda: good.sparkSession.sql(sql).first()["t"])
        return {**self.watermark.advance(epoch_id, applied, batch_max), LATE: str(late)}

    def _warn_unbounded_delta(self, epoch: Epoch) -> None:
        """Keyed views merge each later batch's delta in the driver (a first batch is written by the
        executors, spark_jobs.bootstrap): say once when one is large and nothing bounds the
        batches ([spark] max_files_per_trigger)."""
        limits = self.project.spark
        if (
            self.plan.is_append
            and self.maintainer.view_is_state
            or limits.max_files_per_trigger
            or epoch.rows_in <= limits.driver_rows_max
        ):
            return
        if not self._warned_unbounded:
            self._warned_unbounded = True
            log.warning(
                "%s: epoch %s has %s input rows (more than [spark] driver_rows_max = %s) and its delta is merged in the driver "
                "(only a first batch into empty tables is written by the executors); "
                "set [spark] max_files_per_trigger to bound each batch",
                self.view,
                epoch.number,
                epoch.rows_in,
                limits.driver_rows_max,
            )

    def _append_on_executors(self, epoch: Epoch, rows: DataFrame) -> CommitRecord | None:
        """A large append batch: executors write its data files, the driver commits their metadata."""

        record, files = self._maintain_part(lambda: append_on_executors(self.writer, rows, epoch, self.project))
        writers = sorted({f.writer for f in files})
        self.last_write = {
            "by": "executors",
            "rows_collected": 0,
            "files": len(files),
            "rows": sum(f.rows for f in files),
            "writers": writers,
        }
        return record

    def _bootstrap(self, epoch: Epoch, good: DataFrame) -> Bootstrap | None:
        """A large first batch: every table's rows computed by Spark and written by the executors
        (None: left to the driver, see spark_jobs.bootstrap)."""

        done = self._maintain_part(lambda: bootstrap_on_executors(self, good, epoch))
        if done is not None:
            self.last_write = done.report()
        return done

    def _spark_part(self, step: Callable[[], T]) -> T:
        """Run a Spark step, adding its time to this epoch's ``spark_delta_s``."""
        started = time.perf_counter()
        result = step()
        self.timings["spark_delta_s"] = self.timings.get("spark_delta_s", 0.0) + time.perf_counter() - started
        return result

    def _maintain_part(self, step: Callable[[], T]) -> T:
        """State lookups, the DuckDB merge and the commits (``maintain_s``)."""
        started, cpu = time.perf_counter(), time.thread_time()
        result = step()
        self.timings["maintain_s"] = time.perf_counter() - started
        # this thread's CPU seconds: on a shared machine the wall time stretches with the load, this much less
        self.timings["maintain_cpu_s"] = time.thread_time() - cpu
        return result

    def _frontier(self, epoch_id: int) -> tuple[dict[str, object], int | None]:
        """The source position this epoch reaches (Spark's offset log) and the newest input's
        arrival time (the newest file's modification time, from Spark's file-source log)."""
        offsets = self.checkpoint / "offsets" / str(epoch_id)
        lines = offsets.read_text().splitlines() if offsets.exists() else []
        position = json.loads(lines[2]) if len(lines) >= 3 else {}
        log_offset = position.get("logOffset") if isinstance(position, dict) else None
        files = batch_files(self.checkpoint, log_offset) if log_offset is not None else []
        newest = max((f.modified_ms for f in files), default=None)
        self._batch_paths = [f.path for f in files] if log_offset is not None else None  # None: unknown

        return {self.source: {"log_offset": log_offset, "files": len(files), **upstream_position(files)}}, newest
