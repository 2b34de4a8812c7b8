"""Several sources read by one streaming query, shared by every multi-source pipeline (a join or UNION
ALL view's :class:`~spark_jobs.multi_source.CombinedPipeline`, an operator graph's
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

from lakeview.config.schema import parse_ddl
from lakeview.ivm.changefeed import OP, images_sql, latest_sql, operation_sql
from lakeview.ops.source_log import logged_files
from lakeview.sql.plan import WEIGHT
from spark_jobs.sources.quarantine import CORRUPT, FILE, Quarantine
from spark_jobs.sources.view_changes import upstream_position
from spark_jobs.streams import collect_arrow, file_stream

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ProjectConfig, SourceConfig

SOURCE_TAG = "__lv_src"
PART = "__lv_part"  # collect_sources: which part of which source a collected row belongs to


def tagged_stream(
    spark: SparkSession, project: ProjectConfig, sources: tuple[str, ...], quarantines: dict[str, Quarantine]
) -> DataFrame:
    """Every source's file stream, tagged and prefixed, as one stream."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    streams = []
    for index, source in enumerate(sources):
        # max_files_per_trigger bounds each source: a backlog becomes several epochs
        stream = file_stream(spark, project, source, quarantines[source])
        columns = [F.col(f"`{c}`").alias(f"__lv_s{index}_{c}") for c in stream.columns]
        streams.append(stream.select(*columns, F.lit(index).alias(SOURCE_TAG)))
    combined = streams[0]
    for stream in streams[1:]:
        combined = combined.unionByName(stream, allowMissingColumns=True)
    return combined


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
    batch: DataFrame,
    view: str,
    sources: tuple[str, ...],
    configs: dict[str, SourceConfig],
    quarantines: dict[str, Quarantine],
    epoch_id: int,
    batch_paths: dict[str, list[Path]],
) -> SourceTables:
    """What :func:`source_frames` computes, collected to the driver in ONE Spark job (a Spark job costs
    0.1-1 s on a loaded machine, and that function runs up to three per source): every source's input
    frame, its bad rows and its good-row count are tagged parts of one union, collected as Arrow and
    split here; the bad rows go to each source's quarantine."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    parts: list[DataFrame] = []
    footer_counts: dict[str, int] = {}
    for index, source in enumerate(sources):
        config, quarantine = configs[source], quarantines[source]
        part, operation = _part(batch, index, config)
        good, bad = quarantine.tag(part, operation)
        payload = [c for c in part.columns if c not in (CORRUPT, FILE, operation)]
        counted = quarantine.footer_count(batch_paths.get(source)) if bad is None else None
        if counted is not None:
            footer_counts[source] = counted
        else:  # one payload column counted too: Spark refuses a raw JSON/CSV query of the corrupt column alone
            counts = good.agg(F.count(F.lit(1)).alias("n"), F.count(F.col(f"`{payload[0]}`")).alias("_"))
            parts.append(_tagged(counts, "n", index))
        if bad is not None:
            parts.append(_tagged(bad, "bad", index))
        parts.append(_tagged(_input_frame(good, view, source, config), "in", index))
    combined = parts[0]
    for frame in parts[1:]:
        combined = combined.unionByName(frame, allowMissingColumns=True)
    collected = collect_arrow(combined)
    out = SourceTables()
    for index, source in enumerate(sources):
        bad = _untagged(collected, "bad", index)
        if bad is not None:
            quarantines[source].record(epoch_id, bad.to_pylist())
        counts = _untagged(collected, "n", index)
        good_rows = footer_counts[source] if source in footer_counts else int(counts.column("n")[0].as_py())  # type: ignore[union-attr]
        quarantined = bad.num_rows if bad is not None else 0
        out.rows_in, out.quarantined = out.rows_in + good_rows, out.quarantined + quarantined
        out.tables[source] = _untagged(collected, "in", index)  # type: ignore[assignment]
    return out


def _tagged(frame: DataFrame, part: str, index: int) -> DataFrame:
    """``frame`` as a tagged part of :func:`collect_sources`' union: its columns prefixed by part and source."""
    from pyspark.sql import functions as F  # lazy: Spark loads only where views run

    prefix = f"__lv_{part}{index}_"
    columns = [F.col(f"`{c}`").alias(prefix + c) for c in frame.columns]
    return frame.select(*columns, F.lit(prefix).alias(PART))


def _untagged(collected: pa.Table, part: str, index: int) -> pa.Table | None:
    """One part of :func:`collect_sources`' collected union (its columns unprefixed); None if it has none."""
    prefix = f"__lv_{part}{index}_"
    names = [c for c in collected.column_names if c.startswith(prefix)]
    if not names:
        return None
    rows = collected.filter(pc.equal(collected.column(PART), prefix)).select(names)
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


def frontier(
    checkpoint: Path,
    sources: tuple[str, ...],
    epoch_id: int,
    upstreams: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[dict[str, object], int | None, dict[str, list[Path]]]:
    """Every source's position this epoch reaches (one line per source in Spark's offset log, in source
    order), the newest input file's arrival time (over the sources whose position moved in this epoch)
    and each source's files of this epoch."""
    current, previous = _positions(checkpoint, epoch_id), _positions(checkpoint, epoch_id - 1)
    reached: dict[str, object] = {}
    arrived: list[int] = []
    paths: dict[str, list[Path]] = {}
    for index, source in enumerate(sources):
        log_offset = current[index] if index < len(current) else None
        moved = log_offset is not None and (index >= len(previous) or previous[index] != log_offset)
        files = [f for f in logged_files(checkpoint, index) if f.batch == log_offset] if moved else []
        arrived += [f.modified_ms for f in files]
        paths[source] = [f.path for f in files]  # Parquet: rows counted by footers (Quarantine.split)
        position: dict[str, object] = {"log_offset": log_offset, "files": len(files), "index": index}
        if source in upstreams and log_offset is not None:  # the upstream epoch/snapshot reached (chain oracle)
            read = [f.path for f in logged_files(checkpoint, index) if f.batch <= log_offset]
            position.update(upstream_position(read))
        reached[source] = position
    return reached, max(arrived, default=None), paths


def _positions(checkpoint: Path, epoch_id: int) -> list[int | None]:
    """Each source's file-log offset in Spark's offset log of one epoch (None: no position yet)."""
    offsets = checkpoint / "offsets" / str(epoch_id)
    lines = offsets.read_text().splitlines()[2:] if epoch_id >= 0 and offsets.exists() else []
    positions: list[int | None] = []
    for line in lines:
        position = json.loads(line) if line.strip() not in ("", "-") else None
        positions.append(position.get("logOffset") if isinstance(position, dict) else None)
    return positions
