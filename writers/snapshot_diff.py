"""What one committed snapshot changed, read back from the table itself, as a Z-set.

A view over another view consumes the upstream's per-epoch change: rows removed weighted −1,
rows added +1. Rather than trusting what the pipeline meant to commit, the change is derived
from the table, so it is the same whether it is taken right after the commit or after a crash
and restart (exactly once, whatever died when):

- **Iceberg**: the rows of the data files the snapshot added, minus the rows it removed: those
  at the positions its new position-delete files name (merge-on-read) and the live rows of
  the data files it removed (its own manifest entries, status ADDED / DELETED with the
  snapshot's id). A file rewritten copy-on-write shows its untouched rows both removed and
  added; they cancel when the Z-set is consolidated.
- **Delta**: the add and remove actions of that log version (the files of version N not in
  N−1, and those of N−1 not in N); delta-rs writes no deletion vectors, so the same holds.

The Z-set is consolidated: identical rows are summed and rows whose weight sums to 0 dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

from lakeview.errors import WriterError
from lakeview.graph.zset import summed
from lakeview.ivm.commits import CommitRecord
from writers.base import SnapshotWriter

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from writers.delta.writer import DeltaWriter
    from writers.iceberg.writer import IcebergWriter

WEIGHT = "__lv_w"  # the Z-set weight column (lakeview.sql.plan.WEIGHT)


def snapshot_change(writer: SnapshotWriter, snapshot_id: int) -> pa.Table:
    """The consolidated Z-set (the table's columns plus ``__lv_w``) of one snapshot / version."""
    return _for(writer, _iceberg_change, _delta_change)(writer, snapshot_id)


def snapshot_rows(writer: SnapshotWriter, snapshot_id: int) -> pa.Table:
    """Every row of the table at one snapshot / version."""
    return snapshot_batches(writer, snapshot_id).read_all()


def snapshot_batches(writer: SnapshotWriter, snapshot_id: int) -> pa.RecordBatchReader:
    """Every row of the table at one snapshot / version, streamed a file at a time."""
    return _for(writer, _iceberg_batches, _delta_batches)(writer, snapshot_id)


def commits_after(writer: SnapshotWriter, epoch: int | None) -> list[CommitRecord]:
    """Lakeview's commits with an epoch newer than ``epoch`` (all when None), oldest first."""
    return _for(writer, _iceberg_commits_after, _delta_commits_after)(writer, epoch)


def consolidate(removed: pa.Table, added: pa.Table, schema: pa.Schema) -> pa.Table:
    """``added`` at +1 minus ``removed`` at −1, identical rows summed, zero weights dropped."""
    removed = removed.select(schema.names).cast(schema)
    added = added.select(schema.names).cast(schema)
    both = pa.concat_tables(
        [
            removed.append_column(WEIGHT, pa.array([-1] * removed.num_rows, pa.int32())),
            added.append_column(WEIGHT, pa.array([1] * added.num_rows, pa.int32())),
        ]
    )
    return summed(both)


def _for(writer: SnapshotWriter, iceberg, delta):
    capabilities = writer.capabilities
    if capabilities.snapshot_changes and capabilities.format == "iceberg":
        return iceberg
    if capabilities.snapshot_changes and capabilities.format == "delta":
        return delta
    raise WriterError(f"no snapshot reader for {type(writer).__name__}")


# --- Iceberg ------------------------------------------------------------------------------
def _iceberg_change(writer: IcebergWriter, snapshot_id: int) -> pa.Table:
    table = writer.table()
    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise WriterError(
            f"{'.'.join(writer.identifier)}: snapshot {snapshot_id} is gone (expired); its change cannot be derived"
        )
    added, removed, deletes = [], [], []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id:
            continue  # carried over from an earlier snapshot
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot_id:
                continue
            content, status = entry.data_file.content, entry.status
            if content == DataFileContent.EQUALITY_DELETES:
                raise WriterError(
                    f"{'.'.join(writer.identifier)}: snapshot {snapshot_id} has equality delete files; not written by Lakeview"
                )
            if content == DataFileContent.POSITION_DELETES:
                if status == ManifestEntryStatus.ADDED:
                    deletes.append(entry.data_file)
                continue  # a delete file removed with the data files it applied to: those are in ``removed``
            if status == ManifestEntryStatus.ADDED:
                added.append(entry.data_file)
            elif status == ManifestEntryStatus.DELETED:
                removed.append(entry.data_file)
    arrow = table.schema().as_arrow()
    live = writer.live
    parent = live.live(table, snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
    if parent is None and (removed or deletes):
        raise WriterError(f"{'.'.join(writer.identifier)}: snapshot {snapshot_id} removes rows but has no parent")
    remote = live.remote
    if remote is not None and (
        sum(f.record_count for f in added) > remote.rows_max or (parent is not None and live.distributed(parent))
    ):
        remembered = live.change_of(
            added, deletes, removed
        )  # this process committed it: (gone, came) from the commit itself
        if remembered is not None:
            return consolidate(*remembered, arrow)
        return remote.change(table, parent, deletes, removed, added)  # type: ignore[arg-type]
    # Removed: the rows the snapshot's new delete files name, and a removed data file's rows
    # that were live in the parent (not already deleted).
    gone = [live.rows_deleted_by(table, f, parent) for f in deletes]  # type: ignore[arg-type]
    gone += [live.rows_of(table, f, parent.deletes.get(f.file_path, {})) for f in removed]  # type: ignore[union-attr]
    came = [live.rows_of(table, f) for f in added]

    def rows(parts: list[pa.Table]) -> pa.Table:
        return pa.concat_tables([p.cast(arrow) for p in parts]) if parts else arrow.empty_table()

    return consolidate(rows(gone), rows(came), arrow)


def _iceberg_batches(writer: IcebergWriter, snapshot_id: int) -> pa.RecordBatchReader:
    return writer.table().scan(snapshot_id=snapshot_id).to_arrow_batch_reader()


def _iceberg_commits_after(writer: IcebergWriter, epoch: int | None) -> list[CommitRecord]:
    table = writer.table()
    found: list[CommitRecord] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        record = CommitRecord.from_properties(props, snapshot.snapshot_id)
        if record is not None:
            if epoch is not None and record.epoch <= epoch:
                break
            found.append(record)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return found[::-1]


# --- Delta --------------------------------------------------------------------------------
def _delta_files(table: DeltaTable) -> set[str]:
    return set(table.get_add_actions(flatten=True).column("path").to_pylist())


def _delta_read(table: DeltaTable, location: str, paths: set[str], schema: pa.Schema) -> pa.Table:
    """The rows of some data files of one version (through delta-rs's own filesystem)."""

    if not paths:
        return schema.empty_table()
    dataset = table.to_pyarrow_dataset()
    fragments = [f for f in dataset.get_fragments() if any(f.path.endswith(p.lstrip("/")) for p in paths)]
    if len(fragments) != len(paths):
        raise WriterError(f"{location}: version {table.version()} lists {len(paths)} files, {len(fragments)} readable")
    part = ds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem)
    return part.to_table()


def _delta_change(writer: DeltaWriter, version: int) -> pa.Table:
    table = writer.table(version)  # each version's log is loaded once
    schema = pa.schema(table.schema().to_arrow())
    now = _delta_files(table)
    if version == 0:
        return consolidate(schema.empty_table(), _delta_read(table, writer.location, now, schema), schema)
    previous = writer.table(version - 1)
    before = _delta_files(previous)
    added = _delta_read(table, writer.location, now - before, schema)
    removed = _delta_read(previous, writer.location, before - now, schema)
    return consolidate(removed, added, schema)


def _delta_batches(writer: DeltaWriter, version: int) -> pa.RecordBatchReader:
    return writer.table(version).to_pyarrow_dataset().scanner().to_reader()


def _delta_commits_after(writer: DeltaWriter, epoch: int | None) -> list[CommitRecord]:
    from writers.delta.writer import history_of  # lazy: deltalake loads only for Delta tables

    found: list[CommitRecord] = []
    for record in history_of(writer.table()):  # newest first
        if epoch is not None and record.epoch <= epoch:
            break
        found.append(record)
    return found[::-1]
