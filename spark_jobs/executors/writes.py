"""Large append batches: Spark's executors write the data files, the driver commits metadata.

A projection/filter view over an append-only source appends every row of its batch. Past
``[spark] driver_rows_max`` input rows the view's rows are never collected to the driver: each
Spark task (``mapInArrow``) streams its partition into Parquet files in the table's data
location through pyiceberg's FileIO (a local path or ``s3://`` with the warehouse's endpoint and
credentials; Spark's Hadoop filesystems are not used, they cannot reach S3 here) and returns one
small row per file. The driver commits those rows as one snapshot (``commit_files`` of the
Iceberg and Delta writers).

Bounds: the driver holds one :class:`~writers.staged_files.WrittenFile` per file (path, size,
row count, column stats); a task holds at most ``FILE_BYTES`` of Arrow before it writes a file.

This module is shipped to executors by value (cloudpickle), so a cluster's executors need
pyarrow and pyiceberg (Delta too: the files are plain Parquet; deltalake stays on the driver),
not Lakeview itself. It imports nothing heavy at module level.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
from pyiceberg.table import WriteTask
from pyiceberg.table.metadata import TableMetadataUtil

from lakeview.config.models import file_io_properties
from lakeview.errors import WriterError
from spark_jobs import faults
from writers.staged_files import WrittenFile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeview.config.models import ProjectConfig
    from lakeview.ivm.commits import Epoch
    from writers.base import SnapshotWriter
    from writers.staged_files import WrittenFile

FILE_BYTES = 128 * 1024 * 1024  # Arrow bytes a task buffers before writing one data file
RESULT_DDL = "path STRING, size BIGINT, rows BIGINT, writer STRING, payload BINARY"


@dataclass(frozen=True)
class IcebergFiles:
    """Where and how executors write an Iceberg table's data files (its metadata at planning)."""

    metadata_json: str
    io_properties: dict[str, str]
    write_uuid: str


@dataclass(frozen=True)
class DeltaFiles:
    """Where and how executors write a Delta table's data files (plain Parquet in the table root)."""

    location: str
    io_properties: dict[str, str]
    schema: pa.Schema
    prefix: str  # file names start with it: part-<epoch>-<uuid>


# FileIO settings a task needs; the rest of a table's io properties are the catalog client's
# (its URI, OAuth2 credential or token), which must not travel to executors in task closures.
_FILE_IO_PREFIXES = ("py-io-impl", "s3.", "gcs.", "adls.", "hdfs.", "client.")


def iceberg_target(table: Any) -> IcebergFiles:
    """The executor-side write plan for a pyiceberg ``Table``."""
    io = {k: v for k, v in table.io.properties.items() if k.startswith(_FILE_IO_PREFIXES)}
    return IcebergFiles(table.metadata.model_dump_json(), io, str(uuid.uuid4()))


def delta_target(location: str, schema: pa.Schema, io_properties: dict[str, str], epoch: int) -> DeltaFiles:
    return DeltaFiles(location.rstrip("/"), io_properties, schema, f"part-{epoch:05d}-{uuid.uuid4()}")


def write_on_executors(df: DataFrame, target: IcebergFiles | DeltaFiles) -> list[WrittenFile]:
    """Write ``df``'s rows as data files from the Spark tasks; return only the files' metadata."""
    from pyspark import cloudpickle  # lazy: Spark loads only where views run

    # By value: executors need not import Lakeview (on a cluster it is not installed there).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_partition(target, batches)

    rows = _map_in_arrow(df, write_partition).collect()
    return [WrittenFile(path=r.path, size=r.size, rows=r.rows, writer=r.writer, payload=bytes(r.payload)) for r in rows]


def files_on_executors(
    writer: SnapshotWriter, rows: DataFrame, epoch: Epoch, project: ProjectConfig
) -> list[WrittenFile]:
    """Write ``rows`` as data files of the writer's table from the Spark tasks, committing nothing (the
    caller commits them, e.g. several tables' in one transaction); only the files' metadata returns."""
    capabilities = writer.capabilities
    if not capabilities.executor_writes or capabilities.format not in ("iceberg", "delta"):
        raise WriterError(f"{epoch.view}: {type(writer).__name__} cannot commit files written by executors")
    format_writer: Any = writer  # the format's own writer: table(), location, commit_files
    target: IcebergFiles | DeltaFiles
    if capabilities.format == "iceberg":
        target = iceberg_target(format_writer.table())
    else:
        schema = pa.schema(format_writer.table().schema().to_arrow())
        target = delta_target(format_writer.location, schema, file_io_properties(project), epoch.number)
    files = write_on_executors(rows, target)
    faults.point("files_written", epoch.number)
    return files


