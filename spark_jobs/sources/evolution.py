"""Source schema evolution in Spark: the columns a batch's files have that the source does not
know yet (``new_columns = "evolve"``); recorded by :mod:`lakeview.config.evolution`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from lakeview.config.evolution import effective_ddl, record_added, with_evolved_sources
from lakeview.config.models import ProjectConfig, SourceFormat
from lakeview.config.schema import parse_ddl

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField


class SourceEvolution:
    """Finds the columns a batch's files have that the source does not know yet."""

    def __init__(self, spark: SparkSession, project: ProjectConfig, source: str) -> None:
        self.spark = spark
        self.project = project
        self.source = source
        config = project.sources[source]
        self.format = SourceFormat(config.format.reader_format)
        # A before/after-image feed's row columns are the fields of its two image objects.
        self.images = (config.images.after, config.images.before) if config.images is not None else ()

    def _row_fields(self, schema: StructType) -> list[StructField]:
        """The fields that are the source's row columns: the file's top-level fields, or for
        a before/after-image feed the fields of either image (the after image's first)."""
        if not self.images:
            return list(schema.fields)
        found = {f.name: f for f in schema.fields}
        return [
            f
            for side in self.images
            if side in found and isinstance(found[side].dataType, StructType)
            for f in found[side].dataType.fields
        ]

    def known(self) -> set[str]:
        return {c.name.lower() for c in parse_ddl(effective_ddl(self.project, self.source))}

    def new_columns(self, files: list[str]) -> list[tuple[str, str]]:
        """(name, Spark type) of each column in ``files`` the source does not know, in file order."""
        if not files:
            return []
        known = self.known()
        if self.format is SourceFormat.JSON:
            objects = [f"get_json_object(value, '$.{side}')" for side in self.images] if self.images else ["value"]
            text = self.spark.read.text(files)
            keys = {
                r.k
                for o in objects
                for r in text.selectExpr(f"explode(json_object_keys({o})) AS k").distinct().collect()
            }
            names = sorted(k for k in keys if k is not None and k.lower() not in known)
            if not names:
                return []
            # Infer types only when something is new (a second read of the batch's files).
            inferred = {f.name: f.dataType.simpleString() for f in self._row_fields(self.spark.read.json(files).schema)}
            return [(n, inferred.get(n, "string")) for n in names]
        if self.format is SourceFormat.CSV:
            reader = self.spark.read.option("header", "true").option("inferSchema", "true")
            fields = []
            for path in files:  # each file has its own header
                fields += [f for f in reader.csv(path).schema.fields if f.name.lower() not in known]
        else:
            schema = self.spark.read.option("mergeSchema", "true").parquet(*files).schema
            fields = [f for f in self._row_fields(schema) if f.name.lower() not in known]
        seen: dict[str, str] = {}
        for field in fields:
            seen.setdefault(field.name, field.dataType.simpleString())
        return list(seen.items())


def batch_files(batch: DataFrame, file_column: str) -> list[str]:
    """The input files of a micro-batch (Spark's ``_metadata.file_path`` of its rows)."""
    return sorted(r[0] for r in batch.select(file_column).distinct().collect() if r[0] is not None)


def evolved(
    spark: SparkSession, project: ProjectConfig, sources: list[str], files: dict[str, list[Path]], epoch: int, view: str
) -> ProjectConfig:
    """Record the new columns each of ``sources`` has in its ``files`` of the epoch; ``project`` as the sources
    have evolved (``project`` itself when none has columns it lacks: callers test ``is``)."""
    for source in sources:
        new = SourceEvolution(spark, project, source).new_columns(sorted(str(p) for p in files.get(source, [])))
        if new:
            record_added(project, source, new, epoch=epoch, view=view)
    return with_evolved_sources(project, sources)
