"""A view's pipeline as the embedded stack builds it (its format's writer, its state tables'
writers), for tests that drive one pipeline on the shared Spark session."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakeview.config.models import ProjectConfig
from spark_jobs.pipeline import ViewPipeline
from writers.registry import make_writer, state_writer_factory


def view_pipeline(spark: SparkSession, project: ProjectConfig, view: str, catalog_uri: str) -> ViewPipeline:
    """``view``'s pipeline committing through the catalog at ``catalog_uri`` (not prepared yet)."""
    return ViewPipeline(
        spark,
        project,
        view,
        make_writer(project, view, catalog_uri),
        state_writer=state_writer_factory(project, view),
    )