def _map_in_arrow(df: DataFrame, func: Any, ddl: Any = RESULT_DDL) -> DataFrame:
    """``df.mapInArrow(func, ddl)`` without its pandas check: pyspark 3.5 builds the UDF
    through ``pandas_udf``, which refuses to run without pandas although an Arrow map never uses
    it (and pandas is not a Lakeview dependency)."""
    from pyspark.rdd import PythonEvalType  # lazy: Spark loads only where views run
    from pyspark.sql import DataFrame as SparkDataFrame  # lazy: Spark loads only where views run
    from pyspark.sql.udf import _create_udf  # lazy: Spark loads only where views run

    udf = _create_udf(func, ddl, PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    column = udf(*[df[name] for name in df.columns])
    return SparkDataFrame(df._jdf.pythonMapInArrow(column._jc.expr(), False), df.sparkSession)


# --- executor side -----------------------------------------------------------------------


def _write_partition(target: IcebergFiles | DeltaFiles, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext  # lazy: Spark loads only where views run

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    write = _IcebergTask(target, partition) if isinstance(target, IcebergFiles) else _DeltaTask(target, partition)
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.nbytes
        if size >= FILE_BYTES:
            yield write(pending)
            pending, size = [], 0
    if pending:
        yield write(pending)


def _result(path: str, size: int, rows: int, payload: bytes) -> pa.RecordBatch:
    writer = f"{socket.gethostname()}:{os.getpid()}"
    return pa.RecordBatch.from_pydict(
        {"path": [path], "size": [size], "rows": [rows], "writer": [writer], "payload": [payload]},
        schema=pa.schema(
            [
                ("path", pa.string()),
                ("size", pa.int64()),
                ("rows", pa.int64()),
                ("writer", pa.string()),
                ("payload", pa.binary()),
            ]
        ),
    )


class _IcebergTask:
    """pyiceberg's own ``write_file``: field ids, the table's write properties and column stats."""

    def __init__(self, target: IcebergFiles, partition: int) -> None:
        self.metadata = TableMetadataUtil.parse_raw(target.metadata_json)
        self.io = load_file_io(properties=target.io_properties, location=self.metadata.location)
        self.arrow_schema = self.metadata.schema().as_arrow()
        self.write_uuid = uuid.UUID(target.write_uuid)
        self.partition = partition
        self.files = 0

    def __call__(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        rows = pa.Table.from_batches(batches).select(self.arrow_schema.names).cast(self.arrow_schema)
        schema = pyarrow_to_schema(rows.schema, name_mapping=self.metadata.schema().name_mapping)
        task = WriteTask(
            write_uuid=self.write_uuid,
            task_id=self.partition * 100_000 + self.files,
            schema=schema,
            record_batches=rows.to_batches(),
        )
        self.files += 1
        (data_file,) = list(write_file(self.io, self.metadata, iter([task])))
        fields = {name: getattr(data_file, name) for name in _DATA_FILE_FIELDS}
        fields["spec_id"] = self.metadata.default_spec_id
        return _result(data_file.file_path, data_file.file_size_in_bytes, data_file.record_count, pickle.dumps(fields))


_DATA_FILE_FIELDS = (
    "content", "file_path", "file_format", "partition", "record_count", "file_size_in_bytes", "column_sizes",
    "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds", "key_metadata",
    "split_offsets", "equality_ids", "sort_order_id",
)  # fmt: skip


class _DeltaTask:
    """Plain Parquet with the table's Arrow schema, plus the add action's statistics."""

    def __init__(self, target: DeltaFiles, partition: int) -> None:
        self.target = target
        self.io = load_file_io(properties=target.io_properties, location=target.location)
        self.partition = partition
        self.files = 0

    def __call__(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        schema = self.target.schema
        rows = pa.Table.from_batches(batches).select(schema.names).cast(schema)
        name = f"{self.target.prefix}-{self.partition:05d}-{self.files:03d}.snappy.parquet"
        self.files += 1
        output = self.io.new_output(f"{self.target.location}/{name}")
        with output.create(overwrite=True) as stream:
            pq.write_table(rows, stream, compression="snappy")
        return _result(name, len(output), rows.num_rows, json.dumps(_delta_stats(rows)).encode())


def _delta_stats(rows: pa.Table) -> dict[str, Any]:
    """Delta's per-file statistics (numRecords, nullCount, min/max of simple columns), so
    readers can skip files."""

    stats: dict[str, Any] = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name, column in zip(rows.column_names, rows.columns):
        stats["nullCount"][name] = column.null_count
        kind = column.type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_string(kind)
            or pa.types.is_date(kind)
        ):
            continue
        if column.null_count == len(column):
            continue
        bounds = pc.min_max(column).as_py()
        low, high = bounds["min"], bounds["max"]
        if isinstance(low, float) and (low != low or high != high):
            continue  # NaN: no usable bounds
        stats["minValues"][name] = _json_value(low)
        stats["maxValues"][name] = _json_value(high)
    return stats


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (date, datetime)) else value
