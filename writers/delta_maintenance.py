"""Delta table health with delta-rs: retention (vacuum with the versions to keep, then a
checkpoint and log cleanup), compaction of small files (``optimize.compact``), orphan removal
(a full vacuum with a safety age).

Conflicts: delta-rs commits optimize with optimistic concurrency; a lost race raises
``CommitFailedError`` and the step is redone on the new table state. The log is only cleaned up
behind a checkpoint taken at a Lakeview commit, so the newest commit info (epoch, frontier) stays.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from writers.delta import DeltaWriter, record_of
from writers.maintenance import MAINTENANCE, MaintenancePolicy, MaintenanceReport, Progress

log = logging.getLogger("lakeview.writers.delta_maintenance")
MAX_ATTEMPTS = 5
LOG_RETENTION = "delta.logRetentionDuration"


def maintain_delta(writer: DeltaWriter, policy: MaintenancePolicy, progress: Progress | None = None) -> MaintenanceReport:
    """One maintenance pass over the writer's table: log cleanup, compaction, retention, orphans."""
    say = progress or (lambda message: None)
    report = MaintenanceReport()
    _retrying(report, lambda: _clean_log(writer, policy, say))
    _retrying(report, lambda: _compact(writer, policy, report, say))
    _retrying(report, lambda: _expire(writer, policy, report, say))
    _retrying(report, lambda: _remove_orphans(writer, policy, report, say))
    return report


def _retrying(report: MaintenanceReport, step: Callable[[], None]) -> None:
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            step()
            return
        except CommitFailedError as exc:
            report.attempts += 1
            log.info("maintenance lost a commit race (attempt %s): %s; redoing on the new state", attempt, exc)
            time.sleep(min(2.0, 0.1 * 2**attempt))
    report.notes.append(f"gave up after {MAX_ATTEMPTS} lost commit races; next pass retries")


def _commit_properties(step: str) -> CommitProperties:
    return CommitProperties(custom_metadata={MAINTENANCE: step})


def _kept_versions(table: DeltaTable, policy: MaintenancePolicy) -> tuple[list[int], set[int]]:
    """(versions still in the log oldest first, versions past retention)."""
    entries = sorted(((int(h["version"]), int(h.get("timestamp", 0))) for h in table.history()), key=lambda e: e[0])
    return [v for v, _ in entries], policy.expired(entries)


def _clean_log(writer: DeltaWriter, policy: MaintenancePolicy, say: Progress) -> None:
    if policy.max_age_ms is None:
        return  # Delta's log retention is by age only; without max_age the default (30 days) applies
    table = writer.table()
    wanted = f"interval {max(1, policy.max_age_ms // 1000)} seconds"
    if table.metadata().configuration.get(LOG_RETENTION) != wanted:
        table.alter.set_table_properties({LOG_RETENTION: wanted}, commit_properties=_commit_properties("log-retention"))
        return  # the newest version is now not a Lakeview commit; clean up on a later pass
    newest = table.history(1)
    if not newest or record_of(newest[0]) is None:
        say("log: newest version is not a Lakeview commit; log cleanup waits for the next one")
        return
    before = len(table.history())
    table.create_checkpoint()
    table.cleanup_metadata()
    after = len(writer.table().history())
    say(f"log: checkpoint at version {table.version()}, {before - after} old log entr(ies) removed")


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
    metrics = table.optimize.compact(target_size=policy.small_file_bytes * 4, commit_properties=_commit_properties("compact"))
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
