"""Commit data files that were written elsewhere (Spark executors) as one snapshot per epoch.

The executor path (:mod:`spark_jobs.executors.writes`) writes an append batch's Parquet files in
the table's data location and hands the driver one :class:`WrittenFile` per file: its path,
size, row count and the format's metadata. Committing them is metadata only, so the driver's
memory follows the number of files, not the rows: Iceberg gets one ``append`` snapshot of the
DataFiles (pyiceberg ``fast_append``), Delta one write transaction of add actions
(``create_write_transaction``) carrying the app transaction ``(view, epoch)``. Both are stamped
with the same Lakeview summary as any other commit, plus who wrote the files.

A rebuilt view's first batch replaces the rows its table holds instead (:class:`ReplacingFiles`): Iceberg, one
overwrite snapshot (:mod:`writers.iceberg.group`); Delta, one commit removing every file and adding these.

Files of a commit that never lands (a crash, a lost race) are referenced by no snapshot:
``lakeview maintain`` removes them as orphans once older than ``orphan_min_age``.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.manifest import DataFile

from lakeview.ivm.commits import CommitRecord, Epoch
from writers.iceberg.metadata_memo import transaction

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyiceberg.table import Table, Transaction

WRITTEN_BY = "lakeview.data-files-written-by"  # "executors" on commits of executor-written files
DATA_FILES = "lakeview.data-files"


@dataclass(frozen=True)
class WrittenFile:
    """One data file a Spark task wrote, as the driver sees it (no rows)."""

    path: str  # absolute (Iceberg) or relative to the table root (Delta)
    size: int
    rows: int
    writer: str  # host:pid of the process that wrote it
    payload: bytes  # Iceberg: pickled DataFile fields; Delta: the add action's stats JSON


class ReplacingFiles(list):  # type: ignore[type-arg]
    """Executor-written files (:class:`WrittenFile`) that replace every live file of their table in ONE commit
    instead of adding to them: a rebuilt view's first batch over the rows an older Lakeview left
    (:meth:`writers.base.SnapshotWriter.baseline`). Iceberg: the group's overwrite snapshot; Delta: one commit
    removing every file and adding these."""


def stamp_files(epoch: Epoch, files: list[WrittenFile], deleted: int = 0) -> dict[str, str]:
    """The Lakeview summary of a commit of executor-written ``files`` (``deleted``: the rows they replace)."""
    props = CommitRecord.properties(epoch, inserted=sum(f.rows for f in files), deleted=deleted)
    return {**props, WRITTEN_BY: "executors", DATA_FILES: str(len(files))}


def data_files(files: list[WrittenFile]) -> list[DataFile]:
    """Iceberg's DataFiles of executor-written ``files``."""
    return [DataFile.from_args(**pickle.loads(file.payload)) for file in files]


def append_iceberg_files(table: Table, epoch: Epoch, files: list[WrittenFile]) -> CommitRecord:
    """One ``append`` snapshot adding ``files`` (written with this table's schema and field ids)."""
    txn, props = stage_iceberg_files(table, epoch, files)
    committed = txn.commit_transaction()
    current = committed.current_snapshot()
    return CommitRecord.from_properties(props, current.snapshot_id if current else None)  # type: ignore[return-value]


def stage_iceberg_files(table: Table, epoch: Epoch, files: list[WrittenFile]) -> tuple[Transaction, dict[str, str]]:
    """The ``append`` of ``files`` staged in a transaction, uncommitted (a view group commits
    several tables' staged snapshots in one catalog transaction)."""

    props = stamp_files(epoch, files)
    txn = transaction(table)
    with txn.update_snapshot(snapshot_properties=props).fast_append() as snapshot:
        for data_file in data_files(files):
            snapshot.append_data_file(data_file)
    return txn, props


def append_delta_files(table: DeltaTable, epoch: Epoch, files: list[WrittenFile]) -> dict[str, str]:
    """One Delta commit adding ``files`` (:class:`ReplacingFiles`: and removing every file the table had), with the
    app transaction ``(view, epoch)``; returns its stamp."""
    from deltalake import CommitProperties, Transaction  # lazy: deltalake loads only for Delta tables
    from deltalake.transaction import AddAction  # lazy: deltalake loads only for Delta tables

    replacing = isinstance(files, ReplacingFiles)
    props = stamp_files(epoch, files, table.to_pyarrow_dataset().count_rows() if replacing else 0)
    now = int(time.time() * 1000)
    actions = [
        AddAction(
            path=f.path,
            size=f.size,
            partition_values={},
            modification_time=now,
            data_change=True,
            stats=f.payload.decode(),
        )
        for f in files
    ]
    txn = Transaction(app_id=epoch.view, version=epoch.number, last_updated=now)
    commit = CommitProperties(custom_metadata=props, app_transactions=[txn], max_commit_retries=0)
    mode = "overwrite" if replacing else "append"  # overwrite: delta-rs removes every file the table had
    table.create_write_transaction(actions, mode=mode, schema=table.schema(), commit_properties=commit)
    return props
