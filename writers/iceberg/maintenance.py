"""Iceberg table health with pyiceberg: expire snapshots (and delete the files only they
referenced), compact small data files and fold position deletes back into the data files
(one ``overwrite`` snapshot), remove orphan files.

Every step commits through the catalog like any writer: a concurrent Lakeview commit makes the
step's commit fail (409), and the step is redone on the new state, so maintenance never blocks
or undoes a commit. The snapshot of the newest Lakeview commit is never expired (it carries the
epoch and frontier exactly-once depends on).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from lakeview.errors import CommitConflictError
from writers.iceberg.live_files import LiveFiles, LiveTable
from writers.iceberg.metadata_memo import transaction
from writers.iceberg.position_deletes import row_delta
from writers.iceberg.writer import KEY_PROPERTY, IcebergWriter, _overwrite, last_commit_of, merge_on_read
from writers.maintenance import (
    MAINTENANCE,
    MaintenancePolicy,
    MaintenanceReport,
    Progress,
    filesystem_for,
    list_files,
    mtime_ms,
    retrying_pass,
)

log = logging.getLogger("lakeview.writers.iceberg_maintenance")
LOST_RACE = (
    CommitFailedException,
    CommitConflictError,
    ValidationException,
)  # a maintenance commit that lost to a concurrent one


def maintain_iceberg(
    writer: IcebergWriter,
    policy: MaintenancePolicy,
    file_io: dict[str, str] | None = None,
    progress: Progress | None = None,
    compact: bool = True,
) -> MaintenanceReport:
    """One maintenance pass over the writer's table: compact, expire, remove orphans.

    ``compact=False``: leave compaction to the view's running writer (a keyed merge-on-read
    view's writer folds deletes and compacts small files within its commits; a separate
    compaction of such a table loses the race to every commit that deletes from its files)."""
    say = progress or (lambda message: None)
    report = MaintenanceReport()
    # Compact first: the small files it replaces are deleted once their snapshots expire.
    if compact:
        retrying_pass(report, lambda: _compact(writer, policy, report, say), LOST_RACE)
    else:
        say("compaction: left to the view's writer, which compacts within its commits (merge-on-read)")
    retrying_pass(report, lambda: _expire(writer, policy, report, say), LOST_RACE)
    _remove_orphans(writer.table(), policy, file_io, report, say)
    return report


def reachable_files(table: Table, snapshots: Iterable[Snapshot], cache: dict[str, set[str]] | None = None) -> set[str]:
    """Manifest lists, manifests and live data/delete files of ``snapshots``."""
    cache = {} if cache is None else cache
    files: set[str] = set()
    for snapshot in snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            files.add(manifest.manifest_path)
            if manifest.manifest_path not in cache:
                entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                cache[manifest.manifest_path] = {e.data_file.file_path for e in entries}
            files |= cache[manifest.manifest_path]
    return files


def _expire(writer: IcebergWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    table = writer.table()
    snapshots = sorted(table.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    protected = {s.snapshot_id for s in [table.current_snapshot()] if s is not None}
    last = last_commit_of(table)
    if last is not None and last.snapshot_id is not None:
        protected.add(last.snapshot_id)
    expired = policy.expired([(s.snapshot_id, s.timestamp_ms) for s in snapshots]) - protected
    if not expired:
        say(f"retention: {len(snapshots)} snapshot(s), none to expire")
        return
    say(f"retention: expiring {len(expired)} of {len(snapshots)} snapshot(s)")
    cache: dict[str, set[str]] = {}
    before = reachable_files(table, [s for s in snapshots if s.snapshot_id in expired], cache)
    table.maintenance.expire_snapshots().by_ids(sorted(expired)).commit()
    table = writer.table()
    # Files of snapshots committed meanwhile descend from the kept ones, so this is safe.
    live = reachable_files(table, table.snapshots(), cache)
    doomed = before - live
    for path in sorted(doomed):
        table.io.delete(path)
    report.snapshots_expired += len(expired)
    report.files_deleted += len(doomed)
    say(f"retention: deleted {len(doomed)} file(s) only expired snapshots referenced")


def _compact(writer: IcebergWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    """Rewrite, as ONE snapshot, what :meth:`LiveTable.to_rewrite` picks: the small data files
    once there are ``compact_min_files`` of them, and every data file with position deletes once
    there are ``delete_files_max`` delete files (the deleted rows left out, the delete files gone)."""
    table = writer.table()
    if table.current_snapshot() is None:
        return
    live = LiveFiles().live(table)
    rewrite, dropped = live.to_rewrite(policy)
    if live.delete_files and not dropped:
        say(f"compaction: {len(live.delete_files)} delete file(s), below the threshold of {policy.delete_files_max}")
    if not rewrite:
        small = sum(1 for f in live.data if f.file_size_in_bytes < policy.small_file_bytes)
        say(f"compaction: {small} small file(s) of {len(live.data)}, below the threshold of {policy.compact_min_files}")
        return
    say(
        f"compaction: rewriting {len(rewrite)} file(s)"
        + (f", folding {len(dropped)} delete file(s)" if dropped else "")
    )
    commit_uuid = uuid.uuid4()
    written = _rewritten(table, live, rewrite, commit_uuid)
    txn = transaction(table)
    if live.delete_files or self_compacting(table):
        # RowDelta: refused (and redone by _retrying) if a commit landed since the files were read,
        # as that commit's deletes may name the files rewritten here
        with row_delta(
            txn, {MAINTENANCE: "compact"}, commit_uuid, Operation.OVERWRITE
        ) as snapshot:  # pyiceberg 0.12 summarises no "replace"
            for data_file in rewrite + dropped:
                snapshot.remove(data_file)
            for data_file in written:
                snapshot.add(data_file)
    else:
        # An append view: concurrent commits only add files, so pyiceberg may rebase this onto them
        with _overwrite(txn.update_snapshot(snapshot_properties={MAINTENANCE: "compact"}), commit_uuid) as overwrite:
            for data_file in rewrite:
                overwrite.delete_data_file(data_file)
            for data_file in written:
                overwrite.append_data_file(data_file)
    txn.commit_transaction()
    report.files_compacted += len(rewrite)
    report.files_written += len(written)
    report.delete_files_folded += len(dropped)
    say(
        f"compaction: {len(rewrite)} file(s) -> {len(written)}"
        + (f"; {len(dropped)} delete file(s) folded in" if dropped else "")
    )


def _rewritten(table: Table, live: LiveTable, rewrite: list[DataFile], commit_uuid: uuid.UUID) -> list[DataFile]:
    """``rewrite``'s live rows in new data files, read and written about ``REWRITE_BYTES`` at a
    time: memory holds one output's worth of rows, not every file rewritten."""
    reader = LiveFiles(budget_bytes=0)  # nothing kept between files
    written: list[DataFile] = []
    pending: list[pa.Table] = []
    for index, data_file in enumerate(rewrite):
        pending.append(reader.rows_of(table, data_file, live.deletes.get(data_file.file_path, {})))
        if index == len(rewrite) - 1 or sum(t.nbytes for t in pending) >= REWRITE_BYTES:
            rows = pa.concat_tables(pending)
            pending = []
            if rows.num_rows:
                written.extend(
                    _dataframe_to_data_files(
                        table_metadata=table.metadata, df=rows, io=table.io, write_uuid=commit_uuid
                    )
                )
    return written


