"""Keyed reads of large tables on Spark's executors: the driver never holds their rows.

A merge-on-read commit needs the stored rows of its delta's keys and where they are; a fold
writes data files again without their deleted rows; publishing a snapshot's change needs the
rows it removed and added. Below ``[spark] driver_keys_max`` live rows the driver does these
itself, through a key index and a bounded row cache (:mod:`writers.iceberg.live_files`). Past it, for
every Iceberg table a pipeline keeps (the view's, a keyed aggregate's state, a change feed's
mirror, a join side), they run as Spark jobs: each task reads its share of the table's live
data files through pyiceberg's FileIO (a local path, or ``s3://`` with the warehouse's endpoint
and credentials, as :mod:`spark_jobs.executors.writes` writes them) and only what the epoch
touches comes back to the driver: the rows of the delta's keys with their positions, the new
files' metadata, the snapshot's consolidated change.

The cost moves with it: every epoch reads the table's live files on the executors (spread over
as many as there are), where the driver's index costs per key of the delta. The driver keeps
the file list and the delete files' positions (bounded by the fold threshold).

Shipped to executors by value like :mod:`spark_jobs.executors.writes`: they need pyarrow,
pyiceberg and duckdb (multi-column keys are matched in DuckDB), not Lakeview.
"""

from __future__ import annotations

import logging
import pickle
import sys
import time
import types
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadataUtil

import writers.arrow_ops
from lakeview.sql.plan import WEIGHT
from spark_jobs.executors import writes as executor_writes
from spark_jobs.executors.writes import IcebergFiles, _map_in_arrow, _write_partition, iceberg_target
from writers.arrow_ops import rows_with_keys, with_positions
from writers.iceberg.live_files import POS, Found
from writers.iceberg.position_deletes import read_position_deletes

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ProjectConfig
    from writers.base import SnapshotWriter
    from writers.iceberg.live_files import Found, LiveTable

log = logging.getLogger("lakeview.spark.executor_reads")
FILES_DDL = "file BINARY, positions BINARY, take BOOLEAN, weight INT"


