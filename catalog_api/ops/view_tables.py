"""Format-neutral reads of a view's table: its commit history and current rows.

Iceberg tables are read through the catalog store (no server needed), Delta tables from their
log at ``<warehouse>/<namespace>/<view>``. Used by ``status``, ``verify`` and maintenance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog_api.store.catalog import open_store
from lakeview.config.models import ProjectConfig, TableFormat, delta_storage_options
from lakeview.errors import NoSuchTableError
from lakeview.ivm.commits import CommitRecord
from writers.iceberg.writer import last_commit_of

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeview.ivm.commits import CommitRecord


def commit_history(project: ProjectConfig, view: str, limit: int = 50) -> list[CommitRecord]:
    """Lakeview's newest ``limit`` commits to the view's table, newest first.

    Raises NoSuchTableError when the table does not exist yet.
    """
    if project.views[view].format is TableFormat.DELTA:
        from writers.delta.writer import history_of  # lazy: deltalake loads only for Delta tables

        return history_of(_delta_table(project, view), limit)[:limit]

    table = _iceberg_table(project, view)
    records: list[CommitRecord] = []
    snapshot = table.current_snapshot()
    while snapshot is not None and len(records) < limit:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        record = CommitRecord.from_properties(props, snapshot.snapshot_id)
        if record is not None:
            records.append(record)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return records


def last_commit(project: ProjectConfig, view: str) -> CommitRecord | None:
    """The newest Lakeview commit of the view (None: table created, nothing committed)."""
    if project.views[view].format is TableFormat.DELTA:
        from writers.delta.writer import last_commit_of as delta_last  # lazy: deltalake loads only for Delta tables

        return delta_last(_delta_table(project, view))

    return last_commit_of(_iceberg_table(project, view))


def read_rows(project: ProjectConfig, view: str, snapshot_id: int | None = None) -> pa.Table:
    """The view's rows, now or at ``snapshot_id`` (an Iceberg snapshot id / a Delta version)."""
    if project.views[view].format is TableFormat.DELTA:
        table = _delta_table(project, view)
        if snapshot_id is not None:
            table.load_as_version(snapshot_id)
        return table.to_pyarrow_table()
    return _iceberg_table(project, view).scan(snapshot_id=snapshot_id).to_arrow()


def _iceberg_table(project: ProjectConfig, view: str):
    return open_store(project).load_table((project.views[view].namespace, view))


def _delta_table(project: ProjectConfig, view: str):
    from deltalake import DeltaTable  # lazy: deltalake loads only for Delta tables
    from deltalake.exceptions import TableNotFoundError  # lazy: deltalake loads only for Delta tables

    try:
        return DeltaTable(project.table_location(view), storage_options=delta_storage_options(project))
    except TableNotFoundError:
        raise NoSuchTableError(f"no Delta table at {project.table_location(view)}") from None


class _Summary:
    def __init__(self, props: dict[str, str]) -> None:
        self.additional_properties = props


class LogSnapshot:
    """A Delta commit shaped like an Iceberg snapshot (``snapshot_id``, ``timestamp_ms``,
    ``summary.additional_properties``), so freshness code reads both formats alike."""

    def __init__(self, version: int, timestamp_ms: int, props: dict[str, str]) -> None:
        self.snapshot_id = version
        self.timestamp_ms = timestamp_ms
        self.summary = _Summary(props)


def status_inputs(project: ProjectConfig, store, view: str) -> tuple[CommitRecord | None, list]:
    """The newest Lakeview commit and every snapshot (Iceberg snapshots or Delta log entries) of a
    view's table, for ``status``. Raises NoSuchTableError when the table does not exist yet."""
    if project.views[view].format is TableFormat.DELTA:
        from writers.delta.log import commit_infos  # lazy: deltalake loads only for Delta tables
        from writers.delta.writer import last_commit_of as delta_last  # lazy: deltalake loads only for Delta tables

        table = _delta_table(project, view)
        snapshots = [
            LogSnapshot(
                int(entry.get("version", 0)),
                int(entry.get("timestamp", 0)),
                {k: str(v) for k, v in entry.items() if k.startswith("lakeview.")},
            )
            for entry in reversed(commit_infos(table))
        ]
        return delta_last(table), snapshots

    table = store.load_table((project.views[view].namespace, view))
    return last_commit_of(table), list(table.metadata.snapshots)
