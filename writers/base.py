"""The one interface every table format implements: commit an epoch's change, read back
the last committed epoch, look up the stored rows of some keys."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from lakeview.errors import CommitConflictError
from lakeview.ivm.commits import Change, CommitRecord, Epoch
from lakeview.ops.retrying import retry_transient

log = logging.getLogger("lakeview.writers")  # the runtime heartbeat counts lost races here (COMMIT_RETRYING)
COMMIT_ATTEMPTS = 8  # a commit's tries against concurrent writers and storage hiccups


@dataclass(frozen=True)
class WriterCapabilities:
    """What a writer supports beyond the core contract, declared by its class so callers read
    it instead of probing attributes or types (every flag off: commit, read back, look up)."""

    format: str = ""  # "iceberg" | "delta" | "memory": which format's readers apply to its table
    catalog_commits: bool = False  # commits through an Iceberg catalog (``writer.catalog``); state tables sit beside
    executor_writes: bool = False  # ``commit_files``: one snapshot of data files Spark's executors wrote
    executor_reads: bool = False  # past the driver's bound, live rows are read on Spark's executors (``writer.live``)
    schema_evolution: bool = False  # ``add_columns``
    snapshot_changes: bool = False  # a committed snapshot's change can be derived from the table (views over views)
    merge_on_read: bool = False  # keyed commits can name replaced rows in position deletes instead of rewriting files
    multi_table_transactions: bool = False  # its snapshot can be staged into one catalog transaction with others
    closed_window_reads: bool = False  # ``rows_ending_by``: rows a watermark closed (windowed state tables)


class SnapshotWriter(ABC):
    """Commits a view's changes to one table, one snapshot per epoch, idempotently."""

    capabilities: ClassVar[WriterCapabilities] = WriterCapabilities()

    @property
    def table_name(self) -> str:
        """The table's name (an Iceberg identifier's last part, a Delta table's view)."""
        raise NotImplementedError(f"{type(self).__name__} has no table name")

    @abstractmethod
    def ensure_table(self, schema: pa.Schema, key: tuple[str, ...] | None, properties: dict[str, str]) -> None:
        """Create the view's table (and its namespace) if it does not exist yet."""

    @abstractmethod
    def last_commit(self) -> CommitRecord | None:
        """The newest commit Lakeview made to the table, or None for a new table."""

    @abstractmethod
    def lookup(self, keys: pa.Table) -> pa.Table:
        """The stored rows whose key equals one of ``keys`` (null-safe)."""

    def add_columns(self, schema: pa.Schema, properties: dict[str, str] | None = None) -> list[str]:
        """Add the columns of ``schema`` the table lacks (source schema evolution); existing
        rows read NULL for them; ``properties`` set with them (Iceberg, in one metadata commit;
        Delta keeps none).
        Returns the names added."""
        raise NotImplementedError(f"{type(self).__name__} cannot evolve its schema")

    def drop(self) -> None:
        """Drop the table and delete its files; nothing when it does not exist (a view rebuilt from its
        sources: :mod:`spark_jobs.migrate`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot drop its table")

    def baseline(self) -> None:
        """Mark the rows the table holds as from before the view's epochs (:data:`~lakeview.ivm.commits.BASELINE`),
        in one commit that changes no row: readers keep reading them, ``last_commit()`` reads None, and the view's
        first epoch replaces them in one commit (a view rebuilt from its sources: :mod:`spark_jobs.migrate`).
        Nothing when the table holds no commit or is marked already."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep its rows as a baseline")

    def at_baseline(self) -> bool:
        """Whether the table's newest commit is a baseline (:meth:`baseline`): its rows are an older layout's, which
        the view's first epoch replaces."""
        return False

    @abstractmethod
    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        """Apply ``change`` as one snapshot stamped with ``epoch``.

        Returns None (and changes nothing) when the epoch is already committed or the change is
        empty. Raises CommitConflictError when concurrent commits keep winning.
        """


def retry_commit(
    epoch: Epoch, attempt: Callable[[], CommitRecord | None], reset: Callable[[], None] | None = None
) -> CommitRecord | None:
    """Run one commit ``attempt`` under the one retry policy: a lost race or a storage failure
    (transient) is tried again after ``reset`` (drop cached table state), each lost race logged
    for the heartbeat; at most COMMIT_ATTEMPTS tries, then the last error is raised."""

    def before_retry(exc: BaseException, number: int) -> None:
        if reset is not None:
            reset()
        if isinstance(exc, CommitConflictError):
            log.warning("%s: commit of epoch %s lost a race (attempt %s): %s", epoch.view, epoch.number, number, exc)

    what = f"{epoch.view}: commit of epoch {epoch.number}"
    return retry_transient(attempt, what=what, attempts=COMMIT_ATTEMPTS, before_retry=before_retry)