@dataclass
class ExecutorReads:
    """:class:`writers.iceberg.live_files.RemoteRows` on Spark's executors."""

    spark: SparkSession
    rows_max: int
    jobs: int = 0  # Spark jobs run (find, rewrite, change), for status and tests
    timings: dict[str, float] = field(default_factory=dict)

    def find(self, table: Table, live: LiveTable, keys: pa.Table, key: tuple[str, ...]) -> Found:
        started = time.perf_counter()
        schema = table.schema().as_arrow()
        hits: list[pa.Table] = []
        paths: list[str] = []
        if live.data and keys.num_rows:
            specs = [(f, live.deleted(f.file_path), False, 1) for f in live.data]
            keys_ipc = _ipc(keys)
            plan = iceberg_target(table)

            def find_in(part: Iterator[tuple]) -> Iterator[tuple[str, bytes]]:
                return _find_in(plan, keys_ipc, key, part)

            for path, payload in self._tasks(specs).mapPartitions(find_in).collect():
                hit = _from_ipc(payload)
                hits.append(hit)
                paths += [path] * hit.num_rows
        rows = pa.concat_tables([h.drop_columns([POS]).cast(schema) for h in hits]) if hits else schema.empty_table()
        positions = pa.table({
            "file_path": pa.array(paths, pa.string()),
            "pos": pa.concat_arrays([h.column(POS).combine_chunks().cast(pa.int64()) for h in hits]) if hits else pa.array([], pa.int64()),
        })  # fmt: skip
        self.timings["find_s"] = time.perf_counter() - started
        log.debug(
            "%s: %s stored row(s) of %s key(s) found in %s file(s) on the executors in %.3f s",
            table.name(),
            rows.num_rows,
            keys.num_rows,
            len(live.data),
            self.timings["find_s"],
        )
        return Found(rows=rows, positions=positions, files_read=len(live.data))

    def rewrite(self, table: Table, live: LiveTable, files: list[DataFile], drop: pa.Table) -> list[DataFile]:
        started = time.perf_counter()
        specs = []
        for f in files:
            gone = [
                p
                for p in (
                    live.deleted(f.file_path),
                    drop.column("pos").filter(pc.equal(drop.column("file_path"), f.file_path)).combine_chunks(),
                )
                if p is not None
            ]
            specs.append((f, pa.concat_arrays([g.cast(pa.int64()) for g in gone]) if gone else None, False, 1))
        target = iceberg_target(table)  # its own write uuid: the driver names the epoch's new file after the commit's

        def rewrite_in(part: Iterator[tuple]) -> Iterator[bytes]:
            return _rewrite_in(target, part)

        written = [pickle.loads(payload) for payload in self._tasks(specs).mapPartitions(rewrite_in).collect()]
        self.timings["rewrite_s"] = time.perf_counter() - started
        return [DataFile.from_args(**fields) for fields in written]

    def change(
        self,
        table: Table,
        parent: LiveTable | None,
        deletes: list[DataFile],
        removed: list[DataFile],
        added: list[DataFile],
    ) -> pa.Table:
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run
        from pyspark.sql.pandas.types import (  # lazy: Spark loads only where views run
            from_arrow_schema,
            to_arrow_schema,
        )

        started = time.perf_counter()
        arrow = table.schema().as_arrow()
        before = {f.file_path: f for f in parent.data} if parent is not None else {}
        specs: list[tuple[DataFile, pa.Array | None, bool, int]] = []
        for delete_file in deletes:  # the rows it names, as they were in the parent
            for path, positions in read_position_deletes(table.io, delete_file).items():
                if path in before:
                    specs.append((before[path], positions, True, -1))
        specs += [(f, parent.deleted(f.file_path) if parent is not None else None, False, -1) for f in removed]
        specs += [(f, None, False, 1) for f in added]
        weighted = arrow.append(pa.field(WEIGHT, pa.int32()))
        if not specs:
            return weighted.empty_table()
        spark_schema = from_arrow_schema(weighted)
        target = to_arrow_schema(spark_schema)  # Spark's Arrow types for the table's columns
        plan = iceberg_target(table)
        columns = [F.col(f"`{name}`") for name in arrow.names]

        def rows_in(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return _rows_in(plan, target, _specs(batches))

        net = (
            self._frame(specs, rows_in, spark_schema)
            .groupBy(*columns)
            .agg(F.sum(WEIGHT).cast("int").alias(WEIGHT))
            .where(F.col(WEIGHT) != 0)
        )
        result = pa.Table.from_batches(net._collect_as_arrow(), schema=target)
        self.timings["change_s"] = time.perf_counter() - started
        return result.rename_columns(weighted.names).cast(weighted)

    def _tasks(self, specs: list[tuple[DataFile, pa.Array | None, bool, int]]) -> Any:
        """An RDD of ``specs`` (data file, positions, take them or drop them, weight) in one
        slice per executor core: a plain Python RDD, the cheapest Spark job pyspark runs."""
        from pyspark import cloudpickle  # lazy: Spark loads only where views run

        for module in (sys.modules[__name__], executor_writes, writers.arrow_ops):
            cloudpickle.register_pickle_by_value(module)  # by value: executors need not import Lakeview
        self.jobs += 1
        rows = [
            (pickle.dumps(f), _ipc(pa.table({POS: p.cast(pa.int64())})) if p is not None else None, take, weight)
            for f, p, take, weight in specs
        ]
        return self.spark.sparkContext.parallelize(
            rows, max(1, min(len(rows), self.spark.sparkContext.defaultParallelism))
        )

    def _frame(self, specs: list[tuple[DataFile, pa.Array | None, bool, int]], func: Any, ddl: Any) -> DataFrame:
        """``specs`` as a DataFrame mapped by ``func`` (an Arrow map with the output ``ddl``)."""
        return _map_in_arrow(self.spark.createDataFrame(self._tasks(specs), FILES_DDL), func, ddl)


def on_executors(writer: SnapshotWriter, spark: SparkSession, project: ProjectConfig) -> SnapshotWriter:
    """``writer`` with its large-table reads on Spark's executors (Iceberg writers; Delta's
    lookups stream through deltalake's scanner and keep no rows)."""
    live = writer.live if writer.capabilities.executor_reads else None  # type: ignore[attr-defined]
    if live is not None and live.remote is None:
        live.remote = ExecutorReads(spark, project.spark.driver_keys_max)
    return writer


# --- executor side -----------------------------------------------------------------------


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


def _open(plan: IcebergFiles) -> tuple[Any, Any]:
    metadata = TableMetadataUtil.parse_raw(plan.metadata_json)
    return metadata, load_file_io(properties=plan.io_properties, location=metadata.location)


def _specs(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple]:
    """The rows of an Arrow map's input batches as ``_tasks`` made them."""
    for batch in batches:
        yield from zip(*(batch.column(i).to_pylist() for i in range(4)))


def _spec(row: tuple) -> tuple[Any, pa.Array | None, bool, int]:
    spec, positions, take, weight = row
    return (
        pickle.loads(spec),
        (_from_ipc(positions).column(POS).combine_chunks() if positions is not None else None),
        take,
        weight,
    )


class _FileCache:
    """Rows of data files this Python worker read, by (path, schema id), least recently used out
    past ``WORKER_CACHE_BYTES``. Data files never change once written, so an entry is never
    stale; Spark reuses its Python workers across tasks and jobs, so an epoch's job mostly finds
    the files the last one read (on a cluster, those its executor was given)."""

    def __init__(self) -> None:
        self.rows: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self.bytes = 0

    def put(self, cached: tuple[str, int], rows: pa.Table) -> None:
        self.rows[cached] = rows
        self.bytes += rows.nbytes
        while self.bytes > WORKER_CACHE_BYTES and len(self.rows) > 1:
            _, dropped = self.rows.popitem(last=False)
            self.bytes -= dropped.nbytes


WORKER_CACHE_BYTES = 512 * 1024 * 1024  # per Python worker process on the executors


def _worker_cache() -> _FileCache:
    """The worker process's one cache. It lives in ``sys.modules``: this module's functions reach
    the worker pickled by value, so a global of theirs is new in every task."""

    holder = sys.modules.get("__lakeview_file_cache__")
    if holder is None:
        holder = types.ModuleType("__lakeview_file_cache__")
        holder.cache = _FileCache()  # type: ignore[attr-defined]
        sys.modules["__lakeview_file_cache__"] = holder
    return holder.cache  # type: ignore[attr-defined]


def _file_rows(metadata: Any, io: Any, data_file: Any, positions: pa.Array | None, take: bool) -> pa.Table:
    """One data file's rows (the table's schema) with POS: those at ``positions`` (``take``) or
    all but those."""

    schema = metadata.schema()
    cache = _worker_cache()
    cached = (data_file.file_path, schema.schema_id)
    every = cache.rows.get(cached)
    if every is None:
        scan = ArrowScan(table_metadata=metadata, io=io, projected_schema=schema, row_filter=AlwaysTrue())
        every = with_positions(scan.to_table(tasks=[FileScanTask(data_file)]).cast(schema.as_arrow()), POS)
        cache.put(cached, every)
    else:
        cache.rows.move_to_end(cached)
    if positions is None:
        return every.schema.empty_table() if take else every
    member = pc.is_in(every.column(POS), value_set=positions)
    return every.filter(member if take else pc.invert(member))


def _find_in(
    plan: IcebergFiles, keys_ipc: bytes, key: tuple[str, ...], part: Iterator[tuple]
) -> Iterator[tuple[str, bytes]]:
    metadata, io = _open(plan)
    keys = _from_ipc(keys_ipc)
    for row in part:
        data_file, deleted, _, _ = _spec(row)
        hit = rows_with_keys(_file_rows(metadata, io, data_file, deleted, take=False), keys, key)
        if hit.num_rows:
            yield data_file.file_path, _ipc(hit)


def _rewrite_in(target: IcebergFiles, part: Iterator[tuple]) -> Iterator[bytes]:
    metadata, io = _open(target)

    def kept() -> Iterator[pa.RecordBatch]:
        for row in part:
            data_file, gone, _, _ = _spec(row)
            yield from _file_rows(metadata, io, data_file, gone, take=False).drop_columns([POS]).to_batches()

    for result in _write_partition(target, kept()):
        yield result.column("payload")[0].as_py()


def _rows_in(plan: IcebergFiles, target: pa.Schema, part: Iterator[tuple]) -> Iterator[pa.RecordBatch]:
    metadata, io = _open(plan)
    for row in part:
        data_file, positions, take, weight = _spec(row)
        rows = _file_rows(metadata, io, data_file, positions, take).drop_columns([POS])
        rows = rows.append_column(WEIGHT, pa.repeat(pa.scalar(weight, pa.int32()), rows.num_rows))
        yield from rows.rename_columns(target.names).cast(target).to_batches()
