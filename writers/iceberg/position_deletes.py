"""Iceberg v2 merge-on-read: position-delete files and the snapshot that adds them.

A keyed epoch removes the stored rows of the keys it touches by naming them, ``(data file,
row position)``, in ONE position-delete file, and adds the new rows as new data files; nothing
already written is read back or rewritten, so a commit's cost follows the change. DuckDB's
iceberg extension, pyiceberg and Spark all apply position deletes on read (equality deletes,
the other v2 kind, pyiceberg cannot read). Maintenance later folds the deletes back into the
data files (:mod:`writers.iceberg.maintenance`).

pyiceberg 0.12 writes no delete files ("Merge on read is not yet supported"), so this module
writes the file (spec: ``file_path`` field id 2147483546, ``pos`` 2147483545, sorted by both)
and a snapshot producer, :class:`RowDelta`, that puts data and delete files into manifests of
the right content and can remove either kind (compaction).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import ValidationException
from pyiceberg.io.pyarrow import _read_deletes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table, Transaction

PATH_ID = 2147483546
POS_ID = 2147483545
DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ]
)


def write_position_deletes(table: Table, positions: pa.Table, commit_uuid: uuid.UUID) -> DataFile:
    """One position-delete file naming ``positions`` (columns ``file_path``, ``pos``) of live
    data files of ``table``; written under the table's data location."""
    rows = (
        positions.select(["file_path", "pos"])
        .cast(DELETE_SCHEMA)
        .sort_by([("file_path", "ascending"), ("pos", "ascending")])
    )
    location = table.location_provider().new_data_location(f"{commit_uuid}-deletes-{uuid.uuid4().hex[:8]}.parquet")
    output = table.io.new_output(location)
    with output.create(overwrite=True) as stream:
        pq.write_table(rows, stream, compression="zstd")
    size = len(table.io.new_input(location))
    paths = rows.column("file_path")
    lower, upper = pc.min(paths).as_py(), pc.max(paths).as_py()
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows.num_rows,
        file_size_in_bytes=size,
        # Path bounds let readers skip the file for data files outside them (and, when they are
        # equal, index it by the one data file it deletes from).
        lower_bounds={PATH_ID: lower.encode(), POS_ID: _long(pc.min(rows.column("pos")).as_py())},
        upper_bounds={PATH_ID: upper.encode(), POS_ID: _long(pc.max(rows.column("pos")).as_py())},
        value_counts={PATH_ID: rows.num_rows, POS_ID: rows.num_rows},
        null_value_counts={PATH_ID: 0, POS_ID: 0},
        sort_order_id=None,
        spec_id=table.metadata.default_spec_id,
    )


def read_position_deletes(io: FileIO, delete_file: DataFile) -> dict[str, pa.Array]:
    """The row positions a delete file names, by data file path."""

    return {path: positions.combine_chunks() for path, positions in _read_deletes(io, delete_file).items()}


def _long(value: int) -> bytes:
    return int(value).to_bytes(8, "little", signed=True)


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg's writer only writes data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_SnapshotProducer["RowDelta"]):
    """A snapshot that adds data and position-delete files and may remove either kind.

    Its file positions were found against one snapshot, so it must land on exactly that one:
    a concurrent commit (a compaction may have rewritten the very files it deletes from) fails
    it with :class:`ValidationException` instead of pyiceberg's rebase, and the writer redoes
    the epoch on the new state.
    """

    def __init__(
        self,
        transaction: Transaction,
        io: FileIO,
        commit_uuid: uuid.UUID,
        snapshot_properties: dict[str, str],
        operation: Operation,
    ) -> None:
        super().__init__(operation, transaction, io, commit_uuid=commit_uuid, snapshot_properties=snapshot_properties)

    def add(self, file: DataFile) -> RowDelta:
        self._added_data_files.append(file)
        return self

    def remove(self, file: DataFile) -> RowDelta:
        self._deleted_data_files.add(file)
        return self

    def _validate_concurrency(self) -> None:
        if self._commit_window is not None and not self._commit_window.is_empty():
            raise ValidationException(
                "the table changed since its row positions were read; redo the change on the new state"
            )

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # written by _manifests, next to the kept entries of their manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # _manifests carries them over

    def _manifests(self) -> list[ManifestFile]:
        removed = {f.file_path for f in self._deleted_data_files}
        kept: list[ManifestFile] = []
        gone: dict[bool, list[ManifestEntry]] = {False: [], True: []}  # is a delete file -> entries removed
        parent = (
            self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id
            else None
        )
        for manifest in parent.manifests(self._io) if parent is not None else []:
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # only DELETED entries: nothing live (pyiceberg would carry it on forever)
            if not removed:
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            staying = [e for e in entries if e.data_file.file_path not in removed]
            gone[manifest.content == ManifestContent.DELETES] += [
                e for e in entries if e.data_file.file_path in removed
            ]
            if len(staying) == len(entries):
                kept.append(manifest)
            elif staying:
                with self._writer(manifest.content == ManifestContent.DELETES, manifest.partition_spec_id) as writer:
                    for entry in staying:
                        writer.existing(entry)
                kept.append(writer.to_manifest_file())
        if len(sum(gone.values(), [])) != len(removed):
            raise ValidationException(
                f"{len(removed)} file(s) to remove, {len(sum(gone.values(), []))} live in the parent snapshot"
            )
        written = []
        for deletes in (False, True):
            added = [f for f in self._added_data_files if (f.content != DataFileContent.DATA) == deletes]
            if not added and (deletes or not gone[deletes]):
                continue  # removed delete files go unlisted: their rows are folded into the data files that replace them
            with self._writer(deletes, self._transaction.table_metadata.default_spec_id) as writer:
                for file in added:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, data_file=file
                        )
                    )
                for entry in gone[deletes]:
                    writer.delete(entry)
            written.append(writer.to_manifest_file())
        return written + kept

    def _writer(self, deletes: bool, spec_id: int):
        if not deletes:
            return self.new_manifest_writer(self.spec(spec_id))
        return _DeleteManifestWriter(
            self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
        )


def row_delta(
    txn: Transaction, properties: dict[str, str], commit_uuid: uuid.UUID, operation: Operation = Operation.OVERWRITE
) -> RowDelta:
    """A :class:`RowDelta` on ``txn``'s table (use as a context manager, like pyiceberg's producers)."""
    return RowDelta(txn, txn._table.io, commit_uuid, properties, operation)
