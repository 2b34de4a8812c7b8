"""A view over another view reads the upstream's published changes as its source.

The upstream's change files (:mod:`spark_jobs.sources.view_changes`) are Parquet with the upstream
view's columns plus the Z-set weight ``__lv_w``; to the downstream's pipeline they are an
ordinary Parquet source whose rows already carry their weights (like before/after images),
keyed by the upstream view's key. The columns come from Spark's analysis of the upstream
chain's SQL over the base source's schema — the same analysis that created the upstream's
table, so the types match the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeview.config.models import ProjectConfig, SourceConfig
from lakeview.project import graph_output_schema
from lakeview.sql.dag import upstreams_of
from lakeview.sql.plan import WEIGHT
from spark_jobs.sources.view_changes import reader_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


def with_upstream_source(spark: SparkSession, project: ProjectConfig, view: str) -> ProjectConfig:
    """``project`` with each view ``view`` reads (a join or UNION ALL may read two) declared as
    a Parquet source over its change files for ``view`` (unchanged when ``view`` reads only
    declared sources)."""
    added = {}
    for upstream in upstreams_of(project, view):
        columns = view_schema(spark, project, upstream)
        ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in columns.fields) + f", `{WEIGHT}` INT"
        added[upstream] = SourceConfig.model_validate(
            {"format": "parquet", "path": str(reader_path(project, upstream, view)), "schema": ddl}
        )
    return project.model_copy(update={"sources": {**project.sources, **added}}) if added else project


def view_schema(spark: SparkSession, project: ProjectConfig, view: str) -> StructType:
    """The columns of ``view``'s table: its graph's output over its inputs as its pipeline reads them."""
    from pyspark.sql.pandas.types import from_arrow_schema  # lazy: Spark loads only where views run

    graph_project = with_upstream_source(spark, project, view)
    return from_arrow_schema(graph_output_schema(graph_project, view))
