"""One epoch of a view's streaming query, the same for every pipeline
(:class:`~spark_jobs.sources_pipeline.SourcesPipeline`): start the query, then per batch
skip an epoch already committed, persist the batch, process it, time it, and report the commit.

What differs per pipeline is hooks: ``_process_batch`` (the epoch's work), ``_done`` (an epoch already
committed, skipped before anything is read), ``_release`` (what the epoch held besides the batch),
``_after_batch`` (between the batch and the ``after_commit`` fault point, e.g. publishing changes for
downstream views) and ``_committed`` (after it).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from spark_jobs import faults
from spark_jobs.streams import start_query

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from lakeview.config.models import ViewConfig
    from lakeview.ivm.commits import CommitRecord

log = logging.getLogger("lakeview.pipeline")


class EpochLoop:
    """The streaming query's loop; the pipeline sets ``view``, ``config``, ``checkpoint``, ``on_commit`` and
    ``timings`` and provides ``source_stream()``."""

    view: str
    config: ViewConfig
    checkpoint: object
    on_commit: Callable[[CommitRecord], None] | None
    timings: dict[str, float]
    committed_in = "tables"  # where a replayed epoch is found (the log line)
    persist_batch = True  # False: the pipeline reads the batch once, so caching it only costs

    def source_stream(self) -> DataFrame:
        raise NotImplementedError

    def start(self, available_now: bool = False) -> StreamingQuery:
        """Start the streaming query (``available_now``: process what has landed, then stop)."""
        stream = self.source_stream()
        faults.install(self)  # type: ignore[arg-type]
        return start_query(
            stream, f"lakeview_{self.view}", self.checkpoint, self._process, self.config.cadence, available_now
        )

    def _process(self, batch: DataFrame, epoch_id: int) -> None:
        if self._done(epoch_id):
            log.info("%s: epoch %s already in the %s; skipping the replay", self.view, epoch_id, self.committed_in)
            return
        faults.point("reading", epoch_id)
        started = time.perf_counter()
        if self.persist_batch:
            batch = batch.persist()
        try:
            record = self._process_batch(batch, epoch_id)
        finally:
            if self.persist_batch:
                batch.unpersist()
            self._release()
        self.timings["total_s"] = time.perf_counter() - started
        self._after_batch(epoch_id)
        faults.point("after_commit", epoch_id)
        self._committed(epoch_id)
        if record is not None:
            log.info("%s: committed epoch %s as snapshot %s", self.view, epoch_id, record.snapshot_id)
            if self.on_commit is not None:
                self.on_commit(record)

    def _process_batch(self, batch: DataFrame, epoch_id: int) -> CommitRecord | None:
        raise NotImplementedError

    def _done(self, epoch_id: int) -> bool:
        """Whether the epoch is already committed (skipped before anything is read); by default each
        table applies an epoch at most once by itself, so nothing is skipped here."""
        return False

    def _release(self) -> None:
        """What the epoch held besides the batch (the batch is unpersisted already)."""

    def _after_batch(self, epoch_id: int) -> None:
        """Between the batch's commit and the ``after_commit`` fault point."""

    def _committed(self, epoch_id: int) -> None:
        """After the ``after_commit`` fault point, before the commit is reported."""
