"""The streaming surface of a view that reads its sources as one tagged stream
(:class:`~spark_jobs.graph_pipeline.GraphPipeline`: operator graphs, every join and union): its set-up, the tagged stream, and the epoch's frontier and per-source
frames. ``start()`` and the per-epoch skeleton are every pipeline's (:class:`spark_jobs.epoch_loop.EpochLoop`);
each subclass fills in its hooks (``_process_batch``, ``_done``, ``_after_batch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakeview.ivm.commits import CommitRecord, Epoch
from spark_jobs import faults
from spark_jobs.epoch_loop import EpochLoop
from spark_jobs.executors.reads import on_executors
from spark_jobs.source_frames import Frontier, SourceFrames, frontier, source_frames, tagged_stream
from spark_jobs.sources.quarantine import Quarantine
from spark_jobs.streams import state_table_writer

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from lakeview.config.models import ProjectConfig
    from writers.base import SnapshotWriter


class SourcesPipeline(EpochLoop):
    """Keeps one view over several sources fresh: ``prepare()`` once (the subclass's), then ``start()``.
    ``plan`` is the view's plan (anything with ``sources``); ``project`` is the project as the view's
    query sees it (upstream views already turned into their change files' sources)."""

    # upstream views among the sources (their change files carry weights)
    upstreams: set[str] | frozenset[str] = frozenset()
    # the last epoch's frontier as read from the checkpoint (see epoch_frontier)
    _read_frontier: tuple[int, Frontier] | None = None

    def __init__(
        self,
        spark: SparkSession,
        project: ProjectConfig,
        view: str,
        plan,  # type: ignore[no-untyped-def]  # a GraphPlan
        writer: SnapshotWriter,
        on_commit: Callable[[CommitRecord], None] | None = None,
        state_writer: Callable[[str], SnapshotWriter] | None = None,
    ) -> None:
        self.spark = spark
        self.project = project
        self.view = view
        self.config = project.views[view]
        self.plan = plan
        self.writer = on_executors(writer, spark, project)
        self.on_commit = on_commit
        self.checkpoint = project.checkpoint_path(view)
        made = state_writer or self._iceberg_state_writer
        # every table the view keeps: past [spark] driver_keys_max rows, read only by the executors
        self._state_writer = lambda name: on_executors(made(name), spark, project)
        self.configs = {s: project.sources[s] for s in plan.sources}
        self.quarantines = {s: Quarantine(project, s, view) for s in plan.sources}
        self._last_epoch: int | None = None
        self._batch_paths: dict[str, list[Path]] = {}  # this epoch's files of each source
        self.timings: dict[str, float] = {}  # the last epoch's phases (seconds), for logs and bench/
        self.last_write: dict[str, object] = {}

    @property
    def source(self) -> tuple[str, ...]:
        """Every source the view reads: pending-file
        counts (lakeview.runtime) go over all of them."""
        return self.plan.sources

    @property
    def sources(self) -> tuple[str, ...]:
        return self.plan.sources

    def _iceberg_state_writer(self, name: str) -> SnapshotWriter:
        """A state table next to the view's, through the same catalog."""
        return state_table_writer(self.writer, self.view, self.config.namespace, name)

    # --- streaming (EpochLoop's start and per-epoch skeleton) -----------------------------
    def source_stream(self) -> DataFrame:
        """Every source's file stream, tagged and prefixed, as one stream."""
        return tagged_stream(self.spark, self.project, self.sources, self.quarantines)

    def _epoch(
        self, batch: DataFrame, epoch_id: int, columns: Callable[[str], list[str] | None] = lambda source: None
    ) -> tuple[SourceFrames, Epoch]:
        """The epoch's per-source frames (quarantined; ``columns``: only what the view reads of a source)
        and its :class:`Epoch` (the frontier every source reaches, the newest input's arrival time)."""
        reached, newest_ms, _ = self.epoch_frontier(epoch_id)
        split = source_frames(
            batch, self.view, self.sources, self.configs, self.quarantines, epoch_id, self._batch_paths,
            self.upstreams, columns,
        )  # fmt: skip
        return split, self._epoch_of(epoch_id, reached, newest_ms, split.rows_in, split.quarantined)

    def epoch_frontier(self, epoch_id: int) -> Frontier:
        """The epoch's :func:`~spark_jobs.source_frames.frontier`, read from the checkpoint once per epoch
        however many of its steps ask (the first- and later-batch size checks, ``new_columns = "evolve"``, the
        collect); it names the epoch's files of each source (``_batch_paths``)."""
        if self._read_frontier is None or self._read_frontier[0] != epoch_id:
            self._read_frontier = (epoch_id, frontier(self.checkpoint, self.sources, epoch_id, self.upstreams))
        found = self._read_frontier[1]
        self._batch_paths = found[2]
        return found

    def _epoch_of(
        self, epoch_id: int, reached: dict[str, Any], newest_ms: int | None, rows_in: int, quarantined: int
    ) -> Epoch:
        """The :class:`Epoch` being committed (the fault points name it from here on)."""
        faults.current_epoch = epoch_id
        return Epoch(
            view=self.view,
            number=epoch_id,
            frontier=reached,
            rows_in=rows_in,
            newest_input_ms=newest_ms,
            rows_quarantined=quarantined,
        )
