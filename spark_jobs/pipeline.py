"""One Spark Structured Streaming query per view.

Each trigger (the view's cadence) reads only the files that arrived since the last trigger,
runs the view's SQL over that batch (its delta), and hands the delta to the writer through
the incremental plan. Exactly once: every commit records the Spark batch id (the epoch);
a replayed batch whose epoch the table already has is skipped, and Spark's checkpoint
replays any batch whose commit it did not record.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeview.config import ProjectConfig, SourceFormat
from lakeview.errors import WriterError
from lakeview.ivm import change_for
from lakeview.plan import plan_view
from lakeview.source_log import batch_files
from writers.base import CommitRecord, Epoch, SnapshotWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("lakeview.pipeline")


class ViewPipeline:
    """Keeps one view fresh: ``prepare()`` once, then ``start()``."""

    def __init__(
        self,
        spark: SparkSession,
        project: ProjectConfig,
        view: str,
        writer: SnapshotWriter,
        on_commit: Callable[[CommitRecord], None] | None = None,
    ) -> None:
        self.spark = spark
        self.project = project
        self.view = view
        self.config = project.views[view]
        self.plan = plan_view(view, self.config.sql)
        self.writer = writer
        self.on_commit = on_commit
        self.checkpoint = project.checkpoint_path(view)
        self._last_epoch: int | None = None

    @property
    def source(self) -> str:
        return self.plan.sources[0]

    def _temp_name(self, suffix: str = "") -> str:
        return f"__lv_{self.view}_{self.source}{suffix}"

    def output_schema(self) -> pa.Schema:
        """The view's columns, from Spark's analysis of its SQL over the source schema."""
        from pyspark.sql.pandas.types import to_arrow_schema

        source = self.project.sources[self.source]
        empty = self.spark.createDataFrame([], schema=source.schema_)
        empty.createOrReplaceTempView(self._temp_name("_schema"))
        struct = self.spark.sql(self.plan.batch_sql({self.source: self._temp_name("_schema")})).schema
        return to_arrow_schema(struct)

    def prepare(self) -> None:
        """Create the view's table and reconcile Spark's checkpoint with the table's last epoch."""
        self.project.source_path(self.source).mkdir(parents=True, exist_ok=True)
        properties = {"lakeview.sql": self.config.sql, "lakeview.cadence": str(self.config.cadence)}
        self.writer.ensure_table(self.output_schema(), self.plan.key, properties)
        last = self.writer.last_commit()
        has_progress = (self.checkpoint / "commits").exists() and any((self.checkpoint / "commits").iterdir())
        if last is None and has_progress:
            log.warning("%s: the table has no commits but a checkpoint exists; starting over", self.view)
            shutil.rmtree(self.checkpoint)
        elif last is not None and not (self.checkpoint / "offsets").exists():
            raise WriterError(
                f"{self.view}: the table is at epoch {last.epoch} but Spark's checkpoint {self.checkpoint} is "
                "missing, so the sources' positions are unknown; drop the view's table to rebuild it"
            )
        self._last_epoch = last.epoch if last else None

    def start(self, available_now: bool = False) -> StreamingQuery:
        """Start the streaming query (``available_now``: process what has landed, then stop)."""
        source = self.project.sources[self.source]
        reader = self.spark.readStream.format(source.format.reader_format).schema(source.schema_)
        if source.format is SourceFormat.CSV:
            reader = reader.option("header", "true")
        stream = reader.load(str(self.project.source_path(self.source)))
        writer = (
            stream.writeStream.queryName(f"lakeview_{self.view}")
            .option("checkpointLocation", str(self.checkpoint))
            .foreachBatch(self._process)
        )
        if available_now or self.config.cadence.is_manual:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.config.cadence.spark_trigger)
        return writer.start()

    def _process(self, batch: DataFrame, epoch_id: int) -> None:
        if self._last_epoch is not None and epoch_id <= self._last_epoch:
            log.info("%s: epoch %s already in the table; skipping the replay", self.view, epoch_id)
            return
        batch.createOrReplaceTempView(self._temp_name())
        delta_df = batch.sparkSession.sql(self.plan.batch_sql({self.source: self._temp_name()}))
        delta = collect_arrow(delta_df)
        frontier, newest_ms = self._frontier(epoch_id)
        epoch = Epoch(view=self.view, number=epoch_id, frontier=frontier, rows_in=batch.count(), newest_input_ms=newest_ms)
        record = self.writer.commit(epoch, change_for(self.plan, delta, self.writer))
        self._last_epoch = epoch_id
        if record is not None:
            log.info("%s: committed epoch %s as snapshot %s", self.view, epoch_id, record.snapshot_id)
            if self.on_commit is not None:
                self.on_commit(record)

    def _frontier(self, epoch_id: int) -> tuple[dict[str, object], int | None]:
        """The source position this epoch reaches (Spark's offset log) and the newest input's
        arrival time (the newest file's modification time, from Spark's file-source log)."""
        offsets = self.checkpoint / "offsets" / str(epoch_id)
        lines = offsets.read_text().splitlines() if offsets.exists() else []
        position = json.loads(lines[2]) if len(lines) >= 3 else {}
        log_offset = position.get("logOffset") if isinstance(position, dict) else None
        files = batch_files(self.checkpoint, log_offset) if log_offset is not None else []
        newest = max((f.modified_ms for f in files), default=None)
        return {self.source: {"log_offset": log_offset, "files": len(files)}}, newest


def collect_arrow(df: DataFrame) -> pa.Table:
    """Collect a (small) DataFrame to the driver as Arrow, keeping exact types."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
