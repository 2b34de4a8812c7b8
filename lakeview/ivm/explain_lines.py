"""Lines every view's ``explain`` shares: where an operator graph's batches run, which views read the
published changes."""

from __future__ import annotations

from lakeview.config.models import ProjectConfig
from lakeview.sql.dag import downstreams_of


def graph_batch_lines(project: ProjectConfig, later: str, watermark: bool) -> list[str]:
    """Where an operator graph's batches run: a large first batch by Spark (spark_jobs.executors.graph_backfill),
    a large later one reduced by Spark first as ``later`` says (spark_jobs.executors.graph_batches)."""
    limit, bound = project.spark.driver_rows_max, project.spark.max_files_per_trigger
    first = (f"batches: a first batch of more than {limit} input rows ([spark] driver_rows_max), its tables still "
             "empty (a backfill): every table's rows computed by Spark and written by the executors, nothing collected")  # fmt: skip
    if watermark:
        later = "collected as it comes (the watermark judges each row in the driver); past the bound the log says so"
    return [first, f"         a later batch of more than {limit} input rows: {later}",
            f"         a batch of at most {limit} input rows: collected and stepped in the driver",
            "         each batch reads " + (f"at most {bound} new files per source ([spark] max_files_per_trigger)" if bound
                else "everything landed since the last batch (unbounded: set [spark] max_files_per_trigger)"),
            f"stored rows: held in the driver's memory up to {project.spark.driver_keys_max} live rows per table, "
            "past that looked up by key in the table, never read whole ([spark] driver_keys_max)"]  # fmt: skip


def published_lines(project: ProjectConfig, view: str) -> list[str]:
    """The line saying which views read this one's published changes (none: no line)."""
    readers = downstreams_of(project, view)
    if not readers:
        return []
    return [
        f"changes: each epoch's change (derived from the committed snapshot) is published for {', '.join(readers)} "
        f"in _lakeview/changes/{view}/; files every reader has consumed are deleted"
    ]
