"""Delta table health with delta-rs: compaction of small files (``optimize.compact``),
retention (vacuum with the versions to keep), orphan removal (a full vacuum with a safety age),
then a checkpoint and log cleanup by the same retention.

Log cleanup is Lakeview's own, not ``cleanup_metadata``: delta-rs cleans the log only by age
(``delta.logRetentionDuration``) and deletes every entry behind the newest checkpoint older than
that age, so "keep the last N versions" would neither bound the log nor keep those N versions
loadable. Here each pass writes a checkpoint, and log entries (commits, checkpoints, crc files)
older than the newest checkpoint at or before the oldest kept version are deleted: the log holds
the kept versions plus the few since that checkpoint, and every kept version still loads
(time travel with ``delta_scan(..., version => v)`` / ``DeltaTable(version=v)``). The newest
Lakeview commit is always kept, so its commit info (epoch, frontier) stays readable.

Conflicts: delta-rs commits optimize with optimistic concurrency; a lost race raises
``CommitFailedError`` and the step is redone on the new table state.
"""

from __future__ import annotations

import logging
import math
import re

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from writers.delta.log import commit_infos
from writers.delta.writer import DeltaWriter, last_commit_of
from writers.maintenance import (
    MAINTENANCE,
    MaintenancePolicy,
    MaintenanceReport,
    Progress,
    list_files,
    retrying_pass,
)

log = logging.getLogger("lakeview.writers.delta_maintenance")
LOST_RACE = (CommitFailedError,)  # a maintenance commit that lost to a concurrent one
VACUUM_OPERATIONS = ("VACUUM START", "VACUUM END")
LOG_ENTRY = re.compile(r"^(\d{20})\.")  # 00000000000000000042.json / .checkpoint.parquet / .crc


def maintain_delta(
    writer: DeltaWriter, policy: MaintenancePolicy, progress: Progress | None = None
) -> MaintenanceReport:
    """One maintenance pass over the writer's table: compaction, retention, orphans, log cleanup."""
    say = progress or (lambda message: None)
    report = MaintenanceReport()
    retrying_pass(report, lambda: _compact(writer, policy, report, say), LOST_RACE)
    retrying_pass(report, lambda: _expire(writer, policy, report, say), LOST_RACE)
    retrying_pass(report, lambda: _remove_orphans(writer, policy, report, say), LOST_RACE)
    _clean_log(writer, policy, report, say)
    return report


def _commit_properties(step: str) -> CommitProperties:
    return CommitProperties(custom_metadata={MAINTENANCE: step})


def _kept_versions(table: DeltaTable, policy: MaintenancePolicy) -> tuple[list[int], set[int]]:
    """(snapshot versions still in the log oldest first, versions past retention).

    Vacuum's own START/END versions change no data: they are not snapshots a reader would ask
    for, so they do not count towards ``keep_snapshots`` (else each pass would push out four).
    """
    entries = sorted(
        (int(h["version"]), int(h.get("timestamp", 0)))
        for h in commit_infos(table)
        if h.get("operation") not in VACUUM_OPERATIONS
    )
    return [v for v, _ in entries], policy.expired(entries)


def _clean_log(writer: DeltaWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    table = writer.table()
    versions, expired = _kept_versions(table, policy)
    kept = [v for v in versions if v not in expired]
    last = last_commit_of(table)
    if last is not None and isinstance(last.snapshot_id, int):
        kept.append(last.snapshot_id)
    oldest_kept = min(kept, default=table.version())
    fs, log_dir = _log_filesystem(writer)
    entries = [(int(m.group(1)), info) for info in list_files(fs, log_dir) if (m := LOG_ENTRY.match(info.base_name))]
    if not any(version == table.version() and ".checkpoint." in info.base_name for version, info in entries):
        table.create_checkpoint()  # the base a later pass cleans behind, once it is old enough
    checkpoints = [version for version, info in entries if ".checkpoint." in info.base_name and version <= oldest_kept]
    if not checkpoints:
        say(f"log: {len(versions)} version(s); no checkpoint at or before the oldest kept version {oldest_kept} yet")
        return
    base = max(checkpoints)
    doomed = [info for version, info in entries if version < base]
    for info in doomed:
        fs.delete_file(info.path)
    say(
        f"log: {len(doomed)} entr(ies) before the checkpoint at version {base} deleted; versions {base}..{table.version()} remain"
    )


def _log_filesystem(writer: DeltaWriter) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and path of the table's ``_delta_log`` (local or S3)."""
    fs, root = writer.filesystem()
    return fs, root.rstrip("/") + "/_delta_log"


def _expire(writer: DeltaWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    table = writer.table()
    versions, expired = _kept_versions(table, policy)
    if not expired:
        say(f"retention: {len(versions)} version(s), none to expire")
        return
    keep = [v for v in versions if v not in expired]
    deleted = table.vacuum(
        retention_hours=0, dry_run=False, enforce_retention_duration=False, keep_versions=keep,
        commit_properties=_commit_properties("vacuum"),
    )  # fmt: skip
    report.snapshots_expired += len(expired)
    report.files_deleted += len(deleted)
    say(f"retention: {len(expired)} version(s) past retention; {len(deleted)} file(s) only they referenced deleted")


def _compact(writer: DeltaWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    table = writer.table()
    actions = pa.table(table.get_add_actions(flatten=True))
    sizes = actions.column("size_bytes").to_pylist() if actions.num_rows else []
    small = sum(1 for size in sizes if size < policy.small_file_bytes)
    if small < policy.compact_min_files:
        say(f"compaction: {small} small file(s) of {len(sizes)}, below the threshold of {policy.compact_min_files}")
        return
    say(f"compaction: rewriting {small} small file(s)")
    metrics = table.optimize.compact(
        target_size=policy.small_file_bytes * 4, commit_properties=_commit_properties("compact")
    )
    report.files_compacted += int(metrics.get("numFilesRemoved", 0))
    report.files_written += int(metrics.get("numFilesAdded", 0))
    say(f"compaction: {metrics.get('numFilesRemoved', 0)} file(s) -> {metrics.get('numFilesAdded', 0)}")


def _remove_orphans(writer: DeltaWriter, policy: MaintenancePolicy, report: MaintenanceReport, say: Progress) -> None:
    table = writer.table()
    versions, expired = _kept_versions(table, policy)
    keep = [v for v in versions if v not in expired]
    # Vacuum's age is in whole hours; round up so no file younger than the safety age goes.
    hours = math.ceil(policy.orphan_min_age_ms / 3_600_000)
    orphans = table.vacuum(
        retention_hours=hours, dry_run=False, enforce_retention_duration=False, full=True, keep_versions=keep,
        commit_properties=_commit_properties("orphans"),
    )  # fmt: skip
    report.orphans_deleted += len(orphans)
    say(f"orphans: deleted {len(orphans)} unreferenced file(s) older than {hours}h")
