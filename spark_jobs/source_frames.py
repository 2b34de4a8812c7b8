"""Several sources read by one streaming query: an operator graph's (every join and union;
:class:`~spark_jobs.graph_pipeline.GraphPipeline`).

Spark unions the per-source file streams into one (each source's columns prefixed ``__lv_s<i>_`` plus a
``__lv_src`` tag), so one trigger reads what arrived in *every* source and one epoch (the batch id)
covers them all; Spark's offset log holds one position per source, in source order, and each source
keeps its own file log (``sources/<i>``). Per epoch each source's part of the batch is quarantined and
turned into its input frame: a change feed's newest change per key (source columns + ``__lv_op``), an
image feed's Z-set, an upstream view's weighted change, an append stream's rows with weight +1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeview.config.schema import parse_ddl
from lakeview.errors import TerminalError
from lakeview.ivm.changefeed import DELETE, INSERT, OP, UPDATE, images_sql, latest_sql, operation_sql
from lakeview.ops.source_log import batch_logged_files, logged_files
from lakeview.sql.duck import arrow_sql
from lakeview.sql.plan import WEIGHT
from spark_jobs.sources.json_lines import local_file, read_json_lines, readable
from spark_jobs.sources.quarantine import CORRUPT, FILE, REASON, RECORD, Quarantine, row_record
from spark_jobs.sources.view_changes import upstream_position
from spark_jobs.streams import collect_arrow, file_stream, source_reader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ChangeFeedConfig, ProjectConfig, SourceConfig

SOURCE_TAG = "__lv_src"
PART = "__lv_part"  # collect_sources: which part of which source a collected row belongs to


def tagged_stream(
    spark: SparkSession, project: ProjectConfig, sources: tuple[str, ...], quarantines: dict[str, Quarantine]
) -> DataFrame:
    """Every source's file stream, tagged and prefixed, as one stream."""
    # max_files_per_trigger bounds each source: a backlog becomes several epochs
    return _tagged({i: file_stream(spark, project, s, quarantines[s]) for i, s in enumerate(sources)})


def tagged_files(
    spark: SparkSession, sources: tuple[str, ...], quarantines: dict[str, Quarantine], files: dict[str, list[Path]]
) -> DataFrame:
    """What :func:`tagged_stream` gives for one epoch, as a batch of Spark reading the sources in ``files``
    (each with its files of the epoch): the batch of an epoch the driver stream runs, for the sources whose
    files it leaves to Spark (:func:`collect_sources`)."""
    return _tagged({i: file_frame(spark, quarantines[s], files[s]) for i, s in enumerate(sources) if s in files})


def file_frame(spark: SparkSession, quarantine: Quarantine, files: list[Path]) -> DataFrame:
    """A source's rows in ``files`` as Spark reads them (its schema, malformed rows kept in the corrupt-record
    column), each with its file."""
    if not files:
        empty = spark.createDataFrame([], quarantine.read_schema())
        return empty.selectExpr("*", f"CAST(NULL AS STRING) AS {FILE}")
    frame = source_reader(spark.read, quarantine).load([str(f) for f in files])
    return frame.selectExpr("*", f"_metadata.file_path AS {FILE}")


def _tagged(frames: dict[int, DataFrame]) -> DataFrame:
    """Each source's frame (by its index in the view's sources) with its columns prefixed ``__lv_s<i>_`` and
    tagged, as one union."""
    streams = [tagged(frame, index) for index, frame in frames.items()]
    combined = streams[0]
    for stream in streams[1:]:
        combined = combined.unionByName(stream, allowMissingColumns=True)
    return combined


def tagged(frame: DataFrame, index: int) -> DataFrame:
    """One source's rows (a stream or a batch) as :func:`tagged_stream` has them: columns prefixed, tagged."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    columns = [F.col(f"`{c}`").alias(f"__lv_s{index}_{c}") for c in frame.columns]
    return frame.select(*columns, F.lit(index).alias(SOURCE_TAG))


@dataclass
class SourceFrames:
    """One epoch's input per source (what the driver collects) and the rows read and set aside."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    rows_in: int = 0
    quarantined: int = 0