REWRITE_BYTES = 128 * 1024 * 1024  # Arrow bytes of rows a compaction holds before it writes them


def self_compacting(table: Table) -> bool:
    """A keyed merge-on-read table: its writer compacts within its commits (IcebergWriter)."""
    return KEY_PROPERTY in table.properties and merge_on_read(table)


def _remove_orphans(
    table: Table, policy: MaintenancePolicy, file_io: dict[str, str] | None, report: MaintenanceReport, say: Progress
) -> None:
    referenced = {_bare(p) for p in reachable_files(table, table.snapshots())}
    referenced.add(_bare(table.metadata_location))
    referenced |= {_bare(entry.metadata_file) for entry in table.metadata.metadata_log}
    fs, root = filesystem_for(table.location(), file_io)
    cutoff = int(time.time() * 1000) - policy.orphan_min_age_ms
    # Metadata files older than the oldest one the metadata log still names can never be
    # referenced again (every commit writes a newer one), so they go without the safety age:
    # at one commit a second, waiting out the age alone kept ~60 full metadata JSONs around.
    logged = [_metadata_version(path) for path in referenced]
    oldest_logged = min((v for v in logged if v is not None), default=None)
    orphans = [
        info for info in list_files(fs, root)
        if _bare(info.path) not in referenced
        and (mtime_ms(info) < cutoff or _superseded(info.base_name, oldest_logged))
    ]  # fmt: skip
    for info in orphans:
        fs.delete_file(info.path)
    report.orphans_deleted += len(orphans)
    say(f"orphans: deleted {len(orphans)} unreferenced file(s) older than {policy.orphan_min_age_ms // 1000}s")


def _metadata_version(path: str) -> int | None:
    """The version of a table metadata file ``00042-<uuid>.metadata.json``; None for other files."""
    name = path.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) if name.endswith(".metadata.json") and head.isdigit() else None


def _superseded(name: str, oldest_logged: int | None) -> bool:
    version = _metadata_version(name)
    return version is not None and oldest_logged is not None and version < oldest_logged


def _bare(path: str) -> str:
    """A path without its scheme, comparable across pyiceberg's and pyarrow's spellings."""
    for prefix in ("file://", "s3://", "s3a://"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path
