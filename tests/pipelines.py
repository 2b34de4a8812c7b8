"""A view's pipeline as the embedded stack builds it (its format's writer, its state tables'
writers), for tests that drive pipelines on the shared Spark session: one pipeline, or several views
run over the same epochs of landed files."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakeview.config.models import ProjectConfig
from spark_jobs.epoch_guard import failure_of
from spark_jobs.graph_pipeline import GraphPipeline
from writers.registry import make_writer, state_writer_factory

E = TypeVar("E")
T = TypeVar("T")


def view_pipeline(spark: SparkSession, project: ProjectConfig, view: str, catalog_uri: str) -> GraphPipeline:
    """``view``'s pipeline committing through the catalog at ``catalog_uri`` (not prepared yet)."""
    return GraphPipeline(
        spark,
        project,
        view,
        make_writer(project, view, catalog_uri),
        state_writer=state_writer_factory(project, view),
    )


def started(
    spark: SparkSession, project: ProjectConfig, view: str, catalog_uri: str
) -> tuple[GraphPipeline, StreamingQuery]:
    """``view``'s pipeline (:func:`view_pipeline`), prepared and started."""
    pipeline = view_pipeline(spark, project, view, catalog_uri)
    pipeline.prepare()
    return pipeline, pipeline.start()


def stopping_error(query: StreamingQuery) -> BaseException | None:
    """Run ``query`` until an epoch fails (its ``processAllAvailable`` raises), stop it, and return the error that
    stopped it (as the epoch guard recorded it; None if none did)."""
    try:
        with pytest.raises(Exception):  # noqa: B017 - the query stops; what stopped it is returned
            query.processAllAvailable()
    finally:
        query.stop()
    failure = failure_of(query.name)
    return failure.error if failure is not None else None


def land_parquet(directory: Path, name: str, rows: list[dict], schema: pa.Schema) -> None:
    """``rows`` as the Parquet file ``directory/name``, written hidden then renamed (a file stream never
    sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), hidden)
    os.replace(hidden, directory / name)


def last_line(query: StreamingQuery, exc: Exception) -> str:
    """The last line of a failed query's error (Spark's message ends with the Python error)."""
    return str(exc).splitlines()[-1][:2000]


def run_views(
    spark: SparkSession,
    project: ProjectConfig,
    views: Iterable[str],
    catalog_uri: str,
    epochs: Sequence[E],
    land: Callable[[int, E], None],
    error: Callable[[StreamingQuery, Exception], T] = last_line,  # type: ignore[assignment]
) -> dict[str, T]:
    """Start every view's pipeline, then per epoch ``land(number, epoch)`` its files and process what
    arrived in every view still running; a view whose query fails stops there. Every query is stopped
    at the end. Returns each failed view's ``error(query, exception)`` (by default its last line)."""
    started: list[tuple[str, StreamingQuery]] = []
    failed: dict[str, T] = {}
    try:
        for view in views:
            pipeline = view_pipeline(spark, project, view, catalog_uri)
            pipeline.prepare()
            started.append((view, pipeline.start()))
        for number, epoch in enumerate(epochs):
            land(number, epoch)
            for view, query in started:
                if view in failed:
                    continue
                try:
                    query.processAllAvailable()
                except Exception as exc:
                    failed[view] = error(query, exc)
    finally:
        for _, query in started:
            query.stop()
    return failed
