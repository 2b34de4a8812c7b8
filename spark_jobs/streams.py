"""A view's streaming query: its source's file stream, starting it at the view's cadence,
reconciling Spark's checkpoint with the tables, collecting small results as Arrow."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import pyarrow as pa

from lakeview.config.models import ProjectConfig, SourceFormat
from lakeview.errors import WriterError
from spark_jobs.epoch_guard import guarded  # transient errors retried, the final one noted for supervision
from spark_jobs.sources.quarantine import CORRUPT, FILE, Quarantine
from writers.iceberg.writer import IcebergWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakeview.config.cadence import Cadence
    from writers.base import SnapshotWriter

log = logging.getLogger("lakeview.pipeline")
T = TypeVar("T")


def source_reader(reader: T, quarantine: Quarantine) -> T:
    """A stream or batch reader of ``quarantine``'s source as Lakeview reads it: its (evolved)
    schema, malformed rows kept in the corrupt-record column."""
    source = quarantine.config
    reader = reader.format(source.format.reader_format).schema(quarantine.read_schema())  # type: ignore[attr-defined]
    if source.format is SourceFormat.CSV:
        reader = reader.option("header", "true")
    if source.format.reader_format in ("json", "csv"):
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    return reader


def file_stream(spark: SparkSession, project: ProjectConfig, source: str, quarantine: Quarantine) -> DataFrame:
    """A source's file stream, each row with its file (``[spark] max_files_per_trigger`` bounds
    each batch, so each delta the driver holds)."""
    reader = source_reader(spark.readStream, quarantine)
    if project.spark.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", project.spark.max_files_per_trigger)
    return reader.load(str(project.source_path(source))).selectExpr("*", f"_metadata.file_path AS {FILE}")


def start_query(
    stream: DataFrame,
    name: str,
    checkpoint: Path,
    process: Callable[[DataFrame, int], None],
    cadence: Cadence,
    available_now: bool,
) -> StreamingQuery:
    """Start ``stream``'s query, ``process`` per batch (``available_now`` or a manual cadence:
    what has landed, then stop)."""

    writer = (
        stream.writeStream.queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(guarded(name, process))
    )
    if available_now or cadence.is_manual:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=cadence.spark_trigger)
    return writer.start()


def collect_arrow(df: DataFrame) -> pa.Table:
    """Collect a (small) DataFrame to the driver as Arrow, keeping exact types."""
    from pyspark.sql.pandas.types import to_arrow_schema  # lazy: Spark loads only where views run

    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def reconcile_checkpoint(
    view: str, checkpoint: Path, last: int | None, created_ms: Callable[[], int | None] | None = None
) -> None:
    """Check Spark's checkpoint against ``last``, the tables' last epoch (a checkpoint without commits
    starts over; commits without a checkpoint are refused). ``created_ms``: when the view's table was made; one
    made before Spark finished its first epoch saw every epoch and kept nothing (a view whose input never had a
    row it keeps commits no empty epoch), so the checkpoint is kept; a table made since (dropped to rebuild the
    view) starts over."""
    commits = (
        [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()] if (checkpoint / "commits").exists() else []
    )
    has_progress = bool(commits)
    made = created_ms() if created_ms is not None and last is None and has_progress else None
    if made is not None and made <= min(p.stat().st_mtime for p in commits) * 1000:
        log.info("%s: no epoch has changed the view yet; resuming from Spark's checkpoint", view)
    elif last is None and has_progress:
        log.warning("%s: the table has no commits but a checkpoint exists; starting over", view)
        shutil.rmtree(checkpoint)
    elif last is not None and not (checkpoint / "offsets").exists():
        raise WriterError(
            f"{view}: the table is at epoch {last} but Spark's checkpoint {checkpoint} is "
            "missing, so the sources' positions are unknown; drop the view's table to rebuild it"
        )


def state_table_writer(writer: SnapshotWriter, view: str, namespace: str, name: str) -> SnapshotWriter:
    """A state table next to the view's, through the same catalog."""
    if not writer.capabilities.catalog_commits:
        raise WriterError(f"{view}: its SQL needs state tables, which are kept in Iceberg; use format = 'iceberg'")

    beside = cast("IcebergWriter", writer)  # catalog_commits: an Iceberg writer
    return IcebergWriter(beside.catalog, namespace, name, compaction=beside.compaction)