def source_frames(
    batch: DataFrame,
    view: str,
    sources: tuple[str, ...],
    configs: dict[str, SourceConfig],
    quarantines: dict[str, Quarantine],
    epoch_id: int,
    batch_paths: dict[str, list[Path]],
    upstreams: set[str] = frozenset(),  # type: ignore[assignment]
    append_columns: Callable[[str], list[str] | None] = lambda source: None,
) -> SourceFrames:
    """Split a tagged batch (:func:`tagged_stream`) by source, quarantine each part, and turn it into
    its input frame. ``append_columns``: the columns an append stream's frame keeps (None: all)."""
    out = SourceFrames()
    for index, source in enumerate(sources):
        part, operation = _part(batch, index, configs[source])
        split = quarantines[source].split(part, epoch_id, operation=operation, files=batch_paths.get(source))
        out.rows_in, out.quarantined = out.rows_in + split.rows_in, out.quarantined + split.quarantined
        frame = _input_frame(split.good, view, source, configs[source], source in upstreams, append_columns(source))
        out.frames[source] = frame
    return out


@dataclass
class SourceTables:
    """One epoch's input per source, collected to the driver as Arrow, and the rows read and set aside."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    rows_in: int = 0
    quarantined: int = 0


def collect_sources(
    batch: DataFrame | None,
    view: str,
    sources: tuple[str, ...],
    configs: dict[str, SourceConfig],
    quarantines: dict[str, Quarantine],
    epoch_id: int,
    direct: dict[str, tuple[list[Path], pa.Schema]] | None = None,
    spark: SparkSession | None = None,
) -> SourceTables:
    """What :func:`source_frames` computes (for sources read from files) from ONE Spark query of one stage:
    every source's rows with their quarantine reason, collected as Arrow without a shuffle, the query
    built as one SQL text (a Spark job, a stage or a Py4J call each cost time on a loaded machine;
    :func:`source_frames` runs up to three jobs per source, a change feed's newest change per key
    shuffles, and each column expression is a Py4J call). The driver splits the rows by source, records
    the bad rows in each source's quarantine and computes each input (a change feed's newest change per
    key, an image feed's Z-set) with DuckDB from the same SQL.

    ``direct``: sources the driver reads itself from their files of this epoch, with their schema (see
    :func:`direct_sources`): Spark does not read them at all, so a large first batch of a fact table
    never passes through the JVM's heap. A JSON source's files the driver cannot vouch for (a malformed
    line: :func:`spark_jobs.sources.json_lines.read_json_lines`) are left to Spark: read from ``batch``, or
    without one (the driver stream's epoch) by a Spark batch query of ``spark`` over those files."""
    direct = direct or {}
    out = SourceTables()
    left: dict[str, list[Path]] = {}  # direct sources whose files Spark reads after all
    for source, (paths, schema) in direct.items():
        read = read_direct(paths, schema, configs[source], quarantines[source], epoch_id)
        if read is None:
            left[source] = paths
            continue
        good, bad = read
        out.rows_in, out.quarantined = out.rows_in + good.num_rows, out.quarantined + bad
        out.tables[source] = _input_table(good, configs[source])
    if len(out.tables) == len(sources):
        return out
    if batch is None:
        assert spark is not None and len(direct) == len(sources), "no batch: every source is read from its files"
        batch = tagged_files(spark, sources, quarantines, left)
    relation = f"__lv_{view}_batch"
    batch.createOrReplaceTempView(relation)
    branches = []
    for index, source in enumerate(sources):
        if source in out.tables:
            continue
        config, prefix = configs[source], f"__lv_s{index}_"
        own = [c[len(prefix) :] for c in batch.columns if c.startswith(prefix)]
        renamed = ", ".join(f"`{prefix}{c}` AS `{c}`" for c in own)
        operation = f", {operation_sql(config.changes)} AS {OP}" if config.changes is not None else ""
        part = f"(SELECT {renamed}{operation} FROM {relation} WHERE {SOURCE_TAG} = {index})"
        columns = [*own, *([OP] if operation else [])]
        tagged = quarantines[source].tag_sql(columns, part, OP if operation else None)
        branches.append((index, [*columns, REASON, RECORD], tagged))
    every = [f"__lv_in{i}_{c}" for i, columns, _ in branches for c in columns]
    selects = []
    for index, columns, tagged in branches:
        mine = {f"__lv_in{index}_{c}": c for c in columns}
        listed = ", ".join(f"`{mine[n]}` AS `{n}`" if n in mine else f"NULL AS `{n}`" for n in every)
        selects.append(f"SELECT {listed}, {index} AS {PART} FROM ({tagged})")
    collected = collect_arrow(batch.sparkSession.sql(" UNION ALL ".join(selects)))
    for index, source in enumerate(sources):
        if source in out.tables:
            continue
        rows = _untagged(collected, index)
        bad = rows.filter(pc.is_valid(rows.column(REASON)))
        if bad.num_rows:
            quarantines[source].record(epoch_id, _bad_rows(bad))
        good = rows.filter(pc.is_null(rows.column(REASON)))
        out.rows_in, out.quarantined = out.rows_in + good.num_rows, out.quarantined + bad.num_rows
        internal = [c for c in (CORRUPT, FILE, REASON, RECORD) if c in good.column_names]
        out.tables[source] = _input_table(good.drop_columns(internal), configs[source])
    return out


def _bad_rows(bad: pa.Table) -> list[dict]:
    """An epoch's set-aside rows as (``file``, ``reason``, ``record``). A malformed line's raw text is kept
    as Spark read it, which need not be UTF-8: its invalid bytes become U+FFFD instead of failing the epoch."""
    records = bad.column(RECORD).cast(pa.binary()).to_pylist()
    return [
        {"file": file, "reason": reason, "record": None if raw is None else raw.decode("utf-8", "replace")}
        for file, reason, raw in zip(bad.column(FILE).to_pylist(), bad.column(REASON).to_pylist(), records)
    ]


def direct_sources(
    configs: dict[str, SourceConfig], quarantines: dict[str, Quarantine], schemas: dict[str, pa.Schema]
) -> list[str]:
    """The sources whose epoch the driver can read straight from its files (:func:`collect_sources`,
    :func:`read_direct`): Parquet, or JSON lines of columns it reads as Spark does
    (:func:`spark_jobs.sources.json_lines.readable`); append-only or a change feed (not an image feed)."""
    return [
        source
        for source, config in configs.items()
        if (
            config.format.reader_format == "parquet"
            or (config.format.reader_format == "json" and readable(schemas[source]))
        )
        and config.images is None
    ]


def read_direct(
    paths: list[Path], schema: pa.Schema, config: SourceConfig, quarantine: Quarantine, epoch_id: int
) -> tuple[pa.Table, int] | None:
    """A Parquet or JSON-lines source's good rows in ``paths`` (a change feed's with its normalised operation
    ``__lv_op``) and how many were set aside: what :meth:`Quarantine.tag_sql` finds in Spark (a required
    column NULL, a change feed's unknown operation), recorded in the source's quarantine the same way.
    None (nothing recorded): a JSON file the driver cannot read as Spark would (a malformed line), left to
    Spark."""
    parts, bad = [], []
    read = read_json_lines if config.format.reader_format == "json" else read_parquet_files
    for path in paths:
        rows = read([path], schema)
        if rows is None:
            return None
        if config.changes is not None:
            rows = rows.append_column(OP, _operations(rows.column(config.changes.operation), config.changes))
        reason = _reasons(rows, config)
        if reason.null_count == len(reason):
            parts.append(rows)
            continue
        flagged = pc.is_valid(reason)
        payload = rows.filter(flagged).drop_columns([OP] if config.changes is not None else [])
        for row, why in zip(payload.to_pylist(), reason.filter(flagged).to_pylist()):
            bad.append({"file": Path(path).as_uri(), "reason": why, "record": row_record(row)})
        parts.append(rows.filter(pc.invert(flagged)))
    if bad:
        quarantine.record(epoch_id, bad)
    columns = schema.append(pa.field(OP, pa.string())) if config.changes is not None else schema
    return (pa.concat_tables(parts) if parts else columns.empty_table()), len(bad)


def _operations(column: pa.ChunkedArray, feed: ChangeFeedConfig) -> pa.Array:
    """A change feed's operation column normalised as :func:`operation_sql` does (NULL: unknown)."""
    text = column.cast(pa.string())
    normalised = pa.nulls(len(text), pa.string())
    for values, name in ((feed.delete, DELETE), (feed.update, UPDATE), (feed.insert, INSERT)):  # first match wins
        normalised = pc.if_else(pc.is_in(text, value_set=pa.array(values, pa.string())), name, normalised)
    return normalised


def _reasons(rows: pa.Table, config: SourceConfig) -> pa.Array:
    """Each row's reason to be set aside (NULL: a good row), in :meth:`Quarantine.reason_sql`'s order."""
    names = {n.lower(): n for n in rows.column_names}
    checks = [(pc.is_null(rows.column(names[c.lower()])), f"missing required column {c}") for c in config.required]
    if config.changes is not None:
        raw = rows.column(config.changes.operation).cast(pa.string())
        unknown = pc.binary_join_element_wise("unknown operation ", pc.fill_null(raw, "NULL"), "")
        checks.append((pc.is_null(rows.column(OP)), unknown))
    reason = pa.nulls(rows.num_rows, pa.string())
    for failed, why in reversed(checks):  # the first failing check names the row
        reason = pc.if_else(failed, why, reason)
    return reason.combine_chunks() if isinstance(reason, pa.ChunkedArray) else reason


def read_parquet_files(paths: list[Path], schema: pa.Schema) -> pa.Table:
    """The rows of Parquet files as Spark reads them with the source's declared ``schema``: columns
    matched by name (case-insensitively), a column a file lacks NULL, values cast to the declared types.

    Raises TerminalError naming the file that is not Parquet, or the file and column whose values do not fit
    the declared type (Spark refuses such files too)."""
    tables = []
    for logged in paths:
        path = local_file(logged)
        try:
            found = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:  # named as Spark names it: the file, then why
            raise TerminalError(f"source file {path} is not a Parquet file: {exc}") from exc
        names = {n.lower(): n for n in found.column_names}
        columns = []
        for f in schema:
            if f.name.lower() not in names:
                columns.append(pa.nulls(found.num_rows, f.type))
                continue
            column = found.column(names[f.name.lower()])
            try:
                columns.append(column.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TerminalError(
                    f"source file {path}: column {f.name} holds {column.type}, not the declared {f.type}: {exc}"
                ) from exc
        tables.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _input_table(good: pa.Table, config: SourceConfig) -> pa.Table:
    """A source's good rows (collected) as its input, as :func:`_input_frame` makes it in Spark."""
    declared = [c.name for c in parse_ddl(config.schema_)]
    columns = [c for c in declared if c != WEIGHT]
    if WEIGHT in declared:  # an upstream view's change files: its rows carry their weights
        return good.select([*columns, WEIGHT])
    if config.changes is not None:
        return arrow_sql(latest_sql(config.changes, "b", quote='"'), b=good).drop_columns(["__lv_rn"])
    if config.images is not None:
        return arrow_sql(images_sql(config.images, columns, "b", quote='"'), b=good)
    return good.select(columns).append_column(WEIGHT, pa.array([1] * good.num_rows, pa.int32()))


def _untagged(collected: pa.Table, index: int) -> pa.Table:
    """One source's rows of :func:`collect_sources`' collected union, its columns unprefixed."""
    prefix = f"__lv_in{index}_"
    names = [c for c in collected.column_names if c.startswith(prefix)]
    rows = collected.filter(pc.equal(collected.column(PART), index)).select(names)
    return rows.rename_columns([c[len(prefix) :] for c in names])


def _part(batch: DataFrame, index: int, config: SourceConfig) -> tuple[DataFrame, str | None]:
    """A source's rows of a tagged batch with its own column names (a change feed's: plus the
    normalised operation), and the operation column's name (None: not a change feed)."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    prefix = f"__lv_s{index}_"
    part = batch.where(F.col(SOURCE_TAG) == index).select(
        *[F.col(f"`{c}`").alias(c[len(prefix) :]) for c in batch.columns if c.startswith(prefix)]
    )
    if config.changes is None:
        return part, None
    return part.selectExpr("*", f"{operation_sql(config.changes)} AS {OP}"), OP


def _input_frame(
    good: DataFrame,
    view: str,
    source: str,
    config: SourceConfig,
    upstream: bool = False,
    append_columns: list[str] | None = None,
) -> DataFrame:
    """A source's good rows as its input frame: a change feed's newest change per key, an image
    feed's Z-set, an upstream view's weighted change, an append stream's rows with weight +1."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    spark = good.sparkSession  # temp views of a foreachBatch live in the batch's session
    good = good.drop(CORRUPT, FILE)
    name = f"__lv_{view}_{source}_batch"
    good.createOrReplaceTempView(name)
    columns = [c.name for c in parse_ddl(config.schema_) if c.name != WEIGHT]
    if config.changes is None and config.images is None:
        columns = append_columns or columns
    if upstream:  # an upstream view's change: its rows already carry their weights
        return good.select(*[F.col(f"`{c}`") for c in columns], F.col(WEIGHT).cast("int"))
    if config.changes is not None:
        return spark.sql(latest_sql(config.changes, name)).drop("__lv_rn")
    if config.images is not None:
        return spark.sql(images_sql(config.images, columns, name))
    # an append stream: its rows with weight +1
    return good.select(*[F.col(f"`{c}`") for c in columns]).withColumn(WEIGHT, F.lit(1).cast("int"))


# every source's position reached, the newest input's arrival time (ms), each source's files of the epoch
Frontier = tuple[dict[str, object], int | None, dict[str, list[Path]]]


def frontier(
    checkpoint: Path,
    sources: tuple[str, ...],
    epoch_id: int,
    upstreams: set[str] = frozenset(),  # type: ignore[assignment]
) -> Frontier:
    """Every source's position this epoch reaches (one line per source in Spark's offset log, in source
    order), the newest input file's arrival time (over the sources whose position moved in this epoch)
    and each source's files of this epoch."""
    current, previous = offset_positions(checkpoint, epoch_id), offset_positions(checkpoint, epoch_id - 1)
    reached: dict[str, object] = {}
    arrived: list[int] = []
    paths: dict[str, list[Path]] = {}
    for index, source in enumerate(sources):
        log_offset = current[index] if index < len(current) else None
        moved = log_offset is not None and (index >= len(previous) or previous[index] != log_offset)
        files = batch_logged_files(checkpoint, index, log_offset) if moved else []  # type: ignore[arg-type]
        arrived += [f.modified_ms for f in files]
        paths[source] = [f.path for f in files]  # Parquet: rows counted by footers (Quarantine.split)
        position: dict[str, object] = {"log_offset": log_offset, "files": len(files), "index": index}
        if source in upstreams and log_offset is not None:  # the upstream epoch/snapshot reached (chain oracle)
            read = [f.path for f in logged_files(checkpoint, index) if f.batch <= log_offset]
            position.update(upstream_position(read))
        reached[source] = position
    return reached, max(arrived, default=None), paths


def offset_positions(checkpoint: Path, epoch_id: int) -> list[int | None]:
    """Each source's file-log offset in Spark's offset log of one epoch (None: no position yet)."""
    offsets = checkpoint / "offsets" / str(epoch_id)
    lines = offsets.read_text().splitlines()[2:] if epoch_id >= 0 and offsets.exists() else []
    positions: list[int | None] = []
    for line in lines:
        position = json.loads(line) if line.strip() not in ("", "-") else None
        positions.append(position.get("logOffset") if isinstance(position, dict) else None)
    return positions
