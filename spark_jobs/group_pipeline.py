"""One Spark Structured Streaming query per view group (``group = "name"``).

The members of a group share their sources and cadence, so one query reads the source once per
trigger and every member computes its change from the same batch, exactly as its own
:class:`~spark_jobs.graph_pipeline.GraphPipeline` (the batch tagged as its own query's) would. Their writers only hold the commits
(:class:`~writers.iceberg.group.StagedWriter`); the group then commits every table the epoch touches —
the views, their state tables, change-feed mirrors — in ONE multi-table catalog transaction
stamped with one epoch and one frontier (:class:`~writers.iceberg.group.IcebergGroupWriter`). A reader
therefore never sees one member ahead of another, and a crash leaves all or none of them with the
epoch: a replayed epoch is skipped for the whole group, an unfinished one is redone for all.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from lakeview.config.models import ProjectConfig
from lakeview.errors import WriterError
from lakeview.ivm.commits import CommitRecord
from lakeview.sql.groups import groups_of
from lakeview.sql.planner import view_plan
from spark_jobs import faults
from spark_jobs.graph_pipeline import GraphPipeline
from spark_jobs.source_frames import tagged
from spark_jobs.streams import file_stream, start_query
from writers.iceberg.group import IcebergGroupWriter, StagedWriter

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakeview.ivm.commits import Change, Epoch
    from writers.staged_files import WrittenFile

log = logging.getLogger("lakeview.pipeline")


class GroupPipeline:
    """Keeps the member views of one group fresh together: ``prepare()`` once, then ``start()``."""

    def __init__(
        self,
        spark: SparkSession,
        project: ProjectConfig,
        group: str,
        catalog: RestCatalog,
        on_commit: Callable[[CommitRecord], None] | None = None,
    ) -> None:
        members = groups_of(project).get(group)
        if not members:
            raise WriterError(f"no view has group = {group!r}")
        self.spark = spark
        self.project = project
        self.group = group
        self.catalog = catalog
        self.on_commit = on_commit
        self.checkpoint = project.checkpoint_path(members[0])  # the group's (see ProjectConfig.checkpoint_path)
        self.tables: dict[str, StagedWriter] = {}  # every table of the group, by name
        self.owners: dict[str, str] = {}  # table -> the view it belongs to
        self._source = view_plan(project, members[0]).sources[0]
        self.pipelines: dict[str, GraphPipeline] = {view: self._member(view) for view in members}
        self.writer: IcebergGroupWriter | None = None
        self.timings: dict[str, float] = {}

    @property
    def views(self) -> list[str]:
        return list(self.pipelines)

    @property
    def source(self) -> str:
        return self._source

    def _staged(self, view: str, name: str) -> StagedWriter:
        writer = StagedWriter(self.catalog, self.project.views[view].namespace, name)
        self.tables[name] = writer
        self.owners[name] = view
        return writer

    def _member(self, view: str) -> GraphPipeline:
        pipeline = GraphPipeline(
            self.spark, self.project, view, self._staged(view, view), state_writer=lambda name: self._staged(view, name)
        )
        pipeline.checkpoint = self.checkpoint  # its frontier is read from the group's offsets
        pipeline.staged = True  # its memory copies take an epoch once the group committed it
        return pipeline

    def prepare(self) -> None:
        """Create every member's tables and reconcile the group's checkpoint with them.

        Raises WriterError when the members' tables are at different epochs (a view joined a
        group that already committed, or was kept alone before): they could not move together.
        """
        for view, pipeline in self.pipelines.items():
            pipeline.prepare_tables()
            kept = {writer.table_name for writer in pipeline.tables()}  # (its start looks for older versions' too)
            for name in [n for n, owner in self.owners.items() if owner == view and n not in kept]:
                del self.tables[name], self.owners[name]
        self.writer = IcebergGroupWriter(self.catalog, self.group, dict(self.tables), self.owners)
        epochs = {name: (r.epoch if (r := w.last_commit()) is not None else None) for name, w in self.tables.items()}
        distinct = set(epochs.values())
        if len(distinct) > 1:
            detail = ", ".join(
                f"{name}: {epoch if epoch is not None else 'none'}" for name, epoch in sorted(epochs.items())
            )
            raise WriterError(
                f"group {self.group}: its tables are at different epochs ({detail}), so they cannot commit together; "
                "drop the tables of the views that joined the group (or of the whole group) to rebuild them"
            )
        last = distinct.pop() if distinct else None
        for pipeline in self.pipelines.values():  # every table of the graph commits in the group's transaction
            pipeline.attach(HeldCommits(self.writer, self.tables))  # type: ignore[arg-type]
            pipeline._last_epoch = last
            pipeline.graph.runtime.epoch = 0 if last is None else 1  # a restart: its state exists
        has_progress = (self.checkpoint / "commits").exists() and any((self.checkpoint / "commits").iterdir())
        if last is None and has_progress:
            log.warning("group %s: its tables have no commits but a checkpoint exists; starting over", self.group)
            shutil.rmtree(self.checkpoint)
        elif last is not None and not (self.checkpoint / "offsets").exists():
            raise WriterError(
                f"group {self.group}: its tables are at epoch {last} but Spark's checkpoint {self.checkpoint} is missing, "
                "so the sources' positions are unknown; drop the group's tables to rebuild them"
            )
        for pipeline in self.pipelines.values():
            pipeline.publish_changes()  # for views reading a member: epochs committed before a crash

    def start(self, available_now: bool = False) -> StreamingQuery:
        """Start the group's one streaming query (``available_now``: what has landed, then stop)."""
        first = next(iter(self.pipelines.values()))
        self._install_faults()
        return start_query(
            self._stream(),
            f"lakeview_group_{self.group}",
            self.checkpoint,
            self._process,
            first.config.cadence,
            available_now,
        )

    def _stream(self) -> DataFrame:
        """The source's file stream, read once for every member (each tags its batch as its own query's)."""
        graph = next(iter(self.pipelines.values()))
        return file_stream(self.spark, graph.project, self.source, graph.quarantines[self.source])

    def _install_faults(self) -> None:
        """``LAKEVIEW_FAULT=before_group_commit:<epoch>``: killed with every table's data files
        written and staged, before the catalog transaction is sent (crash tests)."""
        assert self.writer is not None
        post = self.writer._post

        def post_after_fault_point(staged: list) -> int:
            faults.point("before_group_commit", faults.current_epoch)
            return post(staged)

        self.writer._post = post_after_fault_point  # type: ignore[method-assign]

    def _process(self, batch: DataFrame, epoch_id: int) -> None:
        assert self.writer is not None, "prepare() first"
        done = self.writer.last_epoch()
        if done is not None and epoch_id <= done:
            log.info("group %s: epoch %s already committed; skipping the replay", self.group, epoch_id)
            return
        for table in self.tables.values():
            table.take()  # nothing held from a failed attempt at this epoch
        faults.point("reading", epoch_id)
        started = time.perf_counter()
        batch = batch.persist()
        try:
            for pipeline in self.pipelines.values():
                pipeline._process_batch(tagged(batch, 0), epoch_id)
        finally:
            batch.unpersist()
        computed = time.perf_counter()
        records = self._commit(epoch_id)
        for pipeline in self.pipelines.values():
            pipeline.took(epoch_id)
        self.timings = {"compute_s": computed - started, "commit_s": time.perf_counter() - computed}
        log.info(
            "group %s: epoch %s timings %s", self.group, epoch_id, {k: round(v, 3) for k, v in self.timings.items()}
        )
        faults.point("after_commit", epoch_id)
        for pipeline in self.pipelines.values():
            pipeline.publish_changes()  # after the commit, as a view alone does (spark_jobs.sources.view_changes)
        for view in self.pipelines:
            record = records.get(view)
            if record is not None and self.on_commit is not None:
                self.on_commit(record)

    def _commit(self, epoch_id: int) -> dict[str, CommitRecord]:
        """Commit every held change of the epoch (an empty snapshot for tables without one)."""
        assert self.writer is not None
        held = {name: pending for name, table in self.tables.items() if (pending := table.take()) is not None}
        if not held:
            return {}
        # Every member stamps the same epoch and frontier (one source, one offset log); each table
        # keeps its own view's stamp (rows in, quarantined, watermark) when that view held one.
        epoch = next(iter(held.values()))[0]
        by_view = {e.view: e for e, _ in held.values()}
        epochs = {
            name: held[name][0]
            if name in held
            else by_view.get(self.owners[name], replace(epoch, view=self.owners[name]))
            for name in self.tables
        }
        records = self.writer.commit(
            epoch, {name: change for name, (_, change) in held.items()}, epochs
        )  # rows or executor-written files
        if records is None:
            return {}
        log.info("group %s: committed epoch %s to %s tables in one transaction", self.group, epoch_id, len(records))
        return records


class HeldCommits:
    """A graph member's one transaction as its pipeline sees it (``GraphPipeline.group``): each of its tables'
    change (rows, or the files the executors wrote for a first batch) is held by the table for the group's
    transaction, which commits every member's tables at once."""

    def __init__(self, group: IcebergGroupWriter, tables: dict[str, StagedWriter]) -> None:
        self.group, self.tables = group, tables

    def last_epoch(self) -> int | None:
        return self.group.last_epoch()

    def commit(
        self, epoch: Epoch, changes: dict[str, Change | list[WrittenFile]], epochs: dict[str, Epoch] | None = None
    ) -> None:
        """Hold every table's change for the group's commit (nothing is committed yet: None). The epoch's
        frontier is stamped as the group's one-source members stamp it (the group's one source needs no index)."""
        frontier = {s: {k: v for k, v in p.items() if k != "index"} for s, p in epoch.frontier.items()}  # type: ignore[union-attr]
        epoch = replace(epoch, frontier=frontier)
        for name, change in changes.items():
            if isinstance(change, list):
                self.tables[name].commit_files(epoch, change)
            else:
                self.tables[name].commit(epoch, change)
