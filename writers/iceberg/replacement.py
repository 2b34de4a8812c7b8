"""A group member's epoch written as a replacement: ONE snapshot removing every live data file of the table
and adding one file of the rows it holds now (an append log's fold, a small view's rows), nothing read.

The live files are what the replacement removes. Read back, they cost the snapshot's manifest list and each
manifest with live files (Avro readers built per file: ~10 ms an epoch, about an eighth of a group's commit).
A table this process replaced last holds exactly the files that replacement added, so :class:`Replaced`
remembers them with the snapshot that added them and the next replacement of that snapshot reads nothing; any
other snapshot (a commit by another path or process, a maintenance, a fresh load after an unknown outcome) is
read as before.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import AddSnapshotUpdate

from lakeview.ivm.commits import CommitRecord, Epoch
from writers.graph_state import Replacement
from writers.iceberg.metadata_memo import arrow_schema, transaction
from writers.iceberg.writer import _LiveOverwrite, _replacing
from writers.staged_files import ReplacingFiles, data_files, stamp_files


@dataclass(frozen=True)
class Replaced:
    """What a replacement left: the snapshot it adds, that snapshot's manifests kept from before it (delete
    files' manifests with live entries: a replacement carries them) and its live data files (those it added)."""

    snapshot_id: int
    kept: tuple[ManifestFile, ...]
    live: tuple[ManifestEntry, ...]


@dataclass(frozen=True)
class Writing:
    """A replacement's rows being written to the table's data files (by pyiceberg's writer threads, which encode
    Parquet without the GIL, while the group stages its other members)."""

    rows: pa.Table
    commit_uuid: uuid.UUID
    files: Future[list[DataFile]]


# Writes the replacements' rows (pyiceberg's writer then uses its own executor per file, as for any write).
_WRITERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakeview-replacement")


def start_writing(table: Table, change: Replacement) -> Writing:
    """Start writing ``change``'s rows to data files of ``table`` (``Writing.files`` gives them once written)."""
    schema = arrow_schema(table)
    rows = change.rows.select(schema.names).cast(schema)
    commit_uuid = uuid.uuid4()

    def write() -> list[DataFile]:
        if not rows.num_rows:
            return []
        return list(
            _dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io, write_uuid=commit_uuid)
        )

    return Writing(rows, commit_uuid, _WRITERS.submit(write))


def stage_replacement(
    table: Table, epoch: Epoch, change: Replacement | Writing | ReplacingFiles, known: Replaced | None = None
) -> tuple[Transaction, dict[str, str], Replaced | None]:
    """Stage ``change`` (its rows, or its rows being written, :func:`start_writing` on ``table``, or the files
    Spark's executors wrote to replace the table's: a rebuilt view's first batch) on ``table`` as one snapshot
    (see the module docstring); ``known``: what this process's last replacement of the table left (used when it is
    the table's current snapshot). Returns the transaction, the snapshot's properties and what it leaves once
    committed (None: not known, read next time)."""
    if isinstance(change, ReplacingFiles):
        written, commit_uuid = change, uuid.uuid4()
    else:
        writing = change if isinstance(change, Writing) else start_writing(table, change)
        commit_uuid = writing.commit_uuid
    snapshot = table.current_snapshot()
    if snapshot is not None and known is not None and known.snapshot_id == snapshot.snapshot_id:
        kept, live = list(known.kept), list(known.live)
    else:
        kept, live = _read_live(table)
    deleted = sum(e.data_file.record_count for e in live)
    if isinstance(change, ReplacingFiles):
        files, properties = data_files(written), stamp_files(epoch, written, deleted)
    else:
        files = writing.files.result()
        properties = CommitRecord.properties(epoch, inserted=writing.rows.num_rows, deleted=deleted)
    if not live:
        return _replacing(table, properties, [], files, commit_uuid), properties, None
    txn = transaction(table)
    producer = txn.update_snapshot(snapshot_properties=properties)
    replace = _KnownReplace(
        commit_uuid=commit_uuid, operation=Operation.OVERWRITE, transaction=txn, io=producer._io,
        branch=producer._branch, snapshot_properties=producer._snapshot_properties,
    )  # fmt: skip
    replace.known(kept, live)
    with replace:
        for entry in live:
            replace.delete_data_file(entry.data_file)
        for data_file in files:
            replace.append_data_file(data_file)
    return txn, properties, _left(txn, kept, files)


def _read_live(table: Table) -> tuple[list[ManifestFile], list[ManifestEntry]]:
    """The current snapshot's manifests a replacement keeps and its live data files, from the manifests alone
    (a scan's planning also indexes the delete files); each manifest with live data files read once."""
    snapshot = table.current_snapshot()
    manifests = snapshot.manifests(table.io) if snapshot is not None else []
    live = [
        entry
        for manifest in manifests
        if manifest.content == ManifestContent.DATA and _has_live_files(manifest)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    ]
    kept = [m for m in manifests if m.content != ManifestContent.DATA and _has_live_files(m)]
    return kept, live


def _left(txn: Transaction, kept: list[ManifestFile], files: list[DataFile]) -> Replaced | None:
    """What the staged replacement leaves: its files as live entries of its snapshot, with the sequence number
    they inherit from it (as reading its manifest back would give them)."""
    added = [u.snapshot for u in txn._updates if isinstance(u, AddSnapshotUpdate)]
    if len(added) != 1 or added[0].sequence_number is None or txn.table_metadata.format_version != 2:
        return None  # (v1 and v3 manifests give their entries other inherited fields: read those back)
    snapshot, spec_id = added[0], txn.table_metadata.default_spec_id
    for data_file in files:  # the spec id a manifest's entries inherit (not stored in the file, not set when written)
        data_file.spec_id = spec_id
    live = tuple(
        ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED, snapshot_id=snapshot.snapshot_id, data_file=data_file,
            sequence_number=snapshot.sequence_number, file_sequence_number=snapshot.sequence_number,
        )
        for data_file in files
    )  # fmt: skip
    return Replaced(snapshot.snapshot_id, tuple(kept), live)


def _has_live_files(manifest: ManifestFile) -> bool:
    """Whether a manifest may list live files (its counts in the manifest list; unknown counts: maybe)."""
    return manifest.has_added_files() or manifest.has_existing_files()


class _KnownReplace(_LiveOverwrite):
    """An overwrite removing every live data file of the table, known already (:func:`stage_replacement`): the
    snapshot's deleted entries are those, and the manifests kept are those given (delete files' manifests with
    live entries), so no manifest is read."""

    def known(self, kept: list[ManifestFile], live: list[ManifestEntry]) -> None:
        self._known_kept, self._known_live = kept, live

    def _deleted_entries(self) -> list[ManifestEntry]:
        deleted = [
            ManifestEntry.from_args(
                status=ManifestEntryStatus.DELETED, snapshot_id=self._snapshot_id, sequence_number=e.sequence_number,
                file_sequence_number=e.file_sequence_number, data_file=e.data_file,
            )
            for e in self._known_live
        ]  # fmt: skip
        self._validate_required_deletes(deleted)
        return deleted

    def _existing_manifests(self) -> list[ManifestFile]:
        return list(self._known_kept)
